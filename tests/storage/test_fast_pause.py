"""PostgreSQL's one-statement pause (storage.stores.pauses.fast_pause, issue 22).

The common pause (new rows only, no hold on the run) goes out as one statement in autocommit.
It must write exactly the rows the whole transaction writes (the approvals, their approvers,
their reach, the audit trail in the same order, the run), write nothing when its conditions do
not hold, and then leave the whole transaction to say why (LeaseLost, RunHeld) or to do what
it alone does (re-tagging, adopting a callback, starting a sub-agent, a run under a Pause).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from storage.errors import LeaseLost, RunHeld
from storage.models import Run
from storage.records import ApprovalDraft, ArmedCallback, ChildRun, PauseOutcome
from storage.repository import Repository
from storage.stores import pauses
from tests.conftest import POSTGRES_URL, Database, postgres_schema
from tests.support.statements import begin_hold, statements

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

NOW = datetime(2026, 12, 2, 12, 0, 0, 123456)
LEASE = NOW + timedelta(minutes=5)
WORKER = "worker-a/t1"
RUN_ID = "run_fastpause"
HISTORY = [{"role": "user", "content": "restart the database"}]
TABLES = {
    "runs": "id",
    "approvals": "id",
    "approval_approvers": "approval_id, approver",
    "approval_reach": "approval_id",
    "audit_events": "id",
    "run_holds": "run_id",
}


def draft(approval_id: str, **overrides: Any) -> ApprovalDraft:
    values: dict[str, Any] = {
        "id": approval_id,
        "tool_call_id": f"call_{approval_id}",
        "tool_name": "restart_service",
        "arguments": {"service": "db", "note": "ünïcode"},
        "payload_hash": "0" * 64,
        "approvers": ["U0APPROVER1"],
        "allow_self_approval": False,
        "on_expiry": "deny",
        "expires_at": NOW + timedelta(minutes=15),
    }
    return ApprovalDraft(**{**values, **overrides})


# Every kind of new row a pause makes, and every column that varies between them.
MIXED = [
    draft(
        "apr_1",
        approvers=["U0APPROVER1", "U0APPROVER2", "S0GROUP"],
        remind_at=NOW + timedelta(minutes=5),
        escalate_at=NOW + timedelta(minutes=10),
        escalate_to=("U0BOSS",),
        rule="args.service == 'db'",
        rule_when="args.service == 'db'",
        min_approvals=2,
        why="The database is stuck.",
        allow_edit=True,
    ),
    draft("apr_2", approvers=[], batch_id="apr_2", allow_self_approval=True),
    draft("apr_3", approvers=[], batch_id="apr_2", arguments={"service": "cache"}),
    draft("apr_4", kind="question", tool_name="ask_user", arguments={"question": "Which?"}),
    draft(
        "apr_5",
        kind="retry",
        approvers=[],
        reason="rate limited",
        due_at=NOW + timedelta(seconds=30),
        edited_arguments={"service": "db2"},
    ),
    draft(
        "apr_6",
        kind="recovery",
        attempt=2,
        recovery_of="apr_0",
        recovery_cause="error",
        on_expiry="cancel",
        rule_error="bad rule",
        rule="broken",
    ),
]


def _plain() -> str:
    return POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://")


async def connect(database: Database) -> asyncpg.Connection:
    """A connection of our own to ``database``'s schema (another session)."""
    settings = database.engine_kwargs["connect_args"]["server_settings"]
    return await asyncpg.connect(_plain(), server_settings=settings)


async def dump(database: Database) -> dict[str, list[dict[str, Any]]]:
    connection = await connect(database)
    try:
        return {
            table: [dict(r) for r in await connection.fetch(f"SELECT * FROM {table} ORDER BY {o}")]
            for table, o in TABLES.items()
        }
    finally:
        await connection.close()


async def open_run(
    repo: Repository, *, channel: str = "C0OPS", agent: str | None = None, run_id: str = RUN_ID
) -> Run:
    run = await repo.open_run(
        run_id=run_id,
        conversation_key=f"T0TEAM:{channel}:{run_id}",
        requester="U0REQUESTER",
        model_id="scripted",
        new_messages=HISTORY,
        worker=WORKER,
        lease_until=LEASE,
        now=NOW,
        team_id="T0TEAM",
        channel=channel,
        thread_ts="1700000000.000100",
    )
    if agent is not None:  # a sub-agent's run (its approvals carry the agent)
        await repo.execute_sql(
            "UPDATE runs SET agent = :agent WHERE id = :id", {"agent": agent, "id": run_id}
        )
        fresh = await repo.get_run(run_id)
        assert fresh is not None
        run = fresh
    return run


