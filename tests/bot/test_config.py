"""Configuration: defaults with no file, and one clear message naming the key when broken."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.cli.app import main
from bot.config import ConfigError, load_config

GOOD = """
model = "scripted"
system_prompt = "Be careful."
tools = ["tests.support.ops_tools:get_status", "tests.support.ops_tools:restart_service"]
approval_ttl = "45m"
database_url = "sqlite+aiosqlite:///x.db"
shutdown_grace = "20s"

[policies.restart_service]
approval = "required"
approvers = ["U0APPROVER1"]
allow_self_approval = false
ttl = "15m"
on_expiry = "cancel"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "approval-bot.toml"
    path.write_text(text)
    return path


def test_no_file_means_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, environ={})
    assert config.source == "(defaults)"
    assert config.approval_ttl == timedelta(minutes=30)
    assert config.tools == [] and config.policies == {}


def test_a_full_file_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD), environ={})
    assert config.model == "scripted"
    assert [t.name for t in config.tools] == ["get_status", "restart_service"]
    policy = config.policy_for("restart_service")
    assert policy is not None
    assert policy.ttl == timedelta(minutes=15) and policy.on_expiry == "cancel"
    assert config.policy_for("get_status") is None
    assert config.approval_ttl == timedelta(minutes=45)
    assert config.shutdown_grace == timedelta(seconds=20)
    assert load_config(None, environ={}).shutdown_grace == timedelta(seconds=25)


def test_database_url_from_the_environment_wins(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD), environ={"DATABASE_URL": "postgresql://x/y"})
    assert config.database_url == "postgresql://x/y"


def test_a_bad_database_url_in_the_environment_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^DATABASE_URL: .*'mysql' databases are not"):
        load_config(write(tmp_path, GOOD), environ={"DATABASE_URL": "mysql://u:secret@h/db"})
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, GOOD), environ={"DATABASE_URL": "mysql://u:secret@h/db"})
    assert "secret" not in str(error.value)  # the password is never shown


def test_config_path_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    config = load_config(environ={"APPROVAL_BOT_CONFIG": str(path)})
    assert config.source == str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model = ", "not valid TOML"),
        ('colour = "blue"', "unknown key 'colour'"),
        ('approval_ttl = "soon"', "approval_ttl: 'soon' is not a duration"),
        ('approval_ttl = "0m"', "approval_ttl: '0m' is not a duration"),
        # Past a year: was an OverflowError's traceback (review21 D2).
        ('approval_ttl = "99999999d"', "approval_ttl: '99999999d' is too long; the longest"),
        ('max_retry_wait = "9999999999d"', "max_retry_wait: '9999999999d' is too long"),
        ('tools = ["tests.support.ops_tools:nope"]', "tools: 'tests.support.ops_tools:nope'"),
        ('tools = ["no_such_module_xyz:f"]', "cannot import 'no_such_module_xyz'"),
        ("tools = [1]", "tools: must be a list"),
        ("[policies.ghost]\napproval = 'required'", "policies.ghost: no tool named 'ghost'"),
        (
            'tools = ["tests.support.ops_tools:get_status"]\n'
            '[policies.get_status]\nttl = "5 minutes"',
            "policies.get_status.ttl",
        ),
        (
            'tools = ["tests.support.ops_tools:get_status"]\n'
            '[policies.get_status]\nttl = "99999999d"',
            "policies.get_status.ttl: '99999999d' is too long",
        ),
        (
            'tools = ["tests.support.ops_tools:get_status"]\n'
            '[policies.get_status]\non_expiry = "wait"',
            "policies.get_status.on_expiry",
        ),
        (
            'tools = ["tests.support.ops_tools:get_status"]\n[policies.get_status]\nquorum = 2',
            "policies.get_status.quorum: unknown key",
        ),
        (
            'tools = ["tests.support.ops_tools:get_status"]\n'
            '[policies.get_status]\napprovers = "U1"',
            "policies.get_status.approvers",
        ),
        ("chain_limit = 0", "chain_limit"),
        ('shutdown_grace = "a while"', "shutdown_grace: 'a while' is not a duration"),
        # The database URL is checked with the rest, before anything connects.
        ('database_url = "mysql://bot@db/approvals"', "database_url: mysql://bot@db/approvals:"),
        ('database_url = "approvals.db"', "database_url: 'approvals.db' is not a database URL"),
        ('database_url = "oracle://x"', "'oracle' databases are not supported"),
        ('database_url = "sqlite://host/x.db"', "a SQLite URL names a file, not a server"),
        ('database_url = "postgresql://h:70000/db"', "port 70000 is not a TCP port"),
    ],
)
def test_broken_files_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, text), environ={})
    assert message in str(error.value)
    assert str(tmp_path) in str(error.value)


def test_a_named_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml", environ={})


def test_the_cli_fails_at_start_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, 'approval_ttl = "later"')
    assert main(["--config", str(path), "approvals", "list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "approval_ttl" in err and "not a duration" in err


@pytest.mark.parametrize("kind", ["a folder", "not UTF-8"])
def test_a_config_file_that_cannot_be_read_is_a_configuration_error(
    tmp_path: Path, kind: str
) -> None:
    # `--config /etc` or a file saved in another encoding: one message, not a traceback.
    path = tmp_path / "bot.toml"
    if kind == "a folder":
        path.mkdir()
    else:
        path.write_bytes(b'model = "\xff\xfe"\n')
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    assert str(path) in str(error.value)
