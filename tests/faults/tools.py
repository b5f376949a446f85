"""Tools for the fault suite's ``approval-bot serve`` processes.

Every execution is appended to the file named by ``FAULT_TOOL_LOG`` and fsynced before the
tool returns, so the test can count executions even after the process was killed with SIGKILL
mid-run: what the log says happened did happen, whatever the bot recorded.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta

from bot.pauses import RetryAt, WaitForCallback, callback_url, checkpoint, last_checkpoint, progress

LOG_ENV = "FAULT_TOOL_LOG"
# Where start_deploy hands its callback URL to "the pipeline" (the test reads it there).
PIPELINE_ENV = "FAULT_PIPELINE_FILE"
SLOW_ENV = "FAULT_SLOW_TOOL_SECONDS"
# How long migrate_tenants takes per item (long enough to be killed in the middle).
ITEM_ENV = "FAULT_ITEM_SECONDS"


def record(event: str, tool: str, service: str) -> None:
    """Append one line and fsync it: it survives a SIGKILL right after this returns."""
    line = json.dumps({"event": event, "tool": tool, "service": service, "pid": os.getpid()})
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one write under PIPE_BUF: never interleaved
        os.fsync(fd)
    finally:
        os.close(fd)


def get_status(service: str) -> str:
    """Read the status of a service."""
    record("ran", "get_status", service)
    return f"{service} is healthy"


def slow_status(service: str) -> str:
    """Read the status of a service, slowly (the time a process may be killed meanwhile)."""
    record("ran", "slow_status", service)
    time.sleep(float(os.environ.get(SLOW_ENV, "60")))
    return f"{service} is healthy after a while"


def restart_service(service: str) -> str:
    """Restart a service."""
    record("ran", "restart_service", service)
    return f"restarted {service}"


def scale_service(service: str) -> str:
    """Scale a service out (anyone but the requester may approve it)."""
    record("ran", "scale_service", service)
    return f"scaled {service}"


def slow_restart(service: str) -> str:
    """Restart a service that takes a while to come back."""
    record("started", "slow_restart", service)
    time.sleep(float(os.environ.get(SLOW_ENV, "60")))
    record("finished", "slow_restart", service)
    return f"restarted {service} slowly"


def start_deploy(service: str) -> str:
    """Start a deploy of a service; its pipeline reports back when it is done."""
    url = callback_url()
    record("ran", "start_deploy", service)
    fd = os.open(os.environ[PIPELINE_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (url + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    raise WaitForCallback(f"deploy of {service}", timeout="1h")


def slow_deploy(service: str) -> str:
    """Start a deploy whose pipeline may report back before this call is done handing off."""
    url = callback_url()
    record("ran", "slow_deploy", service)
    fd = os.open(os.environ[PIPELINE_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (url + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    time.sleep(float(os.environ.get(SLOW_ENV, "60")))
    raise WaitForCallback(f"deploy of {service}", timeout="1h")


def flaky_api(service: str) -> str:
    """Call an API that asks to be called again a second later the first time."""
    with open(os.environ[LOG_ENV]) as log:
        events = [json.loads(line) for line in log if line.strip()]
    attempts = sum(1 for e in events if e["tool"] == "flaky_api" and e["service"] == service)
    record("ran", "flaky_api", service)
    if attempts == 0:
        raise RetryAt(datetime.now(UTC) + timedelta(seconds=1), "rate limited")
    return f"{service} answered on attempt {attempts + 1}"


def migrate_tenants(count: int) -> str:
    """Migrate tenants one by one; a checkpoint after each, so a restart carries on.

    Logs ``processed`` with the item (as the service) once the item is done, then stores the
    checkpoint: an item logged but not checkpointed when the process died may be done again
    (the contract), none before it may.
    """
    state = last_checkpoint()
    start = state["next"] if state else 0
    record("resumed" if state else "first", "migrate_tenants", str(start))
    for item in range(start, count):
        time.sleep(float(os.environ.get(ITEM_ENV, "0.05")))
        record("processed", "migrate_tenants", str(item))
        checkpoint({"next": item + 1})
        progress(item + 1, count, f"tenant-{item}")
    return f"migrated {count} tenants"


def broken_once(service: str) -> str:
    """Call a service that is down the first time it is called (a recovery's Retry works)."""
    with open(os.environ[LOG_ENV]) as log:
        events = [json.loads(line) for line in log if line.strip()]
    attempts = sum(1 for e in events if e["tool"] == "broken_once" and e["service"] == service)
    record("ran", "broken_once", service)
    if attempts == 0:
        raise ConnectionError(f"{service} is down")
    return f"{service} answered on attempt {attempts + 1}"
