"""Tools and sub-agents as the configuration loads them: the top-level ``tools`` and each
``[agents.NAME]``'s (issue 20 section 1), every ``"module:function"`` reference imported at
start-up, so a broken one fails with the rest of the file's problems, named by its key
(``tools``, ``agents.NAME.tools``), never in the middle of a run.

Owns no state: a loaded :class:`Agent` is part of the ``Config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.config.models import Settings

if TYPE_CHECKING:
    import llm


@dataclass
class Agent:
    """``[agents.NAME]``: a sub-agent, its tools loaded."""

    name: str
    description: str
    model: str
    system_prompt: str
    tool_refs: list[str] = field(default_factory=list)
    tools: list[llm.Tool] = field(default_factory=list)


def agent_system_prompt(name: str, description: str) -> str:
    """A sub-agent's system prompt when its section gives none."""
    return (
        f"You are {name}, a sub-agent working in a Slack thread on one task another agent "
        f"gave you ({description}). Use the tools you are given; some need a human's approval "
        "before they run. Finish with a short answer to the task: it is what the other agent "
        "reads."
    )


def _loaded(refs: list[str], key: str, problems: list[str]) -> list[llm.Tool] | None:
    """The tools ``refs`` name, imported; None (and each problem, named by ``key``) when any
    fails to import or two share a name."""
    from bot.tools import ToolLoadError, load_tools

    tools: list[llm.Tool] = []
    failed = False
    for ref in refs:
        try:
            tools.extend(load_tools([ref]))
        except ToolLoadError as exc:
            problems.append(f"{key}: {exc}")
            failed = True
    names = [tool.name for tool in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"{key}: two tools are named {duplicates[0]!r}")
        failed = True
    return None if failed else tools


def load_top_level_tools(
    refs: Any, extra_tools: list[llm.Tool], problems: list[str]
) -> list[llm.Tool] | None:
    """The configured tools and the extra ones; None (and the problems) when any fails."""
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        return None  # the typed model says what is wrong with the key
    loaded = _loaded(refs, "tools", problems)
    if loaded is None:
        return None
    return _loaded_with(loaded, extra_tools, problems)


def _loaded_with(
    loaded: list[llm.Tool], extra_tools: list[llm.Tool], problems: list[str]
) -> list[llm.Tool] | None:
    tools = [*loaded, *extra_tools]
    names = [tool.name for tool in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"tools: two tools are named {duplicates[0]!r}")
        return None
    return tools


def load_agent_tools(agents: Any, problems: list[str]) -> dict[str, list[llm.Tool]] | None:
    """Each ``[agents.NAME]``'s tools, loaded as the top-level ones are; None (and the
    problems, named ``agents.NAME.tools``) when any fails to load."""
    if not isinstance(agents, dict):
        return {}  # absent, or the typed model says what is wrong with the key
    loaded: dict[str, list[llm.Tool]] = {}
    failed = False
    for name, section in agents.items():
        refs = section.get("tools", []) if isinstance(section, dict) else []
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            continue  # the typed model names it
        tools = _loaded(refs, f"agents.{name}.tools", problems)
        failed = failed or tools is None
        loaded[str(name)] = tools or []
    return None if failed else loaded


def configured_agents(
    settings: Settings, agent_tools: dict[str, list[llm.Tool]] | None
) -> dict[str, Agent]:
    """The ``[agents.NAME]`` sections with their tools loaded and their defaults filled in
    (the top-level model; a system prompt saying what the agent is for)."""
    return {
        name: Agent(
            name=name,
            description=section.description,
            model=section.model or settings.model,
            system_prompt=section.system_prompt or agent_system_prompt(name, section.description),
            tool_refs=list(section.tools),
            tools=list((agent_tools or {}).get(name, [])),
        )
        for name, section in settings.agents.items()
    }
