"""What a read-only command imports (not how long it takes: bench/cli_startup.py measures).

``approvals list``, ``runs show``, ``waits list``, ``grants list`` and ``audit export`` need
neither the tools (llm), nor Alembic when the schema is at head, nor SQLAlchemy's async layer;
on a SQLite file at the schema's head they read through storage.reads and import no SQLAlchemy
at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serve_process import ROOT

HEAVY = ("llm", "alembic", "slack_sdk", "sqlalchemy.ext.asyncio", "openai", "sqlalchemy")
CONFIG = (
    'model = "scripted"\ntools = ["tests.support.ops_tools:restart_service"]\n'
    '[policies.restart_service]\napprovers = ["U0APPROVER1"]\n'
)


def imported_after(argv: list[str], tmp_path: Path) -> set[str]:
    script = (
        "import sys\nfrom bot.cli import main\n"
        f"code = main({argv!r})\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return set(eval(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "command",
    [
        ["approvals", "list"],
        ["approvals", "list", "--json"],
        ["runs", "show", "run_missing"],
        ["waits", "list"],
        ["waits", "list", "--json"],
        ["grants", "list", "--all"],
        ["audit", "export", "--since", "2026-01-01"],
        ["audit", "export", "--since", "2026-01-01", "--format", "csv"],
    ],
)
def test_read_commands_import_nothing_heavy(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "bot.toml").write_text(CONFIG)
    cfg = ["--config", str(tmp_path / "bot.toml")]
    # The database made (and migrated) first: Alembic runs then, and only then.
    assert {"alembic", "sqlalchemy"} <= imported_after([*cfg, "db", "upgrade"], tmp_path)
    assert imported_after([*cfg, *command], tmp_path) == set()
