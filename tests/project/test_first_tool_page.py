"""docs/first-tool.md followed literally, without a key: step 1's module, step 2's
configuration with ``model = "echo"`` (step 3), step 4's keyless ``ask`` and decision, in a
scratch directory with real processes. The page used to show only ``ask "restart web"``,
which the echo model just echoes back, calling nothing."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.serve_process import ROOT

PAGE = ROOT / "docs" / "first-tool.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), re.S)


def commands(block: str) -> list[list[str]]:
    """The block's commands (not its ``#`` lines), as argv with ``.venv/bin/`` dropped."""
    found = []
    for line in block.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            argv = shlex.split(line)
            found.append([argv[0].removeprefix(".venv/bin/"), *argv[1:]])
    return found


def run(argv: list[str], cwd: Path) -> str:
    assert argv[0] == "approval-bot", argv
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv[1:]],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": f"{cwd}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_step_4_without_a_key_runs_the_tool_once_approved(tmp_path: Path) -> None:
    (module,) = [b for b in blocks("python") if "def restart_service" in b]
    (config,) = [b for b in blocks("toml") if "tools = " in b]
    (keyless,) = [b for b in blocks("sh") if "tool_calls" in b]
    (tmp_path / "mytools").mkdir()
    (tmp_path / "mytools" / "__init__.py").write_text("")
    (tmp_path / "mytools" / "ops.py").write_text(module)
    (tmp_path / "approval-bot.toml").write_text('model = "echo"\n' + config)
    ask, decide = commands(keyless)

    asked = run(ask, tmp_path)
    assert "paused" in asked and 'restart_service(service="web")' in asked, asked
    (approval_id,) = re.findall(r"apr_\w+", asked)
    decide = [approval_id if a.startswith("apr_") else a for a in decide]
    decided = run(decide, tmp_path)
    assert "completed" in decided and "web restarted" in decided, decided
    assert "llm-echo" in PAGE.read_text() and "pip install llm-echo" in PAGE.read_text()
