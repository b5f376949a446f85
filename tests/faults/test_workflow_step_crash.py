"""A Workflow Builder step completes once, across kills and replicas (issue 21 section 3).

Real ``approval-bot serve`` processes run the step "Request approval": Slack (our server)
sends ``function_executed``, an approver clicks Approve, and the step must end with one
``functions.completeSuccess`` that Slack accepts, whatever dies in between: killed once the
decision is stored (``decision_stored``), once the completion is claimed (``step_completing``)
or once Slack took it and before that was recorded (``step_completed``: the restart's retry
is refused ``execution_not_in_running_state``, and the step is recorded done). Two replicas
sweeping the outbox while one completion is in flight call Slack once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from playground.slack_server import FunctionExecution, Message, SlackServer
from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    PATIENCE,
    Deployment,
    eventually,
    is_card,
    quiet_sweeps,
)
from tests.support.serve_process import ROOT

STEP = {
    "title": "Deploy shop to production",
    "details": "Release 4.2",
    "approvers": [APPROVER],
    "channel": CHANNEL,
    "timeout": "1h",
}
APPROVED = {"decision": "approved", "decided_by": APPROVER, "reason": ""}


def define_step(slack: SlackServer) -> None:
    manifest: dict[str, Any] = yaml.safe_load((ROOT / "manifest.yml").read_text())
    slack.define_functions(manifest["functions"])


async def run_step(deployment: Deployment, **delivery: Any) -> FunctionExecution:
    reply = await deployment.slack.run_function("request_approval", STEP, **delivery)
    assert reply.status == 200, (reply.status, reply.body)
    assert reply.execution_id is not None
    return deployment.slack.function_executions[reply.execution_id]


async def step_card(deployment: Deployment) -> Message:
    cards = await eventually(
        lambda: [m for m in deployment.slack.messages if m.channel == CHANNEL and is_card(m)],
        "the step's approval card in the channel",
    )
    assert len(cards) == 1, [c.text for c in cards]
    return cards[0]


async def completed(deployment: Deployment, execution: FunctionExecution) -> None:
    """Slack accepted one completion, the record of it is stored, and nothing more comes."""
    await eventually(
        lambda: execution.state != "running",
        lambda: (
            "the step to complete\n"
            + "".join(f"--- {r.name} ---\n{r.output(2000)}\n" for r in deployment.replicas)
        ),
    )
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while True:
        rows = await deployment.rows(
            "SELECT completion, token FROM workflow_steps WHERE completed_at IS NOT NULL"
        )
        if rows:
            break
        assert asyncio.get_running_loop().time() < deadline, "the completion was never recorded"
        await asyncio.sleep(0.2)
    await quiet_sweeps(deployment, 3)
    assert execution.completions == [
        {"method": "functions.completeSuccess", "outputs": APPROVED}
    ], execution.completions
    assert execution.outputs == APPROVED
    [(completion, token)] = rows
    assert completion in ("success", "gone") and token is None


@pytest.mark.parametrize("window", ["decision_stored", "step_completing", "step_completed"])
async def test_kill_9_between_the_decision_and_the_completion(
    deployment: Deployment, window: str
) -> None:
    define_step(deployment.slack)
    first = await deployment.start(failpoint=window)
    execution = await run_step(deployment)
    card = await step_card(deployment)
    click = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert click.status == 200, (click.status, click.body)
    await deployment.crashed_at(first, window)
    if window != "step_completed":
        assert execution.state == "running", "completed before the kill"
    await deployment.start()
    await completed(deployment, execution)
    if window == "step_completed":
        # The restart's retry found the execution completed and recorded it as done.
        [(completion,)] = await deployment.rows("SELECT completion FROM workflow_steps")
        assert completion == "gone"


async def test_two_replicas_sweeping_the_outbox_complete_a_step_once(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> None:
    """Slack takes the completion but answers only after several sweeps of both replicas:
    the completer's claim keeps the other replica (and its own sweeper) from calling again."""
    deployment = Deployment(slack, database_url, tmp_path)
    try:
        define_step(slack)
        bot1 = await deployment.start()
        await deployment.start()
        execution = await run_step(deployment)
        card = await step_card(deployment)
        held = slack.hold("functions.completeSuccess")
        click = await slack.click(APPROVER, card, "approval_approve", bot_url=bot1.events_url)
        assert click.status == 200
        await asyncio.wait_for(held.arrived.wait(), PATIENCE)
        await quiet_sweeps(deployment, 3)  # both replicas sweep while the call is in flight
        held.release.set()
        await completed(deployment, execution)
        assert len(slack.calls_to("functions.completeSuccess")) == 1
    finally:
        await deployment.close()
