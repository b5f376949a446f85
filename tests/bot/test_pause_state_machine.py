"""A hypothesis state machine over pause / resume / decide / retry / skip / kill (issue 19).

One run per example, on the real engine and a real database (a fresh SQLite file per
example, copied from a migrated one; on PostgreSQL one schema per test, emptied before each
example), driven by two runners (two replicas) that share a clock the machine moves by hand.
The scripted model asks for five calls over three responses: ``guarded`` calls need
approval, ``plain`` ones do not, and every tool has ``on_error = "ask"``. The rules are the
people (Approve / Deny, Retry / Skip / "it ran", Pause, Resume) and the wake-ups (time
passing, then one sweep: expiries, take-overs, stranded runs, pause_ttl; a claimant that
stalled and drives late). Each rule that may start a call also chooses how the first
attempt it starts ends: it returns, raises (a recovery card), or hangs, and then the drive
is cancelled there, as a kill -9 would end it (its lease runs out and a sweep takes the run
over); and whether whoever claims a resume drives it or dies before it does.

The invariants, checked after every step and again once the example is settled:

- each attempt starts at most once: every start of a call the engine records (a gated call,
  a retry) finds exactly its own row ``executing``, and no row starts twice; an unrecorded
  first attempt of an ungated call runs again only after a kill in the middle of it (such a
  call is replayed from the history: docs/tool-authors.md);
- a run resumes at most once per wake-up (``run_resumed`` and ``run_taken_over`` in the audit,
  one step at a time) and never twice from one stop (``run_paused`` / ``run_held`` and
  ``run_resumed`` alternate), and a run is left ``resuming`` or ``running`` only by a drive
  that died; a paused run always waits on something (a row, or a hold);
- no call both ran and was skipped: nothing of a call starts after its Skip or "it ran", and
  the model reads the skip, once, for that call;
- a decided row never changes its decision (its status only moves forward from it, its
  decider stays), and the run never fails; settled, it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import asyncpg
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from ulid import ULID

from bot.engine import Request, Runner
from bot.policy import ApprovalExpired, DecisionRefused
from storage.models.base import Base
from storage.repository import LeaseLost, Repository
from tests.conftest import BASE_CONFIG, POSTGRES_URL, make_config
from tests.support import machine_tools

T0 = datetime(2026, 12, 1, 9, 0, 0)
LEASE = timedelta(minutes=1)
CALLS = {1: "guarded", 2: "plain", 3: "plain", 4: "guarded", 5: "guarded"}
STEPS = [[1, 2], [3], [4, 5]]  # the model's three responses
APPROVER = "U0APPROVER1"
REQUESTER = "U0REQUESTER"
CONFIG = make_config(
    tools=[
        *BASE_CONFIG["tools"],
        "tests.support.machine_tools:guarded",
        "tests.support.machine_tools:plain",
    ],
    policies={**BASE_CONFIG["policies"], "guarded": {"approvers": [APPROVER], "ttl": "1h"}},
    on_error="ask",
    recovery_ttl="1h",
    max_recoveries=3,
    run_lease="1m",
    pause_ttl="3h",
)
# Where each status may go from, once decided (reflexive and transitive).
AFTER = {
    "approved": {"approved", "executing", "executed", "unknown", "cancelled"},
    "due": {"due", "executing", "executed", "unknown", "cancelled"},
    "executing": {"executing", "executed", "unknown"},
    "unknown": {"unknown", "executed"},
}
FINISHED = ("completed", "cancelled")
# How the first attempt a step starts ends; whether whoever claims a resume drives it.
FATES = st.sampled_from(["ok", "raise", "raise", "hang"])
DRIVES = st.sampled_from([True, True, True, False])
REPLICAS = st.integers(0, 1)
TICKS = st.sampled_from([timedelta(0), timedelta(seconds=1), LEASE * 2, timedelta(hours=2)])


def script() -> str:
    def call(n: int) -> dict[str, Any]:
        return {"name": CALLS[n], "arguments": {"n": n}, "id": f"c{n}"}

    return json.dumps({"steps": [{"tool_calls": [call(n) for n in step]} for step in STEPS]})


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Start:
    n: int
    row: str | None  # the row recorded ``executing`` for this attempt; None: unrecorded
    executing: int  # how many rows of the call were ``executing`` (one, or none)


@dataclass
class View:
    """The run as the database has it after a step (the invariants and preconditions read it)."""

    run: Any
    rows: list[Any]
    events: list[str]
    stops: list[str]  # the run stopping and resuming, in order: "stop" or "resume"
    held: bool
    stranded: bool

    @classmethod
    async def of(cls, repo: Repository, run_id: str) -> View:
        run = await repo.get_run(run_id)
        rows = await repo.approvals_for_run(run_id)
        trail = await repo.audit_trail(run_id=run_id)
        stops = [
            "resume" if e.event == "run_resumed" else "stop"
            for e in trail
            # run_held "waiting": a run paused already is held; it did not stop again.
            if e.event in ("run_paused", "run_resumed")
            or (e.event == "run_held" and not e.detail.get("waiting"))
        ]
        held = await repo.hold_of(run_id) is not None
        stranded = run_id in await repo.stranded_runs()
        return cls(run, rows, [e.event for e in trail], stops, held, stranded)

    @property
    def run_status(self) -> str:
        return str(self.run.status)

    def pending(self, kind: str) -> bool:
        return any(a.kind == kind and a.status == "pending" for a in self.rows)

    def pick(self, kind: str, pick: int) -> Any:
        rows = [a for a in self.rows if a.kind == kind]
        pending = [a for a in rows if a.status == "pending"]
        choices = rows if pick == 3 else pending
        return choices[pick % len(choices)]

    def due_expiries(self, now: datetime) -> bool:
        return any(a.status == "pending" and a.expires_at <= now for a in self.rows)

    def stale(self, now: datetime) -> bool:
        expires = self.run.lease_expires_at
        return self.run_status in ("running", "resuming") and expires is not None and expires < now


@dataclass
class Backend:
    """Where the examples of one test keep their database, on the test's own event loop."""

    loop: asyncio.AbstractEventLoop
    tmp: Path
    template: Path | None = None  # SQLite: a migrated file, copied for each example
    postgres: list[Repository] = field(default_factory=list)  # PostgreSQL: one schema

    async def repos(self, example: int) -> tuple[list[Repository], bool]:
        """Three repositories on an empty database (two replicas, one observer); whether
        the caller closes them."""
        if self.template is None:
            # DELETE, children first: TRUNCATE of every table costs 0.3 s, this 20 ms.
            for table in reversed(Base.metadata.sorted_tables):
                await self.postgres[0].execute_sql(f"DELETE FROM {table.name}")
            return self.postgres, False
        path = self.tmp / f"example-{example}.db"
        shutil.copy(self.template, path)
        url = f"sqlite+aiosqlite:///{path}"
        return [await Repository.open(url, upgrade=False) for _ in range(3)], True


