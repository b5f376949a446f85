"""A batch's escalation adds its people to each waiting call's own approvers: a call an edit
gave stricter approvers (a rule on its new arguments) keeps them, and someone the rule left
out still may not approve it (found by a review: the lead's approvers were written to every
call of the batch)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from freezegun import freeze_time

from bot.policy import NotAllowed
from handlers.flows import sweep_once
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.handlers.test_slack_batches import rows_of_run
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import running_bot


async def test_an_escalation_keeps_an_edited_calls_stricter_approvers(repo: Repository) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {
            "approvers": ["U0APPROVER1"],
            "allow_edit": True,
            "rules": [{"when": "args.service == 'b-prod'", "approvers": ["U0SRELEAD"]}],
            "escalate_after": "20m",
            "escalate_to": ["U0BOSS"],
            "ttl": "1h",
        },
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    four = calls(*[("restart_service", {"service": s}) for s in ("a", "b", "c", "d")])
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention("U0REQUESTER", four)
            rows = await rows_of_run(repo)
            assert len({r.batch_id for r in rows}) == 1 and rows[0].batch_id
            b = next(r for r in rows if r.arguments["service"] == "b")
            runner = slack.bot.services.runner
            edited = await runner.edit_and_approve(
                b.id, actor="U0APPROVER1", arguments={"service": "b-prod"}
            )
            assert edited.approval.approvers == ["U0SRELEAD"]
            clock.tick(timedelta(minutes=21))
            for _ in range(3):
                await sweep_once(slack.bot.services)
                await slack.settle()
            after = {r.arguments["service"]: r for r in await rows_of_run(repo)}
            assert after["b"].approvers == ["U0SRELEAD", "U0BOSS"]
            assert all(after[s].approvers == ["U0APPROVER1", "U0BOSS"] for s in "acd")
            with pytest.raises(NotAllowed):
                await runner.decide(b.id, actor="U0APPROVER1", approve=True)
            decided = await runner.decide(b.id, actor="U0BOSS", approve=True)
            assert decided.approval.status == "approved"
            assert executed("restart_service") == []
