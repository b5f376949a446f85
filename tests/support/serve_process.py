"""``approval-bot serve`` in a process of its own, as users run it, with Slack played by our
Slack-compatible server in the calling process. Used by the serve test and the benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from playground.slack_server import SlackServer

ROOT = Path(__file__).resolve().parents[2]
SECRET = "serve-process-secret"

CONFIG = """
model = "echo"
tools = [
    "tests.support.ops_tools:get_status",
    "tests.support.ops_tools:restart_service",
    "tests.support.ops_tools:slow_restart",
]

[policies.restart_service]
approvers = ["U0APPROVER1", "U0APPROVER3"]

[policies.slow_restart]
approvers = ["U0APPROVER1"]
"""


@dataclass
class ServedBot:
    slack: SlackServer
    process: asyncio.subprocess.Process
    url: str
    output: bytes = b""


# A port found free is bound by the bot process only later. Taken from the kernel's ephemeral
# range (32768-60999 on Linux), it could meanwhile be given to another test worker's bot or to
# any outgoing connection, and a health check would then reach the wrong process. So each
# pytest-xdist worker takes ports from a block of its own below that range.
PORT_BLOCK_BASE = 20000
PORT_BLOCK_SIZE = 400
PORT_BLOCKS = (32768 - PORT_BLOCK_BASE) // PORT_BLOCK_SIZE


def _worker_port_block() -> range | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1… under xdist
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    if index >= PORT_BLOCKS:
        return None
    start = PORT_BLOCK_BASE + index * PORT_BLOCK_SIZE
    return range(start, start + PORT_BLOCK_SIZE)


# Ports are handed out in turn from a random start, so a port is reused as late as possible.
_next_offset = random.randrange(PORT_BLOCK_SIZE)


def free_port() -> int:
    global _next_offset
    block = _worker_port_block() or range(0)
    for _ in block:
        port = block[_next_offset % len(block)]
        _next_offset += 1
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # more workers than blocks, or a block all in use
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def served_bot(
    database_url: str,
    workdir: Path,
    *,
    capture_output: bool = False,
    extra_config: str = "",
    env: dict[str, str] | None = None,
    slack: SlackServer | None = None,
    cli_args: tuple[str, ...] = (),
    streaming: str = "off",
) -> AsyncIterator[ServedBot]:
    """Start the bot (llm-echo as its model, loaded as a plugin) and wait for /healthz.

    ``extra_config`` is prepended to the TOML, ``env`` added to the environment, ``cli_args``
    (global options: ``-v``, ``--log-format json``) put before ``serve``; pass the ``slack``
    of an earlier bot to restart one against the same Slack. ``streaming``: the tests written
    before streamed answers assert the edited progress message, so they keep it ("off").
    """
    config = workdir / "served-bot.toml"
    config.write_text(f'streaming = "{streaming}"\n' + extra_config + CONFIG)
    async with contextlib.AsyncExitStack() as stack:
        if slack is None:
            slack = await stack.enter_async_context(SlackServer(signing_secret=SECRET))
        port = free_port()
        process_env = {
            **os.environ,
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": slack.api_url,
            "DATABASE_URL": database_url,
            "LLM_USER_PATH": str(workdir / "llm"),
            "LLM_LOAD_PLUGINS": "llm-echo",
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        output = asyncio.subprocess.PIPE if capture_output else asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "--config",
            str(config),
            *cli_args,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            env=process_env,
            cwd=workdir,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
        )
        served = ServedBot(slack=slack, process=process, url=f"http://127.0.0.1:{port}")
        try:
            await wait_healthy(served)
            slack.bot_url = f"{served.url}/slack/events"
            yield served
        finally:
            if process.returncode is None:
                process.terminate()
            out, _ = await asyncio.wait_for(process.communicate(), 20)
            served.output = out or b""


# A bot starting on a busy machine (a CI runner, test workers beside it) can take many
# seconds to import; it fails at once if the process exits.
HEALTHY_WITHIN = 120.0


async def wait_healthy(served: ServedBot) -> None:
    deadline = asyncio.get_running_loop().time() + HEALTHY_WITHIN
    async with aiohttp.ClientSession() as session:
        while asyncio.get_running_loop().time() < deadline:
            if served.process.returncode is not None:
                raise RuntimeError(f"serve exited with {served.process.returncode}")
            try:
                async with session.get(f"{served.url}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the bot never became healthy at {served.url}")
