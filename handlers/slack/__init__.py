"""Talking to Slack's Web API: clients, who is who, and everything the bot posts.

Bottom to top: what a call can fail with (:mod:`~handlers.slack.failures`), the instrumented
client and the settings that make it (:mod:`~handlers.slack.instrument`,
:mod:`~handlers.slack.settings`), which token speaks for each workspace
(:mod:`~handlers.slack.workspaces`, :mod:`~handlers.slack.oauth`,
:mod:`~handlers.slack.authorize`), who is in a user group
and what people are called (:mod:`~handlers.slack.groups`, :mod:`~handlers.slack.people`);
then what the bot writes: run progress, answers, cards and their edits
(:mod:`~handlers.slack.publish`), the approvers' DM copies, reminders and escalations
(:mod:`~handlers.slack.reach`) and the App Home (:mod:`~handlers.slack.home`). Nothing here
knows a listener: these are called by the flows, the sweeper and the command line alike.
"""

from handlers.slack.authorize import WorkspaceAuthorize
from handlers.slack.cards import CardPlace, Cards
from handlers.slack.failures import SLACK_FAILURES, transient
from handlers.slack.groups import GroupLookupFailed, UserGroups, approver_groups
from handlers.slack.home import HomeTabs
from handlers.slack.instrument import InstrumentedWebClient, RateLimitCounter
from handlers.slack.oauth import (
    DatabaseInstallationStore,
    DatabaseStateStore,
    oauth_settings,
    workspace_clients,
)
from handlers.slack.people import PeopleNames, display_name
from handlers.slack.publish import (
    RESUMING,
    RESUMING_ANSWERED,
    RESUMING_CALLBACK,
    RESUMING_EXPIRED,
    RESUMING_RETRY,
    Publisher,
)
from handlers.slack.reach import Reach
from handlers.slack.settings import SlackSettings
from handlers.slack.workspaces import NotInstalled, WorkspaceClients

__all__ = [
    "RESUMING",
    "RESUMING_ANSWERED",
    "RESUMING_CALLBACK",
    "RESUMING_EXPIRED",
    "RESUMING_RETRY",
    "SLACK_FAILURES",
    "CardPlace",
    "Cards",
    "DatabaseInstallationStore",
    "DatabaseStateStore",
    "GroupLookupFailed",
    "HomeTabs",
    "InstrumentedWebClient",
    "NotInstalled",
    "PeopleNames",
    "Publisher",
    "RateLimitCounter",
    "Reach",
    "SlackSettings",
    "UserGroups",
    "WorkspaceAuthorize",
    "WorkspaceClients",
    "approver_groups",
    "display_name",
    "oauth_settings",
    "transient",
    "workspace_clients",
]
