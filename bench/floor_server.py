"""The floor for click acknowledgements: a bare aiohttp server, run in a process of its own.

It answers every request the way the bot acknowledges a click (200, empty body) after
reading the body, and does nothing else: no signature check, no parsing, no database. The
gap between its round trips and the bot's, for the same burst from the same client in the
same run, is what the bot itself adds.

Run: ``python bench/floor_server.py PORT`` (the benchmark starts it; it prints ``ready``).
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web


async def answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=200)


async def serve(port: int) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
