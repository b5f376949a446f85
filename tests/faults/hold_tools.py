"""A tool for the operators' pause fault tests: it runs until the test lets it finish.

``slow_check`` records ``started``, waits until the file named by ``FAULT_RELEASE_FILE``
exists (the test creates it once the pause is recorded), then records ``finished``; both
lines fsynced (:func:`tests.faults.tools.record`), so the test counts executions across kills.
"""

from __future__ import annotations

import os
import time

from tests.faults.tools import record

RELEASE_ENV = "FAULT_RELEASE_FILE"


def slow_check(service: str) -> str:
    """Check a service thoroughly (takes a while)."""
    record("started", "slow_check", service)
    release = os.environ.get(RELEASE_ENV, "")
    deadline = time.monotonic() + 120
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    record("finished", "slow_check", service)
    return f"checked {service} slowly"
