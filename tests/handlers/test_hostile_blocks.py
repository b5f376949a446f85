"""Every card, copy, list and notice, rendered from rows whose untrusted text (arguments, an
error, a question, a reason) grows when escaped and tries to ping or link: each is within
Slack's Block Kit limits (as our Slack-compatible server enforces them), and neither its
blocks nor its notification text can @channel, mention a stranger or disguise a link.

Cutting before escaping let 1,000 ``&`` grow to 5,000 characters: the recovery card was
refused (``invalid_blocks``) and the run stayed paused with no buttons (review of issue 19).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from handlers import blocks as kit
from handlers.blocks.recoveries import render_recovery_card
from storage.models import Approval, Run, RunHold
from tests.handlers.test_pause_blocks import NOW, pause, valid

HEAVY = {"service": "&<>" * 1000, "region": "<!channel>"}
HOSTILE = (
    "<!channel> <@U0STRANGER> <!subteam^S0OPS> <http://evil.example|click me> *b* ```x``` "
    + "&<>" * 2000
)
PINGS = ("<!channel>", "<@U0STRANGER>", "<!subteam^S0OPS>", "<http://evil")


def approval(kind: str = "approval", **fields: Any) -> Approval:
    values: dict[str, Any] = {
        "tool_name": "restart_service",
        "arguments": HEAVY,
        "approvers": ["U0APPROVER1"],
        "allow_edit": True,
    }
    return pause(kind, **{**values, **fields})


def hostile_rows() -> list[Approval]:
    decided = {"decided_by": "U0APPROVER1", "decided_at": NOW}
    question = {"question": HOSTILE, "choices": [HOSTILE, "&" * 600]}
    return [
        approval(id="01PENDING"),
        approval(id="01DENIED", status="denied", reason=HOSTILE, **decided),
        approval(id="01RAN", status="executed", **decided),
        approval(id="01GONE", status="cancelled", result=HOSTILE),
        approval(id="01EDITED", edited_arguments={"service": "<" * 3000}, **decided),
        approval(id="01FAILED", kind="recovery", reason=HOSTILE, attempt=2),
        approval(id="01UNKNOWN", kind="recovery", reason=HOSTILE, recovery_cause="unknown"),
        approval(id="01RESOLVED", kind="recovery", status="resolved", result=HOSTILE, **decided),
        approval(id="01STOPPED", kind="recovery", status="cancelled", reason=HOSTILE),
        pause("question", id="01Q", arguments=question),
        pause("question", id="01QA", arguments=question, status="answered", result=HOSTILE),
        pause("callback", id="01CB", reason=HOSTILE),
        pause("retry", id="01RT", reason=HOSTILE, due_at=NOW + timedelta(minutes=5)),
    ]


def mrkdwn(blocks: Any) -> str:
    """Every mrkdwn text in ``blocks`` (plain_text, a button's label, shows as typed)."""
    if isinstance(blocks, list):
        return "\n".join(mrkdwn(b) for b in blocks)
    if not isinstance(blocks, dict):
        return ""
    if blocks.get("type") == "mrkdwn":
        return str(blocks.get("text", ""))
    return "\n".join(mrkdwn(v) for v in blocks.values())


def unpinging(text: str) -> str:
    for ping in PINGS:
        assert ping not in text, f"{ping!r} in {text[:300]!r}"
    return text


@pytest.mark.parametrize("row", hostile_rows(), ids=lambda row: row.id)
def test_every_card_is_within_slacks_limits_and_pings_nobody(row: Approval) -> None:
    text, blocks = kit.render_card(row)
    unpinging(mrkdwn(valid(blocks)))
    assert len(unpinging(text)) <= 1000, "the notification text"


def test_the_recovery_card_shows_the_whole_call_line_escaped_within_a_section() -> None:
    _, blocks = render_recovery_card(approval(kind="recovery", reason=HOSTILE))
    [call] = [b["text"]["text"] for b in valid(blocks) if b.get("block_id") == "recovery_call"]
    assert "&amp;&lt;&gt;" in call and len(call) <= 1100 and call.endswith("…`")


def test_lists_the_home_and_history_of_hostile_rows_are_within_slacks_limits() -> None:
    rows = hostile_rows()
    for view in ("approve", "mine"):
        text, blocks = kit.render_approvals_page(
            rows, view=view, page=0, total=len(rows), page_size=10, now=NOW, permalinks={}
        )
        unpinging(mrkdwn(valid(blocks)) + text)
    home = kit.home_view(
        now=NOW,
        waiting=rows,
        waiting_total=len(rows),
        mine=rows,
        mine_total=len(rows),
        decided=rows,
    )
    unpinging(mrkdwn(valid(home["blocks"], 100)))
    text, blocks = kit.render_history(rows[:4], "C0OPS")
    unpinging(mrkdwn(valid(blocks)) + text)
    unpinging(kit.granted_call_note(approval(grant_until=NOW, decided_by="U0APPROVER1")))


def test_a_batch_of_hostile_calls_its_modals_and_a_hostile_hold_are_within_slacks_limits() -> None:
    rows = [approval(id=f"01B{i}", batch_id="01BATCH") for i in range(25)]
    text, blocks = kit.render_batch_card(rows)
    unpinging(mrkdwn(valid(blocks)) + text)
    for modal in (
        kit.render_arguments_modal(rows[0]),
        kit.render_details_modal(approval(kind="recovery", reason=HOSTILE * 5)),
    ):
        unpinging(mrkdwn(valid(modal["blocks"], 100)))
    for in_effect in (True, False):
        shown = kit.hold_text("U0APPROVER1", HOSTILE, in_effect=in_effect)
        unpinging(mrkdwn(valid(kit.held_blocks(shown, "01RUN"))))
    run = Run(
        id="01RUN",
        conversation_key="k",
        channel="C0OPS",
        requester="U0REQUESTER",
        status="paused",
        model_id="scripted",
    )
    hold = RunHold(
        run_id="01RUN", action="pause", requested_by="U0APPROVER1", reason=HOSTILE, requested_at=NOW
    )
    unpinging(mrkdwn(valid(kit.held_run_blocks([(run, hold)]))))
