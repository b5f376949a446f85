"""Turning the ``tools = [...]`` import references of the configuration into ``llm.Tool``s."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import llm


class ToolLoadError(Exception):
    pass


def load_tools(refs: list[str]) -> list[llm.Tool]:
    tools: list[llm.Tool] = []
    for ref in refs:
        tools.extend(tools_from_object(resolve_ref(ref), ref))
    return tools


def resolve_ref(ref: str) -> Any:
    """Import ``"package.module:attribute"`` (``"package.module.attribute"`` works too)."""
    module_name, sep, attribute = ref.partition(":")
    if not sep:
        module_name, _, attribute = ref.rpartition(".")
    if not module_name or not attribute:
        raise ToolLoadError(f'{ref!r} is not an import reference like "pkg.module:name"')
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolLoadError(f"{ref!r}: cannot import {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ToolLoadError(f"{ref!r}: {module_name!r} has no attribute {attribute!r}") from exc
    return target


def tools_from_object(target: Any, ref: str) -> list[llm.Tool]:
    """A function, an ``llm.Tool``, or an ``llm.Toolbox`` class or instance."""
    if isinstance(target, llm.Tool):
        return [target]
    if isinstance(target, llm.Toolbox):
        return list(target.tools())
    if inspect.isclass(target) and issubclass(target, llm.Toolbox):
        try:
            return list(target().tools())
        except TypeError as exc:
            message = f"{ref!r}: cannot create the toolbox with no arguments: {exc}"
            raise ToolLoadError(message) from exc
    if callable(target):
        return [llm.Tool.function(target)]
    raise ToolLoadError(f"{ref!r} is not a function, llm.Tool or llm.Toolbox")


def tool_definition(tool: llm.Tool) -> dict[str, Any]:
    """What the model was shown: part of the approved payload's hash."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
