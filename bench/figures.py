"""How the benchmarks report a sample of timings: percentiles and a one-line summary.

Nearest-rank percentiles on the sorted sample (no interpolation), so a p99 is a time that was
really measured; every script prints its figures through these.
"""

from __future__ import annotations

import statistics


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p99_ms": round(percentile(values, 99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
    }
