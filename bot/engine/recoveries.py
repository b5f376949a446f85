"""Settling a recovery row (``on_error = "ask"``): Retry, Skip, "it ran", or Stop run.

Owns no state: each choice is one conditional UPDATE in storage
(``Repository.recover``), so exactly one of several concurrent clicks wins, on any replica.
Retry, Skip and "it ran" claim the run's resume in the same transaction when nothing else of
the run is pending (kept in :class:`bot.engine.claims.Claims` until ``Runner.resume`` drives
it); the resumed drive runs a Retry once through the retry path of ``bot.gate.answers``.
Stop run cancels the run with its other pending rows. Who may choose: the row's approvers
(``recovery_by``, else the tool's approvers, else the requester), checked as a decision is.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from bot.config import Config
from bot.engine.settlements import Settlements
from bot.policy import (
    EDITED_MEANWHILE,
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    EditRefused,
    InvalidEdit,
    edit_errors,
    ensure_may_decide,
    shown_id,
)
from bot.policy.edits import edited_call_policy
from bot.tools import tool_definition
from storage.hashes import PayloadHasher
from storage.values import storable

RECOVERY_CHOICES = ("retry", "skip", "resolve", "stop")
MAX_NOTE_LENGTH = 2000


class Recoveries:
    def __init__(self, settlements: Settlements, config: Config) -> None:
        self.settlements = settlements
        self.config = config

    async def recover(
        self,
        approval_id: str,
        *,
        actor: str,
        choice: str,
        actor_groups: Collection[str] = (),
        actor_name: str | None = None,
        note: str | None = None,
        claim_resume: bool = True,
    ) -> Decision:
        """Settle a pending recovery with ``choice``; the same refusals as a decision
        (ApprovalNotFound, NotAllowed, AlreadyDecided, ApprovalExpired). ``resolve`` ("it
        ran: tell the model it succeeded") only for a call whose outcome is unknown."""
        repo, leases = self.settlements.repo, self.settlements.leases
        if choice not in RECOVERY_CHOICES:
            raise DecisionRefused(
                f"{choice!r} is not a recovery choice (one of: {', '.join(RECOVERY_CHOICES)})."
            )
        approval = await repo.get_approval(approval_id)
        if approval is None or approval.kind != "recovery":
            raise ApprovalNotFound(f"There is no recovery {shown_id(approval_id)}.")
        ensure_may_decide(approval, actor, actor_groups)
        if choice == "resolve" and approval.recovery_cause != "unknown":
            raise DecisionRefused(
                "Only a call whose outcome is unknown can be marked as run.", approval
            )
        note = (note or "").strip()[:MAX_NOTE_LENGTH] or None
        now = leases.clock()
        outcome = await repo.recover(
            approval_id,
            choice=choice,
            actor=actor,
            actor_name=actor_name,
            note=note,
            worker=leases.new_owner(),
            lease_until=leases.until(),
            now=now,
            claim=claim_resume,
        )
        if outcome is not None:
            if outcome.resume_claimed:
                self.settlements.claims.remember(outcome)
            return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
        await self.settlements.refuse_settled(approval_id, now)

    async def edit_and_retry(
        self,
        approval_id: str,
        *,
        actor: str,
        arguments: dict[str, Any],
        actor_groups: Collection[str] = (),
        actor_name: str | None = None,
        shown: str | None = None,
        claim_resume: bool = True,
    ) -> Decision:
        """Edit, then retry: the same checks as edit, then approve (editable, the tool's
        schema, the edited call's policy: one it denies is refused), then a Retry of the
        edited call, exactly once. An edited call a rule now gates asks for approval when
        it runs (``bot.gate.answers``). ``shown``: the payload hash the form showed; an edit
        or choice made since is refused."""
        repo, leases = self.settlements.repo, self.settlements.leases
        row = await repo.get_approval(approval_id)
        if row is None or row.kind != "recovery":
            raise ApprovalNotFound(f"There is no recovery {shown_id(approval_id)}.")
        ensure_may_decide(row, actor, actor_groups)
        if not row.allow_edit:
            raise EditRefused(
                f"The policy of `{row.tool_name}` does not allow editing its calls "
                "(allow_edit); retry or skip it as it is.",
                row,
            )
        tool = self.config.tool_named(row.tool_name)
        if tool is None:
            raise EditRefused(f"The tool {row.tool_name} is no longer configured.", row)
        current = row.edited_arguments if row.edited_arguments is not None else row.arguments
        if errors := edit_errors(tool.input_schema, current, arguments):
            raise InvalidEdit(errors, row)
        edited = storable(arguments)
        policy = edited_call_policy(self.config.policies, row, edited)
        if policy.approval == "deny":
            message = policy.message or "its policy denies it"
            raise EditRefused(f"The edited call is refused: {message}", row)
        now = leases.clock()
        outcome = await repo.edit_and_retry(
            approval_id,
            arguments=edited,
            payload_hash=PayloadHasher(tool_definition(tool))(row.tool_name, edited),
            shown_hash=shown or row.payload_hash,
            actor=actor,
            actor_name=actor_name,
            worker=leases.new_owner(),
            lease_until=leases.until(),
            now=now,
            claim=claim_resume,
        )
        if outcome is None:
            latest = await repo.get_approval(approval_id)
            if latest is not None and latest.status == "pending" and latest.expires_at > now:
                raise EditRefused(EDITED_MEANWHILE, latest)  # edited since the form showed it
            await self.settlements.refuse_settled(approval_id, now)
        assert outcome is not None
        if outcome.resume_claimed:
            self.settlements.claims.remember(outcome)
        return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
