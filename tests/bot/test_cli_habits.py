"""The command line as people use it: options where they type them, read-only commands that
leave no database behind, cancelling under the deciding rule, a model without a key, and the
offline demo model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.app import main
from bot.cli.parser import build_parser
from tests.support.cli_runs import run_cli

CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:get_status", "tests.support.ops_tools:restart_service"]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""
RESTART = json.dumps({"tool_calls": [{"name": "restart_service", "arguments": {"service": "db"}}]})


@pytest.fixture
def config_at(tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A configuration file on each database backend in turn."""
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("DATABASE_URL", database_url)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["approval-bot", "serve", "--config", "x.toml"],
        ["approval-bot", "playground", "--config", "x.toml", "--no-browser"],
        ["approval-bot", "approvals", "list", "--config", "x.toml", "-v"],
        ["approval-bot", "--config", "other.toml", "runs", "show", "R1", "--config", "x.toml"],
        ["approval-bot", "approvals", "--config", "x.toml", "list"],
    ],
)
def test_global_options_are_taken_after_the_subcommand(argv: list[str]) -> None:
    args = build_parser().parse_args(argv[1:])
    assert args.config == "x.toml"


def test_options_before_the_subcommand_still_hold(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--config", "x.toml", "-v", "--log-format", "json", "serve"])
    assert (args.config, args.verbose, args.log_format) == ("x.toml", True, "json")
    args = build_parser().parse_args(["serve", "--log-format", "json", "-v"])
    assert (args.config, args.verbose, args.log_format) == (None, True, "json")


def test_a_config_after_the_subcommand_is_the_one_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "approvals", "list", "--config", "missing.toml")
    assert code == 2 and "missing.toml: no such configuration file" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["approvals", "list"],
        ["approvals", "list", "--json"],
        ["approvals", "decide", "apr_1", "--approve", "--as", "U1"],
        ["approvals", "expire"],
        ["runs", "show", "run_1"],
        ["runs", "cancel", "run_1", "--as", "U1"],
        ["runs", "recover"],
        ["waits", "list"],
        ["waits", "complete", "wait_1", "--body", "{}"],
        ["grants", "list"],
        ["grants", "revoke", "grt_1", "--as", "U1"],
    ],
)
def test_commands_about_what_is_recorded_create_no_database(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    config = tmp_path / "bot.toml"
    config.write_text(CONFIG)
    database = tmp_path / "nothing-yet.db"
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{database}")
    code, out, err = run_cli(capsys, "--config", str(config), *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"there is no database at {database}" in err
    assert not database.exists()


def test_an_empty_database_file_is_no_database_and_stays_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `touch bot.db` (or a file a failed copy left empty) is not a database: reading from it
    # must not write the whole schema into it only to say there is nothing.
    config = tmp_path / "bot.toml"
    config.write_text(CONFIG)
    database = tmp_path / "empty.db"
    database.touch()
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{database}")
    code, out, err = run_cli(capsys, "--config", str(config), "approvals", "list")
    assert code == 2 and out == ""
    assert f"there is no database at {database}" in err and "the file is empty" in err
    assert database.stat().st_size == 0


def test_cancel_follows_the_deciding_rule_unless_forced(
    config_at: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_at)]

    def waiting_run() -> str:
        assert run_cli(capsys, *cfg, "ask", RESTART, "--as", "U0REQUESTER")[0] == 0
        listed = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
        return str(listed[0]["run_id"])

    def status(run_id: str) -> str:
        return str(json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])["status"])

    run_id = waiting_run()
    code, _, err = run_cli(capsys, *cfg, "runs", "cancel", run_id, "--as", "U0STRANGER")
    assert code == 1 and err.startswith(f"approval-bot: {run_id}: only the run's requester")
    assert "--force" in err
    assert status(run_id) == "paused"

    code, _, _ = run_cli(capsys, *cfg, "runs", "cancel", run_id, "--as", "U0APPROVER1")
    assert code == 0 and status(run_id) == "cancelled"

    run_id = waiting_run()
    code, _, _ = run_cli(capsys, *cfg, "runs", "cancel", run_id, "--as", "U0REQUESTER")
    assert code == 0 and status(run_id) == "cancelled"

    run_id = waiting_run()
    code, _, _ = run_cli(capsys, *cfg, "runs", "cancel", run_id, "--as", "U0OPS", "--force")
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    assert code == 0 and shown["status"] == "cancelled"
    assert "by U0OPS (forced by an operator)" in shown["error"]


def test_ask_without_a_model_key_is_one_line_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))  # no keys.json there
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = tmp_path / "bot.toml"
    config.write_text('model = "gpt-4o-mini"\ntools = []\n')
    database = tmp_path / "bot.db"
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{database}")
    code, out, err = run_cli(capsys, "--config", str(config), "ask", "hi", "--as", "U1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "needs an API key" in err and 'model = "demo"' in err
    assert not database.exists()


def test_ask_with_the_demo_model_works_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPROVAL_BOT_DEMO_STATE", str(tmp_path / "demo-state.db"))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'bot.db'}")
    config = tmp_path / "bot.toml"
    config.write_text('model = "demo"\ntools = ["playground.demo:get_status"]\n')
    code, out, _ = run_cli(
        capsys, "--config", str(config), "ask", "status of payments", "--as", "U1"
    )
    assert code == 0 and ": completed" in out and "payments: healthy" in out


HEAVY = ("llm", "sqlalchemy", "openai", "alembic", "slack_bolt", "aiohttp")


def modules_loaded_by(argv: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """The heavy modules a command imported (start-up time is measured in
    bench/cli_startup.py; this guards what it is made of)."""
    code = (
        "import sys\nfrom bot.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True
    )
    return json.loads(done.stderr.strip().splitlines()[-1].replace("'", '"'))


def test_help_and_reading_commands_import_only_what_they_need(tmp_path: Path) -> None:
    config = tmp_path / "bot.toml"
    config.write_text(CONFIG)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
    }
    assert modules_loaded_by(["--help"], tmp_path, env) == []
    assert modules_loaded_by(["approvals", "list", "--bogus"], tmp_path, env) == []
    cfg = ["--config", str(config)]
    assert main([*cfg, "db", "upgrade"]) == 0
    # Reading needs the database and the configuration's tools (llm), not llm's plugins.
    assert "openai" not in modules_loaded_by([*cfg, "approvals", "list"], tmp_path, env)
    assert "openai" not in modules_loaded_by([*cfg, "runs", "show", "R1"], tmp_path, env)


def test_the_demo_refuses_a_scale_past_its_limit_before_anyone_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPROVAL_BOT_DEMO_STATE", str(tmp_path / "demo-state.db"))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'bot.db'}")
    config = tmp_path / "bot.toml"
    config.write_text(
        'model = "demo"\ntools = ["playground.demo:scale_service"]\n'
        '[policies.scale_service]\napprovers = ["U0APPROVER1"]\n'
    )
    cfg = ["--config", str(config)]
    code, out, _ = run_cli(capsys, *cfg, "ask", "scale checkout to 100000", "--as", "U1")
    assert code == 0 and ": completed" in out
    assert "greater than the maximum of 50" in out and "no approval was asked for" in out
    assert run_cli(capsys, *cfg, "approvals", "list", "--json")[1].strip() == "[]"
    code, out, _ = run_cli(capsys, *cfg, "ask", "scale checkout to 5", "--as", "U1")
    assert code == 0 and ": paused" in out, "within the limit it still asks"