class PauseMachine(RuleBasedStateMachine):
    backend: ClassVar[Backend]
    examples: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        PauseMachine.examples += 1
        self.loop = self.backend.loop
        self.repos, self.owns_repos = self.run(self.backend.repos(PauseMachine.examples))
        self.observer = self.repos[2]
        self.clock = Clock()
        self.runners = [
            Runner(repo, CONFIG, worker_id=f"replica-{i}", clock=self.clock)
            for i, repo in enumerate(self.repos[:2])
        ]
        self.starts: list[Start] = []
        self.fate = "ok"  # how the next attempt to start ends
        self.hung: asyncio.Event | None = None
        self.hanging: Start | None = None
        self.kills_mid_unrecorded: dict[int, int] = {}  # kills while an unrecorded attempt ran
        self.orphaned = False  # a drive died or a claimant never drove: the sweeper's to find
        self.frozen: dict[int, int] = {}  # starts of a call when it was skipped / "it ran"
        self.seen: dict[str, tuple[str, str | None]] = {}  # row: (status, decided_by)
        self.resumes = 0
        self.kills = 0
        self.tasks: list[asyncio.Task[Any]] = []
        machine_tools.ON_START = self.on_start
        run = self.run(self.runners[0].open(self.request()))
        self.run_id = run.id
        self.drive(self.runners[0].drive(run))

    # -- plumbing -------------------------------------------------------------------------

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(work)

    @staticmethod
    def request() -> Request:
        return Request(
            text=script(), requester=REQUESTER, team_id="T1", channel="C0OPS", thread_ts="1.1"
        )

    async def on_start(self, tool: str, n: int) -> None:
        rows = await self.observer.approvals_for_run(self.run_id)
        executing = [a.id for a in rows if a.arguments.get("n") == n and a.status == "executing"]
        start = Start(n, executing[-1] if executing else None, len(executing))
        self.starts.append(start)
        mode, self.fate = self.fate, "ok"  # the first call this step starts
        if mode == "raise":
            raise ConnectionError(f"thing {n} is down")
        if mode == "hang":
            assert self.hung is not None
            self.hanging = start
            self.hung.set()
            await asyncio.Event().wait()  # until the drive is cancelled: it died here

    def drive(self, work: Coroutine[Any, Any, Any]) -> None:
        """Drive until the run lets go, or until a call hangs: then the drive dies there."""
        self.hung = asyncio.Event()
        self.hanging = None

        async def go() -> None:
            task = asyncio.ensure_future(work)
            hung = asyncio.ensure_future(self.hung.wait())  # type: ignore[union-attr]
            await asyncio.wait({task, hung}, return_when=asyncio.FIRST_COMPLETED)
            hung.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                assert self.hanging is not None
                if self.hanging.row is None:
                    n = self.hanging.n
                    self.kills_mid_unrecorded[n] = self.kills_mid_unrecorded.get(n, 0) + 1
                self.orphaned = True
                self.kills += 1
                return
            outcome = task.result()
            assert outcome.status != "failed", outcome.error

        self.run(go())
        self.fate = "ok"

    def claimed(self, runner: Runner, drive: bool) -> None:
        """A claim won: its winner drives the run, or dies before it does."""
        if drive:
            self.drive(runner.resume(self.run_id))
        else:
            self.orphaned = True

    def refused(self, runner: Runner, refused: DecisionRefused, drive: bool) -> None:
        """A click past the row's expiry expires it then and there, and moves the run on as
        the sweeper's expiry would (handlers.flows.settle: ``after_expiry``)."""
        expiry = refused.expiry if isinstance(refused, ApprovalExpired) else None
        if expiry is not None and expiry.resume_claimed:
            self.claimed(runner, drive)

    # -- people ---------------------------------------------------------------------------

    @precondition(lambda self: self.view.pending("approval"))
    @rule(
        replica=REPLICAS,
        pick=st.integers(0, 3),
        approve=st.sampled_from([True, True, True, False]),
        fate=FATES,
        drive=DRIVES,
    )
    def decide(self, replica: int, pick: int, approve: bool, fate: str, drive: bool) -> None:
        """Approve or Deny a pending call (``pick`` 3: any, a second click on a decided one)."""
        row = self.view.pick("approval", pick)
        self.fate = fate
        runner = self.runners[replica]
        try:
            decision = self.run(runner.decide(row.id, actor=APPROVER, approve=approve))
        except DecisionRefused as refused:
            self.refused(runner, refused, drive)
            return
        if decision.resume_claimed:
            self.claimed(runner, drive)

    @precondition(lambda self: self.view.pending("recovery"))
    @rule(
        replica=REPLICAS,
        pick=st.integers(0, 3),
        choice=st.sampled_from(["retry", "retry", "skip", "resolve"]),
        fate=FATES,
        drive=DRIVES,
    )
    def recover(self, replica: int, pick: int, choice: str, fate: str, drive: bool) -> None:
        """Retry, Skip or "it ran" on a recovery card ("it ran" only after a kill)."""
        row = self.view.pick("recovery", pick)
        n = row.arguments["n"]
        self.fate = fate
        runner = self.runners[replica]
        before = sum(1 for s in self.starts if s.n == n)
        try:
            decision = self.run(runner.recover(row.id, actor=row.approvers[0], choice=choice))
        except DecisionRefused as refused:
            self.refused(runner, refused, drive)
            return
        if choice in ("skip", "resolve"):
            self.frozen[n] = before
        if decision.resume_claimed:
            self.claimed(runner, drive)

    @precondition(lambda self: self.view.run_status not in FINISHED and not self.view.held)
    @rule(replica=REPLICAS, who=st.sampled_from([REQUESTER, APPROVER]))
    def pause(self, replica: int, who: str) -> None:
        self.run(self.runners[replica].pause_run(self.run_id, actor=who, reason="hold on"))

    @precondition(lambda self: self.view.held)
    @rule(replica=REPLICAS, who=st.sampled_from([REQUESTER, APPROVER]), fate=FATES, drive=DRIVES)
    def resume(self, replica: int, who: str, fate: str, drive: bool) -> None:
        runner = self.runners[replica]
        self.fate = fate
        try:
            released = self.run(runner.resume_run(self.run_id, actor=who))
        except DecisionRefused:  # a held run the sweeper cancelled (pause_ttl) meanwhile
            return
        if released.claimed is not None:
            self.claimed(runner, drive)

    # -- wake-ups -------------------------------------------------------------------------

    @rule(replica=REPLICAS, by=TICKS, fate=FATES)
    def wake(self, replica: int, by: timedelta, fate: str) -> None:
        """Time passes, then one sweep (``handlers.flows.sweeper.sweep_once``): expiries,
        take-overs of runs whose lease ran out, stranded runs, pause_ttl."""
        self.clock.now += by
        self.fate = fate
        runner = self.runners[replica]
        claimed = [e for e in self.run(runner.expire_due()) if e.resume_claimed]
        assert len(claimed) <= 1, "one run: one expiry at most claims its resume"
        if claimed:
            self.drive(runner.resume(self.run_id))
        for run in self.run(runner.take_over_stale_runs()):
            self.orphaned = False
            self.drive(runner.carry_on(run))
        assert self.run(runner.claim_stranded_runs()) == [], "a paused run left with nothing"
        self.run(runner.expire_holds())

    @precondition(lambda self: self.view.run_status == "resuming")
    @rule(replica=REPLICAS, fate=FATES)
    def claimant_drives_late(self, replica: int, fate: str) -> None:
        """Whoever claimed the resume stalled, and drives after all: its claim may have run
        out, or the run been taken over (then it must not drive)."""
        self.fate = fate
        orphaned, self.orphaned = self.orphaned, False
        try:
            self.drive(self.runners[replica].resume(self.run_id))  # orphaned again if it dies
        except LeaseLost:  # not its claim (any more): it drove nothing
            self.orphaned = orphaned

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def check(self) -> None:
        self.view = self.run(View.of(self.observer, self.run_id))
        self.each_attempt_starts_at_most_once()
        self.a_run_resumes_once_per_wake_up()
        self.nothing_runs_after_a_skip()
        self.a_decision_never_changes()

    def each_attempt_starts_at_most_once(self) -> None:
        recorded = [s.row for s in self.starts if s.row is not None]
        assert len(recorded) == len(set(recorded)), f"a recorded attempt started twice: {recorded}"
        for start in self.starts:
            assert start.executing <= 1, f"call {start.n}: two rows executing at once"
            if CALLS[start.n] == "guarded":
                assert start.row is not None, f"gated call {start.n} started unrecorded"
        for n in CALLS:
            unrecorded = sum(1 for s in self.starts if s.n == n and s.row is None)
            allowed = 1 + self.kills_mid_unrecorded.get(n, 0)
            assert unrecorded <= allowed, f"call {n}: {unrecorded} unrecorded starts"

    def a_run_resumes_once_per_wake_up(self) -> None:
        events = self.view.events
        resumes = events.count("run_resumed") + events.count("run_taken_over")
        assert resumes - self.resumes <= 1, f"resumed {resumes - self.resumes} times: {events}"
        self.resumes = resumes
        stops = self.view.stops
        twice = [i for i in range(1, len(stops)) if stops[i] == stops[i - 1] == "resume"]
        assert stops[:1] != ["resume"] and not twice, f"resumed twice from one stop: {stops}"
        status = self.view.run_status
        assert status != "failed", self.view.run.error
        if status in ("running", "resuming"):
            assert self.orphaned, f"run left {status} with nobody dead"
        assert not self.view.stranded, "a paused run with nothing pending and no hold"

    def nothing_runs_after_a_skip(self) -> None:
        for n, count in self.frozen.items():
            now = sum(1 for s in self.starts if s.n == n)
            assert now == count, f"call {n} started after it was skipped"

    def a_decision_never_changes(self) -> None:
        for row in self.view.rows:
            seen = self.seen.get(row.id)
            self.seen[row.id] = (row.status, row.decided_by)
            if seen is None or seen[0] == "pending":
                continue
            status, decided_by = seen
            assert row.status in AFTER.get(status, {status}), (
                f"{row.kind} {row.id}: {status} -> {row.status}"
            )
            if decided_by is not None:
                assert row.decided_by == decided_by, f"{row.id}: decided by someone else now"

    def teardown(self) -> None:
        try:
            self.settle()
        finally:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            machine_tools.ON_START = None
            if self.owns_repos:
                for repo in self.repos:
                    self.run(repo.close())

    def settle(self) -> None:
        """Nothing fails any more, everyone says yes and the sweeper runs: the run must end,
        keeping the invariants on the way, with one result for each call."""
        self.check()
        for name in ("run_held", "run_taken_over", "recovery_retry", "recovery_skipped"):
            event(f"before settling: {name} {'yes' if name in self.view.events else 'no'}")
        for _ in range(60):
            view = self.view
            if view.run_status in FINISHED:
                break
            if view.held:
                self.resume(0, REQUESTER, "ok", True)
            elif view.pending("approval"):
                self.decide(1, 0, True, "ok", True)
            elif view.pending("recovery"):
                self.recover(0, 0, "retry", "ok", True)
            else:
                self.wake(1, LEASE * 2, "ok")
            self.check()
        else:
            raise AssertionError(f"the run never ended: {self.view.run_status}")
        if self.view.run_status == "completed":
            self.one_result_per_call(self.view.run.history)

    def one_result_per_call(self, history: list[dict[str, Any]]) -> None:
        results: dict[str, list[str]] = {}
        for message in history:
            for part in message["parts"] if message["role"] == "tool" else []:
                results.setdefault(part["tool_call_id"], []).append(part["output"])
        assert sorted(results) == [f"c{n}" for n in sorted(CALLS)], results
        for n in CALLS:
            [output] = results[f"c{n}"]
            if n in self.frozen:
                assert "Skipped by" in output or "ran and succeeded" in output, output


