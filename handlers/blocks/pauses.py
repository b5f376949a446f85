"""Every pause by its kind: approvals, questions, callback waits, retries and delegations.

Every pause is a row of the ``approvals`` table with a ``kind``; :func:`render_card` renders a
row by its kind, so the card outbox, the edits after a click, an expiry or a resume, and
/approvals all go through one function. Like every card, it is a pure function of the row: a
card looks the same after a restart or on another replica. :func:`waiting_text` is what a
paused run says in its thread above the cards it posts.
"""

from __future__ import annotations

from handlers.blocks.cards import render_approval_card
from handlers.blocks.delegations import DELEGATION, render_delegation_notice
from handlers.blocks.kit import Block
from handlers.blocks.questions import QUESTION, render_question_card
from handlers.blocks.recoveries import RECOVERY, render_recovery_card
from handlers.blocks.waits import render_callback_notice, render_retry_notice
from storage.models import Approval


def kind_of(approval: Approval) -> str:
    return approval.kind or "approval"


def render_card(approval: Approval) -> tuple[str, list[Block]]:
    """(notification text, blocks) of any pause, by its kind."""
    match kind_of(approval):
        case "question":
            return render_question_card(approval)
        case "callback":
            return render_callback_notice(approval)
        case "retry":
            return render_retry_notice(approval)
        case "recovery":
            return render_recovery_card(approval)
        case "delegation":
            return render_delegation_notice(approval)
    return render_approval_card(approval)


def waiting_text(new_pauses: list[Approval]) -> str:
    """What a paused run says in its thread, above the cards and notices it posts."""
    kinds = [kind_of(a) for a in new_pauses]
    decisions, questions = kinds.count("approval"), kinds.count(QUESTION)
    failures = kinds.count(RECOVERY)
    agents = kinds.count(DELEGATION)
    waits = len(kinds) - decisions - questions - failures - agents
    if not kinds:
        return ":raised_hand: Still waiting for a decision."
    if agents and not (decisions or questions or waits or failures):
        return (
            f":robot_face: Waiting for {agents} sub-agent{'s' if agents != 1 else ''} (see below)."
        )
    if decisions and not (questions or waits or failures):
        # The sentence approvals always had.
        return (
            f":raised_hand: Waiting for a human: {decisions} call"
            f"{'s need' if decisions != 1 else ' needs'} a decision."
        )
    parts = []
    if decisions:
        parts.append(f"{decisions} call{'s need' if decisions != 1 else ' needs'} a decision")
    if questions:
        parts.append(f"{questions} question{'s need' if questions != 1 else ' needs'} an answer")
    if failures:
        parts.append(f"{failures} failed call{'s need' if failures != 1 else ' needs'} a choice")
    if waits:
        parts.append(f"{waits} call{'s are' if waits != 1 else ' is'} waiting (see below)")
    if agents:
        parts.append(f"{agents} sub-agent{'s are' if agents != 1 else ' is'} working")
    return ":raised_hand: Paused: " + "; ".join(parts) + "."
