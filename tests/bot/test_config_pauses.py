"""The configuration keys of pauses: ask_user, [policies.ask_user], public_url (and its env
variable) and max_retry_wait; bad values fail with one message naming the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.config import ConfigError, config_from_dict, load_config


def test_defaults() -> None:
    config = config_from_dict({})
    assert config.ask_user is True
    assert config.public_url is None
    assert config.max_retry_wait == timedelta(days=1)
    assert config.max_retry_attempts == 5
    policy = config.question_policy()
    assert policy.approvers == [] and policy.ttl == config.approval_ttl
    assert policy.on_expiry == "deny"


def test_every_key_is_read() -> None:
    config = config_from_dict(
        {
            "ask_user": False,
            "public_url": "https://bot.example.com/",
            "max_retry_wait": "6h",
            "max_retry_attempts": 2,
            "approval_ttl": "10m",
            "policies": {
                "ask_user": {
                    "answerers": [" U0ONCALL ", "S0SRE"],
                    "ttl": "2h",
                    "on_expiry": "cancel",
                }
            },
        }
    )
    assert config.ask_user is False
    assert config.public_url == "https://bot.example.com"
    assert config.max_retry_wait == timedelta(hours=6)
    assert config.max_retry_attempts == 2
    policy = config.question_policy()
    assert policy.approvers == ["U0ONCALL", "S0SRE"]
    assert policy.ttl == timedelta(hours=2) and policy.on_expiry == "cancel"
    assert "ask_user" not in config.policies


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"ask_user": "yes"}, "ask_user: must be true or false"),
        ({"public_url": "bot.example.com"}, "public_url: 'bot.example.com' is not an http(s) URL"),
        ({"max_retry_wait": "forever"}, "max_retry_wait: 'forever' is not a duration"),
        ({"max_retry_attempts": 0}, "max_retry_attempts: 0 must be a whole number of at least 1"),
        (
            {"max_retry_attempts": "5"},
            "max_retry_attempts: '5' must be a whole number of at least 1",
        ),
        (
            {"policies": {"ask_user": {"approvers": ["U1"]}}},
            "policies.ask_user.approvers: unknown key (known: answerers, on_expiry, ttl)",
        ),
        (
            {"policies": {"ask_user": {"answerers": "U1"}}},
            "policies.ask_user.answerers: must be a list of Slack user or user-group ids",
        ),
        (
            {"policies": {"ask_user": {"on_expiry": "wait"}}},
            'policies.ask_user.on_expiry: \'wait\' must be "deny" or "cancel"',
        ),
        ({"policies": {"ask_user": "on"}}, "policies.ask_user: must be a table"),
    ],
)
def test_bad_values_name_their_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_from_dict(data)
    assert message in str(error.value)


def test_the_environment_sets_the_public_url(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text('public_url = "https://file.example.com"\n')
    env = {"APPROVAL_BOT_PUBLIC_URL": "https://env.example.com/bot/"}
    assert load_config(path, environ=env).public_url == "https://env.example.com/bot"
    with pytest.raises(ConfigError, match="APPROVAL_BOT_PUBLIC_URL: 'nope' is not an http"):
        load_config(path, environ={"APPROVAL_BOT_PUBLIC_URL": "nope"})
