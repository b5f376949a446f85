"""Our ids' text is python-ulid's own (``bot.ids.ulid_text`` only spells it faster)."""

from __future__ import annotations

import os
import re

from ulid import ULID

from bot.ids import new_approval_id, new_grant_id, new_run_id, ulid_text


def test_ulid_text_is_str_of_the_ulid() -> None:
    edges = [bytes(16), b"\xff" * 16, bytes(15) + b"\x01", b"\x80" + bytes(15), b"\x01" * 16]
    for value in [*edges, *(os.urandom(16) for _ in range(2000))]:
        ulid = ULID(value)
        assert ulid_text(ulid) == str(ulid)
    fresh = ULID()
    assert ulid_text(fresh) == str(fresh)


def test_prefixed_ids_are_ulids_and_sort_by_creation() -> None:
    ids = [new_run_id() for _ in range(50)]
    assert all(re.fullmatch(r"run_[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)
    assert ids == sorted(ids)  # python-ulid's generator: monotonic within a millisecond
    assert str(ULID.from_str(ids[0][4:])) == ids[0][4:]
    assert new_approval_id().startswith("apr_") and new_grant_id().startswith("grt_")
