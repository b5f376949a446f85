"""Identifiers: ULIDs, sortable by creation time, with a prefix that says what they name."""

from ulid import ULID


def new_run_id() -> str:
    return f"run_{ULID()}"


def new_approval_id() -> str:
    return f"apr_{ULID()}"


def new_grant_id() -> str:
    return f"grt_{ULID()}"
