"""Benchmark: how long an ``approval-bot`` command takes from exec to exit.

Each command runs ``--runs`` times as a fresh process (``python -m bot.cli``), as a person or a
script would run it, against a SQLite database made once beforehand with ``db upgrade``, so
the figure is start-up (imports, configuration, opening the database) plus the command's own
small query. The interpreter's own start (``python -c pass``) is measured beside it.
"(rules)" runs the command with a configuration that has a rule on arguments, whose CEL
condition is parsed (and so cel-python's parser built) at every start.

``--root DIR`` measures another checkout of the project (e.g. ``git archive COMMIT | tar -x
-C DIR``) with the same interpreter, to compare before and after a change.

Run: ``.venv/bin/python bench/cli_startup.py [--runs 15] [--root DIR]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = 'model = "demo"\ntools = ["playground.demo:get_status"]\n'
RULES = (
    '[policies.get_status]\napprovers = ["U0APPROVER1"]\n'
    '[[policies.get_status.rules]]\nwhen = \'args.service == "db"\'\napproval = "never"\n'
)
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [],
    "--help": ["--help"],
    "approvals list": ["approvals", "list"],
    "runs show ID": ["runs", "show", "run_missing"],
    "approvals list --json": ["approvals", "list", "--json"],
    "audit export": ["audit", "export", "--since", "2026-01-01"],
    "waits list": ["waits", "list"],
    "grants list": ["grants", "list"],
    "approvals list (rules)": ["approvals", "list"],
}


def timed_run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock seconds, and CPU seconds (user + system) of the child: on a machine shared
    with other work the CPU figure says what the command costs, the wall figure what it took."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="approval-bot-cli-startup-"))
    (work / "bot.toml").write_text(CONFIG)
    (work / "rules.toml").write_text(CONFIG + RULES)
    env = {
        **os.environ,
        "PYTHONPATH": str(options.root.resolve()),
        "DATABASE_URL": f"sqlite:///{work / 'bot.db'}",
        "LLM_USER_PATH": str(work / "llm"),
        "APPROVAL_BOT_DEMO_STATE": str(work / "demo-state.db"),
    }
    cli = [sys.executable, "-m", "bot.cli", "--config", str(work / "bot.toml")]
    subprocess.run([*cli, "db", "upgrade"], cwd=work, env=env, check=True, capture_output=True)
    print(f"{options.root.resolve()}: {options.runs} runs each, seconds")
    print(f"{'command':<24}{'median':>8}{'min':>8}{'max':>8}{'cpu med':>9}")
    for name, args in COMMANDS.items():
        argv = [sys.executable, "-c", "pass"] if not args else [*cli, *args]
        if "(rules)" in name:
            argv = [*cli[:3], "--config", str(work / "rules.toml"), *args]
        timed_run(argv, work, env)  # the first run warms the page cache and writes .pyc files
        runs = [timed_run(argv, work, env) for _ in range(options.runs)]
        times, cpu = [wall for wall, _ in runs], statistics.median(c for _, c in runs)
        print(
            f"{name:<24}{statistics.median(times):>8.3f}{min(times):>8.3f}{max(times):>8.3f}"
            f"{cpu:>9.3f}"
        )


if __name__ == "__main__":
    main()
