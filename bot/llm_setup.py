"""Start-up of the ``llm`` library: where it keeps its files, which models it knows, and
whether the configured one can be reached (``ask`` and ``serve`` check it before starting)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import llm
from llm.plugins import pm

_registered: set[str] = set()

DEMO_MODEL_ID = "demo"  # playground.demo.DEMO_MODEL_ID, without importing the playground


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
    def register_models(register):
        # llm's registry is keyed by a sync model; ours are async-only, so the async model
        # stands in for both (the bot only ever asks for async models).
        register(model, model)

    plugin = SimpleNamespace(register_models=register_models)
    pm.register(plugin, name=f"approval-bot:{model.model_id}")
    _registered.add(model.model_id)


def model_problem(model_id: str) -> str | None:
    """Why the bot cannot reach the model, in one line, before anything starts: a missing
    key used to surface as a failed run and a logged traceback (``ask``), or as a bot that
    starts and then fails every mention (``serve``)."""
    try:
        model = llm.get_async_model(model_id)
    except llm.UnknownModelError:
        return (
            f"unknown model {model_id!r}: install its llm plugin, or set model = "
            f'"{DEMO_MODEL_ID}" to try the bot offline'
        )
    if getattr(model, "needs_key", None):
        try:
            model.get_key()
        except llm.NeedsKeyException:
            env = f" or set {model.key_env_var}" if getattr(model, "key_env_var", None) else ""
            return (
                f"the model {model_id!r} needs an API key: `llm keys set {model.needs_key}`"
                f'{env} (or set model = "{DEMO_MODEL_ID}" to try the bot offline)'
            )
    return None
