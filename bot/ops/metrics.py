"""Prometheus metrics (``GET /metrics``), every name starting with ``approval_bot_``.

Two kinds, on purpose:

- **Read from the database at scrape time** (gauges): pending approvals by tool, runs by
  status (those still going: running, paused, resuming) and the sweeper's lag. Every replica
  shares one database, so each replica's scrape reports the same, right numbers; an
  in-process counter would only know what its own replica did. The queries read the pending
  approvals and the live runs only, through the indexes on their status.
- **Counted by this process** (counters and histograms): decisions by outcome, the time from
  a request to its decision, resume latency, acknowledgement latency, Slack API errors and
  429s by method, sweeps, database errors, drives by outcome. Prometheus sums them across
  replicas (``sum by (outcome) (rate(approval_bot_decisions_total[5m]))``).

The code it measures calls it through :mod:`bot.ops.metric_hooks` (decorators, a line each),
which records only once this module is imported: ``serve`` imports it, while a CLI command,
which serves no metrics, never pays for importing prometheus-client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from bot.clock import utcnow

if TYPE_CHECKING:
    from aiohttp import web

    from storage.repository import Repository

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(namespace="approval_bot", registry=REGISTRY)

# A person takes seconds to hours to decide.
DECISION_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
# A resumed run runs a tool and calls the model: about a second to minutes.
RESUME_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
# Slack gives up on an acknowledgement after 3 s.
ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5)

DECISIONS = Counter(
    "approval_bot_decisions",
    "Approvals decided, by outcome (approved, denied, expired).",
    ["outcome"],
    registry=REGISTRY,
)
DECISION_SECONDS = Histogram(
    "approval_bot_decision_seconds",
    "Time from a request for approval to its decision (approved or denied).",
    ["outcome"],
    buckets=DECISION_BUCKETS,
    registry=REGISTRY,
)
RESUME_SECONDS = Histogram(
    "approval_bot_resume_seconds",
    "Time from the decision that let a run carry on to the end of its resumed drive "
    "(its next answer, pause or failure), in the process that took the decision.",
    buckets=RESUME_BUCKETS,
    registry=REGISTRY,
)
ACK_SECONDS = Histogram(
    "approval_bot_ack_seconds",
    "Time to acknowledge a Slack request (event, block_actions, view_submission, command).",
    ["kind"],
    buckets=ACK_BUCKETS,
    registry=REGISTRY,
)
SLACK_API_ERRORS = Counter(
    "approval_bot_slack_api_errors",
    "Slack Web API calls that failed, by method and error (Slack's error code, or 'unreachable').",
    ["method", "error"],
    registry=REGISTRY,
)
SLACK_RATE_LIMITED = Counter(
    "approval_bot_slack_rate_limited",
    "HTTP 429 answers from the Slack Web API, by method (each retry counts).",
    ["method"],
    registry=REGISTRY,
)
SWEEPS = Counter(
    "approval_bot_sweeps",
    "Sweeps made by this replica, by result (ok, failed).",
    ["result"],
    registry=REGISTRY,
)
SWEEP_SECONDS = Histogram(
    "approval_bot_sweep_seconds",
    "How long one sweep took.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30),
    registry=REGISTRY,
)
DATABASE_ERRORS = Counter(
    "approval_bot_database_errors",
    "Database transactions that failed, by error (DatabaseBusy: over its time limit).",
    ["error"],
    registry=REGISTRY,
)
DRIVES = Counter(
    "approval_bot_run_drives",
    "Drives of a run (a start, a resume, a take-over) by how they ended (completed, "
    "paused, failed, cancelled, handed_over, ...).",
    ["outcome"],
    registry=REGISTRY,
)

# -- read from the database at scrape time -------------------------------------------------


@dataclass
class DatabaseSnapshot:
    pending_by_tool: dict[str, int] = field(default_factory=dict)
    runs_by_status: dict[str, int] = field(default_factory=dict)
    oldest_overdue: datetime | None = None
    held_runs: int = 0
    at: datetime = field(default_factory=utcnow)
    ok: bool = True


class DatabaseGauges(Collector):
    """Yields what the last scrape read from the database (see :func:`scrape`)."""

    def __init__(self) -> None:
        self.snapshot = DatabaseSnapshot(ok=False)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self.snapshot
        pending = GaugeMetricFamily(
            "approval_bot_pending_approvals",
            "Approvals waiting for a decision, by tool (all replicas: read from the database).",
            labels=["tool"],
        )
        for tool, count in sorted(snapshot.pending_by_tool.items()):
            pending.add_metric([tool], count)
        yield pending
        runs = GaugeMetricFamily(
            "approval_bot_runs",
            "Runs still going, by status (running, paused, resuming; read from the database).",
            labels=["status"],
        )
        for status in ("running", "paused", "resuming"):
            runs.add_metric([status], snapshot.runs_by_status.get(status, 0))
        yield runs
        yield GaugeMetricFamily(
            "approval_bot_paused_runs",
            "Runs an operator paused (Pause, `runs pause`) and nobody resumed yet (read from "
            "the database).",
            value=snapshot.held_runs,
        )
        lag = 0.0
        if snapshot.oldest_overdue is not None:
            lag = max((snapshot.at - snapshot.oldest_overdue).total_seconds(), 0.0)
        yield GaugeMetricFamily(
            "approval_bot_sweeper_lag_seconds",
            "How long the most overdue approval has been waiting to be expired (0 when none "
            "is): above a few sweep intervals, no sweeper keeps up.",
            value=lag,
        )
        yield GaugeMetricFamily(
            "approval_bot_database_up",
            "1 when this scrape could read the database, else 0.",
            value=1.0 if snapshot.ok else 0.0,
        )


DATABASE_GAUGES = DatabaseGauges()
REGISTRY.register(DATABASE_GAUGES)
# How long a scrape waits for the database before it reports approval_bot_database_up 0.
SCRAPE_DATABASE_SECONDS = 2.0


async def scrape(repo: Repository) -> DatabaseSnapshot:
    """Read the database's gauges for this scrape."""
    from storage.limits import time_limit
    from storage.repository import live_counts

    now = utcnow()
    try:
        with time_limit(SCRAPE_DATABASE_SECONDS):
            counts = await live_counts(repo.database, now=now)
    except Exception as exc:  # counted by CountingDatabase when it is a database failure
        log.error("metrics: could not read the database: %s", exc)
        snapshot = DatabaseSnapshot(ok=False, at=now)
    else:
        snapshot = DatabaseSnapshot(
            pending_by_tool=counts.pending_by_tool,
            runs_by_status=counts.runs_by_status,
            oldest_overdue=counts.oldest_overdue,
            held_runs=counts.held_runs,
            at=now,
        )
    DATABASE_GAUGES.snapshot = snapshot
    return snapshot


