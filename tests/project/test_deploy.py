"""Deployment files: the Dockerfile builds a small non-root image that runs the bot, the
systemd unit is valid, and replicas that start together migrate one after the other."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from ulid import ULID

from tests.support import dockerfile_build
from tests.support.serve_process import ROOT, free_port

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


def test_the_dockerfile_builds_an_image_that_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """With a Docker engine, ``docker build`` and ``docker run``. Without one (CI's machine has
    a docker client but no engine, nor a registry to pull the base image from), the same
    Dockerfile built and run by tests/support/dockerfile_build.py, so CI proves it with no skip."""
    reason = _docker_unavailable()
    with capsys.disabled():
        if reason is None:
            print("\n[Dockerfile] built and run with the docker engine")
        else:
            print(f"\n[Dockerfile] {reason}: built and run without an engine")
    if reason is None:
        build_and_run_with_docker()
    else:
        build_and_run_without_docker(DOCKERFILE.read_text(), (ROOT / ".dockerignore").read_text())


def build_and_run_with_docker() -> None:
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


def build_and_run_without_docker(dockerfile: str, dockerignore: str) -> None:
    """Build (the project pip-installed from the filtered context, as the build stage does),
    then, as the image's USER: ``db upgrade`` on a fresh SQLite file in its home, and the
    default command (``serve``), on its EXPOSEd port, answering /livez until STOPSIGNAL."""
    workspace = Path(tempfile.mkdtemp(prefix="approval-bot-image-"))
    workspace.chmod(0o755)  # the image's user must reach its files inside
    try:
        image = dockerfile_build.build(dockerfile, dockerignore, ROOT, workspace)
        assert image.user[0] != 0, "the image runs as root"
        home = image.homes.get(image.user[0], image.workdir)
        database = f"sqlite:///{home}/bot.db"
        upgraded = subprocess.run(
            dockerfile_build.run_command(image, ["db", "upgrade"]),
            env=dockerfile_build.run_env(image, {"DATABASE_URL": database}),
            cwd=image.host_path(image.workdir),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert upgraded.returncode == 0, upgraded.stderr[-3000:]
        assert "database is up to date" in upgraded.stdout
        assert (Path(image.host_path(home)) / "bot.db").stat().st_uid == (
            image.user[0] if os.geteuid() == 0 else os.geteuid()
        )

        # ``docker run -p HOST:PORT``: the default command must listen on an EXPOSEd port;
        # here it listens on a free host port instead of that one.
        command = dockerfile_build.run_command(image, None)
        assert "--port" in command, command
        port_at = command.index("--port") + 1
        assert command[port_at] in image.exposed, (command, image.exposed)
        command[port_at] = str(free_port())
        served = subprocess.Popen(
            command,
            env=dockerfile_build.run_env(
                image,
                {
                    "DATABASE_URL": database,
                    "SLACK_BOT_TOKEN": "xoxb-image-test",
                    "SLACK_SIGNING_SECRET": "image-test-secret",
                    # The default model's key, as `docker run -e OPENAI_API_KEY` passes it:
                    # serve refuses to start without it (never used: no mention arrives).
                    "OPENAI_API_KEY": "sk-image-test",
                    "SLACK_API_URL": "http://127.0.0.1:9/api/",
                },
            ),
            cwd=image.host_path(image.workdir),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert wait_for_livez(f"http://127.0.0.1:{command[port_at]}/livez", served)
            served.send_signal(signal.Signals[image.stop_signal])
            output, _ = served.communicate(timeout=30)
            assert served.returncode == 0, output[-3000:]
        finally:
            if served.poll() is None:
                served.kill()
                served.communicate()
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def wait_for_livez(url: str, served: subprocess.Popen[str]) -> bool:
    # A deadline, not a count of tries: on a loaded machine the image's start-up (imports, the
    # model check, migrations) took over 30 s.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if served.poll() is not None:
            output = served.stdout.read() if served.stdout else ""
            raise AssertionError(f"serve exited with {served.returncode}: {output[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("COPY bot ./bot", "COPY botz ./botz", "COPY botz: not in the build context"),
        ("!playground/\n", "", "COPY playground: not in the build context"),
        ("COPY --from=build", "COPY --from=builder", "COPY --from=builder: no such stage"),
        ("WORKDIR /src", "WORKDIR /src\nADD . .", "ADD: not interpreted"),
    ],
    ids=["missing-path", "dockerignored-package", "unknown-stage", "unread-instruction"],
)
def test_the_engine_less_build_fails_as_docker_build_would(
    old: str, new: str, message: str, tmp_path: Path
) -> None:
    """The engine-less build is only proof if a broken Dockerfile (or .dockerignore) breaks it
    too; these fail at their COPY, before the pip install."""
    dockerfile = DOCKERFILE.read_text()
    dockerignore = (ROOT / ".dockerignore").read_text()
    if old in dockerfile:
        dockerfile = dockerfile.replace(old, new, 1)
    else:
        assert old in dockerignore
        dockerignore = dockerignore.replace(old, new, 1)
    with pytest.raises(dockerfile_build.DockerfileBuildError, match=re.escape(message)):
        dockerfile_build.build(dockerfile, dockerignore, ROOT, tmp_path)


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
