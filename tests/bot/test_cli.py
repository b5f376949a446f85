"""The CLI end to end, in-process, against a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from ulid import ULID

from bot.cli.app import main
from bot.clock import utcnow
from bot.ids import new_run_id
from storage.repository import Repository
from tests.conftest import POSTGRES_URL, make_config
from tests.support.cli_runs import run_cli, sqlite_config
from tests.support.serve_process import ROOT, free_port
from tests.support.slack_harness import CHANNEL, has_buttons, running_bot

CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:get_status", "tests.support.ops_tools:restart_service"]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return sqlite_config(tmp_path, monkeypatch, CONFIG)


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
    # One error style: approval-bot: <what>: <why> (never "refused (not_allowed)").
    assert code == 1 and err == (
        f"approval-bot: {approval_id}: You asked for this call, so someone else must decide it.\n"
    )

    code, out, _ = run_cli(
        capsys, *cfg, "approvals", "decide", approval_id, "--approve", "--as", "U0APPROVER1"
    )
    assert code == 0
    assert "completed" in out and "restart_service=restarted web" in out

    code, _, err = run_cli(
        capsys, *cfg, "approvals", "decide", approval_id, "--deny", "--as", "U0APPROVER1"
    )
    assert code == 1 and err.startswith(f"approval-bot: {approval_id}: Already approved by ")

    code, out, _ = run_cli(capsys, *cfg, "approvals", "list")
    assert "Nothing waits for a decision or an answer." in out

    code, out, _ = run_cli(capsys, *cfg, "runs", "show", run_id, "--json")
    shown = json.loads(out)
    assert shown["status"] == "completed"
    assert [a["status"] for a in shown["approvals"]] == ["executed"]
    assert "execution_finished" in [e["event"] for e in shown["audit"]]

    code, _, err = run_cli(capsys, *cfg, "runs", "show", "run_missing")
    assert code == 1 and err == "approval-bot: run_missing: there is no such run\n"


def test_cancel_a_waiting_run(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = ["--config", str(config_file)]
    call = {"name": "restart_service", "arguments": {"service": "db"}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])

    code, out, _ = run_cli(capsys, *cfg, "runs", "cancel", listed["run_id"], "--as", "U0APPROVER1")
    assert code == 0 and "cancelled" in out
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", listed["run_id"], "--json")[1])
    assert shown["status"] == "cancelled" and "by U0APPROVER1" in shown["error"]
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
    ["runs", "recover"],
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
    assert_one_line(capsys.readouterr().err, f"--port: '{port}' is not a TCP port")


# -- runs recover: what the sweeper does, once, for when no bot is running --------------------


async def _make_dead_run(database_url: str, conversation: str) -> str:
    """A run whose worker died mid-turn: ``running``, its lease run out a minute ago."""
    repo = await Repository.open(database_url)
    try:
        past = utcnow() - timedelta(minutes=10)
        run = await repo.open_run(
            run_id=new_run_id(),
            conversation_key=conversation,
            requester="U0REQUESTER",
            model_id="scripted",
            opening_messages=[{"role": "system", "parts": [{"type": "text", "text": "Hi"}]}],
            new_messages=[
                {"role": "user", "parts": [{"type": "text", "text": "status of web, please"}]}
            ],
            worker="worker-that-died",
            lease_until=past + timedelta(minutes=9),
            now=past,
        )
        return run.id
    finally:
        await repo.close()


async def _overdue(database_url: str) -> None:
    repo = await Repository.open(database_url)
    try:
        await repo.execute_sql(
            "UPDATE approvals SET expires_at = :past WHERE status = 'pending'",
            {"past": utcnow() - timedelta(minutes=1)},
        )
    finally:
        await repo.close()


def test_a_dead_run_is_recovered_from_the_cli(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    database_url = os.environ["DATABASE_URL"]
    run_id = asyncio.run(_make_dead_run(database_url, "conversation-1"))

    # The conversation is held by the dead run: the advice names the way out.
    code, out, _ = run_cli(
        capsys, *cfg, "ask", "again", "--as", "U0REQUESTER", "--conversation", "conversation-1"
    )
    assert code == 1 and f"run {run_id}: busy" in out
    assert "approvals first" not in out
    assert "worker stopped renewing its lease" in out and "approval-bot runs recover" in out

    code, out, _ = run_cli(capsys, *cfg, "runs", "recover")
    assert code == 0
    assert f"took over run {run_id}" in out
    assert f"run {run_id}: completed" in out and "You said: status of web, please" in out
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", run_id, "--json")[1])
    assert shown["status"] == "completed"
    assert "run_taken_over" in [e["event"] for e in shown["audit"]]

    # Nothing left to do: it says so, and the conversation takes new requests again.
    code, out, _ = run_cli(capsys, *cfg, "runs", "recover")
    assert code == 0 and "Nothing to recover" in out
    code, out, _ = run_cli(
        capsys, *cfg, "ask", "again", "--as", "U0REQUESTER", "--conversation", "conversation-1"
    )
    assert f"run {run_id}: completed" in out and "You said: again" in out


def test_recover_expires_overdue_approvals_and_carries_their_runs_on(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    call = {"name": "restart_service", "arguments": {"service": "web"}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
    asyncio.run(_overdue(os.environ["DATABASE_URL"]))

    code, out, _ = run_cli(capsys, *cfg, "runs", "recover")
    assert code == 0
    assert f"expired {listed['id']} (restart_service): run {listed['run_id']} carries on" in out
    assert f"run {listed['run_id']}: completed" in out
    assert "restart_service=Expired at" in out  # the model was told, and nothing ran
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", listed["run_id"], "--json")[1])
    assert [a["status"] for a in shown["approvals"]] == ["expired"]


def test_a_busy_paused_conversation_says_to_decide_or_cancel(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    call = {"name": "restart_service", "arguments": {"service": "web"}}
    ask = ["ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER"]
    run_cli(capsys, *cfg, *ask, "--conversation", "conversation-2")
    code, out, _ = run_cli(capsys, *cfg, *ask, "--conversation", "conversation-2")
    assert code == 1 and ": busy" in out
    assert "waits for approvals: decide them (approvals list) or stop it (runs cancel" in out


async def test_recover_with_slack_edits_cards_and_answers_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With SLACK_BOT_TOKEN set, ``runs recover`` acts in Slack as the bot's sweeper would."""
    database_url = f"sqlite:///{tmp_path / 'shared.db'}"
    config_file = tmp_path / "bot.toml"
    config_file.write_text(CONFIG)
    repo = await Repository.open(database_url)
    # No bot is running any more; Slack (our server) is still there.
    async with running_bot(make_config(), repo) as slack:
        call = {"name": "restart_service", "arguments": {"service": "web"}}
        paused = await slack.mention("U0REQUESTER", json.dumps({"tool_calls": [call]}))
        [card] = slack.cards()
        asked = slack.server.post_user_message("U0REQUESTER", CHANNEL, "<@U0BOT> status?")
        dead = await repo.open_run(
            run_id=new_run_id(),
            conversation_key="dead-thread",
            requester="U0REQUESTER",
            model_id="scripted",
            new_messages=[{"role": "user", "parts": [{"type": "text", "text": "status?"}]}],
            worker="worker-that-died",
            lease_until=utcnow() - timedelta(minutes=1),
            now=utcnow() - timedelta(minutes=6),
            channel=CHANNEL,
            thread_ts=asked.ts,
        )
        await _overdue(database_url)
        monkeypatch.setenv("DATABASE_URL", database_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", slack.server.bot_token)
        monkeypatch.setenv("SLACK_API_URL", slack.server.api_url)
        code = await asyncio.to_thread(main, ["--config", str(config_file), "runs", "recover"])
        assert code == 0

        card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
        assert card is not None and not has_buttons(card)
        assert "expired" in json.dumps(card.blocks).lower()
        assert any("restart_service=Expired at" in m.text for m in slack.thread_of(paused))
        answers = [
            m.text for m in slack.server.thread(CHANNEL, asked.ts) if m.user != "U0REQUESTER"
        ]
        assert answers == ["You said: status?"]
    await repo.close()
    assert (await _status(database_url, dead.id)) == "completed"


async def _status(database_url: str, run_id: str) -> str:
    repo = await Repository.open(database_url)
    try:
        run = await repo.get_run(run_id)
        assert run is not None
        return run.status
    finally:
        await repo.close()


def test_recover_resumes_a_paused_run_with_nothing_left_to_decide(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    call = {"name": "restart_service", "arguments": {"service": "web"}}
    run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
    # Decided, but nobody claimed the resume (a decider that died in between).
    asyncio.run(_deny_without_resuming(os.environ["DATABASE_URL"], listed["id"]))

    code, out, _ = run_cli(capsys, *cfg, "runs", "recover")
    assert code == 0
    assert f"resumed run {listed['run_id']}: it was paused with nothing left to decide" in out
    assert f"run {listed['run_id']}: completed" in out and "Denied by @U0APPROVER1" in out


async def _deny_without_resuming(database_url: str, approval_id: str) -> None:
    repo = await Repository.open(database_url)
    try:
        await repo.execute_sql(
            "UPDATE approvals SET status = 'denied', decided_by = 'U0APPROVER1', "
            "decided_at = :now WHERE id = :id",
            {"now": utcnow(), "id": approval_id},
        )
    finally:
        await repo.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["approvals", "list", "--limit", "0"],
        ["approvals", "list", "--limit", "-1"],
        ["playground", "--port", "99999", "--no-browser"],
        ["playground", "--port", "-5", "--no-browser"],
    ],
)
def test_out_of_range_numbers_are_usage_errors(
    config_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # --limit -1 was a PostgreSQL traceback, --limit 0 said "No approvals are pending" while
    # some were; a playground port out of range was a traceback from bind().
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(config_file), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_slack_unreachable_does_not_strand_a_decision_or_a_cancel(
    config_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found with real processes: `approvals decide` printed "Approved …", then a traceback
    # from the card edit (Slack timed out) and exited 1, leaving the run it had claimed
    # `resuming` until its lease ran out; `runs cancel` left the cards' buttons live.
    cfg = ["--config", str(config_file)]
    for service in ("web", "db"):
        call = {"name": "restart_service", "arguments": {"service": service}}
        run_cli(capsys, *cfg, "ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    first, second = json.loads(run_cli(capsys, *cfg, "approvals", "list", "--json")[1])
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-unreachable")
    monkeypatch.setenv("SLACK_API_URL", f"http://127.0.0.1:{free_port()}/api/")

    code, out, err = run_cli(
        capsys, *cfg, "approvals", "decide", first["id"], "--approve", "--as", "U0APPROVER1"
    )
    assert code == 0 and "Traceback" not in err, err
    shown = json.loads(run_cli(capsys, *cfg, "runs", "show", first["run_id"], "--json")[1])
    assert shown["status"] == "completed"

    code, out, err = run_cli(
        capsys, *cfg, "runs", "cancel", second["run_id"], "--as", "U0OPS", "--force"
    )
    assert code == 0 and "cancelled" in out and "Traceback" not in err, err


# -- Ctrl-C or SIGTERM while a CLI command runs an approved tool --------------------------

SLOW_CONFIG = """
model = "echo"
tools = ["tests.support.ops_tools:slow_restart"]
shutdown_grace = "20s"

[policies.slow_restart]
approvers = ["U0APPROVER1"]
"""


def _interrupted_decide(tmp_path: Path, signals: int) -> tuple[subprocess.CompletedProcess, str]:
    """Pause a run on slow_restart, approve it from a real CLI process, and send it
    ``signals`` SIGINTs once the tool has started. Returns the process and the run id."""
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_CONFIG)
    log = tmp_path / "tool.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLACK_")},
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "LLM_USER_PATH": str(tmp_path / "llm"),
        "LLM_LOAD_PLUGINS": "llm-echo",
    }
    cli = [sys.executable, "-m", "bot.cli", "--config", str(config)]
    call = {"name": "slow_restart", "arguments": {"service": "db", "seconds": 3, "log": str(log)}}
    prompt = json.dumps({"prompt": "restart db", "tool_calls": [call]})
    ask = [*cli, "ask", prompt, "--as", "U0REQUESTER"]
    subprocess.run(ask, env=env, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    listed = subprocess.run(
        [*cli, "approvals", "list", "--json"], env=env, cwd=tmp_path, capture_output=True
    )
    [approval] = json.loads(listed.stdout)
    decide = subprocess.Popen(
        [*cli, "approvals", "decide", approval["id"], "--approve", "--as", "U0APPROVER1"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(600):
        if log.exists() and "started db" in log.read_text():
            break
        time.sleep(0.05)
    else:
        decide.kill()
        raise AssertionError("the tool never started")
    for _ in range(signals):
        decide.send_signal(signal.SIGINT)
        time.sleep(0.3)
    out, err = decide.communicate(timeout=60)
    return subprocess.CompletedProcess(decide.args, decide.returncode, out, err), approval["run_id"]


def _stored(tmp_path: Path, run_id: str) -> tuple[str, bool, list[str]]:
    """The run's status, whether its lease was released, its approvals' statuses."""
    db = sqlite3.connect(tmp_path / "cli.db")
    [status] = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    released = db.execute(
        "SELECT count(*) FROM audit_events WHERE run_id = ? AND event = 'lease_released'",
        (run_id,),
    ).fetchone()[0]
    approvals = [row[0] for row in db.execute("SELECT status FROM approvals")]
    return status, released == 1, approvals


def test_ctrl_c_during_a_tool_lets_it_finish_and_records_it(tmp_path: Path) -> None:
    # Ctrl-C used to cancel the drive: a KeyboardInterrupt traceback, the tool's thread ran
    # to its end anyway, and its result was never recorded (the approval stuck `executing`,
    # the run held by the dead CLI until its lease ran out, then "outcome unknown").
    result, run_id = _interrupted_decide(tmp_path, signals=1)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert _stored(tmp_path, run_id) == ("completed", False, ["executed"])


def test_a_second_ctrl_c_stops_at_once_and_releases_the_run(tmp_path: Path) -> None:
    result, run_id = _interrupted_decide(tmp_path, signals=2)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 130
    assert "interrupted" in result.stderr
    # Released at once (not a run_lease later): a bot or `runs recover` carries it on.
    assert _stored(tmp_path, run_id) == ("running", True, ["executing"])
