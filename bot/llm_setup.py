"""Start-up of the ``llm`` library: where it keeps its files, and which models it knows."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import llm
from llm.plugins import pm

_registered: set[str] = set()


def prepare_llm(user_path: str | Path | None = None) -> None:
    """Point llm at a directory of ours (keys, logs) and load installed plugins, once."""
    if user_path is not None:
        Path(user_path).mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("LLM_USER_PATH", str(user_path))
    llm.load_plugins()


def register_model(model: llm.AsyncModel) -> None:
    """Register an in-process async model (the demo model, test models) with llm."""
    if model.model_id in _registered:
        return

    @llm.hookimpl
    def register_models(register):  # type: ignore[no-untyped-def]
        # llm's registry is keyed by a sync model; ours are async-only, so the async model
        # stands in for both (the bot only ever asks for async models).
        register(model, model)

    plugin = SimpleNamespace(register_models=register_models)
    pm.register(plugin, name=f"approval-bot:{model.model_id}")
    _registered.add(model.model_id)
