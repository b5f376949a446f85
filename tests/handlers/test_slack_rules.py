"""Rules on arguments through the real bolt app, on SQLite and PostgreSQL: a staging call runs
without a card, a big prod call gets a card naming its rule that only the rule's approvers
may approve, a deny rule's message reaches the model, and a rule that cannot be evaluated
fails closed. The rule is snapshotted on the approval and audited; the CLI shows it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.cli.app import main
from storage.repository import Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

POLICIES = {
    "scale_service": {
        "approvers": ["U0ONCALL"],
        "rules": [
            {"when": 'args.env == "staging"', "approval": "never"},
            {"when": 'args.env == "prod" && args.replicas > 20', "approvers": ["U0SRELEAD"]},
            {"when": 'args.env == "dev" && int(args.service) > 3', "approval": "never"},
        ],
    },
    "refund": {
        "approvers": ["U0FINANCE"],
        "rules": [
            {
                "when": "args.amount_cents > 100000",
                "approval": "deny",
                "message": "Refunds over $1,000 go through finance, not this bot.",
            }
        ],
    },
}
TOOLS = ["tests.support.rule_tools:scale_service", "tests.support.rule_tools:refund"]
BIG_PROD_RULE = "policies.scale_service.rules[1]"


def call(name: str, **arguments: object) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(tools=TOOLS, policies=POLICIES)
    async with running_bot(config, repo) as harness:
        yield harness


async def rule_events(repo: Repository, run_id: str) -> list[dict]:
    return [
        {**e.detail, "approval_id": e.approval_id, "actor": e.actor}
        for e in await repo.audit_trail(run_id=run_id)
        if e.event == "rule_matched"
    ]


async def test_a_staging_call_runs_without_a_card(slack: Harness) -> None:
    reply = await slack.mention(
        "U0REQUESTER", call("scale_service", service="web", env="staging", replicas=50)
    )
    assert slack.cards() == []
    assert ops_tools.EXECUTED == [
        ("scale_service", {"service": "web", "env": "staging", "replicas": 50})
    ]
    assert "Results: scale_service=scaled web in staging to 50" in [
        m.text for m in slack.thread_of(reply)
    ]
    # The thread says why nobody was asked: the rule that let it through, by number.
    assert (
        ":white_check_mark: `scale_service` ran, no approval needed: rule 1 of scale_service "
        '(args.env == "staging").'
    ) in [m.text for m in slack.thread_of(reply)]
    assert await rule_events(slack.repo, await _only_run(slack)) == [
        {
            "tool": "scale_service",
            "rule": "policies.scale_service.rules[0]",
            "when": 'args.env == "staging"',
            "approval": "never",
            "error": None,
            "approval_id": None,
            "actor": "U0REQUESTER",
        }
    ]


async def _only_run(slack: Harness) -> str:
    events = await slack.repo.audit_trail()
    [run_id] = {e.run_id for e in events if e.event == "run_started"}
    return run_id


async def test_a_big_prod_call_asks_the_rules_approvers_only(slack: Harness) -> None:
    reply = await slack.mention(
        "U0REQUESTER", call("scale_service", service="web", env="prod", replicas=25)
    )
    [card] = slack.cards()
    rule_text = (
        f'Rule `{BIG_PROD_RULE}` applied: `args.env == "prod" &amp;&amp; args.replicas &gt; 20`'
    )
    assert rule_text in json.dumps(card.blocks, ensure_ascii=False).replace('\\"', '"')
    assert "<@U0SRELEAD>" in str(card.blocks) and "U0ONCALL" not in str(card.blocks)
    approval = (await slack.repo.approvals_for_run(await _only_run(slack)))[0]
    assert approval.rule == BIG_PROD_RULE and approval.approvers == ["U0SRELEAD"]
    assert approval.rule_when == 'args.env == "prod" && args.replicas > 20'

    # /approvals lists it with its rule.
    listed = await slack.server.slash_command("U0SRELEAD", CHANNEL, text="")
    assert BIG_PROD_RULE in listed.body

    # The tool's own approver is not one of this call's.
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0ONCALL"))
    assert ops_tools.EXECUTED == []
    assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]

    await slack.server.click("U0SRELEAD", card, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [
        ("scale_service", {"service": "web", "env": "prod", "replicas": 25})
    ]
    assert "Results: scale_service=scaled web in prod to 25" in [
        m.text for m in slack.thread_of(reply)
    ]
    # The decided card still says which rule applied.
    decided = slack.server.message(CHANNEL, card.ts)
    assert decided is not None and BIG_PROD_RULE in str(decided.blocks)
    [event] = await rule_events(slack.repo, approval.run_id)
    assert event["rule"] == BIG_PROD_RULE and event["approval_id"] == approval.id
    assert event["approval"] == "required" and event["actor"] == "U0REQUESTER"


async def test_a_small_prod_call_gets_the_tools_defaults(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", call("scale_service", service="web", env="prod", replicas=3))
    [card] = slack.cards()
    assert "approval_rule" not in str(card.blocks) and "<@U0ONCALL>" in str(card.blocks)
    approval = (await slack.repo.approvals_for_run(await _only_run(slack)))[0]
    assert approval.rule is None
    assert await rule_events(slack.repo, approval.run_id) == []


async def test_a_deny_rules_message_reaches_the_model(slack: Harness) -> None:
    reply = await slack.mention("U0REQUESTER", call("refund", order="o-1", amount_cents=250_000))
    assert slack.cards() == [] and ops_tools.EXECUTED == []
    texts = [m.text for m in slack.thread_of(reply)]
    assert (
        "Results: refund=Refused by rule policies.refund.rules[0]: Refunds over $1,000 go "
        "through finance, not this bot. The call to refund was not run and no approval was "
        "asked for; do not try to get around this."
    ) in texts
    [event] = await rule_events(slack.repo, await _only_run(slack))
    assert event["approval"] == "deny" and event["rule"] == "policies.refund.rules[0]"


async def test_a_rule_that_cannot_be_evaluated_fails_closed(slack: Harness) -> None:
    # rules[2] converts the service name to a number: "web" cannot be, so nobody can say
    # whether the rule (which would let the call run) applies. A person decides.
    await slack.mention("U0REQUESTER", call("scale_service", service="web", env="dev", replicas=2))
    assert ops_tools.EXECUTED == []
    [card] = slack.cards()
    text = str(card.blocks)
    assert "policies.scale_service.rules[2]" in text and "could not be evaluated" in text
    assert "<@U0ONCALL>" in text
    approval = (await slack.repo.approvals_for_run(await _only_run(slack)))[0]
    assert approval.rule == "policies.scale_service.rules[2]" and approval.rule_error
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [
        ("scale_service", {"service": "web", "env": "dev", "replicas": 2})
    ]


# -- the command line ---------------------------------------------------------------------


CLI_CONFIG = f"""
model = "scripted"
tools = {json.dumps(TOOLS)}

