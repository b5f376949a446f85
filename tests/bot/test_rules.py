"""Rules on arguments: which rule decides a call, and bad rules refused at start-up with the
key and the position; the typed configuration reports every problem at once and publishes
a JSON Schema that the files we ship validate against."""

from __future__ import annotations

import json
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bot.cli.app import main
from bot.config import ConfigError, config_from_dict, load_config
from bot.policy import Policy
from playground.demo import demo_config_dict

ISSUE_EXAMPLE = """
model = "scripted"
tools = ["tests.support.rule_tools:scale_service", "tests.support.rule_tools:refund"]

[policies.scale_service]
approval = "required"
approvers = ["S0ONCALL"]

[[policies.scale_service.rules]]
when = 'args.env == "staging"'
approval = "never"

[[policies.scale_service.rules]]
when = 'args.env == "prod" && args.replicas > 20'
approvers = ["U0SRELEAD"]
min_approvals = 2
ttl = "10m"

[policies.refund]
approvers = ["U0FINANCE"]

[[policies.refund.rules]]
when = 'args.amount_cents > 100000'
approval = "deny"
message = "Refunds over $1,000 go through finance, not this bot."

[[policies.refund.rules]]
when = 'requester == "U0INTERN" || channel == "C0PUBLIC"'
approvers = ["U0LEAD"]

[[policies.refund.rules]]
when = 'args.amount_cents > 5000'
approvers = ["U0FINANCE", "U0LEAD"]
"""


def example_policies() -> dict[str, Policy]:
    return config_from_dict(tomllib.loads(ISSUE_EXAMPLE)).policies


def scale(env: str, replicas: int = 3) -> dict[str, Any]:
    return {"service": "web", "env": env, "replicas": replicas}


def refund(amount: int) -> dict[str, Any]:
    return {"order": "o-1", "amount_cents": amount}


@pytest.mark.parametrize(
    ("tool", "arguments", "requester", "channel", "expected"),
    [
        # Defaults: no rule matches (prod, few replicas).
        ("scale_service", scale("prod"), "U1", "C0OPS", ("required", ["S0ONCALL"], None)),
        # never: staging runs without anyone asked.
        ("scale_service", scale("staging", 50), "U1", "C0OPS", ("never", ["S0ONCALL"], 0)),
        # A rule's keys override the tool's: approvers, quorum, ttl.
        ("scale_service", scale("prod", 21), "U1", "C0OPS", ("required", ["U0SRELEAD"], 1)),
        # deny, with the message the model reads.
        ("refund", refund(250_000), "U1", "C0OPS", ("deny", ["U0FINANCE"], 0)),
        # First match wins: an intern's big refund is still denied by rules[0]...
        ("refund", refund(250_000), "U0INTERN", "C0OPS", ("deny", ["U0FINANCE"], 0)),
        # ...an intern's small one goes to the lead (rules[1] before rules[2]).
        ("refund", refund(9_000), "U0INTERN", "C0OPS", ("required", ["U0LEAD"], 1)),
        # channel in a condition.
        ("refund", refund(100), "U1", "C0PUBLIC", ("required", ["U0LEAD"], 1)),
        ("refund", refund(9_000), "U1", "C0OPS", ("required", ["U0FINANCE", "U0LEAD"], 2)),
        ("refund", refund(100), "U1", "C0OPS", ("required", ["U0FINANCE"], None)),
    ],
)
def test_the_first_matching_rule_decides(
    tool: str, arguments: dict, requester: str, channel: str, expected: tuple
) -> None:
    policy = example_policies()[tool].resolve(arguments, requester=requester, channel=channel)
    approval, approvers, rule_index = expected
    assert policy.approval == approval
    assert policy.approvers == approvers
    if rule_index is None:
        assert policy.rule is None and policy.rule_when is None
    else:
        assert policy.rule == f"policies.{tool}.rules[{rule_index}]"
        assert policy.rule_when and policy.rule_error is None


def test_a_rule_overrides_only_its_own_keys() -> None:
    policy = example_policies()["scale_service"]
    assert policy.ttl == timedelta(minutes=30)  # approval_ttl
    big = policy.resolve(scale("prod", 21), requester="U1", channel="C")
    assert big.ttl == timedelta(minutes=10) and big.min_approvals == 2
    assert big.on_expiry == "deny" and big.allow_self_approval is False
    assert big.rule_when == 'args.env == "prod" && args.replicas > 20'
    denied = example_policies()["refund"].resolve(refund(200_000), requester="U1", channel="C")
    assert denied.message == "Refunds over $1,000 go through finance, not this bot."


