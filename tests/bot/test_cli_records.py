"""``runs show`` and ``approvals show`` say what each pause came to: a question's answer and
who gave it, a call's result, who approved it, by name where the bot stored one (SQLite and
PostgreSQL, the commands' own functions over the repository)."""

from __future__ import annotations

import argparse

import pytest

from bot.cli.approvals import approvals_show
from bot.cli.runs import runs_show
from bot.clock import utcnow
from bot.engine import Runner
from storage.repository import Repository
from tests.bot.test_engine import calls, request


async def test_runs_show_gives_each_answer_and_result_by_name(
    runner: Runner, repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    await repo.remember_name("U0REQUESTER", "Ana Diaz (@ana)", now=utcnow())
    await repo.remember_name("U0APPROVER1", "Bo Lee (@bo)", now=utcnow())
    asked = await runner.start(
        request(calls(("ask_user", {"question": "Which service?", "choices": ["web", "db"]})))
    )
    [question] = asked.new_approvals
    assert (await runner.answer(question.id, actor="U0REQUESTER", answer="web")).resume_claimed
    await runner.resume(asked.run_id)
    gated = await runner.start(
        request(calls(("restart_service", {"service": "web"})), thread=question.thread_ts)
    )
    [approval] = gated.new_approvals
    decided = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert decided.resume_claimed
    await runner.resume(gated.run_id)

    args = argparse.Namespace(run_id=asked.run_id, json=False)
    assert await runs_show(repo, runner.config, args) == 0
    shown = capsys.readouterr().out
    assert "(asked by Ana Diaz (@ana), model scripted)" in shown
    assert f"question {question.id}: ask_user answered" in shown
    assert "answered by Ana Diaz (@ana) at " in shown and "answer: web" in shown
    assert f"approval {approval.id}: restart_service executed" in shown
    assert "approved by Bo Lee (@bo) at " in shown and "ran; result: restarted web" in shown

    args = argparse.Namespace(approval_id=question.id, json=False)
    assert await approvals_show(repo, runner.config, args) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"question {question.id}: ask_user answered")
    assert "answerers: Ana Diaz (@ana)" in shown and "approval" not in shown.split("\n")[0]
