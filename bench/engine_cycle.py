"""Benchmark: full pause -> persist -> decide -> resume cycles on SQLite.

Each cycle starts a run whose model asks for one gated call (the chain pauses and the history
and approval are persisted), approves it (a conditional UPDATE that also claims the resume) and
resumes it (the gated call executes once, the model answers, the run completes). The model is
an in-process deterministic ``llm.AsyncModel`` whose own cost is measured separately and
subtracted, so the figures are the framework's overhead: llm's chain machinery, our gate and
runner, and the SQLite transactions.

The gated tool is async by default (a fast real tool is I/O: an HTTP call, a queue message),
awaited on the event loop; ``--tool sync`` measures a plain function instead, which the gate
runs on a thread of its own so that it cannot block Slack's acknowledgements.

Run: ``.venv/bin/python bench/engine_cycle.py [--cycles 2000] [--database PATH] [--tool sync]``

``--count-commits N`` also runs N untimed cycles after the timed ones with a trace on every
SQLite connection and the WAL checkpoints held back, and reports the commits (write and read
transactions apart) and the WAL frames per cycle. ``--synchronous FULL`` sets every
connection's ``PRAGMA synchronous``
(``storage.drivers.sqlite.connections.SQLITE_SYNCHRONOUS``) for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LLM_USER_PATH", tempfile.mkdtemp(prefix="approval-bot-bench-"))

import llm
from llm.parts import TextPart, ToolResultPart

from bench.figures import percentile
from bot.config import config_from_dict
from bot.engine import Request, Runner
from bot.llm_setup import prepare_llm, register_model
from storage.drivers.sqlite import connections as sqlite
from storage.repository import Repository

MODEL_SECONDS: list[float] = []


class BenchModel(llm.AsyncModel):
    """Calls ``restart_service`` once, then answers with the tool result."""

    model_id = "bench-deterministic"
    supports_tools = True
    can_stream = True

    async def execute(self, prompt: Any, stream: bool, response: Any, conversation: Any = None):
        started = time.perf_counter()
        messages = list(prompt.messages)
        results = [
            p
            for m in messages[-1:]
            if m.role == "tool"
            for p in m.parts
            if isinstance(p, ToolResultPart)
        ]
        if results:
            text = f"Done: {results[0].output}"
        else:
            user = next(m for m in reversed(messages) if m.role == "user")
            service = "".join(p.text for p in user.parts if isinstance(p, TextPart)).split()[-1]
            response.add_tool_call(
                llm.ToolCall(name="restart_service", arguments={"service": service})
            )
            text = "Restarting."
        MODEL_SECONDS.append(time.perf_counter() - started)
        yield text


def restarted(service: str) -> str:
    """What the benchmark's tool answers (the peers call it from their own tools)."""
    return f"restarted {service}"


async def restart_service(service: str) -> str:
    """Restart a service."""
    return restarted(service)


def _restart_service_sync(service: str) -> str:
    """Restart a service."""
    return restarted(service)


# The same tool as a plain function (``--tool sync``): the gate runs it on a thread of its
# own, so that it cannot block the event loop (and Slack's acknowledgements) while it runs.
restart_service_sync = llm.Tool.function(_restart_service_sync, name="restart_service")

# A real tool that is fast is I/O (an HTTP call, a queue message): async, on the event loop.
TOOLS = {
    "async": "bench.engine_cycle:restart_service",
    "sync": "bench.engine_cycle:restart_service_sync",
}


async def open_runner(database: Path | str, tool: str = "async") -> tuple[Repository, Runner]:
    """The bot's repository and runner on ``database`` (a SQLite file, or a database URL such
    as ``postgresql://...``), with the benchmark model and tool (``tool``: "async", the
    default, or "sync"; see ``TOOLS``)."""
    prepare_llm()
    register_model(BenchModel())
    config = config_from_dict(
        {
            "model": "bench-deterministic",
            "tools": [TOOLS[tool]],
            "policies": {"restart_service": {"approvers": ["U0APPROVER"]}},
        }
    )
    url = database if isinstance(database, str) else f"sqlite+aiosqlite:///{database}"
    repo = await Repository.open(url)
    return repo, Runner(repo, config, worker_id="bench")


async def cycle(runner: Runner, i: int) -> tuple[float, str]:
    """One pause -> persist -> decide -> resume cycle: its seconds less the model's, its run id."""
    model_before = len(MODEL_SECONDS)
    started = time.perf_counter()
    paused = await runner.start(
        Request(
            text=f"restart svc{i}", requester="U0REQUESTER", channel="C0OPS", thread_ts=f"{i}.0"
        )
    )
    assert paused.status == "paused", paused
    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER", approve=True)
    assert decision.resume_claimed
    done = await runner.resume(paused.run_id)
    assert done.status == "completed", done
    return time.perf_counter() - started - sum(MODEL_SECONDS[model_before:]), paused.run_id


