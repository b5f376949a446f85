"""Rows <-> detached model instances: column lists and value conversions from the models."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy import JSON, Boolean, DateTime
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import DeclarativeBase, configure_mappers
from sqlalchemy.orm.attributes import instance_state

from storage.db import Tx, json_text
from storage.models import Approval, AuditEvent, Run

M = TypeVar("M", bound=DeclarativeBase)


class Rows(Generic[M]):
    """One table's columns (from the model) and detached instances built from its rows."""

    def __init__(self, model: type[M]) -> None:
        table = model.__table__  # type: ignore[attr-defined]
        self.model = model
        self.names: tuple[str, ...] = tuple(c.name for c in table.columns)
        self.columns = ", ".join(self.names)
        self.kinds = {c.name: kind for c in table.columns if (kind := _kind(c.type))}
        self._json = tuple(name for name, kind in self.kinds.items() if kind == "json")
        mapper = sa_inspect(model)
        (self._pk,) = (c.name for c in mapper.primary_key)
        self._mapper = mapper
        self._manager = mapper.class_manager
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
        would leave it; the ORM's own loader builds instances the same way."""
        instance = self._manager.new_instance()
        instance_state(instance).key = self._mapper.identity_key_from_primary_key(
            [values[self._pk]]
        )
        instance.__dict__.update(values)
        return instance

    def params(self, values: dict[str, Any]) -> dict[str, Any]:
        """Statement parameters for a row: JSON columns serialized, and a column ``values``
        does not name NULL (a new nullable column needs no edit of every INSERT's values)."""
        return {
            **dict.fromkeys(self.names),
            **values,
            **{name: json_text(values[name]) for name in self._json},
        }


def _kind(column_type: Any) -> str | None:
    if isinstance(column_type, JSON):
        return "json"
    if isinstance(column_type, DateTime):
        return "datetime"
    if isinstance(column_type, Boolean):
        return "bool"
    return None


configure_mappers()  # instances are built without a Session, which would do it on first use
RUNS = Rows(Run)
APPROVALS = Rows(Approval)
AUDIT = Rows(AuditEvent)


def insert_sql(rows: Rows[Any], table: str, suffix: str = "") -> str:
    placeholders = ", ".join(f":{name}" for name in rows.names)
    return f"INSERT INTO {table} ({rows.columns}) VALUES ({placeholders}){suffix}"
