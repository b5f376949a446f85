"""Sub-agents through the engine (issue 20 section 1), on SQLite and PostgreSQL: a parent's
delegate calls pause on ``delegation`` rows, their children run concurrently, and the parent
resumes once, when all have ended, with each child's answer as its call's result."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bot.config import Config
from bot.engine import Runner, RunOutcome
from storage.models import Run
from storage.repository import Repository
from tests.bot.test_engine import request, tool_results_in
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import ScriptedModel

AGENTS = {
    "researcher": {
        "description": "looks things up, read-only",
        "tools": ["tests.support.ops_tools:get_status"],
    },
    "operator": {
        "description": "restarts services",
        "tools": ["tests.support.ops_tools:restart_service"],
    },
}


def agents_config(**overrides: Any) -> Config:
    return make_config(agents=overrides.pop("agents", AGENTS), **overrides)


def delegating(*pairs: tuple[str, str]) -> str:
    """A scripted response that delegates each (agent, task)."""
    return json.dumps(
        {
            "tool_calls": [
                {"name": "delegate", "arguments": {"agent": agent, "task": task}}
                for agent, task in pairs
            ]
        }
    )


async def follow(runner: Runner, outcome: RunOutcome) -> list[RunOutcome]:
    """What a caller does with an outcome: drive its children concurrently, resume the parent
    a child's end claimed; every outcome, in order."""
    seen = [outcome]
    if outcome.children:
        ended = await asyncio.gather(*(runner.drive(child) for child in outcome.children))
        for child in ended:
            seen += await follow(runner, child)
    if outcome.parent_resume is not None:
        seen += await follow(runner, await runner.resume(outcome.parent_resume))
    return seen


async def drive_step_beside_delegate(
    repo: Repository, during_step: Callable[[Runner, str], Awaitable[None]]
) -> tuple[Runner, Run, RunOutcome]:
    """One response calling ``step`` (tests.support.hold_tools) beside ``delegate``, with
    ``during_step(runner, run_id)`` run while the step runs: an operator's Pause or Stop
    landing in the middle of the response."""
    from tests.support import hold_tools

    config = agents_config(tools=[*BASE_CONFIG["tools"], "tests.support.hold_tools:step"])
    runner = Runner(repo, config, worker_id="worker-a")
    text = json.dumps(
        {
            "tool_calls": [
                {"name": "step", "arguments": {"n": 1}},
                {"name": "delegate", "arguments": {"agent": "researcher", "task": "t"}},
            ]
        }
    )
    run = await runner.open(request(text))

    async def on_step(n: int) -> None:
        await during_step(runner, run.id)

    hold_tools.ON_STEP = on_step
    try:
        outcome = await runner.drive(run)
    finally:
        hold_tools.ON_STEP = None
    return runner, run, outcome


async def resumes_of(repo: Repository, run_id: str) -> int:
    return sum(1 for e in await repo.audit_trail(run_id=run_id) if e.event == "run_resumed")


async def test_two_children_run_concurrently_and_the_parent_resumes_once_with_both(
    repo: Repository,
) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    started = await runner.start(
        request(delegating(("researcher", "status of shop"), ("operator", "status of cart")))
    )
    assert started.status == "paused"
    assert [a.kind for a in started.new_approvals] == ["delegation", "delegation"]
    assert len(started.children) == 2
    assert {c.agent for c in started.children} == {"researcher", "operator"}
    assert all(c.parent_run_id == started.run_id for c in started.children)

    outcomes = await follow(runner, started)
    parent = [o for o in outcomes if o.run_id == started.run_id]
    assert [o.status for o in parent] == ["paused", "completed"], "resumed exactly once"
    assert tool_results_in(ScriptedModel.seen[-1]) == {"delegate": "You said: status of cart"}
    final = await repo.get_run(started.run_id)
    assert final is not None and final.status == "completed"
    assert "You said: status of shop" in (final.answer or "")
    assert "You said: status of cart" in (final.answer or "")
    assert await resumes_of(repo, started.run_id) == 1
    children = await repo.children_of(started.run_id)
    assert [c.status for c in children] == ["completed", "completed"]
    # The child's prompt is the task as given, after its agent's system prompt.
    child = children[0]
    assert child.history[0]["role"] == "system" and "researcher" in json.dumps(child.history[0])
    assert child.history[1]["parts"][0]["text"] in ("status of shop", "status of cart")


