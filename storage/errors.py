"""The errors the repository raises on purpose, for the layers above to catch by name.

Owns no state. Plain Python (the models appear in annotations only), so the engine and the
handlers import them without loading the database layer, as they do the records
(:mod:`storage.records`); :mod:`storage.repository` re-exports the common ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.models import Run


class StorageError(Exception):
    """Base of the errors the repository raises on purpose."""


class RunBusy(StorageError):
    """The conversation already has a run that is working or waiting for approvals."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"run {run.id} is {run.status}")
        self.run = run


class DuplicateEvent(StorageError):
    """A Slack event that was already handled (a retry, or another replica got it first)."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} was already handled")
        self.event_id = event_id


class ValueTooLong(StorageError):
    """A value longer than its column holds. PostgreSQL refuses it and SQLite would keep it:
    both refuse it, with this message, before the transaction starts."""

    def __init__(self, what: str, length: int, limit: int) -> None:
        super().__init__(f"{what} is {length} characters long; at most {limit} can be stored")


class LeaseLost(StorageError):
    """This worker no longer holds the run's lease: another worker took the run over."""


class RunHeld(StorageError):
    """An operator's hold (``pause`` or ``stop``) was found by the statement that would have
    started a call: nothing of it was written (``ExecutionStore.begin_execution``)."""

    def __init__(self, run_id: str, action: str) -> None:
        super().__init__(f"run {run_id}: {action} requested by an operator")
        self.run_id = run_id
        self.action = action


class EditConflict(Exception):
    """The approval changed (another edit) since the editor's form or the caller's checks
    read it: nothing was written; the editor should look at it again."""
