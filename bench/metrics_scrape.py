"""Benchmark: what one ``GET /metrics`` scrape costs, and that it does not grow with history.

The database gauges (pending approvals by tool, live runs by status, the sweeper's lag) are
read at every scrape. They should cost the same whether the database holds no finished
runs or hundreds of thousands: the queries read the pending approvals and the live runs
only, through their status indexes. This seeds ``--pending`` paused runs with one pending
approval each, times the scrape, then adds ``--history`` finished runs with a decided
approval each, runs ANALYZE on PostgreSQL (as autovacuum would; see :func:`seed` for why
not on SQLite) and times it again.

Timed: :func:`storage.stores.stats.live_counts` alone (the database part) and the whole scrape
(:func:`bot.ops.metrics.scrape` plus the text exposition), ``--scrapes`` times each, after 5
untimed. SQLite, and PostgreSQL when ``--postgres URL`` or
``$APPROVAL_BOT_TEST_POSTGRES_URL`` is given (a scratch database, dropped afterwards).

Run: ``.venv/bin/python bench/metrics_scrape.py [--pending 1000] [--history 200000]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest

from bench.figures import percentile
from bench.slack_latency import postgres_database
from bot.clock import utcnow
from bot.ops.metrics import REGISTRY, scrape
from storage.repository import Repository, live_counts

TOOLS = ("restart_service", "deploy", "scale", "rollback")
BATCH = 5_000


def run_row(i: int, status: str, now: Any) -> dict[str, Any]:
    return {
        "id": f"run_{status[:3]}_{i:07d}",
        "conversation_key": f"{status}-{i}",
        "team_id": "T1",
        "channel": f"C{i % 50:04d}",
        "thread_ts": "1.0",
        "requester": "U0REQ",
        "status": status,
        "model_id": "echo",
        "history": [],
        "turn": 1,
        "created_at": now,
        "updated_at": now,
    }


def approval_row(i: int, run_id: str, status: str, now: Any) -> dict[str, Any]:
    return {
        "id": f"apr_{status[:3]}_{i:07d}",
        "run_id": run_id,
        "turn": 1,
        "tool_call_id": "tc",
        "tool_name": TOOLS[i % len(TOOLS)],
        "arguments": {"i": i},
        "payload_hash": "0" * 64,
        "status": status,
        "requester": "U0REQ",
        "team_id": "T1",
        "channel": f"C{i % 50:04d}",
        "thread_ts": "1.0",
        "approvers": ["U1"],
        "allow_self_approval": False,
        "on_expiry": "deny",
        "created_at": now,
        "expires_at": now + timedelta(hours=1),
        "decided_by": None if status == "pending" else "U1",
        "decided_at": None if status == "pending" else now,
    }


async def seed(repo: Repository, count: int, run_status: str, approval_status: str) -> None:
    now = utcnow()
    for start in range(0, count, BATCH):
        indexes = range(start, min(start + BATCH, count))
        runs = [run_row(i, run_status, now) for i in indexes]
        approvals = [
            approval_row(i, r["id"], approval_status, now)
            for i, r in zip(indexes, runs, strict=True)
        ]
        await repo.insert_rows_for_benchmark(runs=runs, approvals=approvals)
    if repo.dialect != "sqlite":
        # What autovacuum does on PostgreSQL. Nothing runs ANALYZE on SQLite in production,
        # and statistics taken while every approval was pending made the planner scan the
        # table, a plan the connection's statement cache then kept after the history grew.
        await repo.analyze()


async def timed(body: Callable[[], Awaitable[Any]], times: int) -> dict[str, float]:
    for _ in range(5):
        await body()
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        await body()
        seconds.append(time.perf_counter() - started)
    return {
        "p50_ms": round(statistics.median(seconds) * 1000, 2),
        "p99_ms": round(percentile(seconds, 99) * 1000, 2),
    }


async def measure(repo: Repository, label: str, times: int) -> None:
    async def counts() -> None:
        await live_counts(repo.database, now=utcnow())

    async def whole() -> None:
        await scrape(repo)
        generate_latest(REGISTRY)

    database, full = await timed(counts, times), await timed(whole, times)
    print(
        f"| {label} | {database['p50_ms']} ms | {database['p99_ms']} ms "
        f"| {full['p50_ms']} ms | {full['p99_ms']} ms |",
        flush=True,
    )


async def bench(url: str, name: str, pending: int, history: int, times: int) -> None:
    repo = await Repository.open(url)
    try:
        await seed(repo, pending, "paused", "pending")
        await measure(repo, f"{name}, {pending:,} pending, no history", times)
        await seed(repo, history, "completed", "executed")
        await measure(repo, f"{name}, {pending:,} pending, {history:,} finished runs", times)
    finally:
        await repo.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1_000)
    parser.add_argument("--history", type=int, default=200_000)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--postgres", default=os.environ.get("APPROVAL_BOT_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    print("| database | counts p50 | counts p99 | whole scrape p50 | whole scrape p99 |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        await bench(url, "SQLite", args.pending, args.history, args.scrapes)
    if args.postgres:
        async with postgres_database(args.postgres) as url:
            await bench(url, "PostgreSQL", args.pending, args.history, args.scrapes)


if __name__ == "__main__":
    asyncio.run(main())
