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

from bot.pauses import RetryAt, WaitForCallback, callback_url

LOG_ENV = "FAULT_TOOL_LOG"
# Where start_deploy hands its callback URL to "the pipeline" (the test reads it there).
PIPELINE_ENV = "FAULT_PIPELINE_FILE"
SLOW_ENV = "FAULT_SLOW_TOOL_SECONDS"


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
