"""What models, tools and users wrote reaches the operator's terminal shown, never obeyed:
``runs show``, ``waits list`` and ``approvals list`` printed it raw, so an escape sequence
in a tool's arguments or result (``\\x1b[2J`` clears the screen) acted on the terminal.
In-process against SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli.terminal import terminal_safe
from tests.bot.test_cli_waits import run_cli
from tests.bot.test_engine import calls
from tests.bot.test_logs import ROOT
from tests.support import pause_tools

CONFIG = """
model = "scripted"
tools = [
    "tests.support.pause_tools:start_deploy",
    "tests.support.ops_tools:get_status",
    "tests.support.ops_tools:restart_service",
]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""
# A C0 escape (clear the screen) and its one-byte C1 form (CSI), which JSON with
# ensure_ascii=False leaves raw.
HOSTILE = "\x1b[2J\x9b2J"
SHOWN = "\\x1b[2J\\x9b2J"


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


@pytest.fixture
def config_file(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    yield path


def assert_shown(out: str, shown: str = SHOWN) -> None:
    assert "\x1b" not in out and "\x9b" not in out, repr(out)
    assert shown in out, repr(out)


async def ask(cfg: list[str], capsys: pytest.CaptureFixture[str], request: str) -> str:
    code, out, _ = await run_cli(capsys, *cfg, "ask", request, "--as", "U0REQUESTER")
    assert code == 0, out
    match = re.search(r"run (run_\w+):", out)
    assert match is not None, out
    return match.group(1)


def test_control_characters_are_shown_as_escapes_keeping_newline_and_tab() -> None:
    assert (
        terminal_safe("a\x1b[2J\tb\nc\r\x00\x7f\x9b\xa0é")
        == "a\\x1b[2J\tb\nc\\x0d\\x00\\x7f\\x9b\xa0é"
    )


# Bidirectional controls: an override (U+202E), an isolate (U+2066 ... U+2069), the marks
# (U+200E, U+200F, U+061C). Printed raw, "\u202edenied" reads "deinied" backwards and text
# after an override reads other than it is.
BIDI = "ok\u202ede\u2066nied\u2069\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u2067\u2068"
BIDI_SHOWN = (
    "ok\\u202ede\\u2066nied\\u2069\\u200e\\u200f\\u061c\\u202a\\u202b\\u202c\\u202d\\u2067\\u2068"
)
BIDI_CHARACTERS = (
    "\u061c\u200e\u200f"
    + "".join(map(chr, range(0x202A, 0x202F)))
    + "".join(map(chr, range(0x2066, 0x206A)))
)


def test_bidirectional_controls_are_shown_as_escapes() -> None:
    assert terminal_safe(BIDI) == BIDI_SHOWN
    assert not set(terminal_safe(BIDI_CHARACTERS)) & set(BIDI_CHARACTERS)
    # Letters of right-to-left scripts are text, not controls: they stay.
    assert terminal_safe("שלום مرحبا") == "שלום مرحبا"


async def test_the_cli_shows_bidirectional_controls_from_models_and_users_as_escapes(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    answered = await ask(cfg, capsys, calls(("get_status", {"service": BIDI})))
    code, out, _ = await run_cli(capsys, *cfg, "runs", "show", answered)
    assert code == 0 and "answer: Results: get_status=" in out
    assert not set(out) & set(BIDI_CHARACTERS), repr(out)
    assert BIDI_SHOWN in out, repr(out)
    await ask(cfg, capsys, calls(("restart_service", {"service": BIDI})))
    code, out, _ = await run_cli(capsys, *cfg, "approvals", "list")
    assert code == 0 and "restart_service(" in out
    assert not set(out) & set(BIDI_CHARACTERS), repr(out)
    code, out, _ = await run_cli(capsys, *cfg, "approvals", "list", "--json")
    assert code == 0 and not set(out) & set(BIDI_CHARACTERS)
    assert json.loads(out)[0]["arguments"] == {"service": BIDI}


def test_log_lines_show_control_and_bidirectional_characters_as_escapes() -> None:
    """Log lines quote what users and models wrote (a refused request, a tool's error)."""
    import logging

    from bot.ops.log_output import RedactingTextFormatter, json_formatter
    from bot.ops.logs import TEXT_FORMAT

    record = logging.LogRecord(
        "bot.test", logging.WARNING, __file__, 1, "refused: %s", (HOSTILE + BIDI,), None
    )
    text = RedactingTextFormatter(TEXT_FORMAT).format(record)
    assert not set(text) & set(BIDI_CHARACTERS + "\x1b\x9b"), repr(text)
    assert SHOWN + BIDI_SHOWN in text
    line = json_formatter().format(record)
    assert not set(line) & set(BIDI_CHARACTERS + "\x1b\x9b"), repr(line)
    assert json.loads(line)["message"] == "refused: " + HOSTILE + BIDI


async def test_runs_show_waits_list_and_approvals_list_escape_control_characters(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    answered = await ask(cfg, capsys, calls(("get_status", {"service": HOSTILE})))
    code, out, _ = await run_cli(capsys, *cfg, "runs", "show", answered)
    assert code == 0 and "answer: Results: get_status=" in out
    assert_shown(out)

    waiting = await ask(cfg, capsys, calls(("start_deploy", {"service": HOSTILE})))
    code, out, _ = await run_cli(capsys, *cfg, "waits", "list")
    assert code == 0 and "deploy of " in out
    assert_shown(out)
    code, out, _ = await run_cli(capsys, *cfg, "runs", "show", waiting)
    assert code == 0 and "deploy of " in out
    assert_shown(out)

    await ask(cfg, capsys, calls(("restart_service", {"service": HOSTILE})))
    code, out, _ = await run_cli(capsys, *cfg, "approvals", "list")
    assert code == 0 and "restart_service(" in out
    assert_shown(out, '"\\u001b[2J\\x9b2J"')  # arguments are shown as JSON values

    # --json was escaped already (JSON's own escapes), and reads back as written.
    code, out, _ = await run_cli(capsys, *cfg, "approvals", "list", "--json")
    assert code == 0 and "\x1b" not in out and "\x9b" not in out
    assert json.loads(out)[0]["arguments"] == {"service": HOSTILE}
    code, out, _ = await run_cli(capsys, *cfg, "runs", "show", answered, "--json")
    assert code == 0 and "\x1b" not in out and "\x9b" not in out
    assert HOSTILE in json.loads(out)["answer"]


@pytest.mark.parametrize(
    "argv",
    [
        ["ask", "x", "--as", "U0\u202eAB\x1b[2J"],  # a bad --as, quoted back
        ["--bog\x1b[2Jus\u202e", "approvals", "list"],  # an unknown flag
        ["approvals", "lis\u202et\x1b[2J"],  # an invalid choice
        ["approvals", "list", "--limit", "\x1b[2J\u2066"],  # a bad value
        ["--log-format", "\x1b[2J\u202e", "approvals", "list"],  # checked before the parser
        ["ru\x9b2Jns\u202e"],  # an unknown command (with a C1 escape)
    ],
)
async def test_every_cli_error_escapes_what_the_user_typed(tmp_path: Path, argv: list[str]) -> None:
    """argparse's own errors (and the usage it prints) are written before the command's
    terminal-safe output is in place; they quote what was typed, which reached the terminal
    raw (U+202E reversed the rest of the line, ESC [2J cleared the screen)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *argv,
        env={**os.environ, "PYTHONPATH": str(ROOT), "APPROVAL_BOT_LOG_FORMAT": "text"},
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 2, err
    text = (out + err).decode()
    assert text.startswith("approval-bot: ") or "usage" in text, text
    assert terminal_safe(text) == text, repr(text)
    assert "\\x1b[2J" in text or "\\u202e" in text or "\\x9b" in text, repr(text)