[policies.scale_service]
approvers = ["U0ONCALL"]

[[policies.scale_service.rules]]
when = 'args.env == "prod" && args.replicas > 20'
approvers = ["U0SRELEAD"]
"""


def test_the_cli_shows_the_rule(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "bot.toml"
    path.write_text(CLI_CONFIG)
    monkeypatch.setenv("DATABASE_URL", database_url)
    cfg = ["--config", str(path)]
    assert main([*cfg, "db", "upgrade"]) == 0
    request = call("scale_service", service="web", env="prod", replicas=40)
    assert main([*cfg, "ask", request, "--as", "U0REQUESTER"]) == 0
    capsys.readouterr()

    assert main([*cfg, "approvals", "list"]) == 0
    out = capsys.readouterr().out
    rule_line = (
        'rule policies.scale_service.rules[0] applied: args.env == "prod" && args.replicas > 20'
    )
    assert rule_line in out and "approvers: U0SRELEAD" in out

    assert main([*cfg, "approvals", "list", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["rule"] == "policies.scale_service.rules[0]"
    assert listed["rule_when"] == 'args.env == "prod" && args.replicas > 20'

    assert main([*cfg, "approvals", "show", listed["id"]]) == 0
    out = capsys.readouterr().out
    assert rule_line in out and "rule_matched U0REQUESTER" in out
    assert main([*cfg, "approvals", "show", listed["id"], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["rule"] == listed["rule"]
    assert [e["detail"]["rule"] for e in shown["audit"] if e["event"] == "rule_matched"] == [
        "policies.scale_service.rules[0]"
    ]
    assert main([*cfg, "approvals", "show", "nope"]) == 1
    err = capsys.readouterr().err
    assert err == "approval-bot: nope: there is no approval, question or wait with this id\n"

    assert main([*cfg, "runs", "show", listed["run_id"]]) == 0
    assert rule_line in capsys.readouterr().out

    decide = [*cfg, "approvals", "decide", listed["id"], "--approve", "--as"]
    assert main([*decide, "U0ONCALL"]) == 1
    assert capsys.readouterr().err.startswith(f"approval-bot: {listed['id']}: ")
    assert main([*decide, "U0SRELEAD"]) == 0
    assert "scale_service=scaled web in prod to 40" in capsys.readouterr().out
