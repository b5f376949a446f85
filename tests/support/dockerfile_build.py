"""The Dockerfile's build, performed without a Docker engine, for machines that have none.

CI runs where a docker client is installed but no engine answers (and no registry is reachable
to pull the base image), so ``docker build`` cannot prove the Dockerfile there. This reads the
Dockerfile and performs what it says, on the host, each stage in a directory that stands for
its filesystem: the build context is the checkout filtered by ``.dockerignore``; ``COPY`` copies
from it (or from an earlier stage) and fails on a path that is not there; ``RUN`` runs in ``sh``
with the stage's ``ENV`` and ``WORKDIR``, its absolute paths moved into the stage's directory
(``groupadd``/``useradd`` are recorded, not run: they would change the host); ``USER``,
``ENTRYPOINT``, ``CMD``, ``EXPOSE`` and ``STOPSIGNAL`` are what ``run`` starts the image with.

The base image is the host: its Python stands for the image's ``python``. An instruction this
does not know fails the build, so a Dockerfile change cannot slip past it unread.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# First path components that belong to the host's base system, not to the image's own files.
HOST_TOP_DIRS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "dev", "proc", "sys", "tmp", "run"}
# The PATH the python base images start from.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ABSOLUTE_PATH = re.compile(r"(?<![^\s=:/\"'])/([A-Za-z0-9_.-]+)((?:/[^\s:\"';&|]*)?)")
KNOWN = {
    "FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "USER",
    "EXPOSE", "STOPSIGNAL", "ENTRYPOINT", "CMD", "LABEL",
}  # fmt: skip


class DockerfileBuildError(AssertionError):
    """The Dockerfile would not build (or this cannot tell how it would)."""


@dataclass
class Instruction:
    keyword: str
    arguments: str
    flags: dict[str, str]


def instructions(dockerfile: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending.strip():
        logical.append(pending)
    result = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        flags: dict[str, str] = {}
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags[name] = value
            rest = rest.strip()
        result.append(Instruction(keyword.upper(), rest, flags))
    return result


def dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern as Docker matches it (``**`` crosses directories)."""
    pattern = pattern.strip().strip("/")
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def build_context(root: Path, dockerignore: str, into: Path) -> None:
    """Copy the files ``docker build`` would send (``.dockerignore`` applied) into ``into``."""
    rules = []
    for line in dockerignore.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        rules.append((negated, dockerignore_regex(line.lstrip("!")), line.lstrip("!")))

    def excluded(relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for negated, regex, _ in rules:
            if any(regex.match(prefix) for prefix in prefixes):
                verdict = not negated
        return verdict

    def may_reinclude_under(relative: str) -> bool:
        for negated, _, text in rules:
            if negated and ("*" in text or "?" in text or text.startswith(relative + "/")):
                return True
        return False

    into.mkdir(parents=True)
    for directory, subdirs, files in os.walk(root):
        base = Path(directory).relative_to(root).as_posix()
        base = "" if base == "." else base + "/"
        subdirs[:] = [
            d
            for d in subdirs
            if not (excluded(base + d) and not may_reinclude_under(base + d))
            and not Path(directory, d).is_symlink()
        ]
        for name in files:
            if not excluded(base + name):
                target = into / (base + name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(directory, name), target)


@dataclass
class Image:
    """What ``docker run`` needs from the built image."""

    rootfs: Path
    env: dict[str, str]
    workdir: str
    user: tuple[int, int]
    entrypoint: list[str]
    cmd: list[str]
    exposed: list[str]
    stop_signal: str
    homes: dict[int, str] = field(default_factory=dict)

    def host_path(self, container_path: str) -> str:
        return map_paths(container_path, self.rootfs)


def map_paths(text: str, rootfs: Path) -> str:
    """Absolute paths of the image's own files, moved under ``rootfs``."""

    def move(match: re.Match[str]) -> str:
        if match.group(1) in HOST_TOP_DIRS:
            return match.group(0)
        return f"{rootfs}{match.group(0)}"

    return ABSOLUTE_PATH.sub(move, text)


def expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)


