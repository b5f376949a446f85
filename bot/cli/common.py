"""What several commands share: this process's worker id and Slack, when configured."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.config import Config
    from bot.engine import Runner
    from storage.repository import Repository


@functools.cache
def worker_id() -> str:
    """Every runner of this process drives as one worker, so an interrupted command can
    release exactly the leases it holds."""
    from bot.engine import default_worker_id

    return default_worker_id()


def slack_services(repo: Repository, runner: Runner, config: Config) -> Any:
    """Slack, when ``SLACK_BOT_TOKEN`` (or OAuth installs' ``SLACK_CLIENT_ID`` …) is set:
    decisions made here then edit their cards and the resumed run answers in its thread,
    as if the button had been clicked, with the token of the run's workspace."""
    if not (os.environ.get("SLACK_BOT_TOKEN") or os.environ.get("SLACK_CLIENT_ID")):
        return None
    from handlers.app import build_services
    from handlers.slack import SlackSettings, workspace_clients

    settings = SlackSettings.from_env(web_api_only=True)
    clients = workspace_clients(repo, settings)
    return build_services(repo, config, runner, clients.default, clients)
