"""``runs pause|resume|list --status`` and the hold in ``runs show`` (issue 19 §2), in-process
against a real SQLite file: a pause while the run waits on an approval, the approval decided
meanwhile, and a resume that carries on with it (no second decision)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli.app import main
from tests.support.cli_runs import run_cli, sqlite_config

CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:get_status", "tests.support.ops_tools:restart_service"]
admins = ["U0ADMIN"]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return sqlite_config(tmp_path, monkeypatch, CONFIG)


def test_pause_decide_meanwhile_resume_list_show(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    call = {"name": "restart_service", "arguments": {"service": "web"}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
    run_id, approval_id = listed["run_id"], listed["id"]

    code, _, err = run_cli(capsys, *cfg, "runs", "pause", run_id, "--as", "U0STRANGER")
    assert code == 1 and "refused (not_allowed)" in err and "Only the person who asked" in err
    code, out, _ = run_cli(capsys, *cfg, "runs", "list", "--status", "held")
    assert code == 0 and "No held runs." in out

    code, out, _ = run_cli(
        capsys, *cfg, "runs", "pause", run_id, "--reason", "change freeze", "--as", "U0ADMIN"
    )
    assert code == 0 and "paused" in out and "decisions still count" in out
    code, out, _ = run_cli(capsys, *cfg, "runs", "pause", run_id, "--as", "U0REQUESTER")
    assert code == 0 and "already paused by U0ADMIN" in out

    code, out, _ = run_cli(capsys, *cfg, "runs", "list", "--status", "held", "--json")
    [held] = json.loads(out)
    assert held["id"] == run_id and held["hold"]["requested_by"] == "U0ADMIN"
    assert held["hold"]["reason"] == "change freeze"
    code, out, _ = run_cli(capsys, *cfg, "runs", "list", "--status", "paused")
    assert run_id in out and "paused by U0ADMIN" in out and "change freeze" in out
    code, out, _ = run_cli(capsys, *cfg, "runs", "list", "--status", "completed")
    assert "No completed runs." in out

    # Decided while held: recorded, and the run stays paused.
    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", approval_id, "--approve", "--as", "U0APPROVER1"
    )
    assert code == 0 and "completed" not in out
    code, out, _ = run_cli(capsys, *cfg, "runs", "show", run_id)
    assert "paused by U0ADMIN" in out and "run_pause_requested U0ADMIN: change freeze" in out
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    assert shown["status"] == "paused" and shown["hold"]["action"] == "pause"

    code, out, _ = run_cli(capsys, *cfg, "runs", "resume", run_id, "--as", "U0REQUESTER")
    assert code == 0 and "completed" in out and "restart_service=restarted web" in out
    code, _, err = run_cli(capsys, *cfg, "runs", "resume", run_id, "--as", "U0REQUESTER")
    assert code == 1 and "refused (not_held)" in err
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    assert shown["status"] == "completed" and shown["hold"] is None
    events = [(e["event"], e["actor"]) for e in shown["audit"]]
    assert ("run_pause_requested", "U0ADMIN") in events
    assert ("run_resume_requested", "U0REQUESTER") in events


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_usage_errors(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = ["--config", str(config_file)]
    assert "invalid choice" in usage_error(capsys, *cfg, "runs", "list", "--status", "sleeping")
    assert "--as" in usage_error(capsys, *cfg, "runs", "pause", "run_x")
    code, _, err = run_cli(capsys, *cfg, "runs", "resume", "run_nope", "--as", "U0ADMIN")
    assert code == 1 and "refused (not_found)" in err and "Traceback" not in err


def test_a_huge_id_is_echoed_cut_in_refusals(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``runs pause`` of a 100,000-character id printed the whole id back (review of issue 19)."""
    cfg = ["--config", str(config_file)]
    huge = "R" * 100_000
    for argv in (
        ("runs", "pause", huge, "--as", "U0ADMIN"),
        ("runs", "resume", huge, "--as", "U0ADMIN"),
        ("runs", "show", huge),
        ("approvals", "show", huge),
    ):
        code, _, err = run_cli(capsys, *cfg, *argv)
        assert code == 1 and "Traceback" not in err, (argv[:2], err[:300])
        assert len(err) < 400 and "R" * 79 + "…" in err, (argv[:2], len(err))
    for argv in (("runs", "list", "--limit", "9" * 1000), ("runs", "pause", "r", "--as", huge)):
        err = usage_error(capsys, *cfg, *argv)
        assert len(err) < 2000 and "…" in err, (argv[:2], len(err))


def test_who_decides_a_tools_failed_calls_may_pause_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Those who decide a tool's failed calls (``recovery_by``) may decide for its tools, so
    they may pause any run too (every run may call every tool)."""
    path = tmp_path / "bot.toml"
    path.write_text(
        CONFIG
        + """
[policies.get_status]
recovery_by = ["U0ONCALL", "S0SRE"]
"""
    )
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    cfg = ["--config", str(path)]
    call = {"name": "restart_service", "arguments": {"service": "web"}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
    code, _, err = run_cli(capsys, *cfg, "runs", "pause", listed["run_id"], "--as", "U0STRANGER")
    assert code == 1 and "refused (not_allowed)" in err
    code, out, err = run_cli(capsys, *cfg, "runs", "pause", listed["run_id"], "--as", "U0ONCALL")
    assert code == 0 and "paused" in out, err
