"""Rows <-> detached model instances, for the tables whose whole rows the stores return.

Owns no state: it turns a row of ``runs``, ``approvals``, ``audit_events`` or ``grants`` (its
columns as :mod:`storage.sql.columns` declares them) into the model instance the repository
returns (:mod:`storage.models`), converting the values the driver hands back as its
:class:`~storage.drivers.Tx` says (JSON text, datetimes, booleans on SQLite; nothing on
PostgreSQL). Instances are complete and detached, as a closed session would leave them: nothing
is loaded lazily after the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import DeclarativeBase, InstanceState, configure_mappers

from storage.drivers import Tx
from storage.models import Approval, AuditEvent, Grant, Run, RunHold
from storage.sql.columns import (
    APPROVAL_COLUMNS,
    AUDIT_COLUMNS,
    GRANT_COLUMNS,
    HOLD_COLUMNS,
    RUN_COLUMNS,
    Columns,
)

M = TypeVar("M", bound=DeclarativeBase)


class Rows(Generic[M]):
    """One table's rows as detached instances of its model."""

    def __init__(self, model: type[M], columns: Columns) -> None:
        table = model.__table__
        if tuple(c.name for c in table.columns) != columns.names:
            raise RuntimeError(f"storage.sql.columns does not declare {columns.table} as it is")
        self.model = model
        self.columns = columns
        self.names = columns.names
        self.kinds = columns.kinds
        # Statement parameters for a row (Columns.params): the bound method itself, not a
        # method calling it, so that a row's INSERT costs no extra call.
        self.params: Callable[[dict[str, Any]], dict[str, Any]] = columns.params
        mapper = sa_inspect(model)
        (self._pk,) = (c.name for c in mapper.primary_key)
        self._manager = mapper.class_manager
        # What build() makes by hand (see there): an identity key's first part, and the
        # attribute an instance keeps its state in.
        self._identity_class = mapper.identity_key_from_primary_key(("",))[0]
        self._state_attr = self._manager.STATE_ATTR
        probe = self._manager.new_instance().__dict__
        if probe.keys() != {self._state_attr} or type(probe[self._state_attr]) is not InstanceState:
            raise RuntimeError(f"{model.__name__}: new instances are not built as Rows expects")
        # Per dialect: the columns whose stored values need converting, and how.
        self._converters: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}

    def values(self, tx: Tx, row: Sequence[Any]) -> dict[str, Any]:
        converters = self._converters.get(tx.dialect)
        if converters is None:
            converters = self._converters[tx.dialect] = [
                (name, tx.converters[kind])
                for name, kind in self.kinds.items()
                if kind in tx.converters
            ]
        values = dict(zip(self.names, row, strict=True))
        for name, convert in converters:
            value = values[name]
            if value is not None:
                values[name] = convert(value)
        return values

    def load(self, tx: Tx, row: Sequence[Any]) -> M:
        return self.build(self.values(tx, row))

    def build(self, values: dict[str, Any]) -> M:
        """A detached instance holding exactly ``values`` (every column), as a closed session
        would leave it; the ORM's own loader builds instances the same way.

        What ``ClassManager.new_instance`` and ``Mapper.identity_key_from_primary_key`` do,
        written out: the class's ``__new__``, its state, its identity key. Their calls were
        half of a build (a cycle builds six), and the result is the same instance."""
        model = self.model
        instance: M = model.__new__(model)
        state: InstanceState[Any] = InstanceState(instance, self._manager)
        state.key = (self._identity_class, (values[self._pk],), None)
        attributes = instance.__dict__
        attributes[self._state_attr] = state
        attributes.update(values)
        return instance


configure_mappers()  # instances are built without a Session, which would do it on first use
RUNS = Rows(Run, RUN_COLUMNS)
APPROVALS = Rows(Approval, APPROVAL_COLUMNS)
AUDIT = Rows(AuditEvent, AUDIT_COLUMNS)
GRANTS = Rows(Grant, GRANT_COLUMNS)
HOLDS = Rows(RunHold, HOLD_COLUMNS)
