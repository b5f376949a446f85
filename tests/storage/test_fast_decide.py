"""PostgreSQL's one-statement decision (storage.sql.decisions, ``DecisionStore.decide``).

The common Approve or Deny, and the resume claim it allows, go out as ONE statement in
autocommit: one round trip instead of five. It must write exactly what the full transaction
writes, change nothing when it is not the common case (the full transaction then decides, as
before), and never strand a run nor claim its resume twice when sibling approvals of one run
are decided at the same time: its snapshot predates the run's lock it takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from bot.clock import utcnow
from bot.engine import Request, Runner
from bot.policy import AlreadyDecided, ApprovalNotFound, NotAllowed, StaleCopy
from storage.hashes import UNEDITED, fingerprint
from storage.models import Approval
from storage.records import DecisionOutcome, GrantDraft
from storage.repository import Repository
from storage.sql import APPROVAL_COLUMNS
from storage.sql import decisions as sql_decisions
from storage.stores import decisions
from tests.conftest import BASE_CONFIG, POSTGRES_URL, Database, make_config
from tests.support.scripted_model import calls
from tests.support.statements import statements

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

WORKER = "worker-a/t1"


async def ask(runner: Runner, key: str, services: int = 1) -> list[Approval]:
    """A paused run waiting on ``services`` approvals (restart_service), oldest first."""
    text = calls(*(("restart_service", {"service": f"svc{i}"}) for i in range(services)))
    paused = await runner.start(Request(text=text, requester="U0REQUESTER", conversation_key=key))
    assert paused.status == "paused"
    return sorted(paused.new_approvals, key=lambda a: a.arguments["service"])


async def decide(
    repo: Repository, approval_id: str, now: datetime, *, approve: bool = True, **kwargs: Any
) -> DecisionOutcome | None:
    return await repo.decide(
        approval_id,
        actor=kwargs.pop("actor", "U0APPROVER1"),
        approve=approve,
        reason=kwargs.pop("reason", None),
        worker=WORKER,
        lease_until=now + timedelta(minutes=5),
        now=now,
        **kwargs,
    )


def quorum(min_approvals: int) -> Any:
    policy = {"approvers": ["U0APPROVER1", "U0APPROVER2"], "min_approvals": min_approvals}
    return make_config(policies={**BASE_CONFIG["policies"], "restart_service": policy})


def values(row: object) -> dict[str, Any]:
    return {k: v for k, v in vars(row).items() if not k.startswith("_")}


async def resumes(repo: Repository, run_id: str) -> int:
    return sum(e.event == "run_resumed" for e in await repo.audit_trail(run_id=run_id))


# -- one round trip --------------------------------------------------------------------


@pytest.mark.parametrize("shown", [None, "fingerprint", UNEDITED], ids=["no-copy", "fp", "old"])
async def test_an_approve_is_one_statement_and_claims_the_resume(
    runner: Runner, repo: Repository, shown: str | None
) -> None:
    [approval] = await ask(runner, "one")
    if shown == "fingerprint":
        shown = fingerprint(approval.payload_hash)
    now = utcnow()
    with statements() as sent:
        outcome = await decide(repo, approval.id, now, shown=shown, actor_name="Ann")
    assert len(sent) == 1, sent
    assert outcome is not None and outcome.resume_claimed and not outcome.stale
    assert outcome.approval.status == "approved" and outcome.approval.decided_by_name == "Ann"
    assert outcome.run is not None and outcome.run.status == "resuming"
    assert outcome.run.lease_owner == WORKER
    assert values(await repo.get_run(approval.run_id)) == values(outcome.run)


async def test_a_deny_is_one_statement_and_claims_the_resume(
    runner: Runner, repo: Repository
) -> None:
    [approval] = await ask(runner, "one")
    with statements() as sent:
        outcome = await decide(repo, approval.id, utcnow(), approve=False, reason="no")
    assert len(sent) == 1, sent
    assert outcome is not None and outcome.resume_claimed
    assert outcome.approval.status == "denied" and outcome.approval.reason == "no"


# -- the turn's approvals, with the claim ---------------------------------------------


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "deny"])
async def test_the_claim_carries_the_turns_only_approval(
    runner: Runner, repo: Repository, approve: bool
) -> None:
    """The resumed drive answers the approvals of the run's turn: when the decided one is the
    only one, the claim carries it, as decided, and the drive reads none (bot.engine.drive)."""
    [approval] = await ask(runner, "alone")
    outcome = await decide(repo, approval.id, utcnow(), approve=approve)
    assert outcome is not None and outcome.resume_claimed and outcome.run is not None
    assert outcome.turn_approvals is not None
    [carried] = outcome.turn_approvals
    assert values(carried) == values(outcome.approval)
    assert [values(a) for a in await repo.approvals_for_turn(outcome.run.id, outcome.run.turn)] == [
        values(carried)
    ]


async def test_the_claim_carries_no_approvals_when_the_turn_has_two(
    runner: Runner, repo: Repository
) -> None:
    """A sibling decided earlier is not in the last decision's rows: the drive reads them all."""
    first, second = await ask(runner, "two", 2)
    now = utcnow()
    earlier = await decide(repo, first.id, now, approve=False)
    assert earlier is not None and not earlier.resume_claimed
    assert earlier.turn_approvals is None
    outcome = await decide(repo, second.id, now)
    assert outcome is not None and outcome.resume_claimed
    assert outcome.turn_approvals is None


