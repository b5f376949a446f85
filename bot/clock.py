"""The one clock. Naive UTC, as stored in the database; freezegun moves it in tests."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
