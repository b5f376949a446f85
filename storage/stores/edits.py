"""Edit, then approve: the edited arguments of an approval and what the edit did.

Owns the ``approvals`` columns ``allow_edit`` (the policy's, snapshotted when the approval is
requested), ``edited_arguments``, ``edited_by`` and ``edited_at``. ``arguments`` stays what
the model proposed; an edit re-binds ``payload_hash`` to the edited arguments, so the gate
runs those and nothing else. An edit is a conditional UPDATE (pending, unexpired, editable)
under the run's lock, in the same transaction as the approval it leads to, or, when the
edited call asks for stricter approvers, as the new approver snapshot that keeps it pending.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.errors import EditConflict
from storage.hashes import shows_current
from storage.records import DecisionOutcome, EditRequest
from storage.sql.approvals import APPROVAL_BY_ID, INSERT_APPROVER, approver_rows
from storage.sql.edits import DELETE_APPROVERS, DELETE_VOTES, EDIT
from storage.stores.events import audit
from storage.stores.rows import APPROVALS
from storage.stores.transitions import decide_row, decided_outcome, lock_run_of_approval
from storage.values import json_text, storable


class EditStore:
    database: Database

    async def edit_approval(
        self,
        approval_id: str,
        *,
        actor: str,
        edit: EditRequest,
        actor_name: str | None = None,
        worker: str,
        lease_until: datetime,
        now: datetime,
        claim: bool = True,
    ) -> DecisionOutcome | None:
        """Record ``actor``'s edit and approve the edited call, in one transaction; or, with
        ``edit.stricter_approvers``, record it with those approvers and leave it pending.

        None when the approval is no longer pending, has expired or may not be edited (the
        caller reads it again to say which). Approving claims the run's resume as
        ``DecisionStore.decide`` does.
        """
        edited = storable(edit.arguments)

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            before = tx.one(APPROVAL_BY_ID, {"id": approval_id})
            if before is None:
                return None
            previous = APPROVALS.load(tx, before)
            if previous.status == "pending" and (
                (edit.shown is not None and not shows_current(previous, edit.shown))
                # The caller found one approval enough; a concurrent edit asked for more.
                or (edit.stricter_approvers is None and previous.min_approvals > 1)
            ):
                raise EditConflict(approval_id)
            approvers = (
                edit.stricter_approvers
                if edit.stricter_approvers is not None
                else list(previous.approvers)
            )
            row = tx.one(
                EDIT,
                {
                    "id": approval_id,
                    "edited": json_text(edited),
                    "actor": actor,
                    "now": now,
                    "payload_hash": edit.payload_hash,
                    "approvers": json_text(approvers),
                    # Shown on the card while the edited call waits for the stricter approvers
                    # (a decision replaces it with its own reason).
                    "why": edit.why_stricter,
                    "min_approvals": edit.min_approvals
                    if edit.stricter_approvers is not None
                    else previous.min_approvals,
                    "approved_by": None
                    if edit.stricter_approvers is not None
                    else json_text(previous.approved_by)
                    if previous.approved_by is not None
                    else None,
                    # The rule that asks for more, when the edit keeps it waiting; else the
                    # one of the approval as requested.
                    **(
                        {"rule": edit.rule, "rule_when": edit.rule_when}
                        | {"rule_error": edit.rule_error}
                        if edit.stricter_approvers is not None
                        else {
                            "rule": previous.rule,
                            "rule_when": previous.rule_when,
                            "rule_error": previous.rule_error,
                        }
                    ),
                },
            )
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            detail: dict[str, Any] = {
                "tool_name": approval.tool_name,
                "proposed_arguments": approval.arguments,
                "edited_arguments": edited,
            }
            if previous.edited_arguments is not None:
                detail["previously_edited_arguments"] = previous.edited_arguments
            if edit.stricter_approvers is not None:
                tx.execute(DELETE_APPROVERS, {"id": approval_id})
                tx.execute(DELETE_VOTES, {"id": approval_id})
                rows = approver_rows([{"id": approval_id, "approvers": approvers}])
                tx.executemany(INSERT_APPROVER, rows)
                detail["approvers_before"] = list(previous.approvers)
                detail["approvers"] = approvers
                detail["stricter"] = edit.why_stricter
                detail["rule"] = edit.rule
            audit(
                tx,
                now,
                "approval_edited",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                **detail,
            )
            if edit.stricter_approvers is not None:
                return DecisionOutcome(approval=approval, resume_claimed=False)
            decided = decide_row(tx, approval_id, "approved", actor, actor_name, None, now)
            if decided is None:  # pending and unexpired, but not to be decided by one approval
                raise EditConflict(approval_id)
            approval = APPROVALS.load(tx, decided)
            audit(
                tx,
                now,
                "approval_approved",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                reason=None,
                edited=True,
            )
            return decided_outcome(tx, approval, claim, worker, lease_until, now)

        return await self.database.run(body, Mode.WRITE)
