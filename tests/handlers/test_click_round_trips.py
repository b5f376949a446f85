"""On PostgreSQL, what a click sends between its Approve and its answer in the thread: every
write but the decision is one statement in autocommit (one round trip, no BEGIN or COMMIT),
and the decision is the one transaction, under the click's time limit; the card is edited
from the row the decision returned. Counted on the wire
(tests.support.statements); docs/benchmarks.md, "Where a click's time goes"."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storage.repository import Repository
from tests.conftest import make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import Harness, running_bot
from tests.support.statements import statements

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as h:
        yield h


async def test_from_click_to_answer_only_the_decision_opens_a_transaction(
    slack: Harness,
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    with statements() as sent:
        click = await slack.server.click("U0APPROVER1", card, "approval_approve")
        assert click.status == 200
        await slack.settle()
    assert executed("restart_service") == [{"service": "web"}]
    # The answer's claim returns its thread itself: no read of the run beside it.
    [claim] = [i for i, s in enumerate(sent) if s.startswith("UPDATE run_answers SET claimed")]
    begins = [s for s in sent[: claim + 1] if s.startswith("BEGIN")]
    assert len(begins) == 1 and "statement_timeout" in begins[0], begins
    assert sent.count("COMMIT") == 1
    # The card is edited from the row the decision returned, then read once to check that
    # the edit shows the last state; the resume's first write comes after.
    decided = next(i for i, s in enumerate(sent) if "UPDATE approvals SET status" in s)
    executing = next(i for i, s in enumerate(sent) if "SET status = 'executing'" in s)
    between = sent[decided:executing]
    assert sum(s.endswith("FROM approvals WHERE id = $1") for s in between) == 1, between
    # Once posted, the answer's row goes with the progress message it replaced, at once.
    assert [s for s in sent if s.startswith("DELETE FROM run_answers")] == []
    assert any(s.startswith("WITH gone AS (DELETE FROM run_answers") for s in sent)
