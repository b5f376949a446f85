"""`approval-bot serve` as a user runs it: a real process, configured from the environment."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp

from tests.serve_process import ROOT, served_bot


async def test_serve_answers_health_checks_and_mentions(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'serve.db'}"
    async with served_bot(database, tmp_path, capture_output=True) as served:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{served.url}/healthz") as health,
        ):
            assert health.status == 200 and (await health.json()) == {"ok": True}
        prompt = json.dumps(
            {
                "prompt": "go",
                "tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}],
            }
        )
        reply = await served.slack.mention("U0REQUESTER", "C0OPS", f"<@U0BOT> {prompt}")
        assert reply.status == 200
        for _ in range(100):
            if any("approval_summary" in json.dumps(m.blocks) for m in served.slack.messages):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no approval card was posted")
        assert served.slack.unknown_calls == []
    assert served.process.returncode == 0, served.output.decode()[-2000:]


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
