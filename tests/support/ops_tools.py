"""Tools for tests: they record every real execution in ``EXECUTED`` so tests can count."""

from __future__ import annotations

import os
import time
from typing import Any

EXECUTED: list[tuple[str, dict]] = []


def get_status(service: str) -> str:
    """Read the status of a service."""
    EXECUTED.append(("get_status", {"service": service}))
    return f"{service} is healthy"


def restart_service(service: str) -> str:
    """Restart a service."""
    EXECUTED.append(("restart_service", {"service": service}))
    return f"restarted {service}"


async def deploy(service: str, version: str) -> str:
    """Deploy a version of a service."""
    EXECUTED.append(("deploy", {"service": service, "version": version}))
    return f"deployed {service}@{version}"


def broken_tool(service: str) -> str:
    """Always fails."""
    EXECUTED.append(("broken_tool", {"service": service}))
    raise RuntimeError(f"{service} exploded")


def slow_restart(service: str, seconds: float, log: str) -> str:
    """Restart a service slowly (still running when a deploy stops the bot).

    Writes "started" and "finished" lines to the file ``log``, flushed to disk, so a test in
    another process knows whether the call truly ran to its end. It ends after ``seconds``,
    or as soon as a file ``<log>.release`` exists: a test that must see it still running
    releases it when it has looked, instead of betting on how long a loaded machine takes.
    """
    _log_line(log, f"started {service}")
    release = f"{log}.release"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(release):
        time.sleep(0.02)
    _log_line(log, f"finished {service}")
    EXECUTED.append(("slow_restart", {"service": service, "seconds": seconds}))
    return f"restarted {service} slowly"


def _log_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def tag_service(service: str, llm_tool_call: Any) -> str:
    """Tag a service (sees the call it answers, as llm passes it to such tools)."""
    EXECUTED.append(("tag_service", {"service": service, "call": llm_tool_call.tool_call_id}))
    return f"tagged {service}"


async def untag_service(service: str, llm_tool_call: Any) -> str:
    """Untag a service (async; sees the call it answers)."""
    EXECUTED.append(("untag_service", {"service": service, "call": llm_tool_call.tool_call_id}))
    return f"untagged {service}"


def apply_settings(settings: Any) -> str:
    """Apply settings of any shape (its schema takes any JSON value)."""
    EXECUTED.append(("apply_settings", {"settings": settings}))
    return "applied"


def scale_service(
    service: str, replicas: int, env: str = "staging", labels: dict | None = None
) -> str:
    """Scale a service to a number of replicas (edit-then-approve tests)."""
    EXECUTED.append(
        ("scale_service", {"service": service, "replicas": replicas, "env": env, "labels": labels})
    )
    return f"scaled {service} in {env} to {replicas}"


def executed(name: str) -> list[dict[str, Any]]:
    """The arguments of every call of tool ``name`` that ran in this process, in order."""
    return [args for tool, args in EXECUTED if tool == name]
