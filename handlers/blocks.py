"""Block Kit: approval cards, the deny-reason modal, the arguments modal, /approvals pages.

Everything here is a pure function of database rows, so a card or a list looks the same after
a restart or on another replica. Untrusted text (tool arguments, reasons, model output) is
escaped so it cannot ping ``<!channel>``, forge a ``<@U…>`` mention or a link; button values
carry only an approval id (Approve: and the fingerprint of the arguments it showed, checked
against the stored ones when it comes back), and nothing on a card is trusted back.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Any

from handlers.form_blocks import form_modal, text_input
from handlers.quorum_blocks import approved_by_text, progress_block, progress_text
from handlers.rule_blocks import rule_block, rule_text
from storage.models import Approval
from storage.records import FINGERPRINT_LENGTH, UNEDITED, fingerprint

Block = dict[str, Any]

APPROVE = "approval_approve"
DENY = "approval_deny"
SHOW_ARGUMENTS = "approval_show_arguments"
PAGE = "approvals_page"
DENY_MODAL = "approval_deny_reason"
REASON_BLOCK = "deny_reason"
REASON_INPUT = "reason"

SECTION_LIMIT = 3000
FIELD_LIMIT = 2000  # one of a section's fields
WHO_MAY_APPROVE = "Who may approve"
CARD_ARGUMENTS_LIMIT = 1200
LIST_ARGUMENTS_LIMIT = 120
OUTCOME_DETAIL_LIMIT = 2000  # a reason on a decided card, well within its section's 3000
MESSAGE_TEXT_LIMIT = 3900


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
    pieces, piece, length = [], [], 0
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
    if user_or_group.startswith("S"):
        return f"<!subteam^{user_or_group}>"
    return f"<@{user_or_group}>"


def slack_date(moment: datetime, style: str = "{date_short_pretty} at {time}") -> str:
    """Slack's date formatting: shown in each reader's time zone, with a UTC fallback."""
    epoch = int(moment.replace(tzinfo=UTC).timestamp())
    fallback = moment.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{epoch}^{style}|{fallback}>"


def arguments_text(arguments: dict[str, Any]) -> str:
    return shown_json(arguments, indent=2, sort_keys=True)


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


def _shown_char(char: str) -> str:
    if char == "`" or (char != "\n" and unicodedata.category(char) in _HIDDEN_CATEGORIES):
        # JSON's own escape: \u0060 for a backtick, a surrogate pair past U+FFFF.
        return f"\\u{ord(char):04x}" if ord(char) < 0x10000 else json.dumps(char)[1:-1]
    return char


def truncated(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def approvers_text(approval: Approval, limit: int = FIELD_LIMIT) -> str:
    """Who may approve, within ``limit`` characters: as many as fit, then "and N more".

    A policy may name hundreds of approvers; a card that lists them all would exceed Slack's
    field limit and could never be posted. Mentions are never cut in two.
    """
    if not approval.approvers:
        return "anyone but the requester" if not approval.allow_self_approval else "anyone"
    return mentions_within([mention(a) for a in approval.approvers], limit)


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


def _button(action_id: str, text: str, value: str, style: str | None = None) -> Block:
    button: Block = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text, "emoji": True},
        "value": value,
    }
    if style:
        button["style"] = style
    return button


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


def decision_buttons(approval: Approval, *, with_arguments_button: bool) -> Block:
    approve = _button(APPROVE, "Approve", approve_value(approval), "primary")
    approve["confirm"] = _confirm(
        "Approve this call?",
        f"`{escape(approval.tool_name)}` will run with the arguments shown.",
        "Approve",
    )
    deny = _button(DENY, "Deny", approval.id, "danger")
    deny["confirm"] = _confirm(
        "Deny this call?", "You can give a reason on the next screen.", "Deny", danger=True
    )
    elements = [approve, deny]
    from handlers import edit_blocks  # it builds on this module

    if edit_blocks.editable(approval):
        elements.append(edit_blocks.edit_button(approval))
    if with_arguments_button:
        elements.append(_button(SHOW_ARGUMENTS, "Show all arguments", approval.id))
    return {"type": "actions", "block_id": f"approval:{approval.id}", "elements": elements}


def _confirm(title: str, text: str, confirm: str, *, danger: bool = False) -> Block:
    dialog: Block = {
        "title": {"type": "plain_text", "text": title},
        "text": {"type": "mrkdwn", "text": text},
        "confirm": {"type": "plain_text", "text": confirm},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }
    if danger:
        dialog["style"] = "danger"
    return dialog


def card_text(approval: Approval) -> str:
    """The notification text (and screen-reader text) of a card."""
    return f"Approval needed: {approval.tool_name} (asked by {approval.requester})"


def render_approval_card(approval: Approval) -> tuple[str, list[Block]]:
    """The card of a pending approval, or of a decided one (buttons gone, outcome shown)."""
    from handlers import edit_blocks  # it builds on this module

    text = arguments_text(edit_blocks.current_arguments(approval))
    shown = escaped_within(text, CARD_ARGUMENTS_LIMIT)
    cut = len(shown) < len(escape(text))
    blocks: list[Block] = [
        {
            "type": "section",
            "block_id": "approval_summary",
            "text": {
                "type": "mrkdwn",
                "text": f"*Approval needed* for `{escape(approval.tool_name)}`",
            },
        },
        {
            "type": "section",
            "block_id": "approval_arguments",
            "text": {"type": "mrkdwn", "text": f"```{shown}```"},
        },
        {
            "type": "section",
            "block_id": "approval_people",
            "fields": [
                {"type": "mrkdwn", "text": f"*Asked by*\n{mention(approval.requester)}"},
                {
                    "type": "mrkdwn",
                    "text": f"*{WHO_MAY_APPROVE}*\n"
                    f"{approvers_text(approval, FIELD_LIMIT - len(WHO_MAY_APPROVE) - 3)}",
                },
                {"type": "mrkdwn", "text": f"*Expires*\n{slack_date(approval.expires_at)}"},
                {"type": "mrkdwn", "text": f"*If it expires*\n{_on_expiry_text(approval)}"},
            ],
        },
    ]
    if (rule := rule_block(approval)) is not None:
        blocks.insert(1, rule)
    if (edited := edit_blocks.edit_context(approval)) is not None:
        blocks.append(edited)
    if approval.status == "pending":
        quorum = progress_block(approval)
        if quorum is not None:
            blocks.append(quorum)
        blocks.append(decision_buttons(approval, with_arguments_button=cut))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "approval_outcome",
                "text": {"type": "mrkdwn", "text": outcome_text(approval)},
            }
        )
        if cut:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"arguments:{approval.id}",
                    "elements": [_button(SHOW_ARGUMENTS, "Show all arguments", approval.id)],
                }
            )
    blocks.append(
        {
            "type": "context",
            "block_id": "approval_ids",
            "elements": [
                {"type": "mrkdwn", "text": f"Approval `{approval.id}` · run `{approval.run_id}`"}
            ],
        }
    )
    return card_text(approval), blocks


def _on_expiry_text(approval: Approval) -> str:
    if approval.on_expiry == "cancel":
        return "the task stops"
    return "treated as denied"


def outcome_text(approval: Approval) -> str:
    """One line on a decided card."""
    when = slack_date(approval.decided_at) if approval.decided_at else ""
    who = mention(approval.decided_by) if approval.decided_by else "nobody"
    if approval.status in ("approved", "executing", "executed", "unknown"):
        who = approved_by_text(approval, who)
    match approval.status:
        case "approved" | "executing":
            return f":white_check_mark: *Approved* by {who} {when}"
        case "executed":
            return f":white_check_mark: *Approved* by {who} {when} · ran"
        case "unknown":
            return f":warning: *Approved* by {who} {when} · outcome unknown (not re-run)"
        case "denied":
            reason = (
                f": {escaped_within(approval.reason, OUTCOME_DETAIL_LIMIT)}"
                if approval.reason
                else ""
            )
            return f":no_entry: *Denied* by {who} {when}{reason}"
        case "expired":
            return f":hourglass: *Expired* {slack_date(approval.expires_at)} with no decision"
        case "cancelled":
            detail = escaped_within(
                approval.result or approval.reason or "cancelled", OUTCOME_DETAIL_LIMIT
            )
            return f":heavy_multiplication_x: *Cancelled*: {detail}"
    return f"*{approval.status}*"


def render_deny_modal(approval: Approval, metadata: dict[str, Any]) -> Block:
    ask = (
        f"Deny `{escape(approval.tool_name)}` asked by {mention(approval.requester)}? "
        "The agent will be told your reason."
    )
    return form_modal(
        DENY_MODAL,
        json.dumps(metadata),
        title="Deny this call",
        submit="Deny",
        blocks=[
            {"type": "section", "text": {"type": "mrkdwn", "text": ask}},
            text_input(
                REASON_BLOCK,
                REASON_INPUT,
                label="Reason",
                max_length=1000,
                optional=True,
                placeholder="Not during the freeze",
            ),
        ],
    )


def render_arguments_modal(approval: Approval) -> Block:
    """The whole of the arguments, split over sections (each at most 3000 characters)."""
    from handlers.edit_blocks import current_arguments  # it builds on this module

    arguments = current_arguments(approval)
    pieces = escaped_pieces(arguments_text(arguments), SECTION_LIMIT - 6)  # ``` fences
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{piece}```"}}
        for piece in pieces[:99]
    ]
    if len(pieces) > 99:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": "Too long to show whole here; use "
                        f"`approval-bot runs show {approval.run_id} --json`.",
                    }
                ],
            }
        )
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Arguments"},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": blocks,
    }


def render_approvals_page(
    approvals: list[Approval],
    *,
    view: str,
    page: int,
    total: int,
    page_size: int,
    count_limit: int | None = None,
    now: datetime,
    permalinks: dict[str, str],
    settled: Approval | None = None,
) -> tuple[str, list[Block]]:
    """One page of /approvals: each item with its buttons; a clear empty state.

    ``settled``: an approval just decided from this list, kept in its place with its outcome
    instead of its buttons (the list is edited in place after a decision, see list_refresh)."""
    titles = {
        "approve": "Waiting for your decision",
        "mine": "Your requests that are waiting",
        "all": "Everything waiting in this channel",
    }
    title = titles[view]
    kept = _with_settled(approvals, settled)
    if total == 0 and kept:
        return f"{title}: 0", [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*{title}*\nNothing else is waiting."},
            },
            *_list_items(kept, view, page, now, permalinks),
            _help_context(),
        ]
    if total == 0:
        empty = {
            "approve": "Nothing is waiting for your decision. :tada:",
            "mine": "None of your requests are waiting for a decision.",
            "all": "Nothing is waiting for a decision in this channel.",
        }[view]
        return empty, [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*\n{empty}"}},
            _help_context(),
        ]
    shown_total = (
        f"{count_limit:,}+" if count_limit is not None and total > count_limit else f"{total:,}"
    )
    first = page * page_size + 1
    last = page * page_size + len(approvals)
    blocks: list[Block] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"*{title}* ({first}–{last} of {shown_total})"},
        }
    ]
    blocks.extend(_list_items(kept, view, page, now, permalinks))
    navigation = []
    if page > 0:
        navigation.append(_button(PAGE, "Newer", json.dumps({"view": view, "page": page - 1})))
    if last < total:
        navigation.append(_button(PAGE, "Older", json.dumps({"view": view, "page": page + 1})))
    if navigation:
        blocks.append({"type": "actions", "block_id": "approvals_pages", "elements": navigation})
    blocks.append(_help_context())
    return f"{title}: {total}", blocks


def _with_settled(approvals: list[Approval], settled: Approval | None) -> list[Approval]:
    """The page's items with ``settled`` where it stood (newest first, as listed)."""
    if settled is None or settled.kind not in (None, "approval"):
        return approvals  # questions and waits are listed by pause_blocks, pending only
    if any(a.id == settled.id for a in approvals):
        return approvals
    key = (settled.created_at, settled.id)
    index = next((i for i, a in enumerate(approvals) if (a.created_at, a.id) < key), None)
    return (
        [*approvals[:index], settled, *approvals[index:]]
        if index is not None
        else [
            *approvals,
            settled,
        ]
    )


