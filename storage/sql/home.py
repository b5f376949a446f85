"""The statements of what App Homes show beyond the pending lists (recent decisions near a
person, a channel's history) and of which Homes to publish again (``home_viewers``,
``home_dirty``).

Owns no state; the rows are :mod:`storage.stores.home`'s. Any replica reads and claims them
(a conditional DELETE), so a change made anywhere refreshes every Home that shows it.
Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.sql.columns import APPROVAL_COLUMNS

# "Their channels": channels where they asked for something, or where an approval named
# them as an approver. Slack's membership lists would cost a Web API call per channel.
RECENT_DECISIONS = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals "
    "WHERE team_id = :team_id AND decided_at IS NOT NULL AND channel IN ("
    "SELECT channel FROM approvals WHERE team_id = :team_id AND requester = :user "
    "UNION SELECT approvals.channel FROM approvals JOIN approval_approvers "
    "ON approval_approvers.approval_id = approvals.id "
    "WHERE approvals.team_id = :team_id AND approval_approvers.approver = :user) "
    "ORDER BY decided_at DESC, id DESC LIMIT :limit"
)


# ``/approvals history``: a channel's latest settled approvals (ix_approvals_decided_channel).
CHANNEL_DECISIONS = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals "
    "WHERE team_id = :team_id AND channel = :channel AND decided_at IS NOT NULL "
    "AND kind = 'approval' ORDER BY decided_at DESC, id DESC LIMIT :limit"
)
SAW_HOME = (
    "INSERT INTO home_viewers (team_id, user_id, opened_at) VALUES (:team_id, :user_id, :now) "
    "ON CONFLICT (team_id, user_id) DO UPDATE SET opened_at = excluded.opened_at"
)
HOME_VIEWERS = "SELECT user_id FROM home_viewers WHERE team_id = :team_id"
MARK_HOME = (
    "INSERT INTO home_dirty (team_id, user_id, since) VALUES (:team_id, :user_id, :now) "
    "ON CONFLICT (team_id, user_id) DO NOTHING"
)
CLAIM_HOMES = (
    "DELETE FROM home_dirty WHERE since <= :before AND team_id = :team_id "
    "AND user_id = :user_id RETURNING user_id"
)
DIRTY_HOMES = "SELECT team_id, user_id FROM home_dirty WHERE since <= :before LIMIT :limit"


# "What did I approve today?" (the agent pane): calls ``user`` let run since ``since``, newest
# first. Denials, expiries and cancels are not approvals; a grant's calls name their grantor.
# With a quorum (min_approvals > 1) only the last vote decides: the earlier approvers' votes
# are in approval_votes (portable, unlike a JSON search of approved_by).
APPROVED_BY = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals "
    "WHERE team_id = :team_id AND decided_at >= :since "
    "AND (decided_by = :user OR EXISTS (SELECT 1 FROM approval_votes "
    "WHERE approval_votes.approval_id = approvals.id AND approval_votes.voter = :user "
    "AND approval_votes.vote = 'approve')) "
    "AND status NOT IN ('pending', 'denied', 'expired', 'cancelled') "
    "ORDER BY decided_at DESC, id DESC LIMIT :limit"
)
