"""Command-line values the database cannot hold: one line and exit 2 on both databases,
where PostgreSQL printed a traceback (and SQLite kept the value, or overflowed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.bot.test_cli import config_file, run_cli  # noqa: F401 (config_file is a fixture)
from tests.conftest import POSTGRES_URL

LONG_USER = "U" + "X" * 64
LONG_KEY = "k" * 256


@pytest.mark.parametrize(
    "argv",
    [
        ["ask", "hello", "--as", LONG_USER],
        ["ask", "hello", "--as", ""],
        ["ask", "hello", "--as", "U0REQUESTER", "--conversation", LONG_KEY],
        ["approvals", "decide", "apr_x", "--approve", "--as", LONG_USER],
        ["runs", "cancel", "run_x", "--as", LONG_USER],
        ["approvals", "list", "--limit", "99999999999999999999"],
        ["approvals", "list", "--limit", "-5"],
        ["approvals", "list", "--limit", "0"],
    ],
)
def test_a_value_too_big_for_the_database_is_a_usage_error(
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    cfg = ["--config", str(config_file)]
    assert run_cli(capsys, *cfg, "db", "upgrade")[0] == 0
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, *cfg, *argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, out, _ = run_cli(capsys, *cfg, "approvals", "list", "--json")
    assert code == 0 and json.loads(out) == [], "nothing was stored"


def test_the_longest_values_the_database_holds_are_taken(
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = ["--config", str(config_file)]
    request = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}]}
    )
    code, out, _ = run_cli(
        capsys, *cfg, "ask", request, "--as", "U" * 64, "--conversation", "k" * 255
    )
    assert code == 0 and ": paused" in out
    code, out, _ = run_cli(capsys, *cfg, "approvals", "list", "--limit", "100000")
    assert code == 0 and "restart_service" in out


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # Unparseable: the message quoted the URL, password and all.
        ("postgresql://bot:hunter2secret@[::1/x", "postgresql://bot:***@[::1/x"),
        # Options asyncpg does not take were a TypeError traceback at the first connection.
        ("postgresql://bot:hunter2secret@127.0.0.1:1/x?application_name=bot", "'application_name'"),
        ("postgresql://bot:hunter2secret@127.0.0.1:1/x?sslmode=bogus", "sslmode must be one of"),
        # libpq's multi-host lists and a repeated option: asyncpg would try them in turn.
        ("postgresql://bot:hunter2secret@/x?host=/a,/b", "host must name one server"),
        ("postgresql://bot:hunter2secret@/x?host=/a&host=/b", "host is given more than once"),
        # A socket directory where no server listens: the open fails in one line.
        ("postgresql://bot:hunter2secret@/x?host=/nonexistent-socket-dir", "cannot open"),
    ],
)
def test_a_database_url_option_or_shape_we_cannot_use_is_one_line_without_the_password(
    url: str,
    expected: str,
    config_file: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    code, _, err = run_cli(capsys, "--config", str(config_file), "approvals", "list")
    assert code == 2
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert expected in err and "hunter2secret" not in err, err


@pytest.mark.skipif(not POSTGRES_URL, reason="needs APPROVAL_BOT_TEST_POSTGRES_URL")
def test_libpq_sslmode_in_a_postgresql_url_is_understood(
    postgres_database: str,
    config_file: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``?sslmode=…``, as libpq and most hosting providers write it, was a TypeError."""
    # A database of its own: the shared one's schema may be at another branch's revision.
    monkeypatch.setenv("DATABASE_URL", f"{postgres_database}?sslmode=disable")
    code, _, err = run_cli(capsys, "--config", str(config_file), "approvals", "list")
    assert code == 0, err


@pytest.mark.skipif(not POSTGRES_URL, reason="needs APPROVAL_BOT_TEST_POSTGRES_URL")
def test_a_unix_socket_directory_in_host_reaches_the_server_without_tcp(
    postgres_database: str,
    config_file: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``?host=/var/run/postgresql`` (libpq's spelling; Cloud SQL's proxy and a database on
    the same machine use it) was refused as an unknown option. That the directory is the one
    used (not a default) is the hostile case above: an empty directory fails to open."""
    directory = asyncio.run(_socket_directory(postgres_database))
    if directory is None:
        pytest.skip("the test server listens on no Unix socket")
    parts = urlsplit(postgres_database)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    url = urlunsplit(parts._replace(netloc=user, query=f"host={directory}"))
    monkeypatch.setenv("DATABASE_URL", url)
    code, _, err = run_cli(capsys, "--config", str(config_file), "db", "upgrade")
    assert code == 0, err
    code, out, err = run_cli(capsys, "--config", str(config_file), "approvals", "list", "--json")
    assert code == 0 and json.loads(out) == [], err


async def _socket_directory(url: str) -> str | None:
    """The server's first Unix socket directory that exists here, or None."""
    import asyncpg  # type: ignore[import-untyped]

    connection = await asyncpg.connect(url)
    try:
        setting = await connection.fetchval("SHOW unix_socket_directories")
    finally:
        await connection.close()
    for directory in (part.strip() for part in (setting or "").split(",")):
        if directory.startswith("/") and Path(directory).is_dir():
            return directory
    return None


@pytest.mark.parametrize("given", ["@bo", "bo@x.com", "bo", "u0bo"])
def test_as_says_it_takes_a_slack_user_id(
    config_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    given: str,
) -> None:
    """A handle or an email was recorded as a user nobody is; now one line says what --as
    takes, in the command line's one error style, and nothing is stored."""
    cfg = ["--config", str(config_file)]
    assert run_cli(capsys, *cfg, "db", "upgrade")[0] == 0
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, *cfg, "ask", "hello", "--as", given)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f'approval-bot: --as: takes a Slack user id such as U0123ABCD, not "{given}" '
        "(see approval-bot ask --help)\n"
    )
    code, out, _ = run_cli(capsys, *cfg, "approvals", "list", "--json")
    assert code == 0 and json.loads(out) == [], "nothing was stored"