def exec_form(arguments: str) -> list[str]:
    """ENTRYPOINT/CMD: the JSON (exec) form as is, the shell form through ``/bin/sh -c``."""
    if arguments.startswith("["):
        return list(json.loads(arguments))
    return ["/bin/sh", "-c", arguments]


def check(dockerfile: str) -> None:
    """Fail before building on what would fail at its step: an instruction not interpreted
    here, a ``COPY --from`` of a stage not defined before it."""
    defined: set[str] = set()
    count = 0
    for step in instructions(dockerfile):
        if step.keyword not in KNOWN:
            raise DockerfileBuildError(f"{step.keyword}: not interpreted by the engine-less build")
        if step.keyword == "FROM":
            words = step.arguments.split()
            if count:
                defined.add(str(count - 1))
            if len(words) == 3 and words[1].upper() == "AS":
                defined.add(words[2])
            count += 1
        if step.keyword == "COPY" and step.flags.get("from", "") not in defined | {""}:
            raise DockerfileBuildError(f"COPY --from={step.flags['from']}: no such stage")


def build(dockerfile: str, dockerignore: str, root: Path, workspace: Path) -> Image:
    """Build the Dockerfile's last stage into ``workspace/root``; earlier stages are removed."""
    check(dockerfile)
    context = workspace / "context"
    build_context(root, dockerignore, context)
    shim = workspace / "base-python"
    shim.mkdir()
    for name in ("python", "python3"):
        (shim / name).symlink_to(sys._base_executable)  # type: ignore[attr-defined]
    args: dict[str, str] = {}
    stages: dict[str, Path] = {}
    stage_count = 0
    rootfs = workspace / "root"
    image: Image | None = None
    for step in instructions(dockerfile):
        if step.keyword not in KNOWN:
            raise DockerfileBuildError(f"{step.keyword}: not interpreted by the engine-less build")
        if step.keyword == "ARG":
            name, _, default = step.arguments.partition("=")
            args[name] = default
            continue
        if step.keyword == "FROM":
            if image is not None:
                # The finished stage leaves the place the next one is built in; ``COPY
                # --from`` finds it by its name or its index.
                stage_dir = workspace / f"stage-{stage_count}"
                rootfs.rename(stage_dir)
                stages = {k: stage_dir if v == rootfs else v for k, v in stages.items()}
                stages[str(stage_count)] = stage_dir
                stage_count += 1
            words = step.arguments.split()
            rootfs.mkdir()
            image = Image(
                rootfs=rootfs,
                env={"PATH": f"{shim}:{BASE_PATH}"},
                workdir="/",
                user=(0, 0),
                entrypoint=[],
                cmd=[],
                exposed=[],
                stop_signal="SIGTERM",
            )
            if len(words) == 3 and words[1].upper() == "AS":
                stages[words[2]] = rootfs
            continue
        if image is None:
            raise DockerfileBuildError(f"{step.keyword} before FROM")
        values = {**args, **image.env}
        if step.keyword == "ENV":
            for item in shlex.split(step.arguments):
                name, _, value = item.partition("=")
                image.env[name] = expand(value, {**args, **image.env})
        elif step.keyword == "WORKDIR":
            image.workdir = str(Path(image.workdir, expand(step.arguments, values)))
            Path(image.host_path(image.workdir)).mkdir(parents=True, exist_ok=True)
        elif step.keyword == "COPY":
            copy(step, image, context, stages)
        elif step.keyword == "RUN":
            run_step(step.arguments, image)
        elif step.keyword == "USER":
            user, _, group = expand(step.arguments, values).partition(":")
            if not (user.isdigit() and (group.isdigit() or not group)):
                raise DockerfileBuildError(f"USER {step.arguments}: give numeric uid:gid")
            image.user = (int(user), int(group or user))
        elif step.keyword == "ENTRYPOINT":
            image.entrypoint = exec_form(step.arguments)
            image.cmd = []
        elif step.keyword == "CMD":
            image.cmd = exec_form(step.arguments)
        elif step.keyword == "EXPOSE":
            image.exposed += [port.split("/")[0] for port in step.arguments.split()]
        elif step.keyword == "STOPSIGNAL":
            image.stop_signal = step.arguments
    if image is None:
        raise DockerfileBuildError("no FROM")
    for stage_dir in set(stages.values()) - {rootfs}:
        shutil.rmtree(stage_dir)
    shutil.rmtree(context)
    return image


