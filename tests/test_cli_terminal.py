"""What models, tools and users wrote reaches the operator's terminal shown, never obeyed:
``runs show``, ``waits list`` and ``approvals list`` printed it raw, so an escape sequence
in a tool's arguments or result (``\\x1b[2J`` clears the screen) acted on the terminal.
In-process against SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.terminal import terminal_safe
from tests import pause_tools
from tests.test_cli_waits import run_cli
from tests.test_engine import calls

CONFIG = """
model = "scripted"
tools = [
    "tests.pause_tools:start_deploy",
    "tests.ops_tools:get_status",
    "tests.ops_tools:restart_service",
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
