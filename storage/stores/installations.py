"""Slack installs (one bot token per workspace) and OAuth states, on our own tables.

The OAuth flow (``handlers.oauth``) turns slack_sdk's ``Installation`` and ``Bot`` into JSON
text and back; this module stores that text and knows no Slack types. A workspace's row is
keyed ``<enterprise_id or ->:<team_id or ->`` (:func:`workspace_key`), so an Enterprise Grid
org-wide install (no team) and a workspace install never collide.

Uninstalling (:meth:`InstallationStore.uninstall_workspace`) removes the row and cancels
the workspace's paused runs with their pending approvals in one transaction: nothing can
be decided, or posted, with a token Slack no longer honours.
"""

from __future__ import annotations

from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.records import StoredInstallation
from storage.sql.installations import (
    CONSUME_STATE,
    DELETE_INSTALLATION,
    FIND_INSTALLATION,
    FORGET_STATES,
    INSERT_STATE,
    PAUSED_RUNS_OF_TEAM,
    UPDATE_BOT,
    UPSERT_INSTALLATION,
)
from storage.stores.events import audit
from storage.stores.transitions import cancel_paused_run

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


def workspace_key(enterprise_id: str | None, team_id: str | None) -> str:
    """The row of an install: an org-wide install has no team, a workspace no enterprise."""
    return f"{enterprise_id or '-'}:{team_id or '-'}"


class InstallationStore:
    database: Database

    async def save_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        bot: str,
        installation: str,
        now: datetime,
    ) -> None:
        """Insert or replace a workspace's install (a reinstall brings new tokens and scopes)."""
        params = {
            "workspace": workspace_key(enterprise_id, team_id),
            "enterprise_id": enterprise_id or "",
            "team_id": team_id or "",
            "bot": bot,
            "installation": installation,
            "now": now,
        }

        def body(tx: Tx) -> None:
            tx.execute(UPSERT_INSTALLATION, params)

        await self.database.run(body, WRITE)

    async def save_bot(
        self, *, enterprise_id: str | None, team_id: str | None, bot: str, now: datetime
    ) -> bool:
        """Replace an install's bot (a rotated token); False when it is not installed."""
        params = {"workspace": workspace_key(enterprise_id, team_id), "bot": bot, "now": now}

        def body(tx: Tx) -> bool:
            return tx.execute(UPDATE_BOT, params) == 1

        return await self.database.run(body, WRITE)

    async def find_installation(
        self, *, enterprise_id: str | None, team_id: str | None
    ) -> StoredInstallation | None:
        params = {"workspace": workspace_key(enterprise_id, team_id)}

        def body(tx: Tx) -> StoredInstallation | None:
            row = tx.one(FIND_INSTALLATION, params)
            return None if row is None else StoredInstallation(bot=row[0], installation=row[1])

        return await self.database.run(body, READ_ONE)

    async def delete_installation(self, *, enterprise_id: str | None, team_id: str | None) -> bool:
        params = {"workspace": workspace_key(enterprise_id, team_id)}

        def body(tx: Tx) -> bool:
            return tx.execute(DELETE_INSTALLATION, params) == 1

        return await self.database.run(body, WRITE)

    async def uninstall_workspace(
        self, *, enterprise_id: str | None, team_id: str, reason: str, now: datetime
    ) -> list[str]:
        """Forget the workspace's install and cancel its paused runs (and their pending
        approvals), audited with ``reason``, in one transaction. The ids of the runs cancelled.

        Runs of an org-wide install carry the workspace's team id, so they are found by team.
        """
        params = {"workspace": workspace_key(enterprise_id, team_id), "team_id": team_id}

        def body(tx: Tx) -> list[str]:
            tx.execute(DELETE_INSTALLATION, params)
            cancelled = [
                run_id
                for (run_id,) in tx.all(PAUSED_RUNS_OF_TEAM, params)
                if cancel_paused_run(tx, run_id, reason, now)
            ]
            for run_id in cancelled:
                audit(tx, now, "run_cancel_requested", run_id=run_id, actor="slack", reason=reason)
            return cancelled

        return await self.database.run(body, WRITE, inline=False)

    # -- OAuth states ----------------------------------------------------------------------

    async def issue_oauth_state(self, state: str, *, expires_at: datetime, now: datetime) -> None:
        """Store a state for one redirect; expired states are forgotten on the way."""

        def body(tx: Tx) -> None:
            tx.execute(FORGET_STATES, {"now": now})
            tx.execute(INSERT_STATE, {"state": state, "expires_at": expires_at})

        await self.database.run(body, WRITE)

    async def consume_oauth_state(self, state: str, *, now: datetime) -> bool:
        """True once for a state issued here and not yet expired; False for any other."""

        def body(tx: Tx) -> bool:
            return tx.execute(CONSUME_STATE, {"state": state, "now": now}) == 1

        return await self.database.run(body, WRITE)
