"""Races between replicas on one database: two decisions, or a decision and an expiry, landing
together on the last approvals of a run. Each trial uses independent connections, as replicas
would; on PostgreSQL (READ COMMITTED) these are the races that used to strand runs."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Any

from bot.clock import utcnow
from bot.engine import Request, Runner
from bot.policy import Decision
from storage.repository import Repository
from tests.conftest import Database, make_config
from tests.support import ops_tools

TRIALS = 50


def paused_run(run_id: str, now: datetime) -> dict[str, Any]:
    return {
        "id": run_id,
        "conversation_key": f"key-{run_id}",
        "team_id": "T1",
        "channel": "C0OPS",
        "thread_ts": "1.0",
        "requester": "U0REQUESTER",
        "status": "paused",
        "model_id": "scripted",
        "history": [],
        "turn": 1,
        "created_at": now,
        "updated_at": now,
    }


def pending_approval(
    approval_id: str, run_id: str, now: datetime, *, expires_at: datetime | None = None
) -> dict[str, Any]:
    return {
        "id": approval_id,
        "run_id": run_id,
        "turn": 1,
        "tool_call_id": f"tc-{approval_id}",
        "tool_name": "restart_service",
        "arguments": {"service": approval_id},
        "payload_hash": "0" * 64,
        "status": "pending",
        "requester": "U0REQUESTER",
        "team_id": "T1",
        "channel": "C0OPS",
        "thread_ts": "1.0",
        "approvers": [],
        "allow_self_approval": False,
        "on_expiry": "deny",
        "created_at": now,
        "expires_at": expires_at or now + timedelta(hours=1),
    }


async def seed_paused_runs(
    repo: Repository, now: datetime, *, first_due: bool = False
) -> list[tuple[str, str, str]]:
    """TRIALS paused runs, each waiting on two approvals: (run, first, second)."""
    trials = [(f"run_{i:03d}", f"apr_{i:03d}_a", f"apr_{i:03d}_b") for i in range(TRIALS)]
    due = now - timedelta(seconds=1) if first_due else None
    await repo.insert_rows_for_benchmark(
        runs=[paused_run(run_id, now) for run_id, _, _ in trials],
        approvals=[
            approval
            for run_id, first, second in trials
            for approval in (
                pending_approval(first, run_id, now, expires_at=due),
                pending_approval(second, run_id, now),
            )
        ],
    )
    return trials


async def decide(repo: Repository, approval_id: str, worker: str, now: datetime) -> bool:
    outcome = await repo.decide(
        approval_id,
        actor="U0APPROVER1",
        approve=True,
        reason=None,
        worker=worker,
        lease_until=now + timedelta(minutes=5),
        now=now,
    )
    assert outcome is not None
    return outcome.resume_claimed


async def expire(repo: Repository, approval_id: str, worker: str, now: datetime) -> bool:
    outcome = await repo.expire(
        approval_id, worker=worker, lease_until=now + timedelta(minutes=5), now=now
    )
    assert outcome is not None
    return outcome.resume_claimed


async def test_two_last_decisions_at_once_claim_the_resume_exactly_once(
    database: Database,
) -> None:
    replica_a, replica_b = await database.open(), await database.open()
    now = utcnow()
    trials = await seed_paused_runs(replica_a, now)
    for run_id, first, second in trials:
        claims = await asyncio.gather(
            decide(replica_a, first, "worker-a", now), decide(replica_b, second, "worker-b", now)
        )
        assert sorted(claims) == [False, True], f"{run_id}: claims {claims}"
        run = await replica_a.get_run(run_id)
        assert run is not None and run.status == "resuming"
        assert run.lease_owner == ("worker-a" if claims[0] else "worker-b")


async def test_a_decision_racing_the_expiry_of_its_sibling_claims_the_resume_once(
    database: Database,
) -> None:
    replica_a, replica_b = await database.open(), await database.open()
    now = utcnow()
    trials = await seed_paused_runs(replica_a, now, first_due=True)
    for run_id, due, second in trials:
        claims = await asyncio.gather(
            expire(replica_a, due, "sweeper", now), decide(replica_b, second, "clicker", now)
        )
        assert sorted(claims) == [False, True], f"{run_id}: claims {claims}"
        run = await replica_a.get_run(run_id)
        assert run is not None and run.status == "resuming"


async def test_stranded_runs_are_found_and_claimed_by_one_replica(database: Database) -> None:
    replica_a, replica_b = await database.open(), await database.open()
    now = utcnow()
    await replica_a.insert_rows_for_benchmark(
        runs=[paused_run("run_stranded", now), paused_run("run_waiting", now)],
        approvals=[
            pending_approval("apr_decided", "run_stranded", now) | {"status": "approved"},
            pending_approval("apr_decided_too", "run_waiting", now) | {"status": "denied"},
            pending_approval("apr_pending", "run_waiting", now),
        ],
    )
    assert await replica_a.stranded_runs() == ["run_stranded"]

    async def claim(repo: Repository, worker: str) -> bool:
        return await repo.claim_stranded_run(
            "run_stranded", worker=worker, lease_until=now + timedelta(minutes=5), now=now
        )

    claims = await asyncio.gather(claim(replica_a, "sweeper-a"), claim(replica_b, "sweeper-b"))
    assert sorted(claims) == [False, True]
    assert await replica_a.stranded_runs() == []
    assert not await replica_b.claim_stranded_run(
        "run_waiting", worker="sweeper-b", lease_until=now + timedelta(minutes=5), now=now
    ), "a run with an approval still pending is not stranded"
    run = await replica_a.get_run("run_stranded")
    assert run is not None and run.status == "resuming"
    events = [e.event for e in await replica_a.audit_trail(run_id="run_stranded")]
    assert events == ["run_resumed", "stranded_resume_claimed"], "audited once, by the winner"


async def test_two_replicas_clicking_the_last_two_approvals_resume_the_run_once(
    database: Database,
) -> None:
    """The same race through the runner, as two replicas' clicks: every run completes and
    each approved call runs exactly once."""
    config = make_config()
    replica_a = Runner(await database.open(), config, worker_id="replica-a")
    replica_b = Runner(await database.open(), config, worker_id="replica-b")
    trials = 20
    for i in range(trials):
        text = json.dumps(
            {
                "tool_calls": [
                    {"name": "restart_service", "arguments": {"service": f"web{i}"}},
                    {"name": "restart_service", "arguments": {"service": f"api{i}"}},
                ]
            }
        )
        paused = await replica_a.start(
            Request(text=text, requester="U0REQUESTER", conversation_key=f"trial-{i}")
        )
        first, second = paused.new_approvals
        decisions: list[Decision] = await asyncio.gather(
            replica_a.decide(first.id, actor="U0APPROVER1", approve=True),
            replica_b.decide(second.id, actor="U0APPROVER2", approve=True),
        )
        claimed = [d.resume_claimed for d in decisions]
        assert sorted(claimed) == [False, True], f"trial {i}: claims {claimed}"
        resumer = replica_a if claimed[0] else replica_b
        assert (await resumer.resume(paused.run_id)).status == "completed"
    ran = sorted(args["service"] for _, args in ops_tools.EXECUTED)
    assert ran == sorted(f"{name}{i}" for i in range(trials) for name in ("web", "api"))
