"""`approval-bot serve` as a user runs it: a real process, configured from the environment."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from playground.slack_server import SlackServer

ROOT = Path(__file__).resolve().parents[1]
SECRET = "serve-test-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def wait_healthy(url: str, process: asyncio.subprocess.Process) -> aiohttp.ClientResponse:
    async with aiohttp.ClientSession() as session:
        for _ in range(150):
            if process.returncode is not None:
                raise AssertionError(f"serve exited with {process.returncode}")
            try:
                async with session.get(url) as response:
                    await response.read()
                    return response
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)
    raise AssertionError("serve never answered /healthz")


async def test_serve_answers_health_checks_and_mentions(tmp_path: Path) -> None:
    config = tmp_path / "bot.toml"
    config.write_text(
        'model = "echo"\n'
        'tools = ["tests.ops_tools:get_status", "tests.ops_tools:restart_service"]\n'
        "[policies.restart_service]\n"
        'approvers = ["U0APPROVER1"]\n'
    )
    async with SlackServer(signing_secret=SECRET) as slack:
        port = free_port()
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": slack.api_url,
            "DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
            "LLM_USER_PATH": str(tmp_path / "llm"),
            "LLM_LOAD_PLUGINS": "llm-echo",
            "PYTHONPATH": str(ROOT),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "--config",
            str(config),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            env=env,
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            health = await wait_healthy(f"http://127.0.0.1:{port}/healthz", process)
            assert health.status == 200
            slack.bot_url = f"http://127.0.0.1:{port}/slack/events"
            prompt = json.dumps(
                {
                    "prompt": "go",
                    "tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}],
                }
            )
            reply = await slack.mention("U0REQUESTER", "C0OPS", f"<@U0BOT> {prompt}")
            assert reply.status == 200
            for _ in range(100):
                if any("approval_summary" in json.dumps(m.blocks) for m in slack.messages):
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("no approval card was posted")
            assert slack.unknown_calls == []
        finally:
            process.terminate()
            output, _ = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 0, output.decode()[-2000:]


async def test_serve_without_slack_secrets_says_which(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env["PYTHONPATH"] = str(ROOT)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "serve",
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate()
    assert process.returncode == 2
    assert "SLACK_BOT_TOKEN" in err.decode() and "SLACK_SIGNING_SECRET" in err.decode()
