"""What a person's App Home shows beyond the pending lists: recent decisions near them."""

from __future__ import annotations

from storage.db import Database, Mode, Tx
from storage.models import Approval
from storage.rows import APPROVALS

READ_ONE = Mode.READ_ONE

# "Their channels": channels where they asked for something, or where an approval named
# them as an approver. Slack's membership lists would cost a Web API call per channel.
RECENT_DECISIONS = (
    f"SELECT {APPROVALS.columns} FROM approvals "
    "WHERE team_id = :team_id AND decided_at IS NOT NULL AND channel IN ("
    "SELECT channel FROM approvals WHERE team_id = :team_id AND requester = :user "
    "UNION SELECT approvals.channel FROM approvals JOIN approval_approvers "
    "ON approval_approvers.approval_id = approvals.id "
    "WHERE approvals.team_id = :team_id AND approval_approvers.approver = :user) "
    "ORDER BY decided_at DESC, id DESC LIMIT :limit"
)


# ``/approvals history``: a channel's latest settled approvals (ix_approvals_decided_channel).
CHANNEL_DECISIONS = (
    f"SELECT {APPROVALS.columns} FROM approvals "
    "WHERE team_id = :team_id AND channel = :channel AND decided_at IS NOT NULL "
    "AND kind = 'approval' ORDER BY decided_at DESC, id DESC LIMIT :limit"
)


class HomeStore:
    database: Database

    async def recent_decisions(self, *, team_id: str, user: str, limit: int) -> list[Approval]:
        """The latest decided approvals in the workspace's channels ``user`` works in."""
        params = {"team_id": team_id, "user": user, "limit": limit}

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, row) for row in tx.all(RECENT_DECISIONS, params)]

        return await self.database.run(body, READ_ONE, inline=False)

    async def channel_decisions(self, *, team_id: str, channel: str, limit: int) -> list[Approval]:
        """The latest settled approvals of one channel, newest first (``/approvals history``)."""
        params = {"team_id": team_id, "channel": channel, "limit": limit}

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, row) for row in tx.all(CHANNEL_DECISIONS, params)]

        return await self.database.run(body, READ_ONE)
