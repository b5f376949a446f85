"""Block Kit for the rule on arguments that chose an approval's policy (on cards and lists).

A pure function of the approval row: the rule is the one snapshotted when the approval was
requested, so the card says what applied then, whatever the configuration says now.
"""

from __future__ import annotations

from typing import Any

from handlers.blocks.kit import escaped_within
from storage.models import Approval

RULE_WHEN_LIMIT = 1000
RULE_ERROR_LIMIT = 500


def rule_text(approval: Approval) -> str | None:
    """ "Rule `policies.x.rules[1]` applied: `args.env == "prod"`", or None (no rule)."""
    label = getattr(approval, "rule", None)
    if not label:
        return None
    name = _code(escaped_within(label, 300))
    when = _code(escaped_within(approval.rule_when or "", RULE_WHEN_LIMIT))
    if approval.rule_error:
        error = escaped_within(approval.rule_error, RULE_ERROR_LIMIT)
        return (
            f":warning: Rule {name} ({when}) could not be evaluated for this call: {error}. "
            "Failing closed: the tool's approvers decide."
        )
    return f"Rule {name} applied: {when}"


def rule_block(approval: Approval) -> dict[str, Any] | None:
    text = rule_text(approval)
    if text is None:
        return None
    return {
        "type": "context",
        "block_id": "approval_rule",
        "elements": [{"type": "mrkdwn", "text": text}],
    }


def _code(text: str) -> str:
    # A backtick inside would end the code span early; a look-alike keeps the text readable.
    return f"`{text.replace('`', 'ˋ')}`"
