"""Benchmark: Slack-facing latency over loopback HTTP, through the real bolt app.

The bot runs as ``approval-bot serve`` in its own process (SQLite or PostgreSQL, the llm-echo
model); this process plays Slack and generates the load, so its own work is not counted
against the bot.

1. Click acknowledgement (:mod:`bench.click_bursts`): bursts of signed Approve clicks, built
   and signed before the clock starts and sent at once over one client session, against
   POST /slack/events of the bot and of a bare aiohttp server (``bench/floor_server.py``, in
   its own process) in the same run; two shapes, 100 cards x 1 click and 10 cards x 10 clicks
   (90 duplicates, each refused). Then time to answer: click -> the run's answer in its
   thread, one click at a time.
2. ``/approvals`` with 100,000 pending approvals in the database: the slash command's round
   trip (it answers with the list in its acknowledgement) for each view (approve, mine, all).

Run: ``.venv/bin/python bench/slack_latency.py [--rows 100000] [--postgres URL]
[--rounds 5] [--only clicks|approvals] [--compare-with DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LLM_USER_PATH", tempfile.mkdtemp(prefix="approval-bot-bench-"))

from ulid import ULID

from bench.figures import summary
from bot.clock import utcnow
from storage.repository import Repository
from tests.support.serve_process import served_bot

CHANNEL = "C0OPS"  # also bench/click_bursts.py's

APPROVERS = [f"U0APPROVER{i}" for i in range(1, 21)]
REQUESTERS = [f"U0REQ{i:03d}" for i in range(200)]
CHANNELS = [CHANNEL, *[f"C0CH{i:03d}" for i in range(49)]]


async def seed_pending(repo: Repository, rows: int) -> None:
    """Insert ``rows`` pending approvals (one run each) straight into the tables."""
    now = utcnow()
    batch = 5000
    for start in range(0, rows, batch):
        runs, approvals = [], []
        for i in range(start, min(rows, start + batch)):
            run_id = f"run_{ULID()}"
            requester = REQUESTERS[i % len(REQUESTERS)]
            channel = CHANNELS[i % len(CHANNELS)]
            created = now - timedelta(seconds=rows - i)
            runs.append(
                {
                    "id": run_id,
                    "conversation_key": f"T0001TEAM:{channel}:{i}.0",
                    "team_id": "T0001TEAM",
                    "channel": channel,
                    "thread_ts": f"{i}.0",
                    "requester": requester,
                    "status": "paused",
                    "model_id": "scripted",
                    "history": [],
                    "turn": 1,
                    "created_at": created,
                    "updated_at": created,
                }
            )
            approvers = [APPROVERS[i % len(APPROVERS)], APPROVERS[(i + 7) % len(APPROVERS)]]
            approvals.append(
                {
                    "id": f"apr_{ULID()}",
                    "run_id": run_id,
                    "turn": 1,
                    "tool_call_id": f"tc_{i}",
                    "tool_name": "restart_service",
                    "arguments": {"service": f"svc{i}"},
                    "payload_hash": "0" * 64,
                    "status": "pending",
                    "requester": requester,
                    "team_id": "T0001TEAM",
                    "channel": channel,
                    "thread_ts": f"{i}.0",
                    "approvers": approvers,
                    "allow_self_approval": False,
                    "on_expiry": "deny",
                    "created_at": created,
                    "expires_at": now + timedelta(days=1),
                    "card_channel": channel,
                    "card_ts": f"{i}.5",
                }
            )
        await repo.insert_rows_for_benchmark(runs=runs, approvals=approvals)
    await repo.analyze()


async def approvals_latency(
    database_url: str, workdir: Path, rows: int, requests: int
) -> dict[str, Any]:
    repo = await Repository.open(database_url)
    seeded = time.perf_counter()
    await seed_pending(repo, rows)
    seeding = time.perf_counter() - seeded
    await repo.close()
    results: dict[str, Any] = {"rows": rows, "seed_seconds": round(seeding, 1)}
    async with served_bot(database_url, workdir) as served:
        slack = served.slack
        for view, text, user in (
            ("approve", "", "U0APPROVER3"),
            ("mine", "mine", "U0REQ042"),
            ("all", "all", "U0ANYONE"),
        ):
            timings = []
            for _ in range(requests):
                reply = await slack.slash_command(user, CHANNEL, text=text)
                assert reply.status == 200 and "approval_approve" in reply.body, reply.body[:300]
                timings.append(reply.elapsed)
            results[view] = summary(timings)
    return results


async def main() -> None:
    from bench.click_bursts import click_latency

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5, help="bursts per shape and database")
    parser.add_argument("--answers", type=int, default=50, help="single clicks timed to answer")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--only", choices=["clicks", "approvals"])
    parser.add_argument(
        "--compare-with",
        metavar="DIR",
        help="also click a bot run from this source tree, in the same rounds (A/B)",
    )
    parser.add_argument("--postgres", default=os.environ.get("APPROVAL_BOT_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    report: dict[str, Any] = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.only != "approvals":
            labels = ["bot", *([f"compared={args.compare_with}"] if args.compare_with else [])]
            report["clicks_sqlite"] = await click_latency(
                {label: f"sqlite:///{workdir}/clicks{i}.db" for i, label in enumerate(labels)},
                workdir / "sqlite",
                rounds=args.rounds,
                answers=args.answers,
            )
            print(json.dumps({"clicks_sqlite": report["clicks_sqlite"]}), file=sys.stderr)
            if args.postgres:
                async with contextlib.AsyncExitStack() as stack:
                    urls = [
                        await stack.enter_async_context(postgres_database(args.postgres))
                        for _ in labels
                    ]
                    report["clicks_postgres"] = await click_latency(
                        dict(zip(labels, urls, strict=True)),
                        workdir / "postgres",
                        rounds=args.rounds,
                        answers=args.answers,
                    )
        if args.only != "clicks":
            report["approvals_sqlite"] = await approvals_latency(
                f"sqlite:///{workdir / 'list.db'}", workdir, args.rows, args.requests
            )
            if args.postgres:
                async with postgres_database(args.postgres) as url:
                    report["approvals_postgres"] = await approvals_latency(
                        url, workdir, args.rows, args.requests
                    )
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


@contextlib.asynccontextmanager
async def postgres_database(url: str) -> AsyncIterator[str]:
    """A scratch database on the server at ``url``, dropped afterwards."""
    from urllib.parse import urlsplit, urlunsplit

    import asyncpg

    name = f"bench_{str(ULID()).lower()}"
    plain = url.replace("postgresql+asyncpg://", "postgresql://")
    admin = await asyncpg.connect(plain)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        # The path is the database's name; a query (``?host=/var/run/postgresql``, a Unix
        # socket) is kept.
        yield urlunsplit(urlsplit(plain)._replace(path=f"/{name}"))
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


def run_stopped_by_sigterm(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``asyncio.run(main())``, SIGTERM cancelling it as Ctrl-C does: its scratch databases
    (``postgres_database``) and bots are cleaned up on the way out, not left behind."""

    async def cancellable() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await main()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(cancellable())


if __name__ == "__main__":
    run_stopped_by_sigterm(main)
