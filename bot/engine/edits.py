"""Edit, then approve: settling an approval with the arguments an approver corrected.

The checks are :mod:`bot.policy.edits`' (editable, schema, the edited call's policy); the edit
is stored on the approval (``storage.stores.edits``) in the transaction that approves it, or
keeps it pending under stricter approvers, and a resume is claimed exactly as a decision claims it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import llm

from bot.config import Config
from bot.engine.settlements import Settlements
from bot.policy import (
    EDITED_MEANWHILE,
    ApprovalNotFound,
    Decision,
    EditRefused,
    InvalidEdit,
    edit_errors,
    ensure_may_decide,
    shown_id,
)
from bot.policy.edits import edited_call_policy, stricter_by
from bot.tools import tool_definition
from storage.errors import EditConflict
from storage.hashes import PayloadHasher, fingerprint
from storage.records import EditRequest
from storage.values import storable


class Edits:
    """``edit_and_approve``, settled through the same claims and refusals as a decision."""

    def __init__(self, settlements: Settlements, config: Config) -> None:
        self.settlements = settlements
        self.config = config

    def _configured_tool(self, name: str) -> llm.Tool | None:
        return self.config.tool_named(name)

    async def edit_and_approve(
        self,
        approval_id: str,
        *,
        actor: str,
        arguments: dict[str, Any],
        actor_groups: Collection[str] = (),
        actor_name: str | None = None,
        claim_resume: bool = True,
        shown: str | None = None,
    ) -> Decision:
        """Approve the call with ``arguments`` instead of the proposed ones, exactly once.

        ``actor_name``: the approver's display name, stored with the decision as ``decide``
        stores it (the model reads who approved by name). ``shown``: the fingerprint of the
        arguments the editor's form showed (``storage.records.shows_current``); without it,
        those of the approval as read here. Either way an edit made by someone else since
        is refused (EditRefused), never overwritten.

        Raises what ``decide`` raises (not found, not allowed, decided already, expired),
        EditRefused when the approval may not be edited or the edited call is denied by its
        policy, InvalidEdit when the arguments do not fit the tool's schema. An edited call
        whose policy asks for more (other approvers, more approvals) is recorded and stays
        pending with the stricter approvers: the Decision's approval is still ``pending``.
        """
        approval = await self.settlements.repo.get_approval(approval_id)
        if approval is None:
            raise ApprovalNotFound(f"There is no approval {shown_id(approval_id)}.")
        if approval.kind != "approval":
            raise EditRefused(
                f"{shown_id(approval_id)} is a {approval.kind}: it cannot be edited.", approval
            )
        ensure_may_decide(approval, actor, actor_groups)
        if not approval.allow_edit:
            raise EditRefused(
                f"The policy of `{approval.tool_name}` does not allow editing its calls "
                "(allow_edit); approve or deny it as it is.",
                approval,
            )
        tool = self._configured_tool(approval.tool_name)
        if tool is None:
            raise EditRefused(
                f"The tool {approval.tool_name} is no longer configured; it cannot be edited.",
                approval,
            )
        if errors := edit_errors(tool.input_schema, approval.arguments, arguments):
            raise InvalidEdit(errors, approval)
        edited = storable(arguments)
        policy = edited_call_policy(self.config.policies, approval, edited)
        if policy.approval == "deny":
            message = getattr(policy, "message", None) or "its policy denies it"
            raise EditRefused(f"The edited call is refused: {message}", approval)
        why = stricter_by(approval, policy, actor, actor_groups)
        hasher = PayloadHasher(tool_definition(tool))
        edit = EditRequest(
            arguments=edited,
            payload_hash=hasher(approval.tool_name, edited),
            stricter_approvers=list(policy.approvers) if why else None,
            min_approvals=max(
                getattr(policy, "min_approvals", 1) or 1, getattr(approval, "min_approvals", 1) or 1
            ),
            why_stricter=why,
            rule=getattr(policy, "rule", None),
            rule_when=getattr(policy, "rule_when", None),
            rule_error=getattr(policy, "rule_error", None),
            # The checks above read ``approval``: they hold only while it is unchanged.
            shown=fingerprint(approval.payload_hash) if shown is None else shown,
        )
        now = self.settlements.leases.clock()
        try:
            outcome = await self.settlements.repo.edit_approval(
                approval_id,
                actor=actor,
                edit=edit,
                actor_name=actor_name,
                worker=self.settlements.leases.new_owner(),
                lease_until=self.settlements.leases.until(),
                now=now,
                claim=claim_resume,
            )
        except EditConflict:
            raise EditRefused(EDITED_MEANWHILE, approval) from None
        if outcome is None:
            current = await self.settlements.repo.get_approval(approval_id)
            if current is not None and current.status == "pending" and not current.allow_edit:
                raise EditRefused("This approval cannot be edited.", current)
            await self.settlements.refuse_settled(approval_id, now)  # raises: expired or decided
        assert outcome is not None
        if outcome.resume_claimed:
            self.settlements.claims.remember(outcome)
        return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
