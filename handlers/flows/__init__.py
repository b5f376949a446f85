"""What follows a request or a timer: the paths from a click, a mention or a sweep to Slack.

Listeners acknowledge and hand their work here; so do the sweeper, the callback route and
the command line, so a decision made anywhere settles the same way. Bottom to top: where a
click came from (:mod:`~handlers.flows.clicks`); drive or resume a run and answer in its thread
(:mod:`~handlers.flows.runs`); quorum voters still allowed (:mod:`~handlers.flows.quorum`);
the one settle path and the decisions and answers that take it
(:mod:`~handlers.flows.settle`), with edit-then-approve (:mod:`~handlers.flows.edits`) and
standing grants (:mod:`~handlers.flows.grants`); opening a form on a click
(:mod:`~handlers.flows.forms`); /approvals pages and their refresh (:mod:`~handlers.flows.lists`);
and the sweeper (:mod:`~handlers.flows.sweeper`).
"""

from handlers.flows.batches import decide_batch_from_slack
from handlers.flows.clicks import (
    GROUPS_UNKNOWN,
    LOOKUP_FAILED,
    NOT_HERE,
    ClickPlace,
    EnsureMay,
    FormClick,
    Tell,
    clicked_approval,
    may_see_here,
)
from handlers.flows.edits import edit_from_slack
from handlers.flows.forms import form_opening
from handlers.flows.grants import CardGrants, grant_from_slack, revoke_from_slack
from handlers.flows.holds import hold_from_slack, show_hold
from handlers.flows.lists import LIST_FAILED, RefreshList, approvals_page, list_refresher
from handlers.flows.recoveries import recover_from_slack
from handlers.flows.runs import (
    after_expiry,
    after_the_decision,
    announce_cancelled,
    carry_on,
    drive_request,
    refresh_settled_cards,
    resume_and_publish,
)
from handlers.flows.settle import DECISION_FAILED, answer_from_slack, decide_from_slack
from handlers.flows.sweeper import run_card_outbox, run_sweeper, sweep_once

__all__ = [
    "DECISION_FAILED",
    "GROUPS_UNKNOWN",
    "LIST_FAILED",
    "LOOKUP_FAILED",
    "NOT_HERE",
    "CardGrants",
    "ClickPlace",
    "EnsureMay",
    "FormClick",
    "RefreshList",
    "Tell",
    "after_expiry",
    "after_the_decision",
    "announce_cancelled",
    "answer_from_slack",
    "approvals_page",
    "carry_on",
    "clicked_approval",
    "decide_batch_from_slack",
    "decide_from_slack",
    "drive_request",
    "edit_from_slack",
    "form_opening",
    "grant_from_slack",
    "hold_from_slack",
    "list_refresher",
    "may_see_here",
    "recover_from_slack",
    "refresh_settled_cards",
    "resume_and_publish",
    "revoke_from_slack",
    "run_card_outbox",
    "run_sweeper",
    "show_hold",
    "sweep_once",
]
