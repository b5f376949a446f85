"""Block Kit: every card, list, form and sentence the bot shows in Slack, from database rows.

Everything here is a pure function of database rows (no I/O), so a card or a list looks the
same after a restart or on another replica. Untrusted text (tool arguments, reasons, model
output) is escaped so it cannot ping ``<!channel>``, forge a ``<@U…>`` mention or a link;
button values carry only ids (and what the clicked copy showed), and nothing on a card is
trusted back.

Bottom to top: :mod:`~handlers.blocks.kit` (escape, mention, dates, buttons, Slack's limits),
:mod:`~handlers.blocks.values` (what buttons carry, read back), :mod:`~handlers.blocks.forms`
(the modal shell); what an approval card is made of (:mod:`~handlers.blocks.edits` and
:mod:`~handlers.blocks.edit_submissions`,
:mod:`~handlers.blocks.rules`, :mod:`~handlers.blocks.quorum`); the card
(:mod:`~handlers.blocks.cards`) and its modals (:mod:`~handlers.blocks.modals`); the other
pauses (:mod:`~handlers.blocks.questions`, :mod:`~handlers.blocks.waits`) and every pause by
its kind (:mod:`~handlers.blocks.pauses`); /approvals pages (:mod:`~handlers.blocks.lists`),
grants, reach, history, the App Home; and the sentences a refused click reads
(:mod:`~handlers.blocks.texts`).
"""

from handlers.blocks.batches import (
    BATCH_APPROVE_ALL,
    BATCH_DENY_ALL,
    BATCH_REASON_BLOCK,
    BATCH_REASON_INPUT,
    BATCH_REVIEW,
    BATCH_REVIEW_ALL,
    BATCH_REVIEW_MODAL,
    checked_calls,
    parse_batch_value,
    render_batch_all_modal,
    render_batch_card,
    render_batch_review_modal,
)
from handlers.blocks.cards import (
    APPROVE,
    DENY,
    SHOW_ARGUMENTS,
    approvers_text,
    card_text,
    outcome_text,
    render_approval_card,
)
from handlers.blocks.delegations import DELEGATION, child_intro
from handlers.blocks.edit_submissions import errors_by_block, read_form
from handlers.blocks.edits import (
    EDIT,
    EDIT_MODAL,
    ERROR_LIMIT,
    WHOLE_BLOCK,
    current_arguments,
    editable,
    render_edit_modal,
)
from handlers.blocks.grants import GRANT, GRANT_SAME, REVOKE, decorate_card, render_grants_page
from handlers.blocks.history import HISTORY_SIZE, render_history
from handlers.blocks.holds import (
    RUN_PAUSE,
    RUN_RESUME,
    RUN_STOP,
    held_blocks,
    held_run_blocks,
    hold_text,
    working_blocks,
)
from handlers.blocks.home import home_view
from handlers.blocks.kit import (
    MESSAGE_TEXT_LIMIT,
    Block,
    escape,
    escaped_pieces,
    escaped_within,
    mention,
    shown_name,
    shown_text,
    slack_date,
    split_for_slack,
)
from handlers.blocks.lists import HELP_TEXT, PAGE, list_item, render_approvals_page
from handlers.blocks.metadata import render_card_metadata
from handlers.blocks.modals import (
    DENY_MODAL,
    REASON_BLOCK,
    REASON_INPUT,
    render_arguments_modal,
    render_deny_modal,
)
from handlers.blocks.pauses import kind_of, render_card, waiting_text
from handlers.blocks.questions import (
    ANSWER,
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_MODAL,
    CHOICE_PATTERN,
    QUESTION,
    SELECT,
    choices_of,
    render_answer_modal,
)
from handlers.blocks.reach import copy_blocks, reach_blocks
from handlers.blocks.recoveries import (
    DETAILS_ACTION,
    EDIT_ACTION,
    NOTE_BLOCK,
    NOTE_INPUT,
    RECOVERY,
    RESOLVE_ACTION,
    RESOLVE_MODAL,
    RETRY_ACTION,
    RETRY_UNKNOWN,
    SKIP_ACTION,
    STOP_ACTION,
    render_details_modal,
    render_resolve_modal,
)
from handlers.blocks.texts import granted_call_note, refusal_text, ruled_call_note, status_text
from handlers.blocks.values import (
    approve_value,
    choice_value,
    listed_at,
    parse_approve_value,
    parse_choice_value,
    parse_grant_value,
)
from handlers.blocks.waits import CALLBACK, RETRY

__all__ = [
    "ANSWER",
    "ANSWER_BLOCK",
    "ANSWER_INPUT",
    "ANSWER_MODAL",
    "APPROVE",
    "BATCH_APPROVE_ALL",
    "BATCH_DENY_ALL",
    "BATCH_REASON_BLOCK",
    "BATCH_REASON_INPUT",
    "BATCH_REVIEW",
    "BATCH_REVIEW_ALL",
    "BATCH_REVIEW_MODAL",
    "CALLBACK",
    "CHOICE_PATTERN",
    "DELEGATION",
    "DENY",
    "DENY_MODAL",
    "DETAILS_ACTION",
    "EDIT",
    "EDIT_ACTION",
    "EDIT_MODAL",
    "ERROR_LIMIT",
    "GRANT",
    "GRANT_SAME",
    "HELP_TEXT",
    "HISTORY_SIZE",
    "MESSAGE_TEXT_LIMIT",
    "NOTE_BLOCK",
    "NOTE_INPUT",
    "PAGE",
    "QUESTION",
    "REASON_BLOCK",
    "REASON_INPUT",
    "RECOVERY",
    "RESOLVE_ACTION",
    "RESOLVE_MODAL",
    "RETRY",
    "RETRY_ACTION",
    "RETRY_UNKNOWN",
    "REVOKE",
    "RUN_PAUSE",
    "RUN_RESUME",
    "RUN_STOP",
    "SELECT",
    "SHOW_ARGUMENTS",
    "SKIP_ACTION",
    "STOP_ACTION",
    "WHOLE_BLOCK",
    "Block",
    "approve_value",
    "approvers_text",
    "card_text",
    "checked_calls",
    "child_intro",
    "choice_value",
    "choices_of",
    "copy_blocks",
    "current_arguments",
    "decorate_card",
    "editable",
    "errors_by_block",
    "escape",
    "escaped_pieces",
    "escaped_within",
    "granted_call_note",
    "held_blocks",
    "held_run_blocks",
    "hold_text",
    "home_view",
    "kind_of",
    "list_item",
    "listed_at",
    "mention",
    "outcome_text",
    "parse_approve_value",
    "parse_batch_value",
    "parse_choice_value",
    "parse_grant_value",
    "reach_blocks",
    "read_form",
    "refusal_text",
    "render_answer_modal",
    "render_approval_card",
    "render_approvals_page",
    "render_arguments_modal",
    "render_batch_all_modal",
    "render_batch_card",
    "render_batch_review_modal",
    "render_card",
    "render_card_metadata",
    "render_deny_modal",
    "render_details_modal",
    "render_edit_modal",
    "render_grants_page",
    "render_history",
    "render_resolve_modal",
    "ruled_call_note",
    "shown_name",
    "shown_text",
    "slack_date",
    "split_for_slack",
    "status_text",
    "waiting_text",
    "working_blocks",
]