async def pause(
    repo: Repository,
    run: Run | None,
    drafts: Sequence[ApprovalDraft],
    *,
    run_id: str = RUN_ID,
    worker: str = WORKER,
    **kwargs: Any,
) -> PauseOutcome:
    return await repo.save_pause(
        run_id,
        worker=worker,
        history=[*HISTORY, {"role": "assistant", "content": "asking"}],
        drafts=drafts,
        lease_until=LEASE,
        now=NOW,
        run=run,
        **kwargs,
    )


@contextlib.contextmanager
def whole_transaction_only() -> Iterator[None]:
    pauses.FAST_PAUSE = False
    try:
        yield
    finally:
        pauses.FAST_PAUSE = True


def fast(sent: list[str]) -> bool:
    return bool(sent) and sent[0].startswith("WITH paused AS (")


def outcome_rows(outcome: PauseOutcome) -> list[dict[str, Any]]:
    return [{c.name: getattr(a, c.name) for c in a.__table__.columns} for a in outcome.approvals]


async def test_the_common_pause_is_one_statement(database: Database) -> None:
    repo = await database.open()
    run = await open_run(repo)
    with statements() as sent:
        outcome = await pause(repo, run, [draft("apr_1")])
    assert len(sent) == 1 and fast(sent), sent  # no BEGIN, no COMMIT
    assert [a.id for a in outcome.approvals] == ["apr_1"]
    assert not outcome.resume_claimed and outcome.children == []
    stored = await repo.get_run(RUN_ID)
    assert stored is not None and stored.status == "paused" and stored.turn == 1


@pytest.mark.parametrize(
    ("channel", "agent"), [("C0OPS", None), ("D0PANE", None), ("C0OPS", "ops")]
)
async def test_it_writes_the_rows_the_whole_transaction_writes(
    database: Database, channel: str, agent: str | None
) -> None:
    """The same rows in every table, the audit trail's ids and order included, and the same
    approvals returned; a pane's channel (D…) gives rows with no approvers their reach."""
    async with postgres_schema() as other:
        repo = await database.open()
        with statements() as sent:
            run = await open_run(repo, channel=channel, agent=agent)
            del sent[:]
            outcome = await pause(repo, run, MIXED)
        assert len(sent) == 1 and fast(sent), sent

        whole_repo = await other.open()
        with statements() as sent, whole_transaction_only():
            whole_run = await open_run(whole_repo, channel=channel, agent=agent)
            del sent[:]
            whole = await pause(whole_repo, whole_run, MIXED)
        assert not fast(sent) and sent[0] == "BEGIN"

        assert outcome_rows(outcome) == outcome_rows(whole)
        mine, theirs = await dump(database), await dump(other)
        assert mine == theirs
        assert len(mine["approvals"]) == len(MIXED)
        assert [e["event"] for e in mine["audit_events"]][:3] == [
            "run_started",
            "run_paused",
            "approval_requested",
        ]
        assert mine["approval_reach"], "the scenario has reach rows to compare"


async def test_a_run_not_as_the_drive_knows_it_gets_the_whole_transaction(
    database: Database,
) -> None:
    """The fast statement's rows copy the caller's view of the run; when the row says
    otherwise (another requester continued it, say), the whole transaction's rows win."""
    repo = await database.open()
    run = await open_run(repo)
    await repo.execute_sql(
        "UPDATE runs SET requester = 'U0OTHER', turn = 3 WHERE id = :id", {"id": RUN_ID}
    )
    with statements() as sent:
        outcome = await pause(repo, run, [draft("apr_1")])
    assert fast(sent) and sent[1] == "BEGIN"  # tried, wrote nothing, then the whole one
    [approval] = outcome.approvals
    assert (approval.requester, approval.turn) == ("U0OTHER", 4)
    stored = await repo.approvals_for_run(RUN_ID)
    assert [(a.id, a.requester, a.turn) for a in stored] == [("apr_1", "U0OTHER", 4)]
    events = [e.event for e in await repo.audit_trail(run_id=RUN_ID)]
    assert events == ["run_started", "run_paused", "approval_requested"]


