"""Policy: who must approve which call, who may decide, answer, grant or edit, and why a
decision is refused.

Pure checks of configuration and rows, no I/O: a tool's :class:`Policy` and its rules on
arguments (CEL, :mod:`bot.policy.rules`), the schema check of a call's arguments, quorum,
standing grants and edits. The engine and Slack's listeners ask here, so a click, a command
and the gate follow the same rules and refuse in the same words.
"""

from bot.policy.arguments import MAX_ARGUMENT_DEPTH, argument_error, too_deep
from bot.policy.decisions import (
    MAX_ANSWER_LENGTH,
    AlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    NotAllowed,
    StaleCopy,
    describe_status,
    describe_wait,
    ensure_may_answer,
    ensure_may_decide,
    ensure_may_see,
    shown_id,
)
from bot.policy.edits import EDITED_MEANWHILE, EditRefused, InvalidEdit, changes_text, edit_errors
from bot.policy.grants import duration_text, grant_durations, grant_refusal, revoke_refusal
from bot.policy.holds import NOT_AN_OPERATOR, HoldRefused, ensure_may_hold, operators
from bot.policy.policy import Policy, refusal_reason
from bot.policy.quorum import AlreadyApproved, approvals_so_far, needs_quorum, progress
from bot.policy.recovery import DEFAULT_MAX_RECOVERIES, ON_ERROR_CHOICES, RecoveryPolicy
from bot.policy.rules import Rule

__all__ = [
    "DEFAULT_MAX_RECOVERIES",
    "EDITED_MEANWHILE",
    "MAX_ANSWER_LENGTH",
    "MAX_ARGUMENT_DEPTH",
    "NOT_AN_OPERATOR",
    "ON_ERROR_CHOICES",
    "AlreadyApproved",
    "AlreadyDecided",
    "ApprovalExpired",
    "ApprovalNotFound",
    "Decision",
    "DecisionRefused",
    "EditRefused",
    "HoldRefused",
    "InvalidEdit",
    "NotAllowed",
    "Policy",
    "RecoveryPolicy",
    "Rule",
    "StaleCopy",
    "approvals_so_far",
    "argument_error",
    "changes_text",
    "describe_status",
    "describe_wait",
    "duration_text",
    "edit_errors",
    "ensure_may_answer",
    "ensure_may_decide",
    "ensure_may_hold",
    "ensure_may_see",
    "grant_durations",
    "grant_refusal",
    "needs_quorum",
    "operators",
    "progress",
    "refusal_reason",
    "revoke_refusal",
    "shown_id",
    "too_deep",
]
