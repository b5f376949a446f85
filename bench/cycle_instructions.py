"""Instructions per pause -> decide -> resume cycle, counted by valgrind: a figure load cannot move.

Timed CPU on this shared 2-core machine drifts by a third within minutes, so a change of a
few per cent to the cycle's Python cannot be seen in it. Valgrind's cachegrind counts the
instructions the bot's process executes instead. Two processes run 100 untimed cycles of
``bench/engine_cycle.py``'s ``cycle`` and then 50 and 450 more, on a scratch database each
(created here, dropped afterwards); the difference of their counts ÷ 400 is one cycle's,
start-up and warm-up cancelled out. ``PYTHONHASHSEED`` is fixed so that both processes hash
(and so iterate sets) alike.

Run: ``.venv/bin/python bench/cycle_instructions.py [--database postgresql://…/postgres]``
(without ``--database``: SQLite files in a temporary directory). Needs ``valgrind``
(``apt-get install valgrind``); a process takes about a minute under it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import engine_cycle  # noqa: E402
from bench.slack_latency import postgres_database  # noqa: E402

WARM = 100
FEW, MANY = 50, 450
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


async def run_cycles(database: str, cycles: int) -> None:
    """What runs under valgrind: the warm-up and ``cycles`` more, on ``database``."""
    repo, runner = await engine_cycle.open_runner(database)
    try:
        for i in range(WARM + cycles):
            await engine_cycle.cycle(runner, i)
    finally:
        await repo.close()


def instructions(database: str, cycles: int) -> int:
    """The instructions of a process that runs ``run_cycles(database, cycles)``."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={scratch}/cachegrind.out",
            sys.executable,
            __file__,
            "--inner",
            str(cycles),
            "--database",
            database,
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    counts = _REFS.findall(done.stderr)
    if not counts:
        raise RuntimeError(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(counts[-1].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="a PostgreSQL server's URL; default: SQLite")
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        asyncio.run(run_cycles(args.database, args.inner))
        return
    counts = {}
    for cycles in (FEW, MANY):
        counts[cycles] = asyncio.run(_counted(args.database, cycles))
        print(f"{WARM + cycles} cycles: {counts[cycles]:,} instructions", flush=True)
    per_cycle = (counts[MANY] - counts[FEW]) / (MANY - FEW)
    where = "PostgreSQL" if args.database else "SQLite"
    print(f"{where}: {per_cycle:,.0f} instructions per cycle")


async def _counted(server: str | None, cycles: int) -> int:
    if server is None:
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite+aiosqlite:///{directory}/cycle.db"
            return await asyncio.to_thread(instructions, url, cycles)
    async with postgres_database(server) as url:
        return await asyncio.to_thread(instructions, url, cycles)


if __name__ == "__main__":
    main()
