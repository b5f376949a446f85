"""The slash command's name is ``slash_command`` in the configuration: the bot answers that
command, names it in its help, and no longer answers ``/approvals`` when it is renamed."""

from __future__ import annotations

import pytest

from bot.config import ConfigError
from storage.repository import Repository
from tests.conftest import make_config
from tests.support.slack_harness import CHANNEL, running_bot


async def test_a_renamed_command_is_answered_under_its_own_name(repo: Repository) -> None:
    config = make_config(slash_command="/ok-approvals")
    async with running_bot(config, repo) as slack:
        helped = await slack.server.slash_command(
            "U0APPROVER1", CHANNEL, command="/ok-approvals", text="help"
        )
        assert helped.status == 200
        [shown] = slack.ephemeral_texts("U0APPROVER1")
        assert "`/ok-approvals mine`" in shown and "/approvals" not in shown

        unknown = await slack.server.slash_command(
            "U0APPROVER1", CHANNEL, command="/ok-approvals", text="bogus"
        )
        assert unknown.status == 200
        assert "I don't know `/ok-approvals bogus`" in slack.ephemeral_texts("U0APPROVER1")[-1]

        # The old name is not this bot's command any more: bolt finds no listener for it.
        old = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="help")
        assert old.status == 404
        assert len(slack.ephemeral_texts("U0APPROVER1")) == 2


async def test_the_default_command_is_approvals(repo: Repository) -> None:
    async with running_bot(make_config(), repo) as slack:
        reply = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="help")
        assert reply.status == 200
        assert "`/approvals mine`" in slack.ephemeral_texts("U0APPROVER1")[-1]


@pytest.mark.parametrize("name", ["approvals", "/", "/Approvals", "/two words", "/" + "x" * 32, 7])
def test_a_slash_command_that_slack_would_refuse_is_a_configuration_error(name: object) -> None:
    with pytest.raises(ConfigError, match="slash_command"):
        make_config(slash_command=name)