@pytest.mark.parametrize("action", ["pause", "stop"])
async def test_a_held_run_at_its_safe_point_raises_run_held_and_writes_nothing(
    database: Database, action: str
) -> None:
    repo = await database.open()
    run = await open_run(repo)
    requested = await repo.request_hold(RUN_ID, action=action, actor="U0OP", reason=None, now=NOW)
    assert requested.result == "requested"
    before = await dump(database)
    with statements() as sent, pytest.raises(RunHeld) as held:
        await pause(repo, run, [draft("apr_1")], stop_if_held=True)
    assert held.value.action == action
    assert fast(sent) and "BEGIN" in sent
    assert await dump(database) == before


async def test_a_stop_raises_run_held_even_past_the_safe_point(database: Database) -> None:
    repo = await database.open()
    run = await open_run(repo)
    await repo.request_hold(RUN_ID, action="stop", actor="U0OP", reason=None, now=NOW)
    before = await dump(database)
    with pytest.raises(RunHeld):
        await pause(repo, run, [draft("apr_1")])
    assert await dump(database) == before


async def test_a_pause_under_an_operators_pause_is_stored_held(database: Database) -> None:
    """Past the safe point, a Pause asked for keeps the paused run held: the whole
    transaction stores it (it also holds any sub-agents the pause starts)."""
    repo = await database.open()
    run = await open_run(repo)
    await repo.request_hold(RUN_ID, action="pause", actor="U0OP", reason=None, now=NOW)
    with statements() as sent:
        outcome = await pause(repo, run, [draft("apr_1")])
    assert fast(sent) and "BEGIN" in sent
    assert [a.id for a in outcome.approvals] == ["apr_1"]
    stored = await repo.get_run(RUN_ID)
    assert stored is not None and stored.status == "paused"
    assert await repo.hold_of(RUN_ID) is not None


async def test_a_lost_lease_raises_lease_lost_and_writes_nothing(database: Database) -> None:
    repo = await database.open()
    run = await open_run(repo)
    before = await dump(database)
    with statements() as sent, pytest.raises(LeaseLost):
        await pause(repo, run, [draft("apr_1")], worker="worker-b/t9")
    assert fast(sent) and "BEGIN" in sent
    assert await dump(database) == before


async def test_approvals_still_pending_are_retagged_by_the_whole_transaction(
    database: Database,
) -> None:
    repo = await database.open()
    run = await open_run(repo)
    first = await pause(repo, run, [draft("apr_1")])
    [earlier] = first.approvals
    # The run is driven again (taken over) and pauses with a new call beside the old one.
    await repo.execute_sql(
        "UPDATE runs SET status = 'running', lease_owner = :worker WHERE id = :id",
        {"worker": WORKER, "id": RUN_ID},
    )
    again = await repo.get_run(RUN_ID)
    with statements() as sent:
        outcome = await pause(repo, again, [draft("apr_2")], still_pending=[earlier.id])
    assert sent[0] == "BEGIN"  # not tried: only the whole transaction re-tags
    assert [a.id for a in outcome.approvals] == ["apr_2"]
    turns = {a.id: a.turn for a in await repo.approvals_for_run(RUN_ID)}
    assert turns == {"apr_1": 2, "apr_2": 2}


async def test_an_armed_callback_is_adopted_by_the_whole_transaction(database: Database) -> None:
    repo = await database.open()
    run = await open_run(repo)
    armed = ArmedCallback(
        id="apr_cb",
        run_id=RUN_ID,
        turn=1,
        tool_call_id="call_cb",
        tool_name="deploy",
        arguments={"service": "shop"},
        token_hash="f" * 64,
        expires_at=NOW + timedelta(hours=1),
    )
    await repo.arm_callback(armed, owner=WORKER, now=NOW)
    adopted = draft(
        "apr_cb", kind="callback", tool_name="deploy", approvers=[], adopt=True, reason="deploy"
    )
    with statements() as sent:
        outcome = await pause(repo, run, [adopted, draft("apr_1")])
    assert sent[0] == "BEGIN"
    assert sorted(a.id for a in outcome.approvals) == ["apr_1", "apr_cb"]
    statuses = {a.id: a.status for a in await repo.approvals_for_run(RUN_ID)}
    assert statuses == {"apr_1": "pending", "apr_cb": "pending"}


