"""The small pieces every Block Kit surface is built from: escaping, mentions, dates, buttons.

Untrusted text (tool arguments, reasons, model output, names) reaches Slack only through
:func:`escape` or one of its cutting variants, so it cannot ping ``<!channel>``, forge a
``<@U…>`` mention or a link; JSON of untrusted values through :func:`shown_json`, so no hidden
character or backtick changes what an approver reads. People are shown as mentions and times
as ``<!date^…>`` tokens, which Slack renders in each reader's own name and time zone. Slack's
limits (a section's 3000 characters, a message's 4000) are here too, with the helpers that
keep text within them without cutting an escaped character or a mention in two.
"""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

from storage.models import Approval

Block = dict[str, Any]

SECTION_LIMIT = 3000
FIELD_LIMIT = 2000  # one of a section's fields
LIST_ARGUMENTS_LIMIT = 120
OUTCOME_DETAIL_LIMIT = 2000  # a reason on a decided card, well within its section's 3000
MESSAGE_TEXT_LIMIT = 3900


# A Slack user, bot or user-group id (what ``mention`` makes a mention of).
SLACK_ID = re.compile(r"[UWBS][A-Z0-9]{2,}")


def escape(text: str) -> str:
    """Slack's three control characters; after this, text shows as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escaped_within(text: str, limit: int) -> str:
    """``escape(text)`` cut to at most ``limit`` characters, never inside an entity.

    Escaping can make text 5 times longer (``&`` is ``&amp;``): a reason that fits the deny
    form (1000 characters) could exceed Slack's 3000 per section, and the card then could not
    be edited at all (its buttons stayed on a decided call).
    """
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    kept, length = [], 0
    for char in text:
        piece = escape(char)
        if length + len(piece) > limit - 1:
            break
        kept.append(piece)
        length += len(piece)
    return "".join(kept) + "…"


def escaped_pieces(text: str, size: int) -> list[str]:
    """``escape(text)`` in pieces of at most ``size`` characters, none cut inside an entity."""
    pieces: list[str] = []
    piece: list[str] = []
    length = 0
    for char in text:
        escaped = escape(char)
        if length + len(escaped) > size:
            pieces.append("".join(piece))
            piece, length = [], 0
        piece.append(escaped)
        length += len(escaped)
    pieces.append("".join(piece))
    return pieces


def mention(user_or_group: str) -> str:
    """A user's or group's mention; anything else (an HTTP API token's name, which the
    cards of its requests name as the requester) as plain, escaped text."""
    if not SLACK_ID.fullmatch(user_or_group):
        return f"*{escape(user_or_group)}*" if user_or_group else "someone"
    if user_or_group.startswith("S"):
        return f"<!subteam^{user_or_group}>"
    return f"<@{user_or_group}>"


def asked_by(approval: Approval) -> str:
    """Who asked for a call: ``asked by @ana``, or for a sub-agent's call (issue 20 section
    1) ``requested by agent *researcher* for @ana``."""
    agent = getattr(approval, "agent", None)
    if agent:
        return f"requested by agent *{escape(agent)}* for {mention(approval.requester)}"
    return f"asked by {mention(approval.requester)}"


def mentions_within(mentions: list[str], limit: int) -> str:
    """``mentions`` joined, the last ones counted ("and 3 more") past ``limit`` characters;
    a mention is never cut in two."""
    text = ", ".join(mentions)
    if len(text) <= limit:
        return text
    shown, length = 0, 0
    for item in mentions:
        grown = length + (2 if shown else 0) + len(item)
        if grown + len(f" and {len(mentions) - shown - 1} more") > limit:
            break
        shown, length = shown + 1, grown
    return ", ".join(mentions[:shown]) + f" and {len(mentions) - shown} more"


def slack_date(moment: datetime, style: str = "{date_short_pretty} at {time}") -> str:
    """Slack's date formatting: shown in each reader's time zone, with a UTC fallback."""
    epoch = int(moment.replace(tzinfo=UTC).timestamp())
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{epoch}^{style}|{fallback}>"


# Characters that are invisible or move other text around (right-to-left overrides, zero-width
# spaces, line separators), so what an approver reads would not be what runs.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})


def shown_json(value: Any, **options: Any) -> str:
    """JSON of untrusted values as approvers read it: still JSON of exactly those values, but
    hidden characters and backticks (which would close the code block they are shown in and
    let the rest restyle the card) are written as ``\\uXXXX`` escapes. Outside strings JSON
    holds neither, so only string contents change spelling."""
    text = json.dumps(value, ensure_ascii=False, **options)
    if text.isascii() and "`" not in text and "\x7f" not in text:
        return text
    return "".join(_shown_char(c) for c in text)


def shown_name(name: str) -> str:
    """A tool's name, or a Workflow Builder step's title (which takes its place and is user
    text), as one line of mrkdwn: escaped, and every hidden character, line break and
    backtick (which would close the code span it is shown in) written as ``\\uXXXX``, as in
    :func:`shown_json`. A configured tool's name is unchanged."""
    if name.isascii() and name.isprintable() and "`" not in name:
        return escape(name)
    return escape("".join(_shown_char(c, keep_newlines=False) for c in name))