async def test_the_full_transaction_carries_no_approvals(
    runner: Runner, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decisions, "FAST_DECIDE", False)
    [approval] = await ask(runner, "full")
    outcome = await decide(repo, approval.id, utcnow())
    assert outcome is not None and outcome.resume_claimed
    assert outcome.turn_approvals is None


# -- the same rows as the full transaction ---------------------------------------------


async def rows_of(repo: Repository, run_id: str) -> dict[str, Any]:
    """What a decision wrote for the run, without what differs between two runs by birth."""
    run = await repo.get_run(run_id)
    assert run is not None
    approvals = await repo.approvals_for_run(run_id)
    number = {a.id: i for i, a in enumerate(approvals)}
    born = {"id", "run_id", "tool_call_id", "created_at", "expires_at", "thread_ts"}
    return {
        "run": {
            k: v
            for k, v in values(run).items()
            if k not in {"id", "conversation_key", "created_at", "history"}
        },
        "approvals": [{k: v for k, v in values(a).items() if k not in born} for a in approvals],
        # The trail in id order: the decision's own rows whole, the earlier ones by name.
        "audit": [
            (e.event, e.actor, number.get(e.approval_id or ""), e.detail, e.at)
            if e.event in DECISION_EVENTS
            else e.event
            for e in await repo.audit_trail(run_id=run_id)
        ],
    }


