"""Migration 0006_pauses on a database the previous release used: its approvals stay
approvals and can still be decided, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from alembic import command
from sqlalchemy.engine import Connection

from bot.clock import utcnow
from bot.runner import Runner
from storage import migrate
from storage.repository import Repository
from tests.conftest import make_config


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
