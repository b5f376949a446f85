"""Where one pause -> decide -> resume cycle's time goes, by module (``bench/engine_cycle.py``).

Two passes over steady cycles (after ``--warm`` untimed ones), on one database:

1. **Split, unprofiled**: each cycle's wall time less the model's, and how much of it is spent
   inside SQLite transactions (``storage.drivers.sqlite.connections._transact``: the
   statements, the Python of their bodies, BEGIN and COMMIT), the ``executing`` commit apart
   (the one that fsyncs).
   The rest is llm's chain machinery, our runner, gate and the event loop.
2. **By module, under cProfile**: self time and calls per cycle, grouped by where the code
   lives (each of our modules; llm; SQLite's C calls; json; asyncio; other libraries).
   cProfile slows Python down several times more than C, so the shares are for ranking,
   and the calls per cycle are the figure to compare between versions (they barely vary).

Run: ``.venv/bin/python bench/cycle_profile.py [--cycles 400] [--warm 100] [--top 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import engine_cycle  # noqa: E402
from storage.drivers.sqlite import connections as sqlite  # noqa: E402


def area(filename: str, function: str) -> str:
    """Where a profiled function lives: our module's path, or the library it belongs to."""
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0]
    if filename.startswith(str(ROOT)):
        return filename[len(str(ROOT)) + 1 :]
    if filename == "~":  # a C function: SQLite's apart
        return "SQLite (sqlite3's C calls)" if "sqlite3" in function else "builtins"
    if "/asyncio/" in filename or filename.endswith("selectors.py"):
        return "asyncio"
    if "/json/" in filename:
        return "json"
    return "stdlib: " + filename.rsplit("/", 1)[-1]


def split_pass(runner: Any, first: int, cycles: int) -> dict[str, float]:
    """Wall time per cycle, and the part inside transactions (p50 of each, ms)."""
    inside = {"tx": 0.0, "durable": 0.0}
    depth = [0]  # a durable transaction calls _transact again for its body: count it once
    original = sqlite._transact

    def timed(connection: Any, body: Any, mode: Any, durable: bool = False) -> Any:
        started = time.perf_counter()
        depth[0] += 1
        try:
            return original(connection, body, mode, durable)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                inside["durable" if durable else "tx"] += time.perf_counter() - started

    totals: list[float] = []
    transactions: list[float] = []
    durables: list[float] = []
    sqlite._transact = timed  # type: ignore[assignment]
    try:
        for i in range(first, first + cycles):
            inside.update(tx=0.0, durable=0.0)
            elapsed, _run = asyncio.get_event_loop().run_until_complete(
                engine_cycle.cycle(runner, i)
            )
            totals.append(elapsed)
            transactions.append(inside["tx"])
            durables.append(inside["durable"])
    finally:
        sqlite._transact = original  # type: ignore[assignment]
    outside = [t - a - b for t, a, b in zip(totals, transactions, durables, strict=True)]
    return {
        "cycle_p50_ms": statistics.median(totals) * 1000,
        "other_transactions_p50_ms": statistics.median(transactions) * 1000,
        "executing_transaction_p50_ms": statistics.median(durables) * 1000,
        "outside_transactions_p50_ms": statistics.median(outside) * 1000,
    }


def profile_pass(runner: Any, first: int, cycles: int) -> pstats.Stats:
    profile = cProfile.Profile()
    loop = asyncio.get_event_loop()
    profile.enable()
    for i in range(first, first + cycles):
        loop.run_until_complete(engine_cycle.cycle(runner, i))
    profile.disable()
    return pstats.Stats(profile)


def by_area(stats: pstats.Stats, cycles: int) -> list[tuple[str, float, float]]:
    """(area, self µs per cycle, calls per cycle), most time first."""
    seconds: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for (filename, _line, function), (_cc, ncalls, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = area(filename, function)
        seconds[key] += tottime
        calls[key] += ncalls
    return [(key, s / cycles * 1e6, calls[key] / cycles) for key, s in seconds.most_common()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--warm", type=int, default=100)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--database", type=Path, default=None)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        database = args.database or Path(tmp) / "profile.db"
        repo, runner = loop.run_until_complete(engine_cycle.open_runner(database))
        for i in range(args.warm):
            loop.run_until_complete(engine_cycle.cycle(runner, i))
        split = split_pass(runner, args.warm, args.cycles)
        stats = profile_pass(runner, args.warm + args.cycles, args.cycles)
        loop.run_until_complete(repo.close())
    loop.close()
    print(f"{args.cycles} steady cycles after {args.warm}, unprofiled (ms, p50):")
    for key, value in split.items():
        print(f"  {key:32s} {value:7.3f}")
    rows = by_area(stats, args.cycles)
    total_us = sum(us for _key, us, _calls in rows)
    total_calls = sum(c for _key, _us, c in rows)
    print(
        f"\nunder cProfile: {total_us / 1000:.2f} ms and {total_calls:.0f} calls per cycle; "
        "self time by module:"
    )
    for key, us, calls in rows[: args.top]:
        print(f"  {us:8.1f} µs {us / total_us * 100:5.1f}%  {calls:7.1f} calls  {key}")


if __name__ == "__main__":
    main()
