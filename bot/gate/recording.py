"""Recording a gated call's result, through a database outage however long.

A tool that finished holds the only copy of its result: the call is ``executing`` in the
database and is never run again, so a result that is not recorded is lost for good ("outcome
unknown"). When the database cannot be reached or written (an outage, not a bug), the result
is kept here, in memory, and the recording is tried again with backoff (0.2 s, doubling, at
most 5 s apart) until the database takes it or this process stops (a shutdown cancels the
wait when its grace is up). The drive's lease keeper goes on renewing the lease meanwhile.

While the lease holds, no other replica takes the run over, so nothing runs twice and nobody
says "unknown". Once it has run out (by this drive's clock) the wait goes on, tried at most
1 s apart, and the record is marked late (``recorded_late`` on its audit event): this
process's own sweeper leaves the run alone (``Drives.recording``), and when the database comes
back one conditional UPDATE records the result, ``executing -> executed``, or ``unknown ->
executed`` if another replica took the run over meanwhile and said the outcome was unknown
(audited ``after_outcome_unknown``: the call ran, with this result, recorded late). In the
same transaction the lease is renewed if it is still this drive's: then the run carries on as
usual; if not, this drive stops (the run is the taker's) and its card is edited to show the
call ran.

Owns no durable state: the result, in memory, while it waits.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from bot.gate.turn import TurnContext

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.2
BACKOFF_MAX = 5.0
# Once the lease has run out, the wait is tried this often at most: the database that comes
# back should see this result before another replica's take-over says "unknown".
BACKOFF_MAX_AFTER_LEASE = 1.0


async def record_result(turn: TurnContext, approval_id: str, text: str, *, failed: bool) -> bool:
    """Record the result (renewing this drive's lease in the same transaction); whether the
    drive still holds its run. Waits out a database outage for as long as this process runs
    (see the module's docstring)."""
    source = f"recording the result of {approval_id}"
    loop = asyncio.get_running_loop()
    delay = BACKOFF_FIRST
    attempts = 0
    # The deadline this wait started from, and where it stands on the loop's clock (the
    # turn's clock may be a test's frozen one).
    known: datetime | None = None
    deadline = 0.0
    late = False
    try:
        while True:
            lease_until = turn.lease_until() if turn.lease_until is not None else None
            epoch = turn.hold_epoch
            holds: list[str | None] = []
            try:
                still_ours = await turn.repo.record_execution(
                    approval_id,
                    result=text,
                    failed=failed,
                    now=turn.clock(),
                    owner=turn.owner,
                    lease_until=lease_until,
                    again=attempts > 0,
                    late=late,
                    on_hold=holds.append,
                )
            except Exception as exc:
                if not turn.outages.failed(source, exc):
                    raise
                turn.recording.add(turn.run_id)
                if turn.lease_expires_at != known:
                    known = turn.lease_expires_at
                    left = (known - turn.clock()).total_seconds() if known is not None else 0.0
                    deadline = loop.time() + left
                left = deadline - loop.time()
                if left <= 0 and not late:
                    late = True
                    log.warning(
                        "run %s: the run's lease ran out while the result of approval %s waits "
                        "for the database (%s); still trying: it is recorded late once the "
                        "database is back",
                        turn.run_id,
                        approval_id,
                        exc,
                    )
                attempts += 1
                if late:
                    await asyncio.sleep(min(delay, BACKOFF_MAX_AFTER_LEASE))
                else:
                    await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, BACKOFF_MAX_AFTER_LEASE if late else BACKOFF_MAX)
                continue
            turn.outages.succeeded(source)
            if holds:  # the hold as the recording read it: the next safe point's, if nothing ran
                turn.hold_read_since(epoch, holds[-1])
            if attempts:
                log.info(
                    "run %s: the result of approval %s is recorded after %d attempts",
                    turn.run_id,
                    approval_id,
                    attempts + 1,
                )
            if still_ours and lease_until is not None:
                turn.lease_expires_at = lease_until
            return still_ours
    except asyncio.CancelledError:
        if attempts:
            log.error(
                "run %s: stopped waiting to record the result of approval %s (shutting down; "
                "the database is unavailable); it is lost, and the replica that takes the run "
                "over reports the outcome unknown",
                turn.run_id,
                approval_id,
            )
        raise
    finally:
        turn.outages.forget(source)
        turn.recording.discard(turn.run_id)
