"""manifest.yml is a valid Slack app manifest and declares what the code uses."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
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
    assert "users:read" in scopes  # display names for tool results (handlers.people)
    assert manifest["settings"]["event_subscriptions"]["bot_events"] == [
        "app_mention",
        "app_home_opened",
        "subteam_members_changed",
        "subteam_updated",
        "app_uninstalled",
        "tokens_revoked",
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
