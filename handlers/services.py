"""What every listener and flow needs, built once per process: the container, and nothing else.

:func:`handlers.app.build_services` fills it (the publisher with its card decoration, the
group and name caches, the workspace clients) and :func:`handlers.app.build_app` adds the
App Home and the approvers' reach when it registers the listeners; the command line builds
one without them. Listeners and flows receive it and read what they need; none of them builds
a part of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Config
from bot.engine import Runner
from bot.ops import BackgroundTasks
from handlers.slack import (
    HomeTabs,
    PeopleNames,
    Publisher,
    Reach,
    UserGroups,
    WorkspaceClients,
    approver_groups,
)
from handlers.slack.assistant import PaneCalls
from handlers.slack.steps import StepCompletions
from storage.repository import Repository

# Slack gives up on an acknowledgement after 3 s: the database work before it gets at most
# this, then the request is answered with an error status (Slack redelivers) or "try again".
ACK_TIME_LIMIT = 2.0
# A click's decision runs after the acknowledgement; the clicker is told to try again if
# the database has not recorded it by then.
DECISION_TIME_LIMIT = 5.0


@dataclass
class Services:
    repo: Repository
    config: Config
    runner: Runner
    client: AsyncWebClient
    publisher: Publisher
    groups: UserGroups
    background: BackgroundTasks
    clients: WorkspaceClients
    home: HomeTabs | None = None  # the App Home, once the bolt app registers it
    reach: Reach | None = None  # DM copies, reminders, escalations (handlers.slack.reach)
    people: PeopleNames | None = None  # display names (users.info), cached
    pane: PaneCalls | None = None  # the agent pane's calls (handlers.slack.assistant)
    steps: StepCompletions | None = None  # Workflow Builder steps' completions
    ack_time_limit: float = ACK_TIME_LIMIT
    decision_time_limit: float = DECISION_TIME_LIMIT

    def group_approvers(self) -> set[str]:
        """Every user-group id that any policy names."""
        return approver_groups(self.config)
