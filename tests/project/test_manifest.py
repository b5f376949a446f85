"""manifest.yml is a valid Slack app manifest and declares what the code uses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from handlers.blocks.assistant import SUGGESTED_PROMPTS

ROOT = Path(__file__).resolve().parents[2]
# Slack's own manifest JSON schema (draft-07), copied into the repository.
SCHEMA = ROOT / "tests" / "fixtures" / "slack" / "manifest.schema.1.0.0.json"


@pytest.fixture
def manifest() -> dict:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


def test_manifest_matches_slacks_schema(manifest: dict) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(manifest, schema)


def test_manifest_declares_what_the_bot_uses(manifest: dict) -> None:
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"app_mentions:read", "chat:write", "commands", "im:write", "usergroups:read"} <= scopes
    assert "users:read" in scopes  # display names for tool results (handlers.slack.people)
    assert manifest["settings"]["event_subscriptions"]["bot_events"] == [
        "app_mention",
        "app_home_opened",
        "subteam_members_changed",
        "subteam_updated",
        "app_uninstalled",
        "tokens_revoked",
        "message.im",
        "agent_session_stopped",
    ]
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    assert manifest["oauth_config"]["redirect_urls"] == [
        "https://approval-bot.example.com/slack/oauth_redirect"
    ]
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == "/approvals"
    for url in (
        command["url"],
        manifest["settings"]["event_subscriptions"]["request_url"],
        manifest["settings"]["interactivity"]["request_url"],
    ):
        assert url.endswith("/slack/events")


def test_the_messages_tab_is_the_agent_pane(manifest: dict) -> None:
    """The bot DMs card copies and reminders: people must see them (the tab on); the tab is
    also the agent pane of Slack's Agent messaging experience, where people type requests
    (writable; issue 21 §2), with the scopes and events the pane needs."""
    home = manifest["features"]["app_home"]
    assert home["messages_tab_enabled"] is True
    assert home["messages_tab_read_only_enabled"] is False
    agent = manifest["features"]["agent_view"]
    assert agent["agent_description"]
    assert agent["suggested_prompts"] == SUGGESTED_PROMPTS  # the ones the bot answers
    assert "assistant_view" not in manifest["features"]  # Slack: one or the other
    assert {"assistant:write", "im:history"} <= set(manifest["oauth_config"]["scopes"]["bot"])


def test_every_scope_says_why_it_is_asked_for() -> None:
    """Each bot scope has a comment on the line above it (an admin reviewing the install
    reads why), including the first one."""
    lines = (ROOT / "manifest.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "bot:")
    unexplained = []
    for index in range(start + 1, len(lines)):
        line = lines[index].strip()
        if not line.startswith(("-", "#")):
            break
        if line.startswith("-") and not lines[index - 1].strip().startswith("#"):
            unexplained.append(line[1:].strip())
    assert unexplained == []


def test_the_slash_command_is_the_configured_default_and_its_hint_is_complete(
    manifest: dict,
) -> None:
    from bot.config import config_from_dict
    from handlers.blocks import HELP_TEXT

    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == config_from_dict({}).slash_command
    subcommands = set(re.findall(r"`/approvals (\w+)`", HELP_TEXT))
    assert {"mine", "all", "grants", "history", "help"} <= subcommands
    hinted = {word.strip() for word in command["usage_hint"].strip("[]").split("|")}
    assert hinted == subcommands