async def test_a_delegation_starts_its_child_in_the_whole_transaction(database: Database) -> None:
    repo = await database.open()
    run = await open_run(repo)
    child = ChildRun(
        run_id="run_child",
        agent="researcher",
        model_id="scripted",
        history=[{"role": "user", "content": "look it up"}],
        lease_owner="worker-a/t2",
    )
    delegation = draft("apr_d", kind="delegation", tool_name="delegate", approvers=[], child=child)
    with statements() as sent:
        outcome = await pause(repo, run, [delegation])
    assert sent[0] == "BEGIN"
    assert [c.id for c in outcome.children] == ["run_child"]
    started = await repo.get_run("run_child")
    assert started is not None and started.status == "running"
    assert started.parent_approval_id == "apr_d"


async def test_a_takeover_landing_while_the_pause_waits_for_the_run_wins(
    database: Database,
) -> None:
    """Another worker takes the run over while the statement waits for the run's lock: the
    UPDATE re-checks the row it waited for, writes nothing, and the caller hears LeaseLost."""
    repo = await database.open()
    run = await open_run(repo)
    await repo.approvals_for_run(RUN_ID)  # the pool's connection is open: no connect to wait on
    other = await connect(database)
    try:
        transaction = other.transaction()
        await transaction.start()
        await other.execute("UPDATE runs SET lease_owner = 'worker-b' WHERE id = $1", RUN_ID)
        pausing = asyncio.create_task(pause(repo, run, [draft("apr_1")]))
        await wait_for_lock(other)
        await transaction.commit()
        with pytest.raises(LeaseLost):
            await pausing
    finally:
        await other.close()
    assert await repo.approvals_for_run(RUN_ID) == []
    stored = await repo.get_run(RUN_ID)
    assert stored is not None and stored.status == "running"


@pytest.mark.parametrize("action", ["pause", "stop"])
async def test_a_hold_landing_while_the_pause_waits_is_seen_by_the_pause(
    database: Database, action: str
) -> None:
    """A hold asked for (as request_hold asks: the run's lock, then the hold) while the pause
    waits for the run's lock. After the wait PostgreSQL re-checks only the run's row, so a
    statement that read the hold in its snapshot missed it: a Stop left the run paused with
    live cards under a Stop nothing acts on. Now the run's newer row sends the one statement
    to the whole transaction, whose statements see the hold: a Stop ends the pause
    (RunHeld, nothing stored); a Pause stores it held. The same either way."""
    ends = []
    for fast_path in (True, False):
        async with postgres_schema() as db:
            repo = await db.open()
            run = await open_run(repo)
            await repo.approvals_for_run(RUN_ID)
            other = await connect(db)
            try:
                transaction = await begin_hold(other, RUN_ID, action, NOW)
                pauses.FAST_PAUSE = fast_path
                try:
                    pausing = asyncio.create_task(pause(repo, run, [draft("apr_1")]))
                    await wait_for_lock(other)
                    await transaction.commit()
                    try:
                        outcome = [a.status for a in (await pausing).approvals]
                    except RunHeld as held:
                        outcome = ["held", held.action]
                finally:
                    pauses.FAST_PAUSE = True
            finally:
                await other.close()
            stored = await repo.get_run(RUN_ID)
            assert stored is not None
            pending = [a.status for a in await repo.approvals_for_run(RUN_ID)]
            ends.append((stored.status, outcome, pending))
    expected = {
        "stop": ("running", ["held", "stop"], []),
        "pause": ("paused", ["pending"], ["pending"]),
    }[action]
    assert ends[0] == ends[1] == expected


async def wait_for_lock(other: asyncpg.Connection) -> None:
    """Until some session waits for a lock that ``other`` holds."""
    admin = await asyncpg.connect(_plain())
    try:
        for _ in range(500):
            blocked = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                other.get_server_pid(),
            )
            if blocked:
                return
            await asyncio.sleep(0.01)
    finally:
        await admin.close()
    raise AssertionError("the pause never waited for the run's lock")
