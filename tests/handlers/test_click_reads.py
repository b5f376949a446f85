"""A click that settles a pause reads its approval once before the settlement: the read that
checks where the click came from (``approval_clicked_here``) is the one the policy check uses
(``Runner.decide``'s and ``Runner.answer``'s ``read``), so on PostgreSQL a click costs one
time-limited read (one round trip) less. Counted on the wire (tests.support.statements), as is
what a click sends between its Approve and its answer in the thread: every write but the
decision is one statement in autocommit (one round trip, no BEGIN or COMMIT), the decision is
the one transaction, under the click's time limit, and the card is edited from the row the
decision returned (docs/benchmarks.md, "Where a click's time goes")."""

from __future__ import annotations

import json
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


def reads_before_the_settlement(sent: list[str]) -> int:
    """Reads of one approval by id (storage.sql.approvals APPROVAL_BY_ID) sent before the
    first statement that settles it (the decision's or the answer's conditional UPDATE)."""
    settled = next(i for i, s in enumerate(sent) if "UPDATE approvals SET" in s)
    return sum(s.endswith("FROM approvals WHERE id = $1") for s in sent[:settled])


async def test_an_approve_click_reads_its_approval_once(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    with statements() as sent:
        click = await slack.server.click("U0APPROVER1", card, "approval_approve")
        assert click.status == 200
        await slack.settle()
    assert reads_before_the_settlement(sent) == 1
    assert executed("restart_service") == [{"service": "web"}]


async def test_a_click_refused_by_the_policy_is_still_refused(slack: Harness) -> None:
    """The read the click made is the one the policy judges: someone who may not approve is
    told so, and nothing runs."""
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    click = await slack.server.click("U0OUTSIDER", card, "approval_approve")
    assert click.status == 200
    await slack.settle()
    assert executed("restart_service") == []
    [told] = slack.ephemeral_texts("U0OUTSIDER")
    assert told == ":no_entry: You are not one of the approvers of this call."


async def test_a_question_answered_by_a_click_reads_it_once(slack: Harness) -> None:
    question = {"question": "Restart which region?", "choices": ["eu", "us"]}
    await slack.mention(
        "U0REQUESTER",
        json.dumps({"tool_calls": [{"name": "ask_user", "arguments": question}]}),
    )
    [card] = [
        m
        for m in slack.server.messages
        if not m.is_ephemeral and any(b.get("block_id") == "question_summary" for b in m.blocks)
    ]
    with statements() as sent:
        await slack.server.click("U0REQUESTER", card, "question_choice:1")
        await slack.settle()
    assert reads_before_the_settlement(sent) == 1
    assert any("You answered: us" in t for t in slack.ephemeral_texts("U0REQUESTER"))


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
