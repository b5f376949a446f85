"""ask_user through the engine (Runner + Repository), on SQLite and PostgreSQL: the question is
a pause row, its answer is the tool's result, exactly once, from the right person, in time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from freezegun import freeze_time

from bot.engine import Runner
from bot.policy import (
    AlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    DecisionRefused,
    NotAllowed,
)
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request, tool_results_in
from tests.conftest import Database, make_config
from tests.support.scripted_model import ScriptedModel

REGIONS = ["eu-west", "us-east"]


def ask(question: str = "Restart which region?", choices: list[str] | None = REGIONS) -> str:
    arguments: dict = {"question": question}
    if choices is not None:
        arguments["choices"] = choices
    return calls(("ask_user", arguments))


async def test_the_requester_answers_a_question_with_choices_and_the_model_reads_it(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(ask()))
    assert outcome.status == "paused"
    (question,) = outcome.new_approvals
    assert question.kind == "question" and question.tool_name == "ask_user"
    assert question.arguments == {"question": "Restart which region?", "choices": REGIONS}
    assert question.approvers == ["U0REQUESTER"]  # default answerer: the requester

    with pytest.raises(NotAllowed, match="Only @U0REQUESTER can answer"):
        await runner.answer(question.id, actor="U0OUTSIDER", answer="eu-west")
    unchanged = await repo.get_approval(question.id)
    assert unchanged is not None and unchanged.status == "pending" and unchanged.result is None
    with pytest.raises(DecisionRefused, match="one of the choices: eu-west, us-east"):
        await runner.answer(question.id, actor="U0REQUESTER", answer="mars")

    answered = await runner.answer(question.id, actor="U0REQUESTER", answer="eu-west")
    assert answered.resume_claimed
    assert answered.approval.status == "answered" and answered.approval.result == "eu-west"
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert resumed.answer == "Results: ask_user=eu-west"
    assert tool_results_in(ScriptedModel.seen[-1]) == {"ask_user": "eu-west"}

    with pytest.raises(AlreadyDecided, match="Already answered by @U0REQUESTER"):
        await runner.answer(question.id, actor="U0REQUESTER", answer="us-east")
    stored = await repo.get_approval(question.id)
    assert stored is not None and stored.result == "eu-west"
    events = [e.event for e in await repo.audit_trail(approval_id=question.id)]
    assert events == ["question_asked", "question_answered"]


async def test_a_typed_answer_reaches_the_model_without_choices(runner: Runner) -> None:
    outcome = await runner.start(request(ask("Which ticket is this for?", choices=None)))
    (question,) = outcome.new_approvals
    assert question.arguments == {"question": "Which ticket is this for?", "choices": None}
    decision = await runner.answer(question.id, actor="U0REQUESTER", answer="  OPS-42 ")
    assert decision.resume_claimed
    resumed = await runner.resume(outcome.run_id)
    assert resumed.answer == "Results: ask_user=OPS-42"


async def test_a_question_is_not_an_approval_and_an_approval_is_not_a_question(
    runner: Runner,
) -> None:
    outcome = await runner.start(request(ask()))
    (question,) = outcome.new_approvals
    with pytest.raises(DecisionRefused, match="not an approval but a question"):
        await runner.decide(question.id, actor="U0APPROVER1", approve=True)
    gated = await runner.start(
        request(calls(("restart_service", {"service": "web"})), thread="1700000000.000200")
    )
    with pytest.raises(ApprovalNotFound):
        await runner.answer(gated.new_approvals[0].id, actor="U0APPROVER1", answer="yes")


async def test_configured_answerers_replace_the_requester(repo: Repository) -> None:
    config = make_config(policies={"ask_user": {"answerers": ["U0ONCALL"], "ttl": "2h"}})
    runner = Runner(repo, config, worker_id="worker-a")
    with freeze_time("2026-11-30 10:00:00"):
        outcome = await runner.start(request(ask()))
        (question,) = outcome.new_approvals
        assert question.expires_at.isoformat() == "2026-11-30T12:00:00"
        with pytest.raises(NotAllowed, match="Only @U0ONCALL can answer"):
            await runner.answer(question.id, actor="U0REQUESTER", answer="eu-west")
        decision = await runner.answer(question.id, actor="U0ONCALL", answer="us-east")
    assert decision.resume_claimed


async def test_an_unanswered_question_tells_the_model_no_answer_came(
    runner: Runner, repo: Repository
) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(ask()))
        (question,) = outcome.new_approvals
        assert question.expires_at.isoformat() == "2026-11-30T10:30:00"  # approval_ttl
        clock.tick(timedelta(minutes=31))
        with pytest.raises(ApprovalExpired, match="expired at 2026-11-30 10:30 UTC unanswered"):
            await runner.answer(question.id, actor="U0REQUESTER", answer="eu-west")
        resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    result = tool_results_in(ScriptedModel.seen[-1])["ask_user"]
    assert result == "No answer came: the question expired at 2026-11-30 10:30 UTC unanswered."
    stored = await repo.get_approval(question.id)
    assert stored is not None and stored.status == "expired" and stored.result is None


async def test_on_expiry_cancel_ends_the_run_when_nobody_answers(repo: Repository) -> None:
    config = make_config(policies={"ask_user": {"on_expiry": "cancel", "ttl": "10m"}})
    runner = Runner(repo, config, worker_id="worker-a")
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(ask()))
        clock.tick(timedelta(minutes=11))
        (expiry,) = await runner.expire_due()
    assert expiry.run_cancelled and not expiry.resume_claimed
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "cancelled"


async def test_a_restart_between_question_and_answer_loses_nothing(
    database: Database,
) -> None:
    first = Runner(await database.open(), make_config(), worker_id="worker-a")
    outcome = await first.start(
        request(
            calls(
                ("get_status", {"service": "web"}),
                ("ask_user", {"question": "Restart which region?", "choices": REGIONS}),
            )
        )
    )
    assert outcome.status == "paused"
    question_id = outcome.new_approvals[0].id

    second = Runner(await database.open(), make_config(), worker_id="worker-b")
    decision = await second.answer(question_id, actor="U0REQUESTER", answer="us-east")
    assert decision.resume_claimed
    resumed = await second.resume(outcome.run_id)
    assert resumed.answer == "Results: get_status=web is healthy; ask_user=us-east"
    assert executed("get_status") == [{"service": "web"}], "the sibling ran once"


async def test_ask_user_false_leaves_the_model_without_the_tool(repo: Repository) -> None:
    on = Runner(repo, make_config(), worker_id="worker-a")
    off = Runner(repo, make_config(ask_user=False), worker_id="worker-a")
    assert "ask_user" in {tool.name for tool in on.tools}
    assert "ask_user" not in {tool.name for tool in off.tools}
    outcome = await off.start(request(ask()))
    assert outcome.status == "completed" and outcome.new_approvals == []


async def test_a_question_without_text_is_an_error_for_the_model(runner: Runner) -> None:
    outcome = await runner.start(request(ask("   ")))
    assert outcome.status == "completed"
    refusal = "Error: ask_user needs a question; nothing was asked."
    assert outcome.answer == f"Results: ask_user={refusal}"


async def test_a_choice_with_spaces_around_it_can_be_answered(runner: Runner) -> None:
    """Answers are stripped and had to equal one of the choices as the model wrote them: a
    choice like " eu-west " could never be chosen (not even by its own button's text), and
    the question stayed open until it expired. The answer is the choice as written."""
    outcome = await runner.start(request(ask(choices=[" eu-west ", "us-east"])))
    (question,) = outcome.new_approvals
    for answer in (" eu-west ", "eu-west"):
        with pytest.raises(NotAllowed):
            await runner.answer(question.id, actor="U0OUTSIDER", answer=answer)
    decision = await runner.answer(question.id, actor="U0REQUESTER", answer=" eu-west ")
    assert decision.resume_claimed and decision.approval.result == " eu-west "


async def test_choices_that_differ_only_in_spaces_are_refused(runner: Runner) -> None:
    outcome = await runner.start(request(ask(choices=["eu-west", "eu-west "])))
    assert outcome.status == "completed" and not outcome.new_approvals
    assert "choices must be up to" in (outcome.answer or "")
