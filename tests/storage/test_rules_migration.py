"""Migration 0010_rules on a database the previous release used: its approvals have no rule
and can still be decided, and the previous release's INSERT (no rule columns) still works,
on SQLite and PostgreSQL."""

from __future__ import annotations

import importlib
from datetime import timedelta

from bot.clock import utcnow
from bot.engine import Runner
from storage import migrate
from storage.repository import Repository
from tests.conftest import make_config
from tests.storage.test_pauses_migration import _upgrade_to

# Whatever revision 0010_rules follows once the integrator has chained the migrations.
PREVIOUS = importlib.import_module("storage.migrations.versions.0010_rules").down_revision

INSERT_OLD_APPROVAL = (
    "INSERT INTO approvals (id, run_id, turn, tool_call_id, tool_name, arguments, "
    "payload_hash, status, requester, team_id, channel, thread_ts, approvers, "
    "allow_self_approval, on_expiry, created_at, expires_at) VALUES (:id, "
    "'run_old', 1, :id, 'restart_service', '{}', :hash, 'pending', 'U0REQ', 'T1', "
    "'C1', '1.0', '[]', false, 'deny', :now, :later)"
)


async def test_approvals_of_the_previous_release_have_no_rule(database_url: str) -> None:
    repo = await Repository.open(database_url, upgrade=False)
    try:
        await repo.database.run_with_connection(_upgrade_to(PREVIOUS))  # type: ignore[arg-type]
        now = utcnow()
        params = {"hash": "0" * 64, "now": now, "later": now + timedelta(hours=1)}
        await repo.execute_sql(
            "INSERT INTO runs (id, conversation_key, team_id, channel, thread_ts, requester, "
            "status, model_id, history, turn, created_at, updated_at) VALUES ('run_old', 'k', "
            "'T1', 'C1', '1.0', 'U0REQ', 'paused', 'scripted', '[]', 1, :now, :now)",
            {"now": now},
        )
        await repo.execute_sql(INSERT_OLD_APPROVAL, {**params, "id": "apr_old"})
        await migrate.upgrade(repo.database)
        # The previous release, still running during a rolling deploy, writes as it did.
        await repo.execute_sql(INSERT_OLD_APPROVAL, {**params, "id": "apr_during"})

        for approval_id in ("apr_old", "apr_during"):
            old = await repo.get_approval(approval_id)
            assert old is not None
            assert (old.rule, old.rule_when, old.rule_error) == (None, None, None)
        runner = Runner(repo, make_config(), worker_id="worker-a")
        decision = await runner.decide("apr_old", actor="U0APPROVER1", approve=True)
        assert decision.approval.status == "approved"
    finally:
        await repo.close()
