"""``ask``: a request from the terminal, and the model it needs checked before it starts."""

from __future__ import annotations

import argparse

from bot.cli.common import worker_id
from bot.cli.output import print_outcome
from bot.cli.parser import EXIT_OK, EXIT_REFUSED
from bot.config import Config
from bot.runner import Request, Runner
from storage.repository import Repository

DEMO_MODEL_ID = "demo"  # playground.demo.DEMO_MODEL_ID, without importing the playground


def model_problem(model_id: str) -> str | None:
    """Why ``ask`` cannot reach the model, in one line, before a run is recorded: a missing
    key used to surface as a failed run and a logged traceback."""
    import llm

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


async def ask(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    runner = Runner(repo, config, worker_id=worker_id())
    outcome = await runner.start(
        Request(text=args.text, requester=args.actor, conversation_key=args.conversation)
    )
    print_outcome(outcome)
    # Busy: the conversation's run is still going or waiting; nothing was started.
    return EXIT_REFUSED if outcome.status in ("failed", "busy") else EXIT_OK
