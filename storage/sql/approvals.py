"""The statements of approvals: reading them, deciding, expiring, executing, their cards and
the pending lists; and the ``approval_approvers`` rows that say who may decide each.

Owns no state; the ``approvals`` rows are the approval stores' (:mod:`storage.stores`:
approvals, decisions, executions, cards). Statuses: ``pending -> approved | denied | expired
| cancelled``, then ``approved -> executing -> executed`` (``executing -> unknown`` when a
worker died in between); every transition is one conditional UPDATE. The pending list's
statements are built here once (:func:`pending_list_sql`) for the Repository and the
read-only commands' path (:mod:`storage.reads`) alike, so the two never select different
rows. Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from storage.sql.columns import APPROVAL_COLUMNS
from storage.sql.edits import edit_columns
from storage.values import storable

if TYPE_CHECKING:
    from storage.records import ApprovalDraft, PendingFilter

# ``approvals.approvers`` (and ``approval_approvers``) naming nobody: anyone may decide.
ANYONE = "*"

APPROVAL_BY_ID = f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE id = :id"
APPROVALS_FOR_TURN = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE run_id = :run_id AND turn = :turn"
)
# Whatever their status by now: one decided since the gate saw it pending must still be
# found by the resume that its decision makes possible.
RETAG_STILL_PENDING = "UPDATE approvals SET turn = :turn WHERE id = :id AND run_id = :run_id"
APPROVALS_FOR_RUN = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE run_id = :run_id ORDER BY id"
)
INSERT_APPROVAL = APPROVAL_COLUMNS.insert_sql()
INSERT_APPROVER = (
    "INSERT INTO approval_approvers (approver, approval_id) VALUES (:approver, :approval_id)"
)
# An Approve of an approval that needs several approvers is a vote instead (storage.stores.votes).
DECIDE = (
    "UPDATE approvals SET status = :status, decided_by = :actor, decided_at = :now, "
    "decided_by_name = :actor_name, reason = :reason "
    "WHERE id = :id AND kind = 'approval' AND status = 'pending' AND expires_at > :now "
    "AND (min_approvals <= 1 OR :status = 'denied') "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
EXPIRE = (
    "UPDATE approvals SET status = 'expired', decided_at = :now "
    "WHERE id = :id AND status = 'pending' AND kind != 'retry' AND expires_at <= :now "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
# Retries do not expire: they come due (storage.stores.waits).
DUE_APPROVALS = (
    "SELECT id FROM approvals WHERE status = 'pending' AND kind != 'retry' "
    "AND expires_at <= :now "
    "ORDER BY expires_at LIMIT :limit"
)
# The fenced start of a call is also its drive's first write: a run a decision's claim left
# ``resuming`` (see DecisionStore.decide) is ``running`` from here. The run's row first, as
# every transaction takes them.
START_CLAIMED_RUN = (
    "UPDATE runs SET status = 'running' "
    "WHERE id = (SELECT run_id FROM approvals WHERE id = :id) AND lease_owner = :owner "
    "AND status = 'resuming'"
)
# The call's safe point too (bot.gate.safe_points): the row it returns says whether an
# operator's hold is asked for on the run, read in the transaction that would start the call
# (its caller rolls the start back if so), so the drive makes no read of its own for it.
HOLD_OF_APPROVAL_RUN = "(SELECT action FROM run_holds WHERE run_holds.run_id = approvals.run_id)"
# An approved call starts only before its approval expires, and (fenced) only for the drive
# that holds its run's lease: a drive that lost it never starts a gated call.
BEGIN_EXECUTION = (
    "UPDATE approvals SET status = 'executing', executed_at = :now "
    "WHERE id = :id AND status = 'approved' AND expires_at > :now "
    f"RETURNING run_id, {HOLD_OF_APPROVAL_RUN}"
)
BEGIN_EXECUTION_FENCED = (
    "UPDATE approvals SET status = 'executing', executed_at = :now "
    "WHERE id = :id AND status = 'approved' AND expires_at > :now AND EXISTS ("
    "SELECT 1 FROM runs WHERE runs.id = approvals.run_id AND runs.lease_owner = :owner) "
    f"RETURNING run_id, {HOLD_OF_APPROVAL_RUN}"
)
# A drive's lease check after a gated call, in the transaction that records its result.
RENEW_LEASE_OF_APPROVAL = (
    "UPDATE runs SET lease_expires_at = :lease_until "
    "WHERE id = (SELECT run_id FROM approvals WHERE id = :id) AND lease_owner = :owner"
)
# Also returns the run's hold, as ``BEGIN_EXECUTION_FENCED`` does: when nothing else ran
# since, the drive's next safe point (before the model call) takes this as its read.
RECORD_EXECUTION = (
    "UPDATE approvals SET status = 'executed', result = :result "
    f"WHERE id = :id AND status = 'executing' RETURNING run_id, {HOLD_OF_APPROVAL_RUN}"
)
# The worker that ran the call finished after its run was taken over and the taker had
# recorded the outcome as unknown: the result is still the truth, and nobody re-runs it.
RECORD_LATE_EXECUTION = (
    "UPDATE approvals SET status = 'executed', result = :result "
    "WHERE id = :id AND status = 'unknown' RETURNING run_id"
)
# A retry of a recording whose earlier attempt committed although its caller never heard so
# (the connection was lost during COMMIT): the same result is already there.
RECORDED_EXECUTION = (
    "SELECT run_id FROM approvals WHERE id = :id AND status = 'executed' AND result = :result"
)
MARK_OUTCOME_UNKNOWN = (
    "UPDATE approvals SET status = 'unknown' "
    "WHERE id = :id AND status = 'executing' RETURNING run_id"
)
CANCEL_APPROVED = (
    "UPDATE approvals SET status = 'cancelled', result = :reason "
    "WHERE id = :id AND status = 'approved' RETURNING run_id"
)
# A call that can never run (its tool is no longer configured), decided or not.
CANCEL_UNRUNNABLE = (
    "UPDATE approvals SET status = 'cancelled', result = :reason, "
    "decided_at = COALESCE(decided_at, :now) "
    "WHERE id = :id AND status IN ('pending', 'approved') RETURNING run_id"
)
# A batch card (storage.stores.batches) is every row's of its batch: the batch's id is its
# first row's, so ``batch_id = :id`` finds the others (none for an approval of its own).
# Each row's status as it is once the card is on record: one settled while the card was being
# posted (its decider found no card to edit) has a card to edit now (CardStore.set_card).
SET_CARD = (
    "UPDATE approvals SET card_channel = :channel, card_ts = :ts WHERE id = :id OR batch_id = :id "
    "RETURNING status"
)
# A card someone clicked, for an approval with no card on record (its poster died after Slack
# took the card and before its ts was stored): that message becomes the card.
ADOPT_CARD = (
    "UPDATE approvals SET card_channel = :channel, card_ts = :ts "
    "WHERE (id = :id OR batch_id = :id) AND card_ts IS NULL"
)
_NO_LIVE_CARD_CLAIM = "(card_claimed_until IS NULL OR card_claimed_until < :now)"
# Only a batch's first row posts the batch's card; the others share it (SET_CARD).
_OWN_CARD = "(batch_id IS NULL OR batch_id = id)"
CLAIM_CARD = (
    "UPDATE approvals SET card_claimed_until = :until "
    f"WHERE id = :id AND status = 'pending' AND card_ts IS NULL AND {_NO_LIVE_CARD_CLAIM} "
    f"AND {_OWN_CARD} "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
CARDS_TO_POST = (
    "SELECT id FROM approvals WHERE status = 'pending' AND card_ts IS NULL "
    f"AND created_at <= :created_before AND {_NO_LIVE_CARD_CLAIM} AND {_OWN_CARD} "
    "ORDER BY created_at LIMIT :limit"
)
# The cards of requests another system asked for (the HTTP API, the MCP server, whose
# process never posts one), with no grace: posting is claimed, so a poster racing the API
# route's own post loses cleanly.
REQUEST_CARDS_TO_POST = (
    "SELECT id FROM approvals WHERE status = 'pending' AND card_ts IS NULL "
    f"AND {_NO_LIVE_CARD_CLAIM} AND {_OWN_CARD} "
    "AND id IN (SELECT approval_id FROM api_requests) "
    "ORDER BY created_at LIMIT :limit"
)


def approver_rows(approvals: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """``approval_approvers`` rows: one per named approver, or ``*`` when anyone may decide.

    None for a wait on a system or a time (a callback, a retry): nobody decides those.
    """
    return [
        {"approver": approver, "approval_id": approval["id"]}
        for approval in approvals
        if approval.get("kind", "approval") in ("approval", "question", "recovery")
        for approver in (approval["approvers"] or [ANYONE])
    ]


# A batch listed once: by its first row still pending (the others of it are left out).
ONE_PER_BATCH = (
    "(approvals.batch_id IS NULL OR approvals.id = (SELECT MIN(b.id) FROM approvals b "
    "WHERE b.batch_id = approvals.batch_id AND b.status = 'pending'))"
)


def pending_list_sql(
    where: PendingFilter,
    *,
    now: datetime,
    limit: int = 20,
    offset: int = 0,
    count_limit: int | None = None,
) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """The count and page statements of :meth:`ApprovalStore.list_pending`, and their
    parameters: (count SQL, count parameters, page SQL, page parameters).

    Both name ``status = 'pending'`` literally: that is what lets both databases' planners use
    the partial indexes on pending approvals (tests/storage/test_pending_indexes.py checks the
    plans).
    """
    conditions = ["status = 'pending'", "expires_at > :now"]
    params: dict[str, Any] = {"now": now, "limit": limit, "offset": offset}
    if where.team_id is not None:
        conditions.append("team_id = :team_id")
        params["team_id"] = where.team_id
    if where.channel is not None:
        conditions.append("channel = :channel")
        params["channel"] = where.channel
    if where.requester is not None:
        conditions.append("requester = :requester")
        params["requester"] = where.requester
    if where.kinds is not None:
        conditions.append(
            "kind IN ({})".format(", ".join(f":kind_{i}" for i in range(len(where.kinds))))
        )
        params.update({f"kind_{i}": kind for i, kind in enumerate(where.kinds)})
    if where.one_per_batch:
        conditions.append(ONE_PER_BATCH)
    if where.exclude_requester is not None:
        # The requester's Approve never counts towards a quorum (storage.stores.votes).
        conditions.append(
            "(requester != :exclude_requester "
            "OR (allow_self_approval = TRUE AND min_approvals <= 1))"
        )
        params["exclude_requester"] = where.exclude_requester
    approvers = ""
    if where.approver is not None:
        names = [where.approver, *where.approver_groups]
        if where.anyone_channel is None:
            names.append(ANYONE)
        approvers = "approval_approvers.approver IN ({})".format(
            ", ".join(f":approver_{i}" for i in range(len(names)))
        )
        params.update({f"approver_{i}": name for i, name in enumerate(names)})
        if where.anyone_channel is not None:
            approvers += (
                " OR (approval_approvers.approver = :anyone"
                " AND approvals.channel = :anyone_channel)"
            )
            params.update(anyone=ANYONE, anyone_channel=where.anyone_channel)
    condition = " AND ".join(conditions)
    page_condition = condition
    if approvers:
        # The page walks approvals newest first and probes each one's approvers: it
        # stops after a page of matches. The count starts from the approver's own rows.
        page_condition += (
            " AND EXISTS (SELECT 1 FROM approval_approvers WHERE "
            f"approval_approvers.approval_id = approvals.id AND ({approvers}))"
        )
        matching = (
            "SELECT DISTINCT approvals.id FROM approval_approvers "
            "JOIN approvals ON approvals.id = approval_approvers.approval_id "
            f"WHERE ({approvers}) AND {condition}"
        )
    else:
        matching = f"SELECT approvals.id FROM approvals WHERE {condition}"
    count_params = {k: v for k, v in params.items() if k not in ("limit", "offset")}
    if count_limit is None:
        count_sql = f"SELECT count(*) FROM ({matching}) AS matching"
    else:
        count_sql = f"SELECT count(*) FROM ({matching} LIMIT :count_limit) AS matching"
        count_params["count_limit"] = count_limit + 1
    page_sql = (
        f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE {page_condition} "
        "ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset"
    )
    return count_sql, count_params, page_sql, params


# Batch cards (storage.stores.batches): the rows of one batch, in the order they were asked.
BATCH_ROWS = f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE batch_id = :batch_id ORDER BY id"


def approval_row(
    draft: ApprovalDraft,
    *,
    run_id: str,
    turn: int,
    requester: str,
    team_id: str,
    channel: str,
    thread_ts: str,
    now: datetime,
    agent: str | None = None,
) -> dict[str, Any]:
    """A new pending approval as a whole ``approvals`` row (INSERT_APPROVAL's parameters):
    the one place a draft becomes a row, for a run's pause, a Workflow step and an API
    request alike."""
    return {
        "id": draft.id,
        "run_id": run_id,
        "turn": turn,
        "tool_call_id": draft.tool_call_id,
        "tool_name": draft.tool_name,
        "arguments": storable(draft.arguments),
        "payload_hash": draft.payload_hash,
        "status": "pending",
        "requester": requester,
        "team_id": team_id,
        "channel": channel,
        "thread_ts": thread_ts,
        "approvers": list(draft.approvers),
        "allow_self_approval": draft.allow_self_approval,
        "on_expiry": draft.on_expiry,
        "created_at": now,
        "expires_at": draft.expires_at,
        "decided_by": None,
        "decided_by_name": None,
        "decided_at": None,
        "reason": draft.reason,
        "result": None,
        "executed_at": None,
        "card_channel": None,
        "card_ts": None,
        "card_claimed_until": None,
        "kind": draft.kind,
        "token_hash": draft.token_hash,
        "due_at": draft.due_at,
        "rule": draft.rule,
        "rule_when": draft.rule_when,
        "rule_error": draft.rule_error,
        "min_approvals": draft.min_approvals,
        "approved_by": None,
        **edit_columns(draft.allow_edit, draft.edited_arguments),
        "batch_id": draft.batch_id,
        "attempt": draft.attempt,
        "recovery_of": draft.recovery_of,
        "recovery_cause": draft.recovery_cause,
        "why": draft.why,
        "agent": agent,
    }
