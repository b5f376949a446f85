"""The CLI end to end, in-process, against a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli import main

CONFIG = """
model = "scripted"
tools = ["tests.ops_tools:get_status", "tests.ops_tools:restart_service"]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ask_list_decide_show(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = ["--config", str(config_file)]
    assert run_cli(capsys, *cfg, "db", "upgrade")[0] == 0

    request = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}]}
    )
    code, out, _ = run_cli(capsys, *cfg, "ask", request, "--as", "U0REQUESTER")
    assert code == 0 and ": paused" in out

    code, out, _ = run_cli(capsys, *cfg, "approvals", "list", "--json")
    listed = json.loads(out)
    assert [a["tool"] for a in listed] == ["restart_service"]
    approval_id, run_id = listed[0]["id"], listed[0]["run_id"]

    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", approval_id, "--approve", "--as", "U0REQUESTER"
    )
    assert code == 1 and "refused (not_allowed)" in err

    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", approval_id, "--approve", "--as", "U0APPROVER1"
    )
    assert code == 0
    assert "completed" in out and "restart_service=restarted web" in out

    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", approval_id, "--deny", "--as", "U0APPROVER1"
    )
    assert code == 1 and "already_decided" in err

    code, out, _ = run_cli(capsys, *cfg, "approvals", "list")
    assert "No approvals are pending." in out

    code, out, _ = run_cli(capsys, *cfg, "runs", "show", run_id, "--json")
    shown = json.loads(out)
    assert shown["status"] == "completed"
    assert [a["status"] for a in shown["approvals"]] == ["executed"]
    assert "execution_finished" in [e["event"] for e in shown["audit"]]

    code, _, err = run_cli(capsys, *cfg, "runs", "show", "run_missing")
    assert code == 1 and "no run run_missing" in err


def test_cancel_a_waiting_run(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = ["--config", str(config_file)]
    call = {"name": "restart_service", "arguments": {"service": "db"}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])

    code, out, _ = run_cli(capsys, *cfg, "runs", "cancel", listed["run_id"], "--as", "U0OPS")
    assert code == 0 and "cancelled" in out
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", listed["run_id"], "--json")[1])
    assert shown["status"] == "cancelled" and "by U0OPS" in shown["error"]
    assert [a["status"] for a in shown["approvals"]] == ["cancelled"]

    code, _, err = run_cli(capsys, *cfg, "runs", "cancel", listed["run_id"], "--as", "U0OPS")
    assert code == 1 and "it is cancelled" in err
    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--approve", "--as", "U0APPROVER1"
    )
    assert code == 1 and "cancelled" in err


def test_decide_needs_a_verdict(config_file: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config_file), "approvals", "decide", "apr_x", "--as", "U1"])
    assert exited.value.code == 2