def test_a_condition_that_cannot_be_evaluated_fails_closed() -> None:
    # scale_service's rules[0] is fine; rules[1] reads args.replicas, which this call lacks.
    policy = example_policies()["scale_service"]
    odd = policy.resolve({"service": "web", "env": "prod"}, requester="U1", channel="C")
    assert odd.approval == "required" and odd.approvers == ["S0ONCALL"]
    assert odd.rule == "policies.scale_service.rules[1]"
    assert odd.rule_error == "the arguments have no field: 'replicas'"
    # A string where a number was expected: approval again, never "the rule did not match".
    typed = policy.resolve(scale("prod", "lots"), requester="U1", channel="C")  # type: ignore[arg-type]
    assert typed.approval == "required" and typed.rule_error
    # CEL's && absorbs an error once one side is false: a staging-like call evaluates fine.
    fine = policy.resolve({"service": "web", "env": "dev"}, requester="U1", channel="C")
    assert fine.rule is None and fine.approval == "required"


def test_a_calls_arguments_are_converted_once_for_all_its_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rules run on the event loop. The model chooses the arguments' size: converting them for
    # every rule made 50 rules over a 10,000-item list block every ack for over 2 seconds.
    import celpy

    from bot.policy import Rule
    from bot.policy.rules import choose, compile_condition

    conversions: list[object] = []
    convert = celpy.json_to_cel
    monkeypatch.setattr(celpy, "json_to_cel", lambda v: conversions.append(v) or convert(v))
    rules = [
        Rule(label=f"r{i}", when=compile_condition(f"args.replicas > {100 + i}")) for i in range(50)
    ]
    arguments = {"replicas": 3, "padding": ["x"] * 10_000}
    assert choose(rules, arguments, requester="U1", channel="C").rule is None
    assert len(conversions) == 1
    # A call whose arguments cannot be converted still fails closed, on the first rule.
    nested: dict[str, Any] = {}
    deep = nested
    for _ in range(5000):
        deep["a"] = deep = {}
    failed = choose(rules, {"replicas": 3, "nested": nested}, requester="U1", channel="C")
    assert failed.rule is rules[0] and failed.error


def test_a_tool_that_never_asks_but_has_rules_is_gated_per_call() -> None:
    config = config_from_dict(
        {
            "tools": [
                "tests.support.rule_tools:scale_service",
                "tests.support.ops_tools:get_status",
            ],
            "policies": {
                "scale_service": {
                    "approval": "never",
                    "rules": [{"when": 'args.env == "prod"', "approval": "required"}],
                },
                "get_status": {"approval": "never"},
            },
        }
    )
    policy = config.policy_for("scale_service")
    assert policy is not None  # gated: each call is resolved
    assert policy.resolve(scale("dev"), requester="U", channel="C").approval == "never"
    assert policy.resolve(scale("prod"), requester="U", channel="C").approval == "required"
    assert config.policy_for("get_status") is None  # no rules: the zero-overhead path


# -- start-up checks -------------------------------------------------------------------------


