"""``ask``: a request from the terminal, and the model it needs checked before it starts
(``bot.llm_setup.model_problem``, which ``serve`` checks at start-up too)."""

from __future__ import annotations

import argparse

from bot.cli.common import worker_id
from bot.cli.exits import EXIT_OK, EXIT_REFUSED
from bot.cli.output import print_outcome
from bot.config import Config
from bot.engine import Request, Runner
from bot.llm_setup import DEMO_MODEL_ID, model_problem
from storage.repository import Repository

__all__ = ["DEMO_MODEL_ID", "ask", "model_problem"]


async def ask(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    runner = Runner(repo, config, worker_id=worker_id())
    outcome = await runner.start(
        Request(text=args.text, requester=args.actor, conversation_key=args.conversation)
    )
    # Sub-agents it delegated to work here too, until they end or wait on people.
    outcome = await runner.follow_delegations(outcome)
    print_outcome(outcome)
    # Busy: the conversation's run is still going or waiting; nothing was started.
    return EXIT_REFUSED if outcome.status in ("failed", "busy") else EXIT_OK
