"""Sub-agents from the terminal (issue 20 section 1): ``ask`` drives the children it
delegated to, and ``runs show`` shows the tree, children under their parent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli.app import main

CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:get_status"]

[agents.researcher]
description = "looks things up, read-only"
tools = ["tests.support.ops_tools:get_status"]

[agents.writer]
description = "writes notes"
"""


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    return ["--config", str(path)]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ask_drives_the_children_and_runs_show_shows_the_tree(
    cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    inner = json.dumps(
        {"tool_calls": [{"name": "delegate", "arguments": {"agent": "writer", "task": "w"}}]}
    )
    calls = [
        {"name": "delegate", "arguments": {"agent": "researcher", "task": inner}},
        {"name": "delegate", "arguments": {"agent": "writer", "task": "notes"}},
    ]
    code, out, _ = run_cli(
        capsys, *cfg, "ask", json.dumps({"tool_calls": calls}), "--as", "U0REQUESTER"
    )
    assert code == 0 and "completed" in out and "You said: notes" in out, out
    run_id = next(w for w in out.split() if w.startswith("run_")).strip(":")
    code, out, _ = run_cli(capsys, *cfg, "runs", "show", run_id)
    assert code == 0 and "sub-agents:" in out
    lines = [line for line in out.splitlines() if "└" in line]
    assert len(lines) == 3
    assert lines[0].startswith("    └ run_") and lines[0].endswith("researcher: completed")
    assert lines[1].startswith("      └ run_") and lines[1].endswith("writer: completed")
    assert lines[2].startswith("    └ run_") and lines[2].endswith("writer: completed")
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    (researcher, writer) = shown["children"]
    assert researcher["agent"] == "researcher" and writer["agent"] == "writer"
    assert [c["agent"] for c in researcher["children"]] == ["writer"]
    child = json.loads(run_cli(capsys, *cfg, "runs", "show", researcher["id"], "--json")[1])
    assert child["parent_run_id"] == run_id and child["agent"] == "researcher"
    code, out, _ = run_cli(capsys, *cfg, "audit", "export", "--since", "2000-01-01")
    assert code == 0 and "sub-agent researcher started for run " + run_id in out
    assert "ended completed" in out


OPERATOR = """
[agents.operator]
description = "restarts services"
tools = ["tests.support.ops_tools:restart_service"]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""


@pytest.fixture
def operator_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG + OPERATOR)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    return ["--config", str(path)]


def test_cancelling_a_parent_from_the_terminal_stops_its_children(
    operator_cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = operator_cfg
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}]}
    )
    call = {"name": "delegate", "arguments": {"agent": "operator", "task": task}}
    code, out, _ = run_cli(
        capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER"
    )
    run_id = next(w for w in out.split() if w.startswith("run_")).strip(":")
    code, out, err = run_cli(
        capsys, *cfg, "runs", "cancel", run_id, "--as", "U0REQUESTER", "--reason", "no"
    )
    assert code == 0, err
    assert f"run {run_id}: cancelled" in out and f"(a sub-agent of {run_id})" in out
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    assert shown["status"] == "cancelled"
    assert [c["status"] for c in shown["children"]] == ["cancelled"]
    assert json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1]) == []


def test_a_childs_approval_decided_from_the_terminal_lets_the_parent_finish(
    operator_cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = operator_cfg
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}]}
    )
    call = {"name": "delegate", "arguments": {"agent": "operator", "task": task}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
    assert listed["tool"] == "restart_service", listed
    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", listed["id"], "--approve", "--as", "U0APPROVER1"
    )
    assert code == 0 and "delegate=Results: restart_service=restarted web" in out, out


def test_runs_recover_stops_the_children_of_a_parent_that_ended_without_them(
    operator_cfg: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Found by review: ``runs recover`` (one sweep, for when no bot runs) did all the
    sweeper does but stop the sub-agents whose parent ended without them (an expiry's
    on_expiry = "cancel", an uninstall): their cards stayed open under a cancelled parent."""
    import asyncio

    from bot.clock import utcnow
    from storage.repository import Repository

    cfg = operator_cfg
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}]}
    )
    call = {"name": "delegate", "arguments": {"agent": "operator", "task": task}}
    _, out, _ = run_cli(
        capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER"
    )
    run_id = next(w for w in out.split() if w.startswith("run_")).strip(":")

    async def cancel_the_parent_alone() -> None:
        repo = await Repository.open(f"sqlite:///{tmp_path / 'cli.db'}")
        try:
            assert await repo.cancel_run(run_id, reason="expired", actor="sweeper", now=utcnow())
        finally:
            await repo.close()

    asyncio.run(cancel_the_parent_alone())
    code, out, err = run_cli(capsys, *cfg, "runs", "recover")
    assert code == 0, err
    assert f"(a sub-agent of {run_id}, which ended)" in out, out
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    assert [c["status"] for c in shown["children"]] == ["cancelled"]
    assert json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1]) == []
