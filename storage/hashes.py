"""The hashes that bind an approval to what runs, and the fingerprints cards carry.

Owns no state. An approval stores :func:`payload_hash` of exactly what would run (the tool,
its arguments as stored, the tool's definition); the gate runs a call only when its hash is
the approved one, so an edit re-binds it. A card's Approve buttons carry a
:func:`fingerprint` of the hash they were rendered with (a batch card, of all its calls), so
a click on a copy shown before an edit is refused as stale rather than approving arguments
its clicker never saw. Stored approvals carry these hashes: their material never changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from storage.values import storable

if TYPE_CHECKING:
    from storage.models import Approval

# What the clicked copy of a card showed, which its Approve buttons carry: the first
# FINGERPRINT_LENGTH hex digits of the payload hash it was rendered with (an edit re-binds
# the hash, so a copy shown before an edit no longer matches).
FINGERPRINT_LENGTH = 16
# The Approve buttons of the previous release carry the id alone; they showed the arguments
# as proposed, so they count only while those were never edited.
UNEDITED = ""


def fingerprint(payload_hash: str) -> str:
    return payload_hash[:FINGERPRINT_LENGTH]


def batch_fingerprint(approvals: Sequence[Approval]) -> str:
    """What a batch card showed: its calls (ids) and the arguments each would run (payload
    hashes, edited ones included). A button carries it; a click whose card showed another set
    is refused as stale (``BatchOutcome.stale``)."""
    digest = hashlib.sha256()
    for approval in sorted(approvals, key=lambda a: a.id):
        digest.update(f"{approval.id}:{approval.payload_hash};".encode())
    return digest.hexdigest()[:FINGERPRINT_LENGTH]


def shows_current(approval: Approval, shown: str) -> bool:
    """Whether a copy that showed ``shown`` (a fingerprint, or UNEDITED) shows the approval's
    arguments as they are now."""
    if shown == UNEDITED:
        return approval.edited_arguments is None
    return len(shown) == FINGERPRINT_LENGTH and fingerprint(approval.payload_hash) == shown


def canonical_json(value: Any) -> str:
    return _CANONICAL_ENCODER.encode(value)


# What ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` writes,
# without building an encoder on every call.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_hash(tool_name: str, arguments: dict[str, Any], definition: dict[str, Any]) -> str:
    """Hash of exactly what would run: the tool, its arguments and the tool's definition.

    Taken over the values as stored (:mod:`storage.values`): the call that runs after the
    approval is rebuilt from the stored history, so that is what is approved. The material is
    ``canonical_json(storable({"tool": …, "arguments": …, "definition": …}))``; stored
    approvals carry hashes of it, so it never changes.
    """
    return PayloadHasher(definition)(tool_name, arguments)


class PayloadHasher:
    """:func:`payload_hash` for one tool definition, serialized once instead of per call.

    The definition holds the tool's whole input schema; walking and serializing it was most
    of a hash's cost, on every gated call (three times per approved call). The material is
    assembled from the canonical JSON of its three parts in sorted key order, which is
    byte for byte what ``canonical_json`` writes for the whole object: the same digests.
    """

    __slots__ = ("_definition",)

    def __init__(self, definition: dict[str, Any]) -> None:
        self._definition = canonical_json(storable(definition))

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        material = (
            f'{{"arguments":{canonical_json(storable(arguments))},'
            f'"definition":{self._definition},'
            f'"tool":{canonical_json(storable(tool_name))}}}'
        )
        return hashlib.sha256(material.encode()).hexdigest()


def arguments_hash(arguments: dict[str, Any]) -> str:
    """The scope of a grant limited to the same arguments: their canonical JSON, hashed (in
    the stored form, as approvals hash them)."""
    return hashlib.sha256(canonical_json(storable(arguments)).encode()).hexdigest()
