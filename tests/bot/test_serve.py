"""`approval-bot serve` as a user runs it: a real process, configured from the environment."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp

from tests.support.serve_process import ROOT, ServedBot, free_port, served_bot, wait_healthy


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


async def _serve_once(tmp_path: Path, config: str, env: dict[str, str]) -> tuple[int, str]:
    """``approval-bot serve`` with this configuration until it exits by itself (60 s)."""
    path = tmp_path / "bot.toml"
    path.write_text(config)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bot.cli", "--config", str(path), "serve", "--host", "127.0.0.1"),
        *("--port", str(free_port())),
        env={
            **{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
            "PYTHONPATH": str(ROOT),
            "SLACK_BOT_TOKEN": "xoxb-unused",
            "SLACK_SIGNING_SECRET": "unused",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
            "LLM_USER_PATH": str(tmp_path / "llm"),  # no keys.json: no stored key
            **env,
        },
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, err.decode() + out.decode()


def _one_line(output: str) -> str:
    assert "Traceback" not in output, output
    assert output.count("\n") == 1 and output.startswith("approval-bot: "), output
    return output


async def test_serve_refuses_a_model_it_does_not_know_in_one_line(tmp_path: Path) -> None:
    """What `ask` checks, `serve` checks at start-up: before, it started, acknowledged every
    mention and failed each run with a logged traceback."""
    code, output = await _serve_once(tmp_path, 'model = "no-such-model"\n', {})
    assert code == 2
    assert "unknown model 'no-such-model'" in _one_line(output)
    assert 'model = "demo"' in output
    assert not (tmp_path / "bot.db").exists()  # nothing was started


async def test_serve_refuses_a_model_without_its_key_in_one_line(tmp_path: Path) -> None:
    code, output = await _serve_once(tmp_path, 'model = "gpt-4o-mini"\n', {})
    assert code == 2
    line = _one_line(output)
    assert "the model 'gpt-4o-mini' needs an API key" in line
    assert "OPENAI_API_KEY" in line and "llm keys set openai" in line
    assert not (tmp_path / "bot.db").exists()


async def test_serve_warns_when_no_tool_is_configured_and_runs(tmp_path: Path) -> None:
    config = tmp_path / "bot.toml"
    config.write_text('model = "echo"\n')
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bot.cli", "--config", str(config), "serve", "--host", "127.0.0.1"),
        *("--port", str(port := free_port())),
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SLACK_BOT_TOKEN": "xoxb-unused",
            "SLACK_SIGNING_SECRET": "unused",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
            "LLM_USER_PATH": str(tmp_path / "llm"),
            "LLM_LOAD_PLUGINS": "llm-echo",
        },
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    served = ServedBot(slack=None, process=process, url=f"http://127.0.0.1:{port}")  # type: ignore[arg-type]
    try:
        await wait_healthy(served)  # a warning, not a refusal: it serves
    finally:
        process.terminate()
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0
    warnings = [line for line in out.decode().splitlines() if "no tools are configured" in line]
    assert len(warnings) == 1, out.decode()[-2000:]
    assert str(config) in warnings[0] and "nothing will ever wait for an approval" in warnings[0]