async def test_a_childs_gated_call_waits_for_its_approval_then_the_parent_finishes(
    repo: Repository,
) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    started = await runner.start(request(delegating(("operator", task))))
    (child,) = started.children
    paused = await runner.drive(child)
    assert paused.status == "paused"
    (approval,) = paused.new_approvals
    assert approval.kind == "approval" and approval.tool_name == "restart_service"
    assert approval.run_id == child.id and approval.requester == "U0REQUESTER"
    assert executed("restart_service") == []

    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    outcomes = await follow(runner, await runner.resume(child.id))
    assert executed("restart_service") == [{"service": "shop"}]
    final = await repo.get_run(started.run_id)
    assert final is not None and final.status == "completed"
    assert "restarted shop" in (final.answer or "")
    assert [o.status for o in outcomes if o.run_id == started.run_id] == ["completed"]


async def test_a_failed_child_is_the_parents_result(repo: Repository) -> None:
    broken = {"researcher": {"description": "looks things up", "model": "no-such-model"}}
    runner = Runner(repo, agents_config(agents=broken), worker_id="worker-a")
    started = await runner.start(request(delegating(("researcher", "status"))))
    outcomes = await follow(runner, started)
    assert [o.status for o in outcomes] == ["paused", "failed", "completed"]
    (row,) = await repo.approvals_for_run(started.run_id)
    assert row.kind == "delegation" and row.status == "completed"
    assert (row.result or "").startswith("failed: Stopped: unknown model")
    assert tool_results_in(ScriptedModel.seen[-1])["delegate"] == row.result


@pytest.mark.parametrize(
    ("depth", "to", "refused"),
    [
        # At the limit the tool is not offered: a model calling it anyway hears so from llm.
        (1, "operator", 'tool "delegate" does not exist'),
        (2, "researcher", "researcher is already working up this chain (main -> researcher)"),
    ],
)
async def test_depth_limit_and_cycles_are_refused_with_a_tool_error(
    repo: Repository, depth: int, to: str, refused: str
) -> None:
    runner = Runner(repo, agents_config(max_delegation_depth=depth), worker_id="worker-a")
    # The researcher is asked to delegate again: past the depth limit, or to itself.
    inner = delegating((to, "again"))
    started = await runner.start(request(delegating(("researcher", inner))))
    await follow(runner, started)
    (row,) = await repo.approvals_for_run(started.run_id)
    assert refused in (row.result or "")
    (child,) = await repo.children_of(started.run_id)
    assert await repo.children_of(child.id) == [], "nothing was delegated"


async def test_unknown_agent_is_a_tool_error_and_delegate_false_offers_no_tool(
    repo: Repository,
) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    outcome = await runner.start(request(delegating(("nobody", "x"))))
    assert outcome.status == "completed" and not outcome.children
    assert "there is no agent 'nobody'" in (outcome.answer or "")
    assert "delegate" in {t.name for t in runner.tools}
    off = Runner(repo, agents_config(delegate=False), worker_id="worker-a")
    assert "delegate" not in {t.name for t in off.tools}
    plain = Runner(repo, make_config(), worker_id="worker-a")
    assert "delegate" not in {t.name for t in plain.tools}
    (tool,) = [t for t in runner.tools if t.name == "delegate"]
    assert "- researcher: looks things up, read-only" in (tool.description or "")
    assert "- operator: restarts services" in (tool.description or "")


