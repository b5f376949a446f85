"""Identifiers: ours are ULIDs, sortable by creation time, with a prefix that says what they
name; Slack's are checked for their shape before anything is stored under them (``\\Z``, not
``$``, which also matches before a final newline)."""

import re

from ulid import ULID

SLACK_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,30}\Z")
SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,30}\Z")
# Who may decide: a user, or a user group (S…).
SLACK_APPROVER_ID = re.compile(r"[UWS][A-Z0-9]{2,30}\Z")

# ULID's text is Crockford's base32, five bits a digit: every two digits, by the ten bits
# they spell.
_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DIGIT_PAIRS = [first + second for first in _DIGITS for second in _DIGITS]


def ulid_text(ulid: ULID) -> str:
    """``str(ulid)``, its 26 digits, ten bits a step: python-ulid's five bits a step took
    30 000 instructions, its two ids half a percent of a pause -> decide -> resume cycle.
    The 128 bits are read as 130 (13 pairs), the first two zeros, as ULID's text has them."""
    value = int.from_bytes(ulid.bytes, "big")
    return "".join([_DIGIT_PAIRS[value >> shift & 0x3FF] for shift in range(120, -1, -10)])


def new_run_id() -> str:
    return f"run_{ulid_text(ULID())}"


def new_approval_id() -> str:
    return f"apr_{ulid_text(ULID())}"


def new_grant_id() -> str:
    return f"grt_{ulid_text(ULID())}"