async def _sqlite_template(tmp: Path) -> Path:
    path = tmp / "template.db"
    repo = await Repository.open(f"sqlite+aiosqlite:///{path}")
    await repo.close()
    return path


@contextlib.asynccontextmanager
async def _postgres_schema() -> Any:
    schema = f"t_{str(ULID()).lower()}"
    plain_url = POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://")
    admin = await asyncpg.connect(plain_url)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    kwargs = {"connect_args": {"server_settings": {"search_path": schema}}}
    repos = [await Repository.open(POSTGRES_URL, **kwargs) for _ in range(3)]
    try:
        yield repos
    finally:
        for repo in repos:
            await repo.close()
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_pause_resume_decide_retry_skip_kill_keep_the_invariants(
    backend: str, tmp_path: Path
) -> None:
    loop = asyncio.new_event_loop()
    try:
        if backend == "sqlite":
            template = loop.run_until_complete(_sqlite_template(tmp_path))
            PauseMachine.backend = Backend(loop, tmp_path, template=template)
            run_state_machine_as_test(PauseMachine, settings=SETTINGS)
            return
        schema = _postgres_schema()
        repos = loop.run_until_complete(schema.__aenter__())
        try:
            PauseMachine.backend = Backend(loop, tmp_path, postgres=repos)
            run_state_machine_as_test(PauseMachine, settings=SETTINGS)
        finally:
            loop.run_until_complete(schema.__aexit__(None, None, None))
    finally:
        machine_tools.ON_START = None
        loop.close()