async def bench(
    cycles: int, database: Path, count_commits: int = 0, tool: str = "async"
) -> dict[str, Any]:
    repo, runner = await open_runner(database, tool)
    per_cycle: list[float] = []
    stored_bytes: list[int] = []
    for i in range(cycles + 50):
        elapsed, run_id = await cycle(runner, i)
        if i >= 50:  # warm-up: imports, first connections, statement caches
            per_cycle.append(elapsed)
            if i < 250:
                stored_bytes.append(await paused_size(repo, run_id))
    counts = await count_writes(repo, runner, cycles + 50, count_commits) if count_commits else {}
    await repo.close()
    return {
        **counts,
        "cycles": cycles,
        "tool": tool,
        "p50_ms": statistics.median(per_cycle) * 1000,
        "p99_ms": percentile(per_cycle, 99) * 1000,
        "mean_ms": statistics.fmean(per_cycle) * 1000,
        "bytes_per_paused_run": statistics.median(stored_bytes),
        "database_file_bytes": database.stat().st_size,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


async def settle(repo: Repository) -> None:
    """Wait for the writer and checkpoint threads (a WAL checkpoint may be running)."""
    database = repo.database
    for executor in (database._writer, getattr(database, "_checkpointer", None)):  # type: ignore[attr-defined]
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, lambda: None)


async def count_writes(repo: Repository, runner: Runner, first: int, cycles: int) -> dict[str, Any]:
    """Commits and WAL frames per cycle over ``cycles`` untimed cycles (a trace costs time).

    The WAL is emptied first and no checkpoint runs meanwhile, so the frames it then holds
    are the ones these cycles wrote. Set and cleared only while no other thread is in a
    statement (see bench/peers' CommitCounter).
    """
    database = repo.database
    connections = list(database._connections)  # type: ignore[attr-defined]
    statements: list[str] = []
    every = sqlite.CHECKPOINT_EVERY
    sqlite.CHECKPOINT_EVERY = 1 << 62
    await settle(repo)
    probe = sqlite3.connect(database.path)  # type: ignore[attr-defined]
    try:
        probe.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        for connection in connections:
            connection.set_trace_callback(statements.append)
        try:
            for i in range(first, first + cycles):
                await cycle(runner, i)
        finally:
            await settle(repo)
            for connection in connections:
                connection.set_trace_callback(None)
        _busy, frames, _copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        probe.close()
        sqlite.CHECKPOINT_EVERY = every
    writes = reads = 0
    in_write = False
    for statement in statements:
        verb = statement.strip().upper()
        if verb.startswith("BEGIN"):
            in_write = verb.startswith("BEGIN IMMEDIATE")
        elif verb.startswith(("COMMIT", "END")):
            writes, reads = (writes + 1, reads) if in_write else (writes, reads + 1)
    return {
        "write_commits_per_cycle": writes / cycles,
        "read_transactions_per_cycle": reads / cycles,
        "wal_frames_per_cycle": frames / cycles,
        "fsyncing_commits_per_cycle": sum("SYNCHRONOUS = FULL" in s.upper() for s in statements)
        / cycles,
    }


async def paused_size(repo: Repository, run_id: str) -> int:
    """Bytes of what a paused run keeps: its history and its approval rows (as JSON)."""
    run = await repo.get_run(run_id)
    approvals = await repo.approvals_for_run(run_id)
    assert run is not None
    # The history grew after the resume; measure the part that existed at the pause.
    history = run.history[:3]
    size = len(json.dumps(history))
    for approval in approvals:
        size += len(json.dumps(approval.arguments)) + len(approval.payload_hash)
        size += sum(
            len(str(v))
            for v in (
                approval.id,
                approval.run_id,
                approval.tool_call_id,
                approval.tool_name,
                approval.requester,
                approval.approvers,
            )
        )
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--database", type=Path, default=None)
    parser.add_argument(
        "--count-commits",
        type=int,
        default=0,
        metavar="N",
        help="after the timed cycles, count commits and WAL frames over N untimed cycles",
    )
    parser.add_argument(
        "--synchronous",
        choices=["NORMAL", "FULL"],
        default=None,
        help="every SQLite connection's PRAGMA synchronous (default: the bot's own)",
    )
    parser.add_argument(
        "--tool",
        choices=sorted(TOOLS),
        default="async",
        help="the gated tool as an async function (default) or a sync one (run on a thread)",
    )
    args = parser.parse_args()
    if args.synchronous:
        sqlite.SQLITE_SYNCHRONOUS = args.synchronous
    with tempfile.TemporaryDirectory() as tmp:
        database = args.database or Path(tmp) / "bench.db"
        result = asyncio.run(bench(args.cycles, database, args.count_commits, args.tool))
    result["synchronous"] = sqlite.SQLITE_SYNCHRONOUS
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
