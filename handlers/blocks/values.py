"""What our buttons, menus and lists carry, and how it is read back when Slack sends it.

Nothing on a card is trusted back: a value names a row (an approval, a question, a grant) and
the listener reads everything else from the database again. Each value is written and read by
the pair of functions below, side by side, and every reader takes any string (a crafted
request sends what it likes) and gives None, or a value that names no row, for what we did not
write.

- An Approve button carries the approval id and the fingerprint of the arguments its copy
  showed (checked against the stored ones: a stale copy is refused, ``Runner.decide``).
- A question's buttons carry the question's id and the *index* of a choice, never its text:
  the answer is read back from the stored choices, so a crafted request cannot put words in
  the answerer's mouth (and ``Runner.answer`` checks the answer is one of the choices again).
- An "Approve, and allow …" option carries the approval id, a number of seconds and, as
  Approve's, the fingerprint of the arguments shown (checked again by ``bot.policy.grants``).
- An item's buttons on an ephemeral /approvals list carry, in their block_id, the list's view
  and page: the one thing a click on an ephemeral message tells us about it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from storage.hashes import FINGERPRINT_LENGTH, UNEDITED, fingerprint
from storage.models import Approval

LIST_BLOCK_PREFIX = "approvals_list"
LIST_VIEWS = ("approve", "mine", "all")


def approve_value(approval: Approval) -> str:
    """The Approve button's value: the id, and the fingerprint of the arguments it shows."""
    return f"{approval.id}:{fingerprint(approval.payload_hash)}"


def parse_approve_value(value: object) -> tuple[str, str]:
    """(approval id, what the copy showed) from an Approve button's value: ``approve_value``'s,
    or an id alone (a button of the previous release: ``UNEDITED``). Anything malformed keeps
    a fingerprint no approval has, so it is refused as stale, or not found."""
    text = value if isinstance(value, str) else ""
    approval_id, colon, shown = text.partition(":")
    if not colon:
        return approval_id, UNEDITED
    return approval_id, shown if len(shown) == FINGERPRINT_LENGTH else "-" * FINGERPRINT_LENGTH


def choice_value(approval: Approval, index: int) -> str:
    return json.dumps({"id": approval.id, "choice": index}, separators=(",", ":"))


def parse_choice_value(value: Any) -> tuple[str, int] | None:
    """(question id, choice index) from a button's or option's value; None if not ours."""
    try:
        data = json.loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):  # deep nesting raises RecursionError
        return None
    if not isinstance(data, dict):
        return None
    approval_id, index = data.get("id"), data.get("choice")
    if not isinstance(approval_id, str) or not isinstance(index, int) or isinstance(index, bool):
        return None
    if not 0 <= index < 10_000:
        return None
    return approval_id, index


def grant_value(approval: Approval, duration: timedelta) -> str:
    """The id, the duration and (as Approve's) the fingerprint of the arguments shown."""
    return f"{approval.id}|{int(duration.total_seconds())}|{fingerprint(approval.payload_hash)}"


def parse_grant_value(value: Any) -> tuple[str, timedelta, str] | None:
    """(approval id, duration, what the copy showed) from an option's value; None for
    anything we did not write. A value of the previous release (no fingerprint) showed the
    arguments as proposed: ``UNEDITED``."""
    if not isinstance(value, str) or value.count("|") not in (1, 2):
        return None
    approval_id, seconds, *shown = value.split("|")
    # ASCII digits only: str.isdigit also takes "²", which int() then refuses (a 500).
    if not approval_id or not (seconds.isascii() and seconds.isdigit()) or len(seconds) > 9:
        return None
    if shown and len(shown[0]) != FINGERPRINT_LENGTH:
        return None
    return approval_id, timedelta(seconds=int(seconds)), shown[0] if shown else UNEDITED


def list_block_id(view: str, page: int, block_id: str) -> str:
    return f"{LIST_BLOCK_PREFIX}:{view}:{page}:{block_id}"


def listed_at(block_id: Any) -> tuple[str, int] | None:
    """(view, page) of the /approvals list an item's block_id names, or None."""
    if not isinstance(block_id, str):
        return None
    prefix, _, rest = block_id.partition(":")
    view, _, rest = rest.partition(":")
    page, _, _ = rest.partition(":")
    # ASCII digits only: str.isdigit also takes "²", which int() then refuses (a 500).
    numeric = page.isascii() and page.isdigit()
    if prefix != LIST_BLOCK_PREFIX or view not in LIST_VIEWS or not numeric or len(page) > 4:
        return None
    return view, int(page)
