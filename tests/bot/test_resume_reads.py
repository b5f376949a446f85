"""A resume this worker claimed with a decision answers the approvals of the run's turn from the
claim when they came with it (``DecisionOutcome.turn_approvals``: PostgreSQL's one-statement
decision of the turn's only approval), without reading them again; a claim that did not carry
them, or that this runner no longer keeps, still reads them, and the run completes the same.
Counted on the wire: what PostgreSQL's direct path sends (tests.support.statements)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.engine import Request, Runner, RunOutcome
from storage.repository import Repository
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.statements import statements

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def reads_of_the_turn(sent: list[str]) -> list[str]:
    """The ``approvals_for_turn`` reads among ``sent`` (storage.sql.approvals
    APPROVALS_FOR_TURN, as the direct path numbers its parameters)."""
    return [s for s in sent if s.endswith("FROM approvals WHERE run_id = $1 AND turn = $2")]


async def paused(runner: Runner, key: str, services: int = 1) -> RunOutcome:
    text = calls(*(("restart_service", {"service": f"svc{i}"}) for i in range(services)))
    outcome = await runner.start(Request(text=text, requester="U0REQUESTER", conversation_key=key))
    assert outcome.status == "paused"
    return outcome


async def approve_all(runner: Runner, outcome: RunOutcome) -> None:
    for approval in outcome.new_approvals:
        await runner.decide(approval.id, actor="U0APPROVER1", approve=True)


async def resumed(runner: Runner, run_id: str) -> tuple[RunOutcome, list[str]]:
    with statements() as sent:
        outcome = await runner.resume(run_id)
    return outcome, reads_of_the_turn(sent)


async def test_a_claimed_resume_of_a_one_approval_turn_reads_no_approvals(
    runner: Runner, repo: Repository
) -> None:
    outcome = await paused(runner, "one")
    await approve_all(runner, outcome)
    done, reads = await resumed(runner, outcome.run_id)
    assert done.status == "completed", done
    assert reads == []
    assert executed("restart_service") == [{"service": "svc0"}]
    [approval] = await repo.approvals_for_run(outcome.run_id)
    assert approval.status == "executed"


async def test_a_claimed_resume_of_a_two_approval_turn_reads_them(
    runner: Runner, repo: Repository
) -> None:
    outcome = await paused(runner, "two", services=2)
    await approve_all(runner, outcome)
    done, reads = await resumed(runner, outcome.run_id)
    assert done.status == "completed", done
    assert len(reads) == 1
    assert sorted(a["service"] for a in executed("restart_service")) == ["svc0", "svc1"]


async def test_a_resume_whose_claim_was_dropped_reads_them_and_completes(
    make_runner: Any, repo: Repository
) -> None:
    """The decider's runner is gone (another runner object of this worker resumes): its claim
    is not kept there, so the run starts from the database and its approvals are read."""
    decider = make_runner(worker_id="worker-a")
    outcome = await paused(decider, "dropped")
    await approve_all(decider, outcome)
    done, reads = await resumed(make_runner(worker_id="worker-a"), outcome.run_id)
    assert done.status == "completed", done
    assert len(reads) == 1
    assert executed("restart_service") == [{"service": "svc0"}]


async def test_a_denied_only_approval_is_answered_from_the_claim(
    runner: Runner, repo: Repository
) -> None:
    outcome = await paused(runner, "denied")
    [approval] = outcome.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=False, reason="not today")
    done, reads = await resumed(runner, outcome.run_id)
    assert done.status == "completed", done
    assert reads == []
    assert executed("restart_service") == []
    run = await repo.get_run(outcome.run_id)
    assert run is not None and "not today" in str(run.history)


async def test_a_whole_cycle_sends_seven_statements_and_no_transaction(runner: Runner) -> None:
    """docs/benchmarks.md's round trips per PostgreSQL cycle, as the direct path sends them:
    the new run, the pause, the decision's read of the approval, the decision with its claim,
    ``executing``, ``executed`` and the run's end, each alone in autocommit (one round trip
    each, no BEGIN or COMMIT); the turn's approvals come with the claim."""
    with statements() as sent:
        outcome = await paused(runner, "cycle")
        await approve_all(runner, outcome)
        done = await runner.resume(outcome.run_id)
    assert done.status == "completed", done
    assert len(sent) == 7, "\n".join(s[:80] for s in sent)
    assert not [s for s in sent if s.split()[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK")]
