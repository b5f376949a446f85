"""Tools that fail for recovery tests (``on_error = "ask"``): ``flaky`` fails its first
``FAILURES[0]`` runs, then succeeds; ``hostile`` always fails with an error written to abuse
the card. Every real run is recorded in ops_tools.EXECUTED."""

from __future__ import annotations

from tests.support import ops_tools

FAILURES: list[int] = [1]


def reset() -> None:
    FAILURES[:] = [1]


def flaky(service: str) -> str:
    """Call a service that is sometimes down."""
    ops_tools.EXECUTED.append(("flaky", {"service": service}))
    if FAILURES[0] > 0:
        FAILURES[0] -= 1
        raise ConnectionError(f"{service} is down <b>&</b> " + "x" * 600)
    return f"{service} answered"


# An error a tool could raise to abuse the card: pings, a forged mention, a disguised link.
HOSTILE_ERROR = (
    "<!channel> <@U0APPROVER2> <!subteam^S0OPS> <http://evil.example|click me> "
    "*bold* ```fence``` & " + "\U0001f525" * 3000
)


def hostile(service: str) -> str:
    """Always fail, with an error written to abuse the card."""
    ops_tools.EXECUTED.append(("hostile", {"service": service}))
    raise RuntimeError(HOSTILE_ERROR)
