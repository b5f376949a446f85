"""``approval-bot approvals decide ID --retry | --skip | --stop --as USER``: a failed call's
recovery (on_error = "ask") chosen from the command line, as the card's buttons do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli.app import main
from tests.support import recovery_tools
from tests.support.cli_runs import run_cli, sqlite_config

CONFIG = """
model = "scripted"
tools = ["tests.support.recovery_tools:flaky"]
on_error = "ask"
"""


@pytest.fixture(autouse=True)
def _flaky() -> Iterator[None]:
    recovery_tools.reset()
    yield
    recovery_tools.reset()


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    path = sqlite_config(tmp_path, monkeypatch, CONFIG)
    assert main(["--config", str(path), "db", "upgrade"]) == 0
    return ["--config", str(path)]


def ask(capsys: pytest.CaptureFixture[str], cfg: list[str]) -> dict[str, str]:
    request = json.dumps({"tool_calls": [{"name": "flaky", "arguments": {"service": "api"}}]})
    code, out, _ = run_cli(capsys, *cfg, "ask", request, "--as", "U0REQUESTER")
    assert code == 0 and ": paused" in out
    code, out, _ = run_cli(capsys, *cfg, "approvals", "list")
    assert "failed (attempt 1): api is down" in out and "--retry, --skip or --stop" in out
    code, out, _ = run_cli(capsys, *cfg, "approvals", "list", "--json")
    (listed,) = json.loads(out)
    return listed


def test_retry_from_the_command_line(cfg: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    listed = ask(capsys, cfg)
    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--retry", "--as", "U0OTHER"
    )
    assert code == 1 and "You are not one of the approvers of this call." in err
    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--retry", "--as", "U0REQUESTER"
    )
    assert code == 0 and "completed" in out and "flaky=api answered" in out
    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--skip", "--as", "U0REQUESTER"
    )
    assert code == 1 and "Already retried by" in err


def test_skip_and_stop_from_the_command_line(
    cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    listed = ask(capsys, cfg)
    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--skip", "--as", "U0REQUESTER"
    )
    assert code == 0 and "Skipped by @U0REQUESTER after the error: api is down" in out
    recovery_tools.FAILURES[0] = 1
    second = ask(capsys, cfg)
    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", second["id"], "--stop", "--as", "U0REQUESTER"
    )
    assert code == 0 and "Stopped the run of" in out
    code, out, _ = run_cli(capsys, *cfg, "runs", "show", second["run_id"], "--json")
    assert json.loads(out)["status"] == "cancelled"


def test_approve_is_not_a_recovery_choice(
    cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    listed = ask(capsys, cfg)
    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--approve", "--as", "U0REQUESTER"
    )
    assert code == 1 and "recovery" in err and "Traceback" not in err
