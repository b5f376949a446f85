"""Named crash windows, for the fault suite: kill this process with SIGKILL at a chosen point.

The exactly-once promise is about what happens when a process dies between two durable steps
(the event stored but not acknowledged, the pause stored but no card posted, ``executing``
recorded but the tool not run …). ``failpoint(name)`` marks such a window. It does nothing
unless ``APPROVAL_BOT_FAILPOINT`` names it, in which case the process kills itself with
SIGKILL right there: no ``finally``, no flush, no shutdown hook, exactly like ``kill -9`` or a
power cut at that instant. ``tests/faults/`` starts real ``approval-bot serve`` processes with
it set, then restarts them and checks that nothing was lost or run twice.

``APPROVAL_BOT_FAILPOINT=name`` kills at the first time the window is reached;
``name@N`` at the N-th time (1-based), so a test can let earlier requests through. Read
when the process starts.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "APPROVAL_BOT_FAILPOINT"

# Every window the code marks; the fault suite kills at each.
WINDOWS = (
    "mention_stored",  # the event id and the request are stored; Slack not yet answered
    "pause_stored",  # the paused run and its approvals are stored; no card posted yet
    "click_acknowledged",  # Slack has its 200 for a click; its decision is not stored yet
    "decision_stored",  # a decision (and maybe the resume claim) is stored; no resume yet
    "execution_started",  # ``executing`` is recorded; the tool has not run
    "execution_recorded",  # ``executed`` is recorded; the answer is not posted yet
    "answer_posting",  # the run's end and its answer are stored and claimed; not yet posted
    "answer_posted",  # Slack took the answer; the outbox row is not deleted yet
    "step_completing",  # a workflow step's approval is settled and its completion claimed
    "step_completed",  # Slack took the step's completion; the record of it is not stored
    "webhook_sending",  # an API request's webhook is claimed; not yet POSTed
    "webhook_sent",  # the receiver took the webhook; the record of it is not stored
    "child_ended",  # a sub-agent's end is stored with its parent's resume claimed; not resumed
)

_counts: dict[str, int] = {}
_lock = threading.Lock()


def _armed(value: str) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, nth = value.partition("@")
    return name, int(nth) if nth.isdigit() else 1


# Read once, when the process starts: its environment is what it was started with (the fault
# suite's processes are started with the window armed). Read at every window it cost 9 000
# instructions (a name os.environ lacks is a KeyError raised and caught), three windows in a
# pause -> decide -> resume cycle.
ARMED = _armed(os.environ.get(ENV, ""))


def failpoint(name: str) -> None:
    """Kill this process with SIGKILL here if ``APPROVAL_BOT_FAILPOINT`` names this window."""
    armed = ARMED
    if armed is None or armed[0] != name:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        if _counts[name] != armed[1]:
            return
    os.kill(os.getpid(), signal.SIGKILL)
