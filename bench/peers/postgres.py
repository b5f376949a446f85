"""The PostgreSQL column: approval-bot's cycle on PostgreSQL beside LangGraph's PostgresSaver.

``python -m bench.peers --database postgresql://user@host:port/db`` runs it after the SQLite
parts (``--synchronous none`` skips those). The URL names a server and a database to connect
to; the benchmark creates a scratch database of its own there (``bench_<ulid>``) and drops it
afterwards, so it never leaves tables behind.

Three peers, interleaved one cycle each per round in one sitting, each approval-bot row on a
scratch database of its own and LangGraph's two on one:

- approval-bot (``bench/engine_cycle.py``'s ``cycle``), its repository opened on the URL as a
  deployment opens it (``Repository.open``: asyncpg, its own settings);
- LangGraph with ``PostgresSaver`` (langgraph-checkpoint-postgres: a psycopg 3 connection
  with ``autocommit=True``, ``prepare_threshold=0``, as its ``from_conn_string`` makes one),
  the same graph as the SQLite peer (``bench/peers/langgraph_cycle.py``), at its default
  durability and at ``durability="exit"``.

The server runs as it is configured (``synchronous_commit`` is printed): every peer gets the
server's durability except where it chooses otherwise itself (approval-bot's commits and its
``executing`` commit: see ``storage/drivers/postgres.py``).

Per cycle: wall time less the fake model's (p50, p99), the bot process's CPU (its process
time over the cycle, the fake model's few microseconds included), and, from untimed cycles
afterwards, the round trips counted on the wire (:mod:`bench.peers.pg_wire`) and the CPU of
the PostgreSQL backends serving the peer.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import engine_cycle
from bench.figures import percentile
from bench.peers.common import load
from bench.peers.pg_wire import RoundTripRelay
from bench.process_stats import BackendCpu

BASELINE = "approval-bot"


# approval-bot with one of its levers undone, beside the shipped one in the same sitting
# (``--variants``): each names the module settings it opens its repository with.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "server-commit": (
        "every commit at the server's synchronous_commit",
        {"storage.drivers.pg_commits.POSTGRES_SYNCHRONOUS_COMMIT": None},
    ),
    "engine": (
        "every transaction through SQLAlchemy's engine",
        {"storage.drivers.postgres.POSTGRES_DIRECT": False},
    ),
    "before": (
        "both undone (the engine, the server's synchronous_commit): as issue 22 found it",
        {
            "storage.drivers.postgres.POSTGRES_DIRECT": False,
            "storage.drivers.pg_commits.POSTGRES_SYNCHRONOUS_COMMIT": None,
        },
    ),
}


class ApprovalBotPostgres:
    def __init__(self, variant: str | None = None) -> None:
        self.variant = variant
        self.name = "approval-bot (`bench/engine_cycle.py`) on PostgreSQL, async tool"
        if variant is not None:
            self.name = f"approval-bot, {VARIANTS[variant][0]}"
        self.repo: Any = None
        self.runner: Any = None

    async def open(self, url: str) -> None:
        import importlib

        settings = VARIANTS[self.variant][1] if self.variant is not None else {}
        before = {}
        for path, value in settings.items():
            module, name = path.rsplit(".", 1)
            before[path] = getattr(importlib.import_module(module), name)
            setattr(importlib.import_module(module), name, value)
        try:
            self.repo, self.runner = await engine_cycle.open_runner(url)
        finally:
            for path, value in before.items():
                module, name = path.rsplit(".", 1)
                setattr(importlib.import_module(module), name, value)

    async def cycle(self, i: int) -> float:
        seconds, _run = await engine_cycle.cycle(self.runner, i)
        return seconds

    async def close(self) -> None:
        if self.repo is not None:
            await self.repo.close()


class LangGraphPostgres:
    """``durability`` None is LangGraph's default ("async"); "exit" writes at the interrupt and
    at the end only."""

    def __init__(self, durability: str | None, prefix: str = "") -> None:
        self.mode = durability
        label = "default durability" if durability is None else f'durability "{durability}"'
        self.name = f"LangGraph, PostgresSaver, {label}"
        self.prefix = f"{prefix}{durability or 'default'}-"
        self.connection: Any = None
        self.graph: Any = None

    async def open(self, url: str) -> None:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        from bench.peers.langgraph_cycle import build_graph

        plain = url.replace("postgresql+asyncpg://", "postgresql://")
        self.connection = Connection.connect(
            plain, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver = PostgresSaver(self.connection)
        saver.setup()
        self.graph = build_graph(saver)  # type: ignore[arg-type]

    async def cycle(self, i: int) -> float:
        from langchain_core.messages import HumanMessage, SystemMessage
        from langgraph.types import Command

        from bench.peers.langgraph_cycle import CLOCK
        from bot.config.models import DEFAULT_SYSTEM_PROMPT

        config = {"configurable": {"thread_id": f"{self.prefix}run{i}"}}
        options: dict[str, Any] = {} if self.mode is None else {"durability": self.mode}
        model_before = CLOCK.seconds
        started = time.perf_counter()
        request = [SystemMessage(DEFAULT_SYSTEM_PROMPT), HumanMessage(f"restart svc{i}")]
        paused = self.graph.invoke({"messages": request}, config, **options)
        assert "__interrupt__" in paused, paused
        done = self.graph.invoke(
            Command(resume={"approved": True, "actor": "U0APPROVER"}), config, **options
        )
        assert done["messages"][-1].content == f"Done: restarted svc{i}", done
        return time.perf_counter() - started - (CLOCK.seconds - model_before)

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def factories(variants: tuple[str, ...] = ()) -> tuple[list[tuple[str, Any]], list[str]]:
    made: list[tuple[str, Any]] = [(BASELINE, ApprovalBotPostgres)]
    for variant in variants:
        made.append((variant, lambda prefix="", v=variant: ApprovalBotPostgres(v)))
    missing: list[str] = []
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import psycopg  # noqa: F401

        made.append(("langgraph-default", lambda prefix="": LangGraphPostgres(None, prefix)))
        made.append(("langgraph-exit", lambda prefix="": LangGraphPostgres("exit", prefix)))
    except ImportError as exc:
        missing.append(f"LangGraph PostgresSaver: not installed ({exc}); pip install -e '.[peers]'")
    return made, missing


def _make(key: str, factory: Any, prefix: str = "") -> Any:
    return factory() if key == BASELINE else factory(prefix)  # only LangGraph's share ids


async def _server(url: str) -> dict[str, str]:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        return {
            "version": (await connection.fetchval("SHOW server_version")).split()[0],
            "synchronous_commit": await connection.fetchval("SHOW synchronous_commit"),
        }
    finally:
        await connection.close()


async def _backend_seconds(url: str) -> float:
    """CPU seconds so far of every backend connected to the scratch database (but this one)."""
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        sampler = BackendCpu(url)
        return sum((await sampler._sample(connection, url.rsplit("/", 1)[1])).values())
    finally:
        await connection.close()


async def run_postgres(
    url: str, cycles: int, warmup: int, variants: tuple[str, ...] = (), count: int = 50
) -> dict[str, Any]:
    """Every PostgreSQL peer interleaved, then each alone through the relay for its counts."""
    from contextlib import AsyncExitStack

    from bench.slack_latency import postgres_database

    made, missing = factories(variants)
    rows: dict[str, dict[str, Any]] = {}
    # A scratch database for each approval-bot (their runs' conversations are the same) and
    # one for LangGraph's (its tables include one named ``checkpoints``, as ours do).
    async with AsyncExitStack() as stack:
        theirs = await stack.enter_async_context(postgres_database(url))
        where = {}
        for key, _ in made:
            if key.startswith("langgraph"):
                where[key] = theirs
            else:
                where[key] = await stack.enter_async_context(postgres_database(url))
        server = await _server(where[BASELINE])
        peers = {key: _make(key, factory) for key, factory in made}
        seconds: dict[str, list[float]] = {key: [] for key in peers}
        cpu: dict[str, list[float]] = {key: [] for key in peers}
        keys = list(peers)
        load_before = load()
        started = time.monotonic()
        try:
            for key, peer in peers.items():
                await peer.open(where[key])
            for i in range(warmup + cycles):
                shift = i % len(keys)
                for key in keys[shift:] + keys[:shift]:
                    peer = peers[key]
                    cpu_before = time.process_time()
                    elapsed = await peer.cycle(i)
                    spent = time.process_time() - cpu_before
                    if i >= warmup:
                        seconds[key].append(elapsed)
                        cpu[key].append(spent)
        finally:
            for peer in peers.values():
                await peer.close()
        wall = time.monotonic() - started
        load_after = load()
        counts = await _count(where, made, warmup + cycles, count)
    for key, peer in peers.items():
        rows[key] = timed_row(peer.name, seconds[key], cpu[key], counts[key])
    return {
        "database": "postgresql",
        "server": server,
        "cycles": cycles,
        "load_before": load_before,
        "load_after": load_after,
        "seconds": round(wall, 1),
        "rows": rows,
        "missing": missing,
    }


def timed_row(
    name: str, seconds: list[float], cpu: list[float], counts: dict[str, Any]
) -> dict[str, Any]:
    """A peer's row of the table: its timed cycles' wall and CPU figures, and its counts."""
    return {
        "name": name,
        "p50_ms": statistics.median(seconds) * 1000,
        "p99_ms": percentile(seconds, 99) * 1000,
        "mean_ms": statistics.fmean(seconds) * 1000,
        "cpu_ms": statistics.fmean(cpu) * 1000,
        "cpu_p50_ms": statistics.median(cpu) * 1000,
        **counts,
    }


async def _count(
    where: dict[str, str], made: list[tuple[str, Any]], first: int, count: int
) -> dict[str, dict[str, Any]]:
    """Round trips and backend CPU per cycle: each peer alone, through the relay, untimed."""
    from urllib.parse import urlsplit

    parts = urlsplit(where[BASELINE].replace("postgresql+asyncpg://", "postgresql://"))
    relay = RoundTripRelay(parts.hostname or "127.0.0.1", parts.port or 5432)
    found: dict[str, dict[str, Any]] = {}
    try:
        for n, (key, factory) in enumerate(made):
            scratch = where[key]
            peer = _make(key, factory, prefix=f"count{n}-")
            await peer.open(relay.url(scratch))
            try:
                base = first + 100_000 * (n + 1)
                for i in range(base, base + 5):  # statement caches, pool connections
                    await peer.cycle(i)
                backend_before = await _backend_seconds(scratch)
                with relay.counting():
                    for i in range(base + 5, base + 5 + count):
                        await peer.cycle(i)
                    trips = relay.round_trips
                backend = await _backend_seconds(scratch) - backend_before
            finally:
                await peer.close()
            found[key] = {
                "round_trips_per_cycle": trips / count,
                "server_cpu_ms": backend / count * 1000,
            }
    finally:
        relay.close()
    return found


def postgres_table(result: dict[str, Any]) -> str:
    head = [
        "per cycle (PostgreSQL)",
        "p50 ms",
        "p99 ms",
        "p99 ÷ p50",
        "bot CPU ms",
        "round trips",
        "server CPU ms",
        "p50 ÷ approval-bot",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    base = result["rows"][BASELINE]["p50_ms"]
    for row in result["rows"].values():
        cells = [
            row["name"],
            f"{row['p50_ms']:.2f}",
            f"{row['p99_ms']:.2f}",
            f"{row['p99_ms'] / row['p50_ms']:.2f}",
            f"{row['cpu_ms']:.2f}",
            f"{row['round_trips_per_cycle']:.1f}",
            f"{row['server_cpu_ms']:.2f}",
            f"{row['p50_ms'] / base:.2f}×",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(result: dict[str, Any]) -> list[str]:
    """The PostgreSQL part's lines: the server, the table, what its columns are, the targets."""
    method = result.get("method", "interleaved cycle by cycle in one process")
    lines = [
        f"PostgreSQL {result['server']['version']} on this machine (synchronous_commit = "
        f"{result['server']['synchronous_commit']} on the server), a scratch database for each "
        "approval-bot row and one for LangGraph's; "
        f"{method}; load average {result['load_before']} before, {result['load_after']} after.",
        "",
        postgres_table(result),
        "",
        "'bot CPU': the peer's process's CPU time per cycle (mean); 'round trips' and "
        "'server CPU' (the PostgreSQL backends' CPU) from untimed cycles of each peer alone, "
        "counted on the wire (bench/peers/pg_wire.py).",
        "",
        f"Targets (issue 22), {method}:",
    ]
    lines += [f"- {line}" for line in postgres_targets(result)]
    lines += [f"\nNot measured: {line}" for line in result["missing"]]
    return lines


def postgres_targets(result: dict[str, Any]) -> list[str]:
    """Issue 22's targets, each met or not, from this sitting's figures."""
    rows = result["rows"]
    bot = rows[BASELINE]

    def judge(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = []
    for key, factor in (("langgraph-default", 3), ("langgraph-exit", 2)):
        if key in rows:
            ratio = rows[key]["p50_ms"] / bot["p50_ms"]
            lines.append(
                f">= {factor}× faster than {rows[key]['name']}: {ratio:.2f}×, "
                f"{judge(ratio >= factor)}"
            )
    spent = bot["cpu_ms"]
    lines.append(f"bot CPU <= 2.5 ms per cycle: {spent:.2f} ms, {judge(spent <= 2.5)}")
    trips = bot["round_trips_per_cycle"]
    lines.append(f"<= 10 round trips per cycle: {trips:.1f}, {judge(trips <= 10)}")
    ratio = bot["p99_ms"] / bot["p50_ms"]
    lines.append(f"p99 <= 2× p50: {ratio:.2f}×, {judge(ratio <= 2)}")
    return lines