def metrics_handler(repo: Repository) -> Callable[[web.Request], Any]:
    """``GET /metrics``: the database gauges read now, then everything in text format."""
    from prometheus_client.aiohttp import make_aiohttp_handler

    exposition = make_aiohttp_handler(REGISTRY)
    # The endpoint needs no credentials and may share Slack's port: scrapes that overlap
    # share one database read, so a burst of them holds one pool connection, not one each.
    in_flight: asyncio.Task[DatabaseSnapshot] | None = None

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal in_flight
        if in_flight is None or in_flight.done():
            in_flight = asyncio.ensure_future(scrape(repo))
        await asyncio.shield(in_flight)
        return await exposition(request)

    return handle


# -- hooks -------------------------------------------------------------------------------

# run id -> monotonic time of the decision that claimed its resume; bounded, oldest dropped
# (a run resumed elsewhere never takes its entry).
_decided_at: OrderedDict[str, float] = OrderedDict()
_DECIDED_AT_MAX = 10_000


def _resume_claimed(run_id: str) -> None:
    _decided_at[run_id] = time.monotonic()
    _decided_at.move_to_end(run_id)
    while len(_decided_at) > _DECIDED_AT_MAX:
        _decided_at.popitem(last=False)


def resume_started(run_id: str) -> float | None:
    """When the decision that claimed this run's resume was taken (monotonic), if here."""
    return _decided_at.pop(run_id, None)


def record_decision(decision: Any, *, approve: bool) -> None:
    """A decision that won its race: count it, and how long the request waited for it."""
    approval = decision.approval
    if approval.status == "pending":
        return  # a vote towards a quorum (min_approvals): the decision is the last one's
    outcome = "approved" if approve else "denied"
    DECISIONS.labels(outcome).inc()
    if approval.decided_at is not None and approval.created_at is not None:
        waited = (approval.decided_at - approval.created_at).total_seconds()
        DECISION_SECONDS.labels(outcome).observe(max(waited, 0.0))
    if decision.resume_claimed:
        _resume_claimed(approval.run_id)


def record_expiry(expiry: Any) -> None:
    DECISIONS.labels("expired").inc()
    if expiry.resume_claimed:
        _resume_claimed(expiry.approval.run_id)


class CountingDatabase:
    """Wraps the repository's :class:`~storage.drivers.Database`: every transaction that fails
    is counted by error, then raised as before."""

    def __init__(self, database: Any) -> None:
        self._database = database

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        from storage.limits import DATABASE_FAILURES

        try:
            return await self._database.run(*args, **kwargs)
        except DATABASE_FAILURES as exc:  # not the refusals a transaction raises on purpose
            DATABASE_ERRORS.labels(type(exc).__name__).inc()
            raise


def count_database_errors(repo: Repository) -> None:
    """Count the failed transactions of ``repo`` from now on (once per repository)."""
    if not isinstance(repo.database, CountingDatabase):
        repo.database = CountingDatabase(repo.database)
