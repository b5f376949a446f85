"""Message metadata on every card: what other apps and workflows read instead of our text.

Slack's message metadata (``metadata={"event_type", "event_payload"}`` on chat.postMessage
and chat.update) lets another app, or a workflow, react to an approval without scraping the
card. A pure function of the rows, like the card itself, so the metadata always says what
the card shows: ``approval_requested`` while the card waits, ``approval_decided`` once it
is settled, re-sent with each edit. Slack's payload values are strings, numbers, booleans
or flat objects; ids and ISO 8601 UTC times are strings, and nothing here is user text: a
Workflow Builder step's title, which takes a tool's name's place on its card, is the
workflow author's text, so a step's ``tool`` is the step's callback id, ``request_approval``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from bot.engine.steps import ON_EXPIRY_WORKFLOW, STEP_CALLBACK_ID
from handlers.blocks.kit import Block
from storage.models import Approval

REQUESTED = "approval_requested"
DECIDED = "approval_decided"

# The status a row ends in, as the decision other apps read (a recovery's Retry is "due").
_DECISIONS = {
    "approved": "approved",
    "executing": "approved",
    "executed": "approved",
    "unknown": "approved",
    "due": "retried",
}


def render_card_metadata(rows: Sequence[Approval]) -> Block:
    """The metadata of a card showing ``rows`` (one approval, or a batch's calls)."""
    lead = next((row for row in rows if row.batch_id == row.id), rows[0])
    payload: dict[str, str | int | bool] = {
        "approval_id": lead.id,
        "run_id": lead.run_id,
        "kind": lead.kind or "approval",
        # A step's title is user text: its metadata names the step instead.
        "tool": STEP_CALLBACK_ID if lead.on_expiry == ON_EXPIRY_WORKFLOW else lead.tool_name,
        "requester": lead.requester,
        "expires_at": _iso(lead.expires_at),
    }
    if len(rows) > 1:
        payload["batch_size"] = len(rows)
    if any(row.status == "pending" for row in rows):
        payload["status"] = "pending"
        return {"event_type": REQUESTED, "event_payload": payload}
    decisions = {decision_of(row) for row in rows}
    payload["status"] = lead.status
    payload["decision"] = decisions.pop() if len(decisions) == 1 else "mixed"
    payload["decided_by"] = lead.decided_by or ""
    if lead.decided_at is not None:
        payload["decided_at"] = _iso(lead.decided_at)
    return {"event_type": DECIDED, "event_payload": payload}


def decision_of(approval: Approval) -> str:
    """approved, denied, expired, cancelled, answered, skipped, resolved or retried."""
    return _DECISIONS.get(approval.status, approval.status)


def _iso(moment: datetime) -> str:
    """Stored times are naive UTC: said so, in ISO 8601."""
    return moment.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
