"""PostgreSQL's one-statement pause: the run's UPDATE and the pause's rows in one statement.

Owns no state; the rows are :mod:`storage.stores.pauses`'s. The common pause (new rows only:
nothing adopted, re-tagged or delegated, no hold on the run) is one round trip on PostgreSQL
(``Mode.WRITE_ONE``, autocommit): ``PAUSE_FREE_RUN`` as a data-modifying CTE, and each table's
rows as one INSERT that inserts them only if that UPDATE matched (:func:`fast_pause_sql`), so
a statement whose UPDATE matched nothing writes nothing and the full transaction runs instead.
PostgreSQL only (data-modifying CTEs); ``:name`` parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from storage.sql.runs import PAUSE_FREE_RUN

_PLAIN_INSERT = re.compile(r"\s*INSERT INTO (\w+) \(([^()]*)\) VALUES \(([^()]*)\)\s*", re.S)
# Each table's INSERT in the statement (one per table: see guarded_insert).
_GUARD = "EXISTS (SELECT 1 FROM paused)"


def guarded_insert(
    insert: str, count: int, tag: str, casts: Mapping[str, str], condition: str = _GUARD
) -> str:
    """``insert`` (a plain one-row ``INSERT INTO t (...) VALUES (:a, ...)``) as one INSERT of
    ``count`` rows that inserts them only while ``condition`` holds, in the order given.

    Row ``i``'s parameter ``:a`` is ``:_<tag>_<i>_a`` (:func:`guarded_params`). One INSERT per
    table, its rows ordered: two INSERTs into one table in one statement run in no set order,
    and serial ids (the audit trail's order) follow the order rows are inserted in. A VALUES
    list in FROM types its parameters on its own (as text), not as the target columns: the
    columns of other types are cast to theirs (``casts``: column -> SQL type).
    """
    match = _PLAIN_INSERT.fullmatch(insert)
    if match is None:
        raise ValueError(f"a plain INSERT ... VALUES (...) is needed, not {insert!r}")
    table, column_list, value_list = match.groups()
    columns = [c.strip() for c in column_list.split(",")]
    names = [v.strip().removeprefix(":") for v in value_list.split(",")]

    def value(index: int, column: str, name: str) -> str:
        param = f":_{tag}_{index}_{name}"
        cast = casts.get(column)
        return f"CAST({param} AS {cast})" if cast else param

    rows = ", ".join(
        "({}, {})".format(", ".join(value(i, c, n) for c, n in zip(columns, names, strict=True)), i)
        for i in range(count)
    )
    selected = ", ".join(f"column{i + 1}" for i in range(len(columns)))
    return (
        f"INSERT INTO {table} ({column_list}) SELECT {selected} FROM (VALUES {rows}) AS v "
        f"WHERE {condition} ORDER BY column{len(columns) + 1}"
    )


def guarded_params(
    rows: Sequence[Mapping[str, Any]], tag: str, params: dict[str, Any]
) -> dict[str, Any]:
    """``rows``' values as :func:`guarded_insert`'s parameters, added to ``params``."""
    for index, row in enumerate(rows):
        prefix = f"_{tag}_{index}_"
        for name, value in row.items():
            params[prefix + name] = value
    return params


def fast_pause_sql(inserts: Sequence[tuple[str, str, int, Mapping[str, str]]]) -> str:
    """The one-statement pause: ``PAUSE_FREE_RUN`` and, for each ``(tag, INSERT, rows, casts)``,
    its rows inserted only if the run's UPDATE matched. Returns the run's id, or no row when
    nothing was written. The UPDATE locks the run's row before any row of the pause is made
    (they wait on its CTE), as every transaction of a run takes the run's lock first."""
    ctes = [f"paused AS ({PAUSE_FREE_RUN})"]
    ctes += [
        f"_{tag} AS ({guarded_insert(insert, count, tag, casts)})"
        for tag, insert, count, casts in inserts
        if count
    ]
    return f"WITH {', '.join(ctes)} SELECT id FROM paused"
