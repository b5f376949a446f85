"""Run the side-by-side table: ``python -m bench.peers [--cycles 2000]``. See __init__.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import engine_cycle  # sets LLM_USER_PATH and sys.path before llm is imported
from bench.peers.at_most_once import (
    AT_MOST_ONCE,
    BASELINE,
    SHIPPED,
    at_most_once,
    at_most_once_table,
    targets,
)
from bench.peers.common import (
    SYNCHRONOUS_LEVELS,
    SYNCHRONOUS_SETTINGS,
    CommitCounter,
    Peer,
    check_durability,
    fsync_ms,
    load,
)


def peer_factories() -> tuple[list[tuple[str, Callable[[], Peer]]], list[str]]:
    """Every peer that can be imported, in table order; and a line for each that cannot."""
    factories: list[tuple[str, Callable[[], Peer]]] = []
    missing: list[str] = []
    from bench.peers.approval_bot import ApprovalBot

    factories.append((BASELINE, ApprovalBot))
    factories.append(("approval-bot-sync-tool", lambda: ApprovalBot("sync")))
    try:
        from bench.peers.langgraph_cycle import LangGraph

        factories.append(("langgraph-default", lambda: LangGraph(None)))
        factories.append(("langgraph-exit", lambda: LangGraph("exit")))
    except ImportError as exc:
        missing.append(f"LangGraph: not installed ({exc}); pip install -e '.[peers]'")
    try:
        from bench.peers.openai_agents import OpenAIAgents

        factories.append(("openai-agents", OpenAIAgents))
    except ImportError as exc:
        missing.append(f"OpenAI Agents SDK: not installed ({exc}); pip install -e '.[peers]'")
    from bench.peers.floor import SqliteFloor
    from bench.peers.raw_llm import RawLlm

    factories.append(("raw-llm", RawLlm))
    factories.append(("sqlite-floor", SqliteFloor))
    return factories, missing


def setting_for(part: str, key: str) -> str:
    """The PRAGMA synchronous a peer runs at in one part of the run.

    In the at-most-once part approval-bot (and the floor, its transactions) runs as shipped,
    NORMAL with its ``executing`` commit raised to FULL (see ``shipped_setting``), and every
    other peer at FULL: the setting at which what a peer stored before its tool ran survives
    a power cut.
    """
    if part != AT_MOST_ONCE:
        return part
    return shipped_setting() if key in SHIPPED else "FULL"


def shipped_setting() -> str:
    """approval-bot's setting for the at-most-once part: NORMAL when its repository raises
    the ``executing`` commit to a durable level
    (``storage.drivers.sqlite.connections.SQLITE_DURABLE_SYNCHRONOUS``), else FULL (every
    commit durable: the only way to keep the promise without that)."""
    from storage.drivers.sqlite import connections as sqlite

    durable = getattr(sqlite, "SQLITE_DURABLE_SYNCHRONOUS", None)
    if durable is not None and SYNCHRONOUS_LEVELS[durable.upper()] >= SYNCHRONOUS_LEVELS["FULL"]:
        return "NORMAL"
    return "FULL"


async def run_table(
    factories: list[tuple[str, Callable[[], Peer]]],
    synchronous: str,
    cycles: int,
    warmup: int,
    directory: Path,
) -> dict[str, Any]:
    """Every peer at one synchronous setting (or the at-most-once part's), interleaved: one
    cycle each per round."""
    peers: dict[str, Peer] = {}
    counter = CommitCounter()
    commits: dict[str, int] = {}
    fsynced: dict[str, int] = {}
    stored: dict[str, int | None] = {}
    seconds: dict[str, list[float]] = {key: [] for key, _ in factories}
    cpu: dict[str, list[float]] = {key: [] for key, _ in factories}
    keys = list(seconds)
    load_before = load()
    fsync_before = fsync_ms(directory)
    started = time.monotonic()
    try:
        for key, factory in factories:
            peers[key] = factory()
            await peers[key].open(directory, setting_for(synchronous, key))
        for i in range(warmup + cycles):
            # Rotate the order each round: no peer always runs right after another one.
            shift = i % len(keys)
            for key in keys[shift:] + keys[:shift]:
                peer = peers[key]
                if i == warmup - 1:  # the last warm-up cycle, untimed: count its commits
                    await peer.settle()
                    check_durability(peer.connections(), setting_for(synchronous, key))
                    peer.measuring = True
                    with counter.counting(*peer.connections()):
                        await peer.cycle(i)
                        await peer.settle()
                    peer.measuring = False
                    commits[key] = counter.count
                    fsynced[key] = counter.fsynced
                    stored[key] = await peer.stored_at_pause()
                    continue
                cpu_before = time.process_time()
                elapsed = await peer.cycle(i)
                if i >= warmup:
                    seconds[key].append(elapsed)
                    cpu[key].append(time.process_time() - cpu_before)
    finally:
        for peer in peers.values():
            await peer.close()
    wall = time.monotonic() - started
    rows = {}
    for key, values in seconds.items():
        rows[key] = {
            "name": peers[key].name,
            "durability": peers[key].durability,
            "synchronous": setting_for(synchronous, key),
            "commits_per_cycle": commits.get(key),
            "fsynced_commits_per_cycle": fsynced.get(key),
            "bytes_at_pause": stored.get(key),
            "p50_ms": statistics.median(values) * 1000,
            "p99_ms": engine_cycle.percentile(values, 99) * 1000,
            "mean_ms": statistics.fmean(values) * 1000,
            "cpu_ms": statistics.fmean(cpu[key]) * 1000,
        }
    return {
        "synchronous": synchronous,
        "cycles": cycles,
        "load_before": load_before,
        "load_after": load(),
        "fsync_ms_before": round(fsync_before, 3),
        "fsync_ms_after": round(fsync_ms(directory), 3),
        "seconds": round(wall, 1),
        "rows": rows,
    }


def table(results: list[dict[str, Any]]) -> str:
    """One markdown table: p50/p99 per cycle and the ratio to approval-bot, per setting."""
    results = [r for r in results if r["synchronous"] != AT_MOST_ONCE]
    head = ["per cycle, ms", "commits", "bytes at pause"]
    for result in results:
        setting = result["synchronous"]
        head += [f"{setting}: fsynced commits", "p50", "p99", "p50 ÷ approval-bot"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    first = results[0]["rows"]
    for key, row in first.items():
        stored = "" if row["bytes_at_pause"] is None else f"{row['bytes_at_pause']:,}"
        cells = [row["name"], str(row["commits_per_cycle"]), stored]
        for result in results:
            r = result["rows"][key]
            base = result["rows"][BASELINE]["p50_ms"]
            cells += [
                str(r["fsynced_commits_per_cycle"]),
                f"{r['p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
                f"{r['p50_ms'] / base:.2f}×",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000, help="timed cycles per peer")
    parser.add_argument("--warmup", type=int, default=50, help="untimed cycles first")
    parser.add_argument(
        "--synchronous",
        default=",".join([*SYNCHRONOUS_SETTINGS, AT_MOST_ONCE]),
        help=(
            "the SQLite parts of the run, in order: PRAGMA synchronous settings for every "
            f"peer, or {AT_MOST_ONCE!r} (approval-bot as shipped, every other peer at FULL); "
            f"default: NORMAL,FULL,{AT_MOST_ONCE}; 'none': no SQLite part (with --database)"
        ),
    )
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help=(
            "also the PostgreSQL part on the server at URL (postgresql://user@host:port/db): "
            "approval-bot beside LangGraph's PostgresSaver, in a scratch database created "
            "there and dropped afterwards (bench/peers/postgres.py)"
        ),
    )
    parser.add_argument(
        "--variants",
        default="",
        help=(
            "with --database: also approval-bot with a lever undone, beside it (comma-separated "
            "names from bench/peers/postgres.py's VARIANTS)"
        ),
    )
    parser.add_argument(
        "--isolated",
        action="store_true",
        help=(
            "with --database: also the PostgreSQL table with each peer in a process of its "
            "own, taking turns in blocks of cycles (bench/peers/isolated.py)"
        ),
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = parser.parse_args()
    # SIGTERM (a timeout, a CI job cancelled) stops the run as Ctrl-C does, so the scratch
    # databases are dropped on the way out instead of left behind.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.isolated and not args.database:
        parser.error("--isolated needs --database (it measures the PostgreSQL table)")
    if args.isolated and args.variants:
        parser.error("--isolated measures the peers as shipped: leave out --variants")
    if args.warmup < 1:
        parser.error("--warmup must be at least 1 (its last cycle counts the commits)")
    settings = [s.strip().upper() for s in args.synchronous.split(",") if s.strip()]
    settings = [s for s in settings if s != "NONE"]  # "none": the PostgreSQL part alone
    settings = [AT_MOST_ONCE if s == AT_MOST_ONCE.upper() else s for s in settings]
    for setting in settings:
        if setting not in SYNCHRONOUS_LEVELS and setting != AT_MOST_ONCE:
            parser.error(
                f"--synchronous: {setting!r} is not a SQLite synchronous setting "
                f"nor {AT_MOST_ONCE!r}"
            )
    factories, missing = peer_factories()
    results: list[dict[str, Any]] = []
    for setting in settings:
        # Beside the repository (a disk, as a deployment's), not a tmpfs /tmp would be.
        with tempfile.TemporaryDirectory(prefix="bench-peers-", dir=Path.cwd()) as tmp:
            result = asyncio.run(run_table(factories, setting, args.cycles, args.warmup, Path(tmp)))
        results.append(result)
        print(
            f"part {setting}: {args.cycles} cycles each in {result['seconds']} s, "
            f"load {result['load_before']} -> {result['load_after']}",
            file=sys.stderr,
        )
    postgres = isolated = None
    if args.database:
        from bench.peers import postgres as pg

        variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        unknown = [v for v in variants if v not in pg.VARIANTS]
        if unknown:
            parser.error(f"--variants: unknown {unknown}; known: {sorted(pg.VARIANTS)}")
        postgres = asyncio.run(pg.run_postgres(args.database, args.cycles, args.warmup, variants))
        print(
            f"part PostgreSQL: {args.cycles} cycles each in {postgres['seconds']} s, "
            f"load {postgres['load_before']} -> {postgres['load_after']}",
            file=sys.stderr,
        )
        if args.isolated:
            from bench.peers.isolated import run_isolated

            isolated = asyncio.run(run_isolated(args.database, args.cycles, args.warmup))
    print(f"{os.cpu_count()} cores; {args.cycles} cycles per peer")
    if results:
        print("SQLite: WAL, a file per peer beside the repository")
    for result in results:
        print(
            f"part {result['synchronous']}: load average "
            f"{result['load_before']} before, {result['load_after']} after; one fsync "
            f"{result['fsync_ms_before']:.2f} ms before, {result['fsync_ms_after']:.2f} ms after"
        )
    if any(r["synchronous"] != AT_MOST_ONCE for r in results):
        print()
        print(table(results))
        print(
            "\n'fsynced commits': commits made at synchronous = FULL (each waits for an fsync "
            "of the WAL); at NORMAL a commit is durable only at the next checkpoint."
        )
    summary = at_most_once(results)
    if summary is not None:
        print(
            "\nAt the durability at-most-once needs (what was stored before the tool ran "
            "survives a power cut): approval-bot as shipped, every peer at FULL, "
            f"{summary['source']}.\n"
        )
        print(at_most_once_table(summary))
        print("\nTargets (issue 11):")
        for line in targets(summary, results):
            print(f"- {line}")
    if results:
        print("\nHow each is set to the setting (every connection checked: WAL, that level):")
        for row in results[0]["rows"].values():
            print(f"- {row['name']}: {row['durability']}")
        for line in missing:
            print(f"\nNot measured: {line}")
    for part in (postgres, isolated):
        if part is not None:
            print()
            print("\n".join(pg.report(part)))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "tables": results,
                    "at_most_once": summary,
                    "postgresql": postgres,
                    "postgresql_isolated": isolated,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