def with_rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "tools": ["tests.support.rule_tools:refund"],
        "policies": {"refund": {"rules": list(rules)}},
    }


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"when": "args.amount_cents >"},
            "policies.refund.rules[0].when: line 1, column 19: not valid CEL: the expression "
            "ends too early",
        ),
        (
            {"when": "args.amount_cents > > 3"},
            "policies.refund.rules[0].when: line 1, column 21: not valid CEL: unexpected '>'",
        ),
        (
            {"when": 'args.order == "x" &&\n  amount > 3'},
            "policies.refund.rules[0].when: line 2, column 3: unknown name 'amount' (a "
            "condition sees args, requester, channel)",
        ),
        (
            {"when": "args.order.lower() == 'x'"},
            "policies.refund.rules[0].when: line 1, column 12: unknown function 'lower'",
        ),
        # A broken regex would fail closed on every call, rule after rule: said at start-up.
        (
            {"when": 'args.order.matches("o-(\\d+")'},
            "policies.refund.rules[0].when: line 1, column 20: not a valid regular expression "
            "(missing ): ",
        ),
        (
            {"when": 'true && matches(args.order, "[")'},
            "policies.refund.rules[0].when: line 1, column 29: not a valid regular expression "
            "(missing ]: ",
        ),
        ({"when": "  "}, "policies.refund.rules[0].when: the condition is empty"),
        ({"when": 3}, "policies.refund.rules[0].when: must be a CEL expression in a string"),
        ({"approval": "never"}, "policies.refund.rules[0].when: is required"),
        (
            {"when": "true", "quorum": 2},
            "policies.refund.rules[0].quorum: unknown key (known: approval, approvers, "
            "message, min_approvals, on_expiry, ttl, when)",
        ),
        (
            {"when": "true", "approval": "maybe"},
            'policies.refund.rules[0].approval: \'maybe\' must be "required", "never" or "deny"',
        ),
        ({"when": "true", "ttl": "soon"}, "policies.refund.rules[0].ttl: 'soon' is not a"),
        ({"when": "true", "min_approvals": 0}, "policies.refund.rules[0].min_approvals: 0 must"),
    ],
)
def test_bad_rules_fail_at_start_up_with_key_and_position(rule: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_from_dict(with_rules(rule))
    assert str(error.value).startswith(message), str(error.value)


def test_rules_must_be_a_list_of_tables() -> None:
    with pytest.raises(ConfigError, match=r"^policies\.refund\.rules: must be a list"):
        config_from_dict(
            {"tools": ["tests.support.rule_tools:refund"], "policies": {"refund": {"rules": 1}}}
        )


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text(
        "chain_limit = 0\nmystery = 1\n"
        + ISSUE_EXAMPLE.replace('approvers = ["S0ONCALL"]', 'approvers = "S0ONCALL"')
        .replace("args.replicas > 20", "args.replicas >> 20")
        .replace('ttl = "10m"', 'ttl = "10 minutes"\ncolour = "red"')
        + "\n[policies.ghost]\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    message = str(error.value)
    assert message.startswith(f"{path}: 7 problems:\n")
    assert error.value.problems == [
        "chain_limit: 0 must be a whole number of at least 1",
        "policies.scale_service.approvers: must be a list of Slack user or user-group ids",
        "policies.scale_service.rules[1].when: line 1, column 38: not valid CEL: unexpected '>'",
        "policies.scale_service.rules[1].ttl: '10 minutes' is not a duration; write a positive "
        'number and a unit, like "45s", "30m", "2h" or "1d"',
        "policies.scale_service.rules[1].colour: unknown key (known: approval, approvers, "
        "message, min_approvals, on_expiry, ttl, when)",
        "unknown key 'mystery' (known: admins, agents, api_rate_limit, approval_ttl, "
        "approver_dm_limit, ask_user, assistant_cards_channel, batch_threshold, chain_limit, "
        "database_statement_cache, database_url, delegate, max_approvals_per_turn, "
        "max_delegation_depth, max_recoveries, max_retry_attempts, max_retry_wait, mcp_servers, "
        "metrics_port, model, on_error, pause_ttl, policies, public_url, recovery_by, "
        "recovery_ttl, run_lease, shutdown_grace, slash_command, streaming, sweep_interval, "
        "system_prompt, tools)",
        "policies.ghost: no tool named 'ghost' (tools: refund, scale_service)",
    ]
    for problem in error.value.problems:
        assert f"\n  {problem}" in message


def test_the_keys_of_the_other_issue_8_features_are_typed() -> None:
    config = config_from_dict(
        {
            "tools": ["tests.support.rule_tools:refund"],
            "approver_dm_limit": 5,
            "policies": {
                "refund": {
                    "min_approvals": 2,
                    "allow_edit": True,
                    "grant_max": "1h",
                    "remind_after": "10m",
                    "escalate_after": "20m",
                    "escalate_to": [" U0BOSS "],
                }
            },
        }
    )
    policy = config.policies["refund"]
    assert (policy.min_approvals, policy.allow_edit) == (2, True)
    assert policy.grant_max == timedelta(hours=1)
    assert (policy.remind_after, policy.escalate_after) == (
        timedelta(minutes=10),
        timedelta(minutes=20),
    )
    assert policy.escalate_to == ["U0BOSS"] and config.approver_dm_limit == 5
    assert config_from_dict({}).approver_dm_limit == 25
    with pytest.raises(ConfigError) as error:
        config_from_dict(
            {
                "tools": ["tests.support.rule_tools:refund"],
                "approver_dm_limit": 0,
                "policies": {"refund": {"allow_edit": "yes", "grant_max": "ever"}},
            }
        )
    assert error.value.problems == [
        "policies.refund.allow_edit: must be true or false",
        "policies.refund.grant_max: 'ever' is not a duration; write a positive number and a "
        'unit, like "45s", "30m", "2h" or "1d"',
        "approver_dm_limit: 0 must be a whole number of at least 1",
    ]


# -- the JSON Schema -------------------------------------------------------------------------


def printed_schema(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["config", "schema"]) == 0
    return json.loads(capsys.readouterr().out)


def test_config_schema_is_a_json_schema_the_shipped_files_validate_against(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    schema = printed_schema(capsys)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(demo_config_dict())  # the playground's
    validator.validate(tomllib.loads(ISSUE_EXAMPLE))
    validator.validate({"policies": {"ask_user": {"answerers": ["U1"], "ttl": "2h"}}})
    # What the loader refuses, the schema flags too: editors show it as the file is typed.
    for bad in (
        {"colour": "blue"},
        {"approval_ttl": "0m"},
        {"approval_ttl": "30 minutes"},
        {"chain_limit": 0},
        {"policies": {"refund": {"rules": [{"approval": "never"}]}}},
        {"policies": {"refund": {"approval": "sometimes"}}},
        {"policies": {"refund": {"rules": [{"when": "true", "quorum": 2}]}}},
        {"policies": {"refund": {"escalate_after": "20m"}}},
    ):
        assert not validator.is_valid(bad), bad


def test_config_schema_does_not_need_a_valid_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("colour = ")
    assert main(["--config", str(broken), "config", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "approval-bot configuration"


def test_a_condition_that_is_not_true_or_false_fails_closed() -> None:
    config = config_from_dict(
        {
            "tools": ["tests.support.rule_tools:refund"],
            "policies": {"refund": {"approval": "never", "rules": [{"when": "args.order"}]}},
        }
    )
    policy = config.policies["refund"].resolve(refund(5), requester="U1", channel="C")
    assert policy.approval == "required"
    assert policy.rule_error == "the condition gave string, not true or false"


def test_a_tool_denied_outright_tells_the_model_why() -> None:
    from bot.gate import refusal_text

    config = config_from_dict(
        {
            "tools": ["tests.support.rule_tools:refund"],
            "policies": {"refund": {"approval": "deny", "message": "Use the finance portal."}},
        }
    )
    assert config.policy_for("refund") is not None  # gated: its calls are refused
    assert refusal_text("refund", config.policies["refund"]) == (
        "Refused by the policy of refund: Use the finance portal. The call to refund was not "
        "run and no approval was asked for; do not try to get around this."
    )


def test_the_playgrounds_demo_scales_staging_without_asking() -> None:
    from playground.demo_model import choose_tool

    policy = config_from_dict(demo_config_dict()).policy_for("scale_service")
    assert policy is not None
    chosen = choose_tool("scale checkout to 5 in staging")
    assert isinstance(chosen, tuple) and chosen[0] == "scale_service"
    staging = chosen[1]
    assert staging["env"] == "staging"
    assert policy.resolve(staging, requester="U", channel="C").approval == "never"
    chosen = choose_tool("scale checkout to 5")
    assert isinstance(chosen, tuple)
    prod = chosen[1]
    assert "env" not in prod
    assert policy.resolve(prod, requester="U", channel="C").approval == "required"


def test_the_demo_agent_scales_staging_without_a_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPROVAL_BOT_DEMO_STATE", str(tmp_path / "demo-state.db"))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'bot.db'}")
    config = tmp_path / "bot.toml"
    config.write_text(
        'model = "demo"\ntools = ["playground.demo:scale_service"]\n'
        '[policies.scale_service]\napprovers = ["U0APPROVER1"]\n'
        "[[policies.scale_service.rules]]\n"
        'when = \'has(args.env) && args.env == "staging"\'\napproval = "never"\n'
    )
    cfg = ["--config", str(config)]
    assert main([*cfg, "ask", "scale checkout to 5 in staging", "--as", "U1"]) == 0
    out = capsys.readouterr().out
    assert ": completed" in out and "scaled checkout to 5 replicas in staging" in out
    assert main([*cfg, "approvals", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main([*cfg, "ask", "scale checkout to 5", "--as", "U1"]) == 0
    assert ": paused" in capsys.readouterr().out, "prod still asks"
