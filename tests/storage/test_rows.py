"""Rows.build (storage.stores.rows) makes the instance a closed session leaves: the same
detached state, identity key and attributes as the ORM's own load, without a session."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import create_engine, inspect
from sqlalchemy.orm import Session

from storage.models import Base, Run
from storage.stores.rows import RUNS

VALUES = {
    "id": "run_01",
    "conversation_key": "T1:C1:1.0",
    "team_id": "T1",
    "channel": "C1",
    "thread_ts": "1.0",
    "requester": "U1",
    "status": "paused",
    "model_id": "m",
    "history": [{"role": "user", "parts": [{"text": "hi"}]}],
    "turn": 1,
    "answer": None,
    "error": None,
    "lease_owner": None,
    "lease_expires_at": None,
    "created_at": datetime(2026, 1, 2, 3, 4, 5),
    "updated_at": datetime(2026, 1, 2, 3, 4, 6),
    "progress_ts": None,
    "agent": None,
    "parent_run_id": None,
    "parent_approval_id": None,
}


def test_a_built_row_is_what_a_closed_session_leaves() -> None:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine, tables=[Run.__table__])
    with Session(engine) as session:
        session.add(Run(**VALUES))
        session.commit()
    with Session(engine) as session:
        loaded = session.get(Run, "run_01")
        assert loaded is not None
    built = RUNS.build(dict(VALUES))

    assert type(built) is Run
    ours, orms = inspect(built), inspect(loaded)
    assert (ours.detached, ours.key, ours.identity) == (orms.detached, orms.key, orms.identity)
    assert ours.obj() is built and ours.dict is built.__dict__
    assert not ours.modified and not ours.expired_attributes and not ours.unloaded
    assert {name: getattr(built, name) for name in VALUES} == VALUES
    assert {name: getattr(loaded, name) for name in VALUES} == VALUES
    # A detached instance built here can join a session again, as a loaded one can.
    with Session(engine) as session:
        merged = session.merge(built)
        assert merged.status == "paused"
