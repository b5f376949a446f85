"""``approval-bot waits list``, ``waits complete ID --body JSON`` and what ``runs show`` says a
run waits for, in-process against SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli.app import main
from storage.repository import Repository
from tests.bot.test_engine import calls, executed
from tests.conftest import BASE_CONFIG, make_config
from tests.support import pause_tools
from tests.support.slack_harness import running_bot

CONFIG = """
model = "scripted"
tools = ["tests.support.pause_tools:start_deploy", "tests.support.pause_tools:rate_limited"]
public_url = "https://bot.example.com"
"""


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


@pytest.fixture
def config_file(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    yield path


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_list_complete_and_show_a_wait(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    assert (await run_cli(capsys, *cfg, "db", "upgrade"))[0] == 0  # reading makes no database
    code, out, _ = await run_cli(capsys, *cfg, "waits", "list")
    assert code == 0 and out.strip() == "Nothing is waiting."

    request = calls(("start_deploy", {"service": "shop"}))
    code, out, _ = await run_cli(capsys, *cfg, "ask", request, "--as", "U0REQUESTER")
    assert code == 0 and ": paused" in out
    assert pause_tools.PIPELINE[0].startswith("https://bot.example.com/callbacks/")

    code, out, _ = await run_cli(capsys, *cfg, "waits", "list", "--json")
    (wait,) = json.loads(out)
    assert wait["kind"] == "callback" and wait["tool"] == "start_deploy"
    assert wait["waiting_for"].startswith("Waiting for deploy of shop until ")
    code, out, _ = await run_cli(capsys, *cfg, "waits", "list")
    assert f"{wait['id']}  callback  run {wait['run_id']}  Waiting for deploy of shop" in out

    code, out, _ = await run_cli(capsys, *cfg, "approvals", "list")
    assert out.strip() == "Nothing waits for a decision or an answer.", "nobody decides a wait"
    code, out, _ = await run_cli(capsys, *cfg, "runs", "show", wait["run_id"])
    assert code == 0 and "run " in out and ": paused" in out
    # A wait for a callback is a wait where people read, never an approval.
    assert f"wait {wait['id']}: start_deploy pending: Waiting for deploy of shop until" in out

    with pytest.raises(SystemExit) as usage:
        await run_cli(capsys, *cfg, "waits", "complete", wait["id"], "--body", "{oops")
    assert usage.value.code == 2 and "--body: not valid JSON" in capsys.readouterr().err
    code, _, err = await run_cli(capsys, *cfg, "waits", "complete", "apr_nope", "--body", "{}")
    assert code == 1 and err == "approval-bot: apr_nope: there is no such wait\n"

    body = '{"status": "deployed"}'
    code, out, _ = await run_cli(capsys, *cfg, "waits", "complete", wait["id"], "--body", body)
    assert code == 0, out
    assert f"Completed {wait['id']} (start_deploy)." in out
    assert "completed" in out and 'start_deploy={"status": "deployed"}' in out
    assert len(executed("start_deploy")) == 1

    code, _, err = await run_cli(capsys, *cfg, "waits", "complete", wait["id"], "--body", body)
    assert code == 1 and err == f"approval-bot: {wait['id']}: it is completed already\n"
    code, out, _ = await run_cli(capsys, *cfg, "waits", "list")
    assert out.strip() == "Nothing is waiting."


async def test_runs_show_says_until_when_a_retry_waits(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    request = calls(("rate_limited", {"service": "api"}))
    code, out, _ = await run_cli(capsys, *cfg, "ask", request, "--as", "U0REQUESTER")
    assert code == 0 and ": paused" in out
    code, out, _ = await run_cli(capsys, *cfg, "waits", "list", "--json")
    (wait,) = json.loads(out)
    assert wait["kind"] == "retry" and wait["due_at"] is not None
    code, out, _ = await run_cli(capsys, *cfg, "runs", "show", wait["run_id"])
    assert f"retry {wait['id']}: rate_limited pending: Retrying rate_limited at " in out
    assert out.count("rate limited") >= 1
    code, _, err = await run_cli(capsys, *cfg, "waits", "complete", wait["id"], "--body", "{}")
    assert code == 1 and "it is a retry, not a wait for a callback: it runs by itself" in err


async def test_a_deeply_nested_body_is_refused_with_a_usage_line(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """json.loads raises RecursionError on deep nesting: a traceback before, not a refusal."""
    cfg = ["--config", str(config_file)]
    with pytest.raises(SystemExit) as usage:
        await run_cli(capsys, *cfg, "waits", "complete", "apr_x", "--body", "[" * 50_000)
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "--body: not valid JSON" in err
    assert "Traceback" not in err


async def test_a_completed_wait_whose_notice_edit_fails_still_resumes_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``waits complete`` with Slack edits the wait's notice before resuming the run its
    completion claimed. The edit failing (here the database's own error: a table it reads
    is renamed away) raised out of the command, and the run sat in ``resuming`` until its
    lease ran out, for a sweeper to take it over."""
    database_url = f"sqlite:///{tmp_path / 'shared.db'}"
    config_file = tmp_path / "bot.toml"
    config_file.write_text(SLACK_WAIT_CONFIG)
    repo = await Repository.open(database_url)
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.slack_wait_tools:start_deploy"]
    )
    async with running_bot(config, repo) as slack:
        await slack.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
        [wait] = await repo.pending_waits(limit=10)
        assert wait.card_ts, "its notice is in the thread"
        await repo.database.execute_sql("ALTER TABLE approval_reach RENAME TO approval_reach_gone")
        monkeypatch.setenv("DATABASE_URL", database_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", slack.server.bot_token)
        monkeypatch.setenv("SLACK_API_URL", slack.server.api_url)
        argv = ["--config", str(config_file), "waits", "complete", wait.id, "--body", "{}"]
        code = await asyncio.to_thread(main, argv)
        run = await repo.get_run(wait.run_id)
        assert run is not None and run.status == "completed", run and run.status
        assert code == 0
    await repo.close()


SLACK_WAIT_CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:restart_service", "tests.support.slack_wait_tools:start_deploy"]
"""
