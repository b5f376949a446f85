"""Batch cards: which of one model response's new approvals share one card.

Owns no durable state: before a pause is stored, the drafts of one response that ask
``batch_threshold`` (or more) calls of one tool under the same approvers, quorum and expiry
are tagged with one ``batch_id`` (the id of the first of them, whose card is the batch's).
Each call keeps its own row and payload hash; only the card is shared. A call a rule on
arguments chose the policy of (denied, never, more approvers) is never batched: it gets its
own card, which shows the rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from storage.records import ApprovalDraft

BatchKey = tuple[object, ...]


def _key(draft: ApprovalDraft) -> BatchKey | None:
    """What calls must share to share a card; None for a call that gets its own."""
    if draft.kind != "approval" or draft.rule is not None or draft.adopt:
        return None
    return (
        draft.tool_name,
        tuple(sorted(draft.approvers)),
        draft.allow_self_approval,
        draft.min_approvals,
        draft.on_expiry,
        tuple(sorted(draft.escalate_to)),
    )


def batched(
    drafts: Sequence[ApprovalDraft], threshold_for: Callable[[str], int]
) -> list[ApprovalDraft]:
    """``drafts`` with ``batch_id`` set on each group big enough for a batch card, in order."""
    if len(drafts) == 1 and threshold_for(drafts[0].tool_name) != 1:
        return list(drafts)  # the common pause: one call, no batch of one to make
    groups: dict[BatchKey, list[int]] = {}
    for index, draft in enumerate(drafts):
        key = _key(draft)
        if key is not None:
            groups.setdefault(key, []).append(index)
    result = list(drafts)
    for indexes in groups.values():
        threshold = threshold_for(drafts[indexes[0]].tool_name)
        if threshold <= 0 or len(indexes) < threshold:
            continue
        batch_id = drafts[indexes[0]].id
        for index in indexes:
            result[index] = dataclasses.replace(drafts[index], batch_id=batch_id)
    return result