def shown_text(text: str) -> str:
    """Free text (the model's "why") as mrkdwn: escaped, hidden characters such as a
    right-to-left override written as ``\\uXXXX`` (line breaks kept)."""
    if text.isascii() and "\x7f" not in text and all(c.isprintable() or c == "\n" for c in text):
        return escape(text)
    return escape("".join(_shown_char(c, backtick=False) for c in text))


def _shown_char(char: str, *, keep_newlines: bool = True, backtick: bool = True) -> str:
    hidden = unicodedata.category(char) in _HIDDEN_CATEGORIES
    if (backtick and char == "`") or (hidden and not (keep_newlines and char == "\n")):
        # JSON's own escape: \u0060 for a backtick, a surrogate pair past U+FFFF.
        return f"\\u{ord(char):04x}" if ord(char) < 0x10000 else json.dumps(char)[1:-1]
    return char


def truncated(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def escaped_arguments(
    arguments: dict[str, Any], limit: int = LIST_ARGUMENTS_LIMIT
) -> tuple[str, bool]:
    """``key="value", …`` on one line, escaped, then cut to ``limit`` (lists, the Home,
    history, the recovery card); and whether it was cut. Cutting before escaping let 1,000
    ``&`` grow to 5,000 characters, past a section's 3,000: Slack refused the whole card."""
    line = ", ".join(f"{shown_json(k)[1:-1]}={shown_json(v)}" for k, v in arguments.items())
    shown = escaped_within(line, limit)
    return shown, len(shown) < len(escape(line))


def button(action_id: str, text: str, value: str, style: str | None = None) -> Block:
    block: Block = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text, "emoji": True},
        "value": value,
    }
    if style:
        block["style"] = style
    return block


def confirm(title: str, text: str, confirm_label: str, *, danger: bool = False) -> Block:
    """The "are you sure?" dialog of a button or menu."""
    dialog: Block = {
        "title": {"type": "plain_text", "text": title},
        "text": {"type": "mrkdwn", "text": text},
        "confirm": {"type": "plain_text", "text": confirm_label},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }
    if danger:
        dialog["style"] = "danger"
    return dialog


def context(text: str) -> Block:
    """A line of small print (mrkdwn)."""
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def list_row(text: str, *below: Block) -> list[Block]:
    """One item of a list (approvals, questions, waits): a divider, its text, what goes below."""
    return [
        {"type": "divider"},
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        *below,
    ]


def pause_ids(what: str, approval: Approval) -> Block:
    """The last line of a question's card or a wait's notice: its id and its run's."""
    return {
        "type": "context",
        "block_id": "pause_ids",
        "elements": [
            {"type": "mrkdwn", "text": f"{what} `{approval.id}` · run `{approval.run_id}`"}
        ],
    }


def split_for_slack(text: str, limit: int = MESSAGE_TEXT_LIMIT) -> list[str]:
    """Split a long answer into messages, at line breaks where possible."""
    chunks: list[str] = []
    remaining = text
    while len(remaining) > limit:
        cut = remaining.rfind("\n", 0, limit)
        if cut < limit // 2:
            cut = limit
            entity = remaining.rfind("&", cut - 5, cut)
            if entity != -1 and ";" not in remaining[entity:cut]:
                cut = entity  # never split an escaped character like &amp;
        chunks.append(remaining[:cut])
        remaining = remaining[cut:].lstrip("\n")
    chunks.append(remaining)
    return chunks