async def test_stopping_a_parent_stops_its_children(repo: Repository) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    started = await runner.start(request(delegating(("operator", task), ("researcher", "status"))))
    first, second = started.children
    await runner.drive(first)  # paused on its approval; the second has not run yet
    await runner.stop_run(started.run_id, actor="U0REQUESTER")
    parent = await repo.get_run(started.run_id)
    assert parent is not None and parent.status == "cancelled"
    children = {c.id: c for c in await repo.children_of(started.run_id)}
    assert children[first.id].status == "cancelled"
    # The working one stops at its next safe point.
    outcome = await runner.drive(second)
    assert outcome.status == "cancelled"
    assert await repo.unfinished_children(started.run_id) == []


async def test_a_stopped_child_is_the_parents_result_and_the_parent_resumes_once(
    repo: Repository,
) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    started = await runner.start(request(delegating(("operator", task))))
    (child,) = started.children
    assert (await runner.drive(child)).status == "paused"
    stopped = await runner.stop_run(child.id, actor="U0REQUESTER", reason="not today")
    (row,) = await repo.approvals_for_run(started.run_id)
    assert row.status == "completed" and row.result == "stopped by @U0REQUESTER: not today"
    # The stop settled the row; its caller claimed the parent's resume (else the sweeper's
    # claim of paused runs with nothing pending would), once.
    assert stopped.parent_resume == started.run_id
    assert await runner.claim_stranded_runs() == []
    resumed = await runner.resume(started.run_id)
    assert resumed.status == "completed"
    assert "delegate=stopped by @U0REQUESTER: not today" in (resumed.answer or "")
    assert await runner.claim_stranded_runs() == []
    assert executed("restart_service") == []


async def test_pausing_and_resuming_a_parent_pauses_and_resumes_its_children(
    repo: Repository,
) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    started = await runner.start(request(delegating(("operator", task))))
    (child,) = started.children
    paused = await runner.drive(child)
    (approval,) = paused.new_approvals
    await runner.pause_run(started.run_id, actor="U0REQUESTER")
    hold = await repo.hold_of(child.id)
    assert hold is not None and hold.action == "pause", "the child is held with its parent"
    # Decided while held: recorded, but the child does not resume.
    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert not decision.resume_claimed
    await runner.resume_run(started.run_id, actor="U0REQUESTER")
    assert await repo.hold_of(child.id) is None
    current = await repo.get_run(child.id)
    assert current is not None and current.status == "resuming"


async def test_children_of_a_parent_that_ended_without_them_are_stopped_by_the_sweeper(
    repo: Repository,
) -> None:
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    started = await runner.start(request(delegating(("operator", task), ("researcher", "status"))))
    first, second = started.children
    await runner.drive(first)  # waits on its approval; the second has not run yet
    # The parent ends some other way than a Stop (an expiry's on_expiry = "cancel", an
    # uninstall): its children are not told in that transaction.
    assert await repo.cancel_run(
        started.run_id, reason="expired", actor="sweeper", now=runner.clock()
    )
    assert await runner.stop_orphans() == [first.id]
    assert await runner.stop_orphans() == [], "the working one's Stop is asked for once"
    assert (await runner.drive(second)).status == "cancelled"
    assert await repo.unfinished_children(started.run_id) == []


async def test_a_childs_call_is_gated_by_the_same_policies_edits_included(
    repo: Repository,
) -> None:
    policies = {
        "restart_service": {"approvers": ["U0APPROVER1"], "allow_edit": True},
    }
    runner = Runner(repo, agents_config(policies=policies), worker_id="worker-a")
    task = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "shop"}}]}
    )
    started = await runner.start(request(delegating(("operator", task))))
    (child,) = started.children
    (approval,) = (await runner.drive(child)).new_approvals
    assert approval.agent == "operator" and approval.approvers == ["U0APPROVER1"]
    decision = await runner.edit_and_approve(
        approval.id, actor="U0APPROVER1", arguments={"service": "cart"}
    )
    assert decision.resume_claimed
    await follow(runner, await runner.resume(child.id))
    assert executed("restart_service") == [{"service": "cart"}]
    final = await repo.get_run(started.run_id)
    assert final is not None and final.status == "completed"
    assert "restarted cart" in (final.answer or "")


