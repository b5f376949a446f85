"""The SQL layer's column lists (storage.sql.columns, declared without SQLAlchemy) are the
models' tables exactly: the same columns in the same order, and the same ones converted
(JSON, datetimes, booleans) as the models' column types say."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import JSON, Boolean, DateTime

from storage.models import Approval, AuditEvent, Grant, Run
from storage.sql.columns import (
    APPROVAL_COLUMNS,
    AUDIT_COLUMNS,
    GRANT_COLUMNS,
    RUN_COLUMNS,
    Columns,
)
from tests.support.serve_process import ROOT

KINDS = {JSON: "json", DateTime: "datetime", Boolean: "bool"}


@pytest.mark.parametrize(
    ("model", "columns"),
    [
        (Run, RUN_COLUMNS),
        (Approval, APPROVAL_COLUMNS),
        (AuditEvent, AUDIT_COLUMNS),
        (Grant, GRANT_COLUMNS),
    ],
)
def test_declared_columns_are_the_models_tables(model: Any, columns: Columns) -> None:
    table = model.__table__
    assert columns.table == table.name
    assert columns.names == tuple(column.name for column in table.columns)
    expected = {
        column.name: kind
        for column in table.columns
        for sa_type, kind in KINDS.items()
        if isinstance(column.type, sa_type)
    }
    assert columns.kinds == expected
    assert list(columns.kinds) == [name for name in columns.names if name in expected]


def test_the_sql_layer_and_the_read_path_import_no_sqlalchemy() -> None:
    script = (
        "import sys\nimport storage.sql, storage.reads\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
