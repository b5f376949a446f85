"""The CLI end to end, in-process, against a real SQLite file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from ulid import ULID

from bot.cli import main
from tests.conftest import POSTGRES_URL
from tests.serve_process import ROOT, free_port

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


# -- a database or a port that cannot be used: one line, exit status 2, for every command ----

COMMANDS = [
    ["db", "upgrade"],
    ["approvals", "list"],
    ["approvals", "decide", "apr_x", "--approve", "--as", "U0APPROVER1"],
    ["approvals", "expire"],
    ["runs", "show", "run_x"],
    ["runs", "cancel", "run_x", "--as", "U0OPS"],
    ["ask", "hello", "--as", "U0REQUESTER"],
    ["serve", "--host", "127.0.0.1", "--port", str(free_port())],
]


def bad_database_urls(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Each case: the URL, and what its one line must say."""
    cases = {
        "unknown scheme": ("bogus://somewhere/db", "'bogus' databases are not supported"),
        "mysql": ("mysql://bot:secret@db/approvals", "'mysql' databases are not supported"),
        "not a URL": ("approvals.db", "is not a database URL"),
        "unreachable PostgreSQL": (
            "postgresql://postgres@127.0.0.1:1/approvals",
            "cannot open the database postgresql://postgres@127.0.0.1:1/approvals:",
        ),
        "SQLite file in a missing folder": (
            f"sqlite:///{tmp_path / 'no-such-folder' / 'bot.db'}",
            f"the folder {tmp_path / 'no-such-folder'} does not exist",
        ),
    }
    if POSTGRES_URL:
        missing = make_url(POSTGRES_URL).set(database=f"missing_{str(ULID()).lower()}")
        cases["missing PostgreSQL database"] = (
            missing.render_as_string(hide_password=False),
            f'database "{missing.database}" does not exist',
        )
    return cases


def assert_one_line(err: str, expected: str) -> None:
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("approval-bot"), err
    assert expected in err, err
    assert "secret" not in err


@pytest.fixture
def slack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` needs its Slack secrets before it looks at the database."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "test-secret")


@pytest.mark.parametrize(
    "case",
    [
        "unknown scheme",
        "mysql",
        "not a URL",
        "unreachable PostgreSQL",
        "SQLite file in a missing folder",
        "missing PostgreSQL database",
    ],
)
def test_a_bad_database_url_is_one_line_and_exit_2(
    case: str,
    config_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    slack_env: None,
) -> None:
    cases = bad_database_urls(tmp_path)
    if case not in cases:
        pytest.skip("needs PostgreSQL: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    url, expected = cases[case]
    monkeypatch.setenv("DATABASE_URL", url)
    for command in COMMANDS:
        code, out, err = run_cli(capsys, "--config", str(config_file), *command)
        assert code == 2, (command, out, err)
        assert_one_line(err, expected)


def test_a_bad_database_url_in_the_file_is_refused_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    path = tmp_path / "bot.toml"
    path.write_text('database_url = "mysql://bot@db/approvals"\n')
    code, _, err = run_cli(capsys, "--config", str(path), "approvals", "list")
    assert code == 2
    assert_one_line(err, "database_url: mysql://bot@db/approvals: 'mysql' databases are not")


def test_a_bad_database_url_from_a_real_shell(tmp_path: Path) -> None:
    """The same through the installed entry point: what a user's terminal shows."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": "mysql://bot@db/x"}
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "approvals", "list"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert_one_line(result.stderr, "'mysql' databases are not supported")


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slack_env: None
) -> None:
    database = tmp_path / "untouched.db"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"sqlite:///{database}",
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "test-secret",
    }
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert_one_line(result.stderr, f"cannot listen on 127.0.0.1:{port}: Address already in use")
    # The port is checked first: nothing was started, not even the database.
    assert not database.exists()


@pytest.mark.parametrize("port", ["70000", "-1", "0", "http"])
def test_serve_on_an_invalid_port_is_one_line_and_exit_2(
    port: str, config_file: Path, capsys: pytest.CaptureFixture[str], slack_env: None
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config_file), "serve", "--port", port])
    assert exited.value.code == 2
    assert_one_line(capsys.readouterr().err, f"argument --port: '{port}' is not a TCP port")
