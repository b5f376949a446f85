"""Identifiers: ours are ULIDs, sortable by creation time, with a prefix that says what they
name; Slack's are checked for their shape before anything is stored under them (``\\Z``, not
``$``, which also matches before a final newline)."""

import re

from ulid import ULID

SLACK_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,30}\Z")
SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,30}\Z")
# Who may decide: a user, or a user group (S…).
SLACK_APPROVER_ID = re.compile(r"[UWS][A-Z0-9]{2,30}\Z")


def new_run_id() -> str:
    return f"run_{ULID()}"


def new_approval_id() -> str:
    return f"apr_{ULID()}"


def new_grant_id() -> str:
    return f"grt_{ULID()}"
