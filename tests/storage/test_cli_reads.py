"""The read-only commands print the same bytes through storage.reads (SQLite, no SQLAlchemy)
as through the Repository (SQLAlchemy, what serve uses), and on PostgreSQL, on one set of
records: approvals of every status and kind, quorum votes, rules, names, unicode, long
arguments, audit events. Also: when the read path is taken, and the URLs it reads itself."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, Boolean, DateTime
from sqlalchemy.engine import make_url

from bot.cli.app import READ_ONLY, command_for, main
from bot.cli.parser import build_parser
from bot.clock import utcnow
from bot.config import load_config
from storage import migrate, reads
from storage.models import Approval, AuditEvent, Grant, Run
from storage.reads import NeedsRepository, open_reads
from storage.repository import Repository
from storage.urls import plain_sqlite_path
from tests.conftest import fresh_postgres_database
from tests.support.serve_process import ROOT

CONFIG = (
    'model = "scripted"\ntools = ["tests.support.ops_tools:restart_service"]\n'
    '[policies.restart_service]\napprovers = ["U0APPROVER1"]\n'
)
T0 = datetime(2026, 3, 1, 9, 30, 15, 123456)
LATER = utcnow() + timedelta(days=3)  # pending approvals are listed until they expire
LONG = "x" * 300
STATUSES = ("pending", "approved", "denied", "expired", "cancelled", "executing", "executed")


def run_row(run_id: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": run_id,
        "conversation_key": f"T1:C1:{run_id}",
        "team_id": "T1",
        "channel": "C1",
        "thread_ts": f"17000.{run_id[-2:]}",
        "requester": "U0REQUESTER",
        "status": status,
        "model_id": "scripted",
        "history": [{"role": "user", "content": "héllo ☃ “quoted”"}],
        "turn": 1,
        "created_at": T0,
        "updated_at": T0 + timedelta(minutes=1),
        **extra,
    }


def approval_row(number: int, run_id: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"apr_{number:03d}",
        "run_id": run_id,
        "turn": 1,
        "tool_call_id": f"call_{number}",
        "tool_name": "restart_service",
        "arguments": {"service": f"web-{number}", "note": "ünïcode ✓ 日本"},
        "payload_hash": "0" * 64,
        "status": status,
        "requester": "U0REQUESTER",
        "team_id": "T1",
        "channel": "C1",
        "thread_ts": "17000.01",
        "approvers": ["U0APPROVER1"],
        "allow_self_approval": False,
        "on_expiry": "deny",
        "created_at": T0 + timedelta(seconds=number),
        "expires_at": LATER + timedelta(seconds=number),
        "kind": "approval",
        "min_approvals": 1,
        "allow_edit": False,
        **extra,
    }


def records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs = [
        run_row("run_01", "paused"),
        run_row("run_02", "completed", answer="Done: restarted “web” ✓"),
        run_row("run_03", "failed", error="tool failed:\nboom"),
        run_row("run_04", "paused"),
        run_row("run_05", "paused"),  # cancelled below, with its pending approval
    ]
    approvals = [
        approval_row(n, "run_01", status, decided_by=None if status == "pending" else "U0A")
        for n, status in enumerate(STATUSES, start=1)
    ]
    approvals += [
        # Decided, with the name Slack gave; a reason with a NUL (stored as U+FFFD).
        approval_row(
            10,
            "run_02",
            "executed",
            decided_by="U0APPROVER1",
            decided_by_name="Ada Lövelace",
            decided_at=T0,
            reason="ok\x00then",
            result="restarted",
            executed_at=T0,
        ),
        # A quorum: 1 of 3 so far; another with none yet.
        approval_row(11, "run_04", "pending", min_approvals=3, approved_by=["U0B"]),
        approval_row(12, "run_04", "pending", min_approvals=2, approved_by=None),
        # Rules: one applied, one that failed closed.
        approval_row(
            13,
            "run_04",
            "pending",
            rule="policies.restart_service.rules[0]",
            rule_when='args.service == "db"',
        ),
        approval_row(
            14,
            "run_04",
            "pending",
            rule="policies.restart_service.rules[1]",
            rule_when="args.n > 1",
            rule_error="no such key: n",
        ),
        # Long and nested arguments, anyone may decide, self-approval allowed.
        approval_row(
            15,
            "run_04",
            "pending",
            arguments={"service": LONG, "nested": {"a": [1, 2.5, None, True]}},
            approvers=[],
            allow_self_approval=True,
            on_expiry="approve",
        ),
        # Edited before it was approved.
        approval_row(
            16,
            "run_02",
            "approved",
            edited_arguments={"service": "web-2"},
            edited_by="U0APPROVER1",
            edited_at=T0,
            decided_by="U0APPROVER1",
        ),
        # Waits: a question, a callback, retries, pending or not.
        approval_row(
            20,
            "run_04",
            "pending",
            kind="question",
            approvers=["U0REQUESTER"],
            tool_name="ask_user",
            arguments={"question": "Which región?"},
        ),
        approval_row(21, "run_04", "pending", kind="callback", approvers=[], reason="the CI job ✓"),
        approval_row(
            22,
            "run_04",
            "pending",
            kind="retry",
            approvers=[],
            due_at=T0 + timedelta(hours=2),
            reason="rate limited",
        ),
        approval_row(23, "run_03", "executed", kind="retry", approvers=[]),
        approval_row(24, "run_03", "completed", kind="callback", approvers=[], decided_by="ci"),
        approval_row(25, "run_03", "expired", kind="callback", approvers=[]),
        approval_row(26, "run_03", "cancelled", kind="question", approvers=[], reason="gone"),
        approval_row(30, "run_05", "pending"),
    ]
    return runs, approvals


def grant_row(grant_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": grant_id,
        "team_id": "T1",
        "channel": "C1",
        "thread_ts": "17000.01",
        "tool_name": "restart_service",
        "payload_scope": None,
        "grantor": "U0APPROVER1",
        "grantor_groups": '["S0OPS"]',
        "approval_id": "apr_010",
        "run_id": "run_02",
        "created_at": T0,
        "expires_at": LATER,
        "revoked_at": None,
        "revoked_by": None,
        "last_used_at": None,
        "expiry_noticed_at": None,
        **extra,
    }


GRANTS = [
    grant_row("grt_01", last_used_at=T0 + timedelta(minutes=5)),
    grant_row("grt_02", payload_scope="ab" * 32, thread_ts="17000.ü", created_at=T0 + timedelta(1)),
    grant_row("grt_03", revoked_at=T0 + timedelta(minutes=9), revoked_by="U0APPROVER1"),
    grant_row("grt_04", expires_at=T0 + timedelta(hours=1)),  # expired (noticed in seed)
]


async def insert_grant(repo: Repository, row: dict[str, Any]) -> None:
    columns = ", ".join(row)
    await repo.execute_sql(
        f"INSERT INTO grants ({columns}) VALUES ({', '.join(f':{c}' for c in row)})", row
    )


async def seed(url: str) -> None:
    repo = await Repository.open(url)
    try:
        runs, approvals = records()
        await repo.insert_rows_for_benchmark(runs=runs, approvals=approvals)
        for n, (run_id, approval) in enumerate([("run_01", "apr_001"), ("run_04", "apr_013")]):
            await repo.record_rule_match(
                run_id,
                actor="U0REQUESTER",
                tool="restart_service",
                rule=f"policies.restart_service.rules[{n}]",
                when="args.x == “ü”",
                approval=approval,
                now=T0 + timedelta(minutes=n),
            )
        for grant in GRANTS:
            await insert_grant(repo, grant)
        assert len(await repo.notice_expired_grants(now=T0 + timedelta(hours=2))) == 1
        assert await repo.cancel_run(
            "run_05", reason="by U0REQUESTER ✗", actor="U0REQUESTER", now=T0 + timedelta(hours=1)
        )
    finally:
        await repo.close()


COMMANDS = [
    ["approvals", "list"],
    ["approvals", "list", "--json"],
    ["approvals", "list", "--limit", "2"],
    ["runs", "show", "run_01"],
    ["runs", "show", "run_02", "--json"],
    ["runs", "show", "run_03"],
    ["runs", "show", "run_04"],
    ["runs", "show", "run_05"],
    ["runs", "show", "run_missing"],
    ["waits", "list"],
    ["waits", "list", "--json"],
    ["grants", "list"],
    ["grants", "list", "--all"],
    ["grants", "list", "--all", "--json"],
    ["audit", "export", "--since", "2026-01-01"],
    ["audit", "export", "--since", "2026-01-01", "--format", "csv"],
    ["audit", "export", "--since", "2026-03-01T09:31:00Z", "--until", "2026-03-02"],
]


async def printed(repo: Any, tmp_path: Path, argv: list[str]) -> tuple[int, str]:
    args = build_parser().parse_args(["--config", str(tmp_path / "bot.toml"), *argv])
    config = load_config(args.config, tools=False)
    key = (args.command, getattr(args, f"{args.command}_command"))
    assert key in READ_ONLY
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = await command_for(key)(repo, config, args)
    return code, out.getvalue()


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[str]:
    (tmp_path / "bot.toml").write_text(CONFIG)
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    await seed(url)
    yield url


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_read_commands_print_the_same_on_both_paths(
    seeded: str, tmp_path: Path, backend: str
) -> None:
    """The old path (Repository, on SQLite and on PostgreSQL) and storage.reads, byte for byte."""
    if backend == "postgres":
        from tests.conftest import POSTGRES_URL

        if not POSTGRES_URL:
            pytest.skip("PostgreSQL variant: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    fast = open_reads(str(tmp_path / "bot.db"))
    assert fast is not None
    async with contextlib.AsyncExitStack() as stack:
        url = seeded
        if backend == "postgres":
            url = await stack.enter_async_context(fresh_postgres_database())
            await seed(url)
        repo = await Repository.open(url)
        stack.push_async_callback(repo.close)
        stack.push_async_callback(fast.close)
        for argv in COMMANDS:
            expected = await printed(repo, tmp_path, argv)
            assert await printed(fast, tmp_path, argv) == expected, argv
            assert expected[1].strip(), argv
        # The records were all there: every status listed, the quorum, a rule, a name.
        _, shown = await printed(fast, tmp_path, ["runs", "show", "run_01"])
        assert all(f" {status}" in shown for status in STATUSES)
        _, listed = await printed(fast, tmp_path, ["approvals", "list"])
        assert "1 of 3 approvals (U0B)" in listed and "failed closed" in listed
        assert "…" in listed  # the long arguments, cut
        _, run = await printed(fast, tmp_path, ["runs", "show", "run_02"])
        assert "by Ada Lövelace" in run


async def test_grants_list_with_an_expiry_to_audit_is_the_repositorys(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``grants list`` audits each grant's expiry once: the read path hands that to the
    Repository, before printing anything, and reads again once it is audited."""
    repo = await Repository.open(seeded)
    try:
        await insert_grant(repo, grant_row("grt_05", expires_at=T0 + timedelta(hours=3)))
    finally:
        await repo.close()
    fast = open_reads(str(tmp_path / "bot.db"))
    assert fast is not None
    with pytest.raises(NeedsRepository):
        await fast.notice_expired_grants(now=utcnow())
    monkeypatch.setenv("DATABASE_URL", seeded)
    cfg = ["--config", str(tmp_path / "bot.toml")]
    for _ in range(2):
        assert await asyncio.to_thread(main, [*cfg, "grants", "list", "--all"]) == 0
        out = capsys.readouterr().out
        assert "grt_05  restart_service  in C1/17000.01  by U0APPROVER1  expired at" in out
    assert await fast.notice_expired_grants(now=utcnow()) == []
    trail = await fast.audit_trail(run_id="run_02")
    assert [e.detail["grant_id"] for e in trail if e.event == "grant_expired"] == [
        "grt_04",
        "grt_05",
    ]
    await fast.close()


