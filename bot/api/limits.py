"""A token's rate: at most ``api_rate_limit`` requests a minute to ``/api/v1`` (per replica).

A sliding window of the last minute's request times per token, in memory: cheap, and a
replica that restarts forgets it (a limit, not an accounting). More answer 429 with
``Retry-After``, having changed nothing.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable

WINDOW = 60.0


class RateLimit:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._seen: dict[str, collections.deque[float]] = {}

    def retry_after(self, key: str) -> int | None:
        """None: the request may go ahead (and is counted); else seconds to wait."""
        now = self.clock()
        seen = self._seen.setdefault(key, collections.deque())
        while seen and seen[0] <= now - WINDOW:
            seen.popleft()
        if len(seen) >= self.per_minute:
            return max(1, math.ceil(seen[0] + WINDOW - now))
        seen.append(now)
        return None
