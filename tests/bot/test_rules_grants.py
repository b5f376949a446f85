"""Rules on arguments with standing grants: a call a grant covers keeps the rule that chose
its policy on its row, and a rule that could not be evaluated (fail closed) is never covered
by a grant: a person looks at that call."""

from __future__ import annotations

import pytest

from bot.engine import Runner
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request
from tests.bot.test_engine_guarantees import Clock
from tests.bot.test_grants_engine import granted_thread, held_config
from tests.support import held_tools

RULES = [
    {"when": 'args.service.startsWith("w")', "approvers": ["U0APPROVER1"]},
    {"when": "int(args.service) > 0", "approval": "never"},
]


@pytest.fixture(autouse=True)
def _fresh_hold() -> None:
    held_tools.HOLD = held_tools.Hold()


async def test_grants_keep_the_rule_and_never_cover_a_failed_condition(repo: Repository) -> None:
    runner = Runner(repo, held_config(grant_max="1h", rules=RULES), worker_id="w", clock=Clock())
    run_id = await granted_thread(runner)
    [first] = await repo.approvals_for_run(run_id)
    assert first.rule == "policies.held_restart.rules[0]"

    held_tools.HOLD = held_tools.Hold()
    held_tools.HOLD.release.set()
    granted = await runner.start(request(calls(("held_restart", {"service": "www"}))))
    assert granted.status == "completed"
    assert executed("held_restart") == [{"service": "web"}, {"service": "www"}]
    [ran] = [a for a in await repo.approvals_for_run(run_id) if a.arguments == {"service": "www"}]
    assert ran.tool_call_id.startswith("grant:") and ran.rule == "policies.held_restart.rules[0]"

    # "api" is not a number: rules[1] cannot say whether it applies. The grant does not
    # stand in for the person the failed condition asks for.
    asked = await runner.start(request(calls(("held_restart", {"service": "api"}))))
    assert asked.status == "paused"
    [approval] = asked.new_approvals
    assert approval.rule == "policies.held_restart.rules[1]" and approval.rule_error
    assert executed("held_restart") == [{"service": "web"}, {"service": "www"}]