def _list_items(
    approvals: list[Approval], view: str, page: int, now: datetime, permalinks: dict[str, str]
) -> list[Block]:
    """Items of an /approvals page; their buttons' block_id names the list (view and page),
    the one thing a click on an ephemeral message tells us about it."""
    items: list[Block] = []
    for approval in approvals:
        for block in list_item(approval, now, permalinks.get(approval.id)):
            if block.get("type") == "actions" and block.get("block_id"):
                block = {**block, "block_id": list_block_id(view, page, block["block_id"])}
            items.append(block)
    return items


LIST_BLOCK_PREFIX = "approvals_list"


def list_block_id(view: str, page: int, block_id: str) -> str:
    return f"{LIST_BLOCK_PREFIX}:{view}:{page}:{block_id}"


def list_item(approval: Approval, now: datetime, permalink: str | None) -> list[Block]:
    """An approval in a list (/approvals, the App Home): arguments cut short, buttons.
    Questions and waits are listed as pause_blocks renders them."""
    link = f" · <{permalink}|card>" if permalink else ""
    if approval.kind not in (None, "approval"):
        # Questions and waits render in pause_blocks, which builds on this module.
        from handlers.pause_blocks import list_item as pause_list_item

        return pause_list_item(approval, _age(now - approval.created_at), link)
    from handlers.edit_blocks import current_arguments  # it builds on this module

    summary, cut = truncated(
        ", ".join(
            f"{shown_json(k)[1:-1]}={shown_json(v)}" for k, v in current_arguments(approval).items()
        ),
        LIST_ARGUMENTS_LIMIT,
    )
    return list_row(
        f"`{escape(approval.tool_name)}` `{escape(summary)}`\n"
        f"asked by {mention(approval.requester)} {_age(now - approval.created_at)} ago"
        f" · expires {slack_date(approval.expires_at)}{link}{_progress(approval)}"
        + (f"\n{rule}" if (rule := rule_text(approval)) else ""),
        # Nobody approves arguments they could not read: offer the whole of them.
        decision_buttons(approval, with_arguments_button=cut)
        if approval.status == "pending"
        else {"type": "section", "text": {"type": "mrkdwn", "text": outcome_text(approval)}},
    )


def list_row(text: str, *below: Block) -> list[Block]:
    """One item of a list (approvals, questions, waits): a divider, its text, what goes below."""
    return [
        {"type": "divider"},
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        *below,
    ]


def _progress(approval: Approval) -> str:
    text = progress_text(approval)
    return f"\n:busts_in_silhouette: {text}" if text else ""


def _age(delta: Any) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _help_context() -> Block:
    return {
        "type": "context",
        "elements": [
            {
                "type": "mrkdwn",
                "text": "`/approvals` yours to decide · `/approvals mine` your requests · "
                "`/approvals all` this channel · `/approvals help`",
            }
        ],
    }


HELP_TEXT = (
    "*/approvals* lists calls waiting for a human decision.\n"
    "• `/approvals` — what you may approve\n"
    "• `/approvals mine` — what you asked for\n"
    "• `/approvals all` — everything pending in this channel\n"
    "• `/approvals grants` — tools allowed without asking in this channel's threads\n"
    "• `/approvals history` — recent decisions in this channel\n"
    "• `/approvals help` — this message\n"
    "Each item has the same buttons as its card: Approve / Deny, or a question's answers. "
    "Calls waiting on another system or for a retry are listed too."
)


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
