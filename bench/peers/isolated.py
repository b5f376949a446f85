"""The PostgreSQL column with each peer in a process of its own, taking turns in short blocks.

Why a second method: interleaved cycle by cycle in one process (:func:`bench.peers.postgres.
run_postgres`), every peer runs on what the others left behind: the CPU caches, the
allocator's arenas, the event loop. Our cycle pays more for it than LangGraph's: in three
sittings its CPU per cycle was 32-39% higher in one process than in a process of its own,
LangGraph's (default durability) 3-8% higher. It is not the garbage collector: with it
off in the one-process method the ratio did not move (2.37x). No deployment runs two
frameworks in one process, and pyperf runs each benchmark in worker processes of its own.

Method: one worker process per peer (``python -m bench.peers.isolated --worker KEY URL``),
started one at a time (approval-bot on a scratch database of its own, LangGraph's two peers
on one, whose tables the first creates), each warming up once. The coordinator then asks the
workers in turn for ``block`` cycles each, the order rotating by round, so the machine's
drift (a third within minutes here) falls on every peer alike; only one worker runs at a
time, and it runs one untimed cycle at the start of each turn (the first after the others'
turns is slower, on what they left in the caches). Each worker times its cycles as the
in-process method does (wall time less the fake model's, and its own process's CPU time).
Round trips and server CPU come from the
same untimed counting as the in-process method (:func:`bench.peers.postgres._count`).

Run: ``python -m bench.peers --synchronous none --database URL --isolated`` (this module's
:func:`run_isolated`, beside the in-process table, in the same sitting).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

from bench.peers.common import load
from bench.peers.postgres import BASELINE, _count, _make, _server, factories, timed_row

BLOCK = 20  # cycles a worker runs in one turn


async def run_isolated(url: str, cycles: int, warmup: int, block: int = BLOCK) -> dict[str, Any]:
    """Every PostgreSQL peer in a worker process of its own, taking turns ``block`` cycles at
    a time; the same result shape as :func:`bench.peers.postgres.run_postgres`."""
    from bench.slack_latency import postgres_database

    made, missing = factories()
    async with AsyncExitStack() as stack:
        theirs = await stack.enter_async_context(postgres_database(url))
        where = {
            key: theirs
            if key.startswith("langgraph")
            else await stack.enter_async_context(postgres_database(url))
            for key, _ in made
        }
        server = await _server(where[BASELINE])
        workers: dict[str, _Worker] = {}
        names: dict[str, str] = {}
        for key in where:
            # One at a time: a worker answers once its peer is open, and LangGraph's two
            # create their tables on one database (two setups at once collide).
            workers[key] = await stack.enter_async_context(_worker(key, where[key]))
            names[key] = (await workers[key].ask({"name": True}))["name"]
        for worker in workers.values():
            await worker.ask({"warmup": warmup})
        seconds: dict[str, list[float]] = {key: [] for key in workers}
        cpu: dict[str, list[float]] = {key: [] for key in workers}
        keys = list(workers)
        load_before = load()
        started = time.monotonic()
        for round_no in range((cycles + block - 1) // block):
            count = min(block, cycles - round_no * block)
            shift = round_no % len(keys)
            for key in keys[shift:] + keys[:shift]:
                answer = await workers[key].ask({"cycles": count})
                seconds[key] += answer["seconds"]
                cpu[key] += answer["cpu"]
        wall = time.monotonic() - started
        load_after = load()
        counts = await _count(where, made, warmup + cycles + 1_000_000, 50)
    rows = {key: timed_row(names[key], seconds[key], cpu[key], counts[key]) for key in workers}
    return {
        "database": "postgresql",
        "method": f"each peer in its own process, taking turns {block} cycles at a time",
        "server": server,
        "cycles": cycles,
        "load_before": load_before,
        "load_after": load_after,
        "seconds": round(wall, 1),
        "rows": rows,
        "missing": missing,
    }


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(command).encode() + b"\n")
            await self.process.stdin.drain()
            line = await asyncio.wait_for(self.process.stdout.readline(), 600)
        except (BrokenPipeError, ConnectionResetError):
            line = b""
        if not line:
            raise RuntimeError("a benchmark worker stopped (see its error above)")
        answer: dict[str, Any] = json.loads(line)
        return answer


class _worker:
    """A worker process for ``key`` on the scratch database ``url``, stopped on exit."""

    def __init__(self, key: str, url: str) -> None:
        self.key, self.url = key, url
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> _Worker:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.peers.isolated",
            "--worker",
            self.key,
            self.url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return _Worker(self.process)

    async def __aexit__(self, *exc: object) -> None:
        assert self.process is not None
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


async def serve_worker(key: str, url: str) -> None:
    """The worker's side: commands on stdin, one JSON answer per line on stdout."""
    made = dict(factories()[0])
    peer = _make(key, made[key])
    await peer.open(url)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    next_cycle = 0
    try:
        while line := await reader.readline():
            command = json.loads(line)
            answer: dict[str, Any] = {}
            if "name" in command:
                answer["name"] = peer.name
            if "warmup" in command:
                for _ in range(command["warmup"]):
                    await peer.cycle(next_cycle)
                    next_cycle += 1
            if "cycles" in command:
                # The first cycle after the other peers' turns runs on what they left in the
                # caches (about 5% slower, and 1 in 20 samples: where p99 sits): untimed.
                await peer.cycle(next_cycle)
                next_cycle += 1
                answer["seconds"], answer["cpu"] = [], []
                for _ in range(command["cycles"]):
                    cpu_before = time.process_time()
                    answer["seconds"].append(await peer.cycle(next_cycle))
                    answer["cpu"].append(time.process_time() - cpu_before)
                    next_cycle += 1
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        await peer.close()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "--worker":
        sys.exit("usage: python -m bench.peers.isolated --worker KEY URL (bench.peers runs it)")
    asyncio.run(serve_worker(sys.argv[2], sys.argv[3]))
