"""The load generator of ``bench/click_bursts.py``, in a process of its own.

The benchmark process also plays Slack: while a bot decides, edits cards and resumes runs,
it answers the bot's Web API calls on its event loop. Timing the clicks on that same loop
would count Slack's work against the bot (the floor makes no such calls). So the bursts,
built and signed by the benchmark, are sent from here, over one client session whose
connections stay open between bursts.

Protocol, one JSON object a line on stdin, one answer a line on stdout:
``{"open": URL, "count": N}`` opens N kept-alive connections (N concurrent GETs), answers
``{}``; ``{"burst": PATH, "url": URL}`` sends every click pickled in PATH (a list of
``(body, headers)``) at once and answers ``{"sent_at": unix time, "round_trips": [seconds,
...]}``, in the burst's order.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp


async def send(session: aiohttp.ClientSession, url: str, body: bytes, headers: Any) -> float:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as reply:
        await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{url} answered {reply.status}")
    return time.perf_counter() - started


async def open_connections(session: aiohttp.ClientSession, url: str, count: int) -> None:
    async def one() -> None:
        async with session.get(url) as reply:
            await reply.read()

    await asyncio.gather(*(one() for _ in range(count)))


async def main() -> None:
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=0)  # no connection limit: the burst goes at once
    async with aiohttp.ClientSession(connector=connector) as session:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command = json.loads(line)
            answer: dict[str, Any] = {}
            if "open" in command:
                await open_connections(session, command["open"], command["count"])
            else:
                burst = pickle.loads(Path(command["burst"]).read_bytes())
                answer["sent_at"] = time.time()  # wall clock, as the Slack server's
                answer["round_trips"] = list(
                    await asyncio.gather(*(send(session, command["url"], *c) for c in burst))
                )
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
