"""The CLI run in-process, as a user's shell would run it: ``approval-bot ARGS`` against a
config file and a SQLite database in the test's own folder (``DATABASE_URL``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.app import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of one command."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sqlite_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str) -> Path:
    """``config`` written to ``bot.toml``, with ``DATABASE_URL`` a SQLite file beside it."""
    path = tmp_path / "bot.toml"
    path.write_text(config)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    return path
