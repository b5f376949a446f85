"""Every resume is audited once, as ``run_resumed``, in the transaction that claims it
(``paused -> resuming``), whichever pause settled and whoever then drives the run: the
claimant, the claimant again from the database after its claim's lease ran out, or another
worker that took the run over because the claimant never started it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from freezegun import freeze_time

from bot.engine import Runner, RunOutcome
from storage.repository import Repository
from tests.bot.test_callbacks_engine import PAUSE_TOOLS, token_of
from tests.bot.test_engine import calls, executed, request
from tests.bot.test_retries_engine import RETRY_TOOLS
from tests.conftest import BASE_CONFIG, make_config
from tests.support import pause_tools

LEASE = timedelta(minutes=5)


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


def runner(repo: Repository, worker_id: str) -> Runner:
    tools = [*BASE_CONFIG["tools"], *PAUSE_TOOLS, *RETRY_TOOLS]
    return Runner(
        repo,
        make_config(tools=tools, public_url="https://bot.example.com/", run_lease=LEASE),
        worker_id=worker_id,
    )


async def trail(repo: Repository, run_id: str) -> list[str]:
    return [e.event for e in await repo.audit_trail(run_id=run_id)]


async def claim(claimant: Runner, kind: str, paused: RunOutcome) -> None:
    """Settle the run's only pause so that ``claimant`` claims its resume."""
    if kind == "retry":
        assert await claimant.due_retries() == [paused.run_id]
    elif kind == "callback":
        (url,) = pause_tools.PIPELINE
        done = await claimant.complete_callback(token_of(url), "deployed")
        assert done.status == "completed" and done.resume_claimed
    elif kind == "question":
        (question,) = paused.new_approvals
        answered = await claimant.answer(question.id, actor="U0REQUESTER", answer="eu-west")
        assert answered.resume_claimed
    else:
        (approval,) = paused.new_approvals
        decision = await claimant.decide(approval.id, actor="U0APPROVER1", approve=True)
        assert decision.resume_claimed


CALLS = {
    "retry": ("rate_limited", {"service": "api"}),
    "callback": ("start_deploy", {"service": "shop"}),
    "approval": ("restart_service", {"service": "web"}),
    "question": ("ask_user", {"question": "Which region?", "choices": ["eu-west", "us-east"]}),
}


@pytest.mark.parametrize("kind", CALLS)
async def test_a_claimed_resume_another_worker_takes_over_is_audited_once(
    repo: Repository, kind: str
) -> None:
    """The claimant stalls (a loaded machine) until its claim's lease runs out; another
    replica's sweeper takes the ``resuming`` run over and drives it. It was resumed: the
    take-over is audited besides, not instead."""
    with freeze_time("2026-11-30 10:00:00") as clock:
        claimant = runner(repo, "claimant")
        paused = await claimant.start(request(calls(CALLS[kind])))
        assert paused.status == "paused"
        clock.tick(timedelta(minutes=5))  # the retry's time
        await claim(claimant, kind, paused)
        stored = await repo.get_run(paused.run_id)
        assert stored is not None and stored.status == "resuming"

        clock.tick(LEASE + timedelta(seconds=1))
        [taken] = await runner(repo, "rescuer").recover_stale_runs()
    assert taken.status == "completed"
    events = await trail(repo, paused.run_id)
    assert events.count("run_resumed") == 1, " ".join(events)
    assert events.count("run_taken_over") == 1, " ".join(events)
    assert events.index("run_resumed") < events.index("run_taken_over"), " ".join(events)


@pytest.mark.parametrize("kind", CALLS)
async def test_a_claim_resumed_from_the_database_after_its_lease_ran_out_is_audited_once(
    repo: Repository, kind: str
) -> None:
    """The claimant's own ``resume`` comes after its claim's lease ran out (nobody took the
    run over): it starts the run from the database, and that is the same resume."""
    with freeze_time("2026-11-30 10:00:00") as clock:
        claimant = runner(repo, "claimant")
        paused = await claimant.start(request(calls(CALLS[kind])))
        clock.tick(timedelta(minutes=5))
        await claim(claimant, kind, paused)
        clock.tick(LEASE + timedelta(seconds=1))
        done = await claimant.resume(paused.run_id)
    assert done.status == "completed"
    events = await trail(repo, paused.run_id)
    assert events.count("run_resumed") == 1, " ".join(events)
    tool, arguments = CALLS[kind]
    if kind != "question":  # asking is no tool of ours
        assert executed(tool) == [arguments] * (2 if kind == "retry" else 1)