async def test_the_read_path_reads_only_a_schema_at_head(tmp_path: Path) -> None:
    """An older or unknown schema, no schema, or no file: None, and the Repository (which
    migrates, warns or says what is wrong, as before) is used instead."""
    path = tmp_path / "bot.db"
    assert open_reads(str(path)) is None and not path.exists()  # never creates the file
    sqlite3.connect(path).close()
    assert open_reads(str(path)) is None  # no alembic_version
    await (await Repository.open(f"sqlite:///{path}")).close()
    reader = open_reads(str(path))
    assert reader is not None
    await reader.close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'older'")
    assert open_reads(str(path)) is None


def test_head_revisions_are_alembics_own() -> None:
    """The head the read path compares with (read from the files) is Alembic's head."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert migrate.head_revisions() == frozenset(script.get_heads())


def test_converted_columns_match_the_models() -> None:
    """storage.reads converts exactly the columns whose model types storage.stores.rows converts."""
    kinds = {JSON: "json", DateTime: "datetime", Boolean: "bool"}
    for model in (Run, Approval, AuditEvent, Grant):
        table = model.__table__
        expected = {
            column.name: kind
            for column in table.columns
            for sa_type, kind in kinds.items()
            if isinstance(column.type, sa_type)
        }
        assert reads._KINDS[table.name] == expected, table.name


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///bot.db",
        "sqlite:////abs/path/bot.db",
        "sqlite+aiosqlite:///rel/dir/bot.db",
        "sqlite+pysqlite:////tmp/x y.db",
        "sqlite:///ünï.db",
    ],
)
def test_plain_sqlite_urls_are_read_as_sqlalchemy_reads_them(url: str) -> None:
    assert plain_sqlite_path(url) == make_url(url).database


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:bot.db?mode=memory&uri=true",
        "sqlite:///bot%20x.db",
        "sqlite://user@host/bot.db",
        "postgresql://postgres@127.0.0.1/test",
        "sqlite:///",
    ],
)
def test_other_urls_go_through_sqlalchemy(url: str) -> None:
    assert plain_sqlite_path(url) is None


def run_cli(tmp_path: Path, url: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(tmp_path / "bot.toml"), *argv],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("query", ["", "?timeout=30"])  # the read path; the Repository's
async def test_a_damaged_table_is_one_line_not_a_traceback(
    seeded: str, tmp_path: Path, query: str
) -> None:
    """The schema check reads one page; a damaged page of a table is found later, mid-read."""
    path = tmp_path / "bot.db"
    with contextlib.closing(sqlite3.connect(path)) as connection:
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
        rootpages = dict(connection.execute("SELECT name, rootpage FROM sqlite_master"))
    with path.open("r+b") as file:
        for table in ("approvals", "runs"):
            file.seek((rootpages[table] - 1) * page_size)
            file.write(b"\xff" * page_size)
    for argv in (["approvals", "list"], ["runs", "show", "run_01"]):
        done = run_cli(tmp_path, seeded + query, argv)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "cannot read the database" in done.stderr
        assert "database disk image is malformed" in done.stderr
        assert done.stdout == ""


LIST_JSON = ["approvals", "list", "--json"]


async def test_a_reader_that_stops_reading_is_no_error(seeded: str, tmp_path: Path) -> None:
    """`approvals list --json | head -2`: no traceback when head closes the pipe."""
    with contextlib.closing(sqlite3.connect(tmp_path / "bot.db")) as connection:
        connection.execute(
            "UPDATE approvals SET arguments = ? WHERE status = 'pending'",
            (json.dumps({"service": "x" * 300_000}),),  # more than a pipe holds
        )
        connection.commit()
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "--config", str(tmp_path / "bot.toml"), *LIST_JSON],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": seeded},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(10) == b"[\n  {\n    "
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert stderr == ""