def copy(step: Instruction, image: Image, context: Path, stages: dict[str, Path]) -> None:
    """``COPY [--from=stage] src... dest``: a missing source fails, as it does in Docker."""
    words = (
        json.loads(step.arguments)
        if step.arguments.startswith("[")
        else shlex.split(step.arguments)
    )
    *sources, dest = words
    if "from" in step.flags:
        if step.flags["from"] not in stages:
            raise DockerfileBuildError(f"COPY --from={step.flags['from']}: no such stage")
        origin = stages[step.flags["from"]]
    else:
        origin = context
    target = Path(image.host_path(str(Path(image.workdir, dest))))
    into_directory = dest.endswith("/") or len(sources) > 1
    for source in sources:
        matches = sorted(origin.glob(source.lstrip("/")))
        if not matches:
            where = f"stage {step.flags['from']}" if "from" in step.flags else "the build context"
            raise DockerfileBuildError(
                f"COPY {source}: not in {where} (is it kept out by .dockerignore?)"
            )
        for match in matches:
            if match.is_dir():
                shutil.copytree(match, target, symlinks=True, dirs_exist_ok=True)
            elif into_directory:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(match, target / match.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(match, target)


def run_step(command: str, image: Image) -> None:
    """``RUN``: in ``sh``, except the user-account commands, recorded instead of run."""
    pieces = [piece.strip() for piece in command.split("&&")]
    if not any(piece.split()[0] in ("groupadd", "useradd") for piece in pieces if piece):
        pieces = [command]
    host_env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PATH")
    }
    for piece in pieces:
        words = shlex.split(piece)
        if words[0] == "groupadd":
            continue
        if words[0] == "useradd":
            add_user(words, image)
            continue
        env = {**host_env, **{k: image.host_path(v) for k, v in image.env.items()}}
        done = subprocess.run(
            ["/bin/sh", "-c", image.host_path(piece)],
            cwd=image.host_path(image.workdir),
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise DockerfileBuildError(
                f"RUN {piece} exited with {done.returncode}:\n{done.stderr[-3000:]}"
            )


def add_user(words: list[str], image: Image) -> None:
    """``useradd``: the account's uid and home (created, owned by it, with --create-home)."""
    uid = None
    home = None
    create = False
    for i, word in enumerate(words):
        if word in ("--uid", "-u"):
            uid = int(words[i + 1])
        elif word in ("--home-dir", "-d"):
            home = words[i + 1]
        elif word in ("--create-home", "-m"):
            create = True
    if uid is None or home is None:
        raise DockerfileBuildError(f"{' '.join(words)}: give --uid and --home-dir")
    image.homes[uid] = home
    if create:
        path = Path(image.host_path(home))
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, uid, uid)


def run_command(image: Image, arguments: list[str] | None) -> list[str]:
    """What ``docker run IMAGE [ARGS]`` executes, as the image's USER (when we are root)."""
    command = image.entrypoint + (image.cmd if arguments is None else arguments)
    if not command:
        raise DockerfileBuildError("neither ENTRYPOINT nor CMD")
    program = command[0]
    if "/" not in program:
        found = shutil.which(program, path=image.host_path(image.env.get("PATH", BASE_PATH)))
        if found is None:
            raise DockerfileBuildError(f"{program}: not on the image's PATH")
        program = found
    else:
        program = image.host_path(program)
    uid, gid = image.user
    prefix: list[str] = []
    if os.geteuid() == 0 and uid != 0:
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    return [*prefix, program, *command[1:]]


def run_env(image: Image, extra: dict[str, str]) -> dict[str, str]:
    """The environment ``docker run -e …`` gives: the image's ENV, HOME, and these."""
    env = {"HOME": image.homes.get(image.user[0], "/"), **image.env, **extra}
    return {name: image.host_path(value) for name, value in env.items()}
