"""Migration 0006_pauses on a database the previous release used: its approvals stay
approvals and can still be decided, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from alembic import command
from freezegun import freeze_time
from sqlalchemy.engine import Connection

from bot.clock import utcnow
from bot.engine import Runner
from storage import migrate
from storage.repository import Repository
from tests.bot.test_engine import calls, request
from tests.bot.test_retries_engine import retry_config
from tests.conftest import make_config
from tests.support import pause_tools


def _upgrade_to(revision: str) -> object:
    def upgrade(connection: Connection) -> None:
        config = migrate.alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    return upgrade


async def test_approvals_of_the_previous_release_stay_approvals(database_url: str) -> None:
    repo = await Repository.open(database_url, upgrade=False)
    try:
        await repo.database.run_with_connection(_upgrade_to("0005_pending"))  # type: ignore[arg-type]
        now = utcnow()
        await repo.execute_sql(
            "INSERT INTO runs (id, conversation_key, team_id, channel, thread_ts, requester, "
            "status, model_id, history, turn, created_at, updated_at) VALUES ('run_old', 'k', "
            "'T1', 'C1', '1.0', 'U0REQ', 'paused', 'scripted', '[]', 1, :now, :now)",
            {"now": now},
        )
        await repo.execute_sql(
            "INSERT INTO approvals (id, run_id, turn, tool_call_id, tool_name, arguments, "
            "payload_hash, status, requester, team_id, channel, thread_ts, approvers, "
            "allow_self_approval, on_expiry, created_at, expires_at) VALUES ('apr_old', "
            "'run_old', 1, 'tc', 'restart_service', '{}', :hash, 'pending', 'U0REQ', 'T1', "
            "'C1', '1.0', '[]', false, 'deny', :now, :later)",
            {"hash": "0" * 64, "now": now, "later": now + timedelta(hours=1)},
        )
        await migrate.upgrade(repo.database)

        old = await repo.get_approval("apr_old")
        assert old is not None and old.kind == "approval"
        assert old.token_hash is None and old.due_at is None
        runner = Runner(repo, make_config(), worker_id="worker-a")
        decision = await runner.decide("apr_old", actor="U0APPROVER1", approve=True)
        assert decision.approval.status == "approved" and decision.resume_claimed
        assert await repo.due_retries(now + timedelta(days=2)) == []
    finally:
        await repo.close()


# The previous release's sweeper (0005_pending, before pauses had a kind), verbatim: it expires
# every pending row past ``expires_at``, whatever it is. During a rolling deploy it runs beside
# the new release on the same database (docs/deploy.md: one release of backwards compatibility).
PREVIOUS_RELEASE_EXPIRE = (
    "UPDATE approvals SET status = 'expired', decided_at = :now "
    "WHERE status = 'pending' AND expires_at <= :now"
)


async def test_the_previous_release_sweeper_leaves_a_due_retry_to_run(repo: Repository) -> None:
    pause_tools.reset()
    runner = Runner(repo, retry_config(), worker_id="worker-new")
    try:
        with freeze_time("2026-11-30 10:00:00") as clock:
            outcome = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
            (retry,) = outcome.new_approvals
            clock.tick(timedelta(minutes=6))  # due; the old replica sweeps before the new checks
            await repo.execute_sql(PREVIOUS_RELEASE_EXPIRE, {"now": utcnow()})
            stored = await repo.get_approval(retry.id)
            assert stored is not None and stored.status == "pending", stored
            assert await runner.due_retries() == [outcome.run_id]
            resumed = await runner.resume(outcome.run_id)
        assert resumed.answer == "Results: rate_limited=api answered on attempt 2"
    finally:
        pause_tools.reset()