async def test_children_started_while_an_operator_pauses_the_parent_start_held(
    repo: Repository,
) -> None:
    async def pause_parent(runner: Runner, run_id: str) -> None:
        # The operator's Pause lands while the response's other call runs.
        await runner.pause_run(run_id, actor="U0REQUESTER")

    runner, run, outcome = await drive_step_beside_delegate(repo, pause_parent)
    if outcome.status == "held":
        # The delegate call reached its safe point after the Pause (the calls run
        # concurrently): it stopped there, and no child was started.
        assert await repo.children_of(run.id) == []
        return
    assert outcome.status == "paused"
    (child,) = outcome.children
    hold = await repo.hold_of(child.id)
    assert hold is not None and hold.action == "pause" and hold.requested_by == "U0REQUESTER"
    assert (await runner.drive(child)).status == "held", "it stops at its first safe point"


async def test_a_stop_asked_for_after_a_delegate_calls_safe_point_ends_the_parent(
    repo: Repository,
) -> None:
    """The Stop lands after the delegate call passed its safe point, before the pause that
    starts the child is stored (found by review): the pause is the Stop's safe point, so the
    parent ends cancelled and no child starts. Before the fix the parent was stored paused
    under the Stop's hold with its child running; the child's Stop settled the parent's row,
    and then nothing ever moved the parent (no resume claim under a hold, no sweep of it)."""
    from bot.gate import current_turn

    async def stop_parent_once_delegated(runner: Runner, run_id: str) -> None:
        turn = current_turn.get()
        while not turn.drafts:  # the delegate call's row is drafted: its safe point passed
            await asyncio.sleep(0)
        await runner.stop_run(run_id, actor="U0REQUESTER")

    runner, run, outcome = await drive_step_beside_delegate(repo, stop_parent_once_delegated)
    await follow(runner, outcome)
    parent = await repo.get_run(run.id)
    assert parent is not None and parent.status == "cancelled", parent and parent.status
    assert await repo.hold_of(run.id) is None
    assert await repo.unfinished_children(run.id) == []
    assert await runner.claim_stranded_runs() == []


async def test_a_huge_unknown_agent_name_is_not_echoed_whole(repo: Repository) -> None:
    """Found by review: the task is bounded (MAX_TASK_LENGTH) but an unknown agent's name was
    quoted whole in the tool error: 100,000 characters went to the history, back to the
    model and into the thread's answer."""
    runner = Runner(repo, agents_config(), worker_id="worker-a")
    outcome = await runner.start(request(delegating(("x" * 100_000, "t"))))
    assert outcome.status == "completed" and not outcome.children
    assert "there is no agent 'xxx" in (outcome.answer or "")
    assert "(agents: operator, researcher); nothing was delegated." in (outcome.answer or "")
    assert len(outcome.answer or "") < 1000


async def test_an_agent_at_the_depth_limit_is_not_offered_delegate(repo: Repository) -> None:
    """A call would only be refused: the tool is not offered (nor listed in the child's first
    message), while an agent above the limit keeps it."""
    for depth, offered in ((1, False), (2, True)):
        runner = Runner(repo, agents_config(max_delegation_depth=depth), worker_id="worker-a")
        started = await runner.start(request(delegating(("researcher", "look"))))
        (child,) = await repo.children_of(started.run_id)
        names = {tool.name for tool in await runner.drives.offered_to(child)}
        assert ("delegate" in names) is offered, (depth, names)
        assert "get_status" in names
        main = await repo.get_run(started.run_id)
        assert main is not None
        assert "delegate" in {tool.name for tool in await runner.drives.offered_to(main)}
