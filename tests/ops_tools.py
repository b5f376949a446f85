"""Tools for tests: they record every real execution in ``EXECUTED`` so tests can count."""

from __future__ import annotations

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
