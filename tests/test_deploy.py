"""Deployment files: the Dockerfile builds a small non-root image that runs the bot, the
systemd unit is valid, and replicas that start together migrate one after the other."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ulid import ULID

from tests.serve_process import ROOT

DOCKERFILE = ROOT / "Dockerfile"
UNIT = ROOT / "deploy" / "approval-bot.service"


def final_stage(dockerfile: str) -> list[str]:
    """The instructions of the last stage (continuation lines joined)."""
    lines = dockerfile.replace("\\\n", " ").splitlines()
    instructions = [
        line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
    ]
    last_from = max(i for i, line in enumerate(instructions) if line.upper().startswith("FROM "))
    return instructions[last_from:]


def test_the_image_runs_the_bot_as_an_unprivileged_user() -> None:
    stage = final_stage(DOCKERFILE.read_text())
    users = [line.split(None, 1)[1] for line in stage if line.upper().startswith("USER ")]
    assert users, "the final stage never leaves root"
    assert users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["approval-bot"]' in stage


def test_the_image_copies_every_package_the_project_installs() -> None:
    """A package added to pyproject.toml but not to the Dockerfile (or kept out by
    .dockerignore) would build an image that fails at import."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", DOCKERFILE.read_text(), re.MULTILINE))
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert packages <= allowed, f"kept out of the build context: {sorted(packages - allowed)}"
    for package in packages:
        assert (ROOT / package / "__init__.py").exists()


def _docker_unavailable() -> str | None:
    """Why the image cannot be built here, or None when it can."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return "docker is installed but no engine answers (`docker info` failed)"
    return None


def test_the_dockerfile_builds_an_image_that_runs() -> None:
    reason = _docker_unavailable()
    if reason:
        pytest.skip(f"cannot build the image here: {reason}")
    tag = f"approval-bot-test:{str(ULID()).lower()}"
    build = subprocess.run(
        ["docker", "build", "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=900
    )
    assert build.returncode == 0, build.stderr[-3000:]
    try:

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["docker", "run", "--rm", *args], capture_output=True, text=True, timeout=120
            )

        uid = run("--entrypoint", "id", tag, "-u")
        assert uid.returncode == 0 and uid.stdout.strip() != "0"
        upgraded = run(
            "-e", "DATABASE_URL=sqlite:////var/lib/approval-bot/bot.db", tag, "db", "upgrade"
        )
        assert upgraded.returncode == 0, upgraded.stderr
        assert "database is up to date" in upgraded.stdout
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)


def test_the_systemd_unit_is_valid(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # The unit names the installed command; point it at this checkout's.
    command = Path(sys.executable).parent / "approval-bot"
    unit = tmp_path / "approval-bot.service"
    unit.write_text(UNIT.read_text().replace("/opt/approval-bot/bin/approval-bot", str(command)))
    verified = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [
        line for line in (verified.stdout + verified.stderr).splitlines() if "approval-bot" in line
    ]
    assert verified.returncode == 0 and problems == [], "\n".join(problems)


# A replica's start-up: imports done, it waits for "go" on stdin, then opens (and so migrates)
# the database, as ``serve`` does first thing.
REPLICA_START = """
import asyncio, sys
from storage.repository import Repository

async def start():
    repo = await Repository.open(sys.argv[1])
    await repo.close()

sys.stdin.readline()
asyncio.run(start())
print("started")
"""


async def test_replicas_that_start_together_migrate_one_after_the_other(
    postgres_database: str, tmp_path: Path
) -> None:
    """Every ``serve`` migrates at start; replicas started together on an empty database
    failed ("relation already exists", a duplicate key in pg_type) until they took turns.
    PostgreSQL only: several replicas need PostgreSQL (README, "Several replicas")."""
    database_url = postgres_database
    replicas = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            REPLICA_START,
            database_url,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=tmp_path,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    await asyncio.sleep(3)  # their imports; a replica still importing reads "go" later
    for replica in replicas:
        assert replica.stdin is not None
        replica.stdin.write(b"go\n")
    results = [await asyncio.wait_for(r.communicate(), 120) for r in replicas]
    failures = [err.decode()[-500:] for out, err in results if out.strip() != b"started"]
    assert failures == []