DECISION_EVENTS = ("approval_approved", "approval_denied", "approval_vote", "run_resumed")
SCENARIOS = {
    "approve": [(0, True, None)],
    "deny": [(0, False, "not now")],
    "siblings": [(0, True, "fine"), (1, False, None)],
    "siblings-last-approves": [(1, False, None), (0, True, None)],
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_the_one_statement_writes_what_the_full_transaction_writes(
    runner: Runner, repo: Repository, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = SCENARIOS[scenario]
    services = max(index for index, _, _ in steps) + 1
    now = utcnow()
    written = {}
    for fast in (True, False):
        monkeypatch.setattr(decisions, "FAST_DECIDE", fast)
        approvals = await ask(runner, f"{scenario}-{fast}", services)
        outcomes = []
        for index, approve, reason in steps:
            with statements() as sent:
                outcome = await decide(
                    repo, approvals[index].id, now, approve=approve, reason=reason, actor_name="A"
                )
            assert outcome is not None
            outcomes.append(outcome.resume_claimed)
            if fast and outcome.resume_claimed:
                assert len(sent) == 1, sent
        written[fast] = (outcomes, await rows_of(repo, approvals[0].run_id))
    assert written[True] == written[False]
    assert written[True][0][-1] is True  # the last decision claimed the resume


# -- not the common case: nothing changed, the full transaction decides ---------------


async def test_a_stale_copy_is_refused_as_before(runner: Runner, repo: Repository) -> None:
    [approval] = await ask(runner, "stale")
    now = utcnow()
    for shown in (fingerprint("0" * 64), "not a fingerprint"):
        outcome = await decide(repo, approval.id, now, shown=shown)
        assert outcome is not None and outcome.stale and not outcome.resume_claimed
    # An edited call: a copy of the previous release showed the arguments as proposed.
    await repo.execute_sql(
        "UPDATE approvals SET edited_arguments = :edited WHERE id = :id",
        {"edited": json.dumps({"service": "other"}), "id": approval.id},
    )
    outcome = await decide(repo, approval.id, now, shown=UNEDITED)
    assert outcome is not None and outcome.stale
    current = await repo.get_approval(approval.id)
    assert current is not None and current.status == "pending"
    events = [e.event for e in await repo.audit_trail(approval_id=approval.id)]
    assert events == ["approval_requested"]
    # The current fingerprint decides, in one statement.
    with statements() as sent:
        outcome = await decide(repo, approval.id, now, shown=fingerprint(approval.payload_hash))
    assert len(sent) == 1 and outcome is not None and outcome.resume_claimed


async def test_settled_and_expired_approvals_are_not_decided(
    runner: Runner, repo: Repository
) -> None:
    [approval] = await ask(runner, "settled")
    now = utcnow()
    assert await decide(repo, approval.id, now) is not None
    assert await decide(repo, approval.id, now, approve=False) is None
    [late] = await ask(runner, "late")
    assert await decide(repo, late.id, late.expires_at) is None
    assert await decide(repo, "apr_missing", now) is None
    current = await repo.get_approval(late.id)
    assert current is not None and current.status == "pending"


async def test_a_quorum_vote_and_a_quorum_deny_take_the_full_transaction(
    make_runner: Any, repo: Repository
) -> None:
    runner = make_runner(worker_id="worker-a", config=quorum(2))
    [approval] = await ask(runner, "quorum")
    now = utcnow()
    vote = await decide(repo, approval.id, now)
    assert vote is not None and vote.approval.status == "pending" and not vote.resume_claimed
    denied = await decide(repo, approval.id, now, approve=False, actor="U0APPROVER2")
    assert denied is not None and denied.approval.status == "denied" and denied.resume_claimed
    assert await repo.approve_voters(approval.id) == ["U0APPROVER1"]
    events = [e.event for e in await repo.audit_trail(approval_id=approval.id)]
    assert events == ["approval_requested", "approval_vote", "approval_denied"]


@pytest.mark.parametrize("case", ["no-claim", "grant", "voters"])
async def test_what_the_one_statement_does_not_cover_is_decided_in_full(
    runner: Runner, repo: Repository, case: str
) -> None:
    [approval] = await ask(runner, case)
    kwargs: dict[str, Any] = {
        "no-claim": {"claim": False},
        "grant": {"grant": GrantDraft(id="grt_fast", duration=timedelta(hours=1))},
        "voters": {"not_allowed_voters": ["U0GONE"]},
    }[case]
    with statements() as sent:
        outcome = await decide(repo, approval.id, utcnow(), **kwargs)
    assert sent[0] == "BEGIN"
    assert outcome is not None and outcome.approval.status == "approved"
    assert outcome.resume_claimed is (case != "no-claim")
    if case == "grant":
        assert [g.id for g in await repo.list_grants(now=utcnow())] == ["grt_fast"]


async def test_a_held_run_is_decided_and_stays_paused(runner: Runner, repo: Repository) -> None:
    [approval] = await ask(runner, "held")
    now = utcnow()
    held = await repo.request_hold(
        approval.run_id, action="pause", actor="U0OPS", reason=None, now=now
    )
    assert held.result == "held", held
    outcome = await decide(repo, approval.id, now)
    assert outcome is not None and outcome.approval.status == "approved"
    assert not outcome.resume_claimed
    run = await repo.get_run(approval.run_id)
    assert run is not None and run.status == "paused"


async def test_a_run_locked_by_another_transaction_is_decided_after_it(
    runner: Runner, repo: Repository
) -> None:
    """The lock is taken with SKIP LOCKED: a held lock makes the one statement change
    nothing, and the full transaction waits for it, then sees what its holder committed (here
    the sibling's decision, so this one claims the resume)."""
    first, second = await ask(runner, "locked", 2)
    with statements() as sent:
        async with locked_run(repo, first.run_id) as admin:
            await admin.execute("UPDATE approvals SET status = 'denied' WHERE id = $1", second.id)
            deciding = asyncio.ensure_future(decide(repo, first.id, utcnow()))
            await asyncio.sleep(0.3)
            assert not deciding.done()
        outcome = await deciding
    # The one statement changed nothing and the full transaction followed it.
    fast = next(i for i, text in enumerate(sent) if text.startswith("WITH run AS"))
    assert sent[fast + 1] == "BEGIN", sent
    assert outcome is not None and outcome.resume_claimed
    assert await resumes(repo, first.run_id) == 1


async def test_a_decision_whose_snapshot_missed_its_siblings_decision_claims_after_it(
    runner: Runner, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hazard made certain: the statement here WAITS for the run's lock (the real one
    skips a held lock, which makes the hazard rare, not impossible: a sibling can commit
    between the statement's snapshot and its lock). The sibling's decision commits while it
    waits, having seen this approval pending (so it claimed nothing); this statement's
    snapshot still shows the sibling pending, so it claims nothing either. The claim that
    follows a decision that did not claim is what resumes the run."""
    real = sql_decisions.STATEMENTS[None]
    waiting = real.replace(" SKIP LOCKED", "")
    assert waiting != real
    monkeypatch.setitem(sql_decisions.STATEMENTS, None, waiting)
    first, second = await ask(runner, "stale snapshot", 2)
    async with locked_run(repo, first.run_id) as admin:
        deciding = asyncio.ensure_future(decide(repo, first.id, utcnow()))
        await asyncio.sleep(0.3)
        assert not deciding.done()
        await admin.execute("UPDATE approvals SET status = 'denied' WHERE id = $1", second.id)
    outcome = await deciding
    assert outcome is not None and outcome.approval.status == "approved"
    assert outcome.resume_claimed
    assert await resumes(repo, first.run_id) == 1


async def test_a_decision_whose_snapshot_missed_a_new_pause_does_not_claim(
    runner: Runner, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same wait, while the run's row changes and a new approval of it appears (as a pause
    writes them): the snapshot shows neither, so the statement must not claim the resume on
    it; the claim after it sees the new approval pending and claims nothing either."""
    real = sql_decisions.STATEMENTS[None]
    monkeypatch.setitem(sql_decisions.STATEMENTS, None, real.replace(" SKIP LOCKED", ""))
    [approval] = await ask(runner, "new pause")
    copy = ", ".join(
        {"id": "'apr_new'", "tool_call_id": "'tc_new'"}.get(name, name)
        for name in APPROVAL_COLUMNS.names
    )
    async with locked_run(repo, approval.run_id) as admin:
        deciding = asyncio.ensure_future(decide(repo, approval.id, utcnow()))
        await asyncio.sleep(0.3)
        assert not deciding.done()
        await admin.execute("UPDATE runs SET turn = turn + 1 WHERE id = $1", approval.run_id)
        await admin.execute(
            f"INSERT INTO approvals ({APPROVAL_COLUMNS.sql}) SELECT {copy} FROM approvals "
            "WHERE id = $1",
            approval.id,
        )
    outcome = await deciding
    assert outcome is not None and outcome.approval.status == "approved"
    assert not outcome.resume_claimed
    run = await repo.get_run(approval.run_id)
    assert run is not None and run.status == "paused"


@contextlib.asynccontextmanager
async def locked_run(repo: Repository, run_id: str) -> AsyncIterator[asyncpg.Connection]:
    """A transaction of another connection holding the run's lock, committed on leaving."""
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        schema = await repo.database.run(_search_path, decisions.READ_ONE)
        await admin.execute(f"SET search_path TO {schema}")
        async with admin.transaction():
            await admin.execute("SELECT id FROM runs WHERE id = $1 FOR NO KEY UPDATE", run_id)
            yield admin
    finally:
        await admin.close()


def _search_path(tx: Any) -> str:
    row = tx.one("SELECT current_setting('search_path')")
    assert row is not None
    return str(row[0])


# -- siblings decided at once ----------------------------------------------------------


async def test_siblings_decided_at_once_claim_the_resume_exactly_once(
    database: Database, runner: Runner
) -> None:
    """Two approvals of one run decided at the same time on two connections, 50 times: one
    claim each time. The one statement's "nothing else pending" reads a snapshot taken before
    it locks the run, so a sibling decision that committed in between (and saw this one
    pending) is missed; the claim that follows such a decision is what keeps the run from
    being stranded."""
    one, other = await database.open(), await database.open()
    followed = 0
    for round_ in range(50):
        first, second = await ask(runner, f"race{round_}", 2)
        now = utcnow()
        with statements() as sent:
            outcomes = await asyncio.gather(
                decide(one, first.id, now, approve=round_ % 3 != 0),
                decide(other, second.id, now, actor="U0APPROVER2"),
            )
        followed += sum(s.startswith("SELECT id FROM runs") for s in sent)
        assert all(o is not None for o in outcomes)
        assert sum(o.resume_claimed for o in outcomes if o is not None) == 1, round_
        run = await one.get_run(first.run_id)
        assert run is not None and run.status == "resuming", round_
        assert await resumes(one, first.run_id) == 1, round_
    print(f"claims after a decision that did not claim: {followed}")


# -- Runner.decide: the read its checks need (bot.policy), then one statement -----------


async def test_runner_decide_reads_checks_and_decides_in_one_statement(
    runner: Runner, repo: Repository
) -> None:
    [approval] = await ask(runner, "runner")
    for actor, groups, refusal in (
        ("U0REQUESTER", [], NotAllowed),
        ("U0STRANGER", ["S0OPS"], NotAllowed),
        ("U0STRANGER", [], NotAllowed),
        ("U0APPROVER1", [], StaleCopy),
    ):
        with pytest.raises(refusal):
            await runner.decide(
                approval.id,
                actor=actor,
                actor_groups=groups,
                approve=True,
                shown=fingerprint("1" * 64),
            )
    with pytest.raises(ApprovalNotFound):
        await runner.decide("apr_nothing", actor="U0APPROVER1", approve=True)
    with statements() as sent:
        decision = await runner.decide(
            approval.id, actor="U0APPROVER2", approve=True, shown=fingerprint(approval.payload_hash)
        )
    # Who may decide is bot.policy's (it needs the approval read); the decision is then one.
    assert len(sent) == 2 and sent[0].startswith("SELECT"), sent
    assert decision.resume_claimed and decision.approval.decided_by == "U0APPROVER2"
    with pytest.raises(AlreadyDecided):
        await runner.decide(approval.id, actor="U0APPROVER1", approve=False)
    resumed = await runner.resume(approval.run_id)
    assert resumed.status == "completed"
