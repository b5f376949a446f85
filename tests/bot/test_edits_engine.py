"""Edit, then approve, through the runner on SQLite and PostgreSQL: an edited call that fails
or asks to be retried, a replayed result, and the form and wording helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.config import ConfigError
from bot.engine import Runner
from bot.gate import decision_text, edit_note
from bot.policy import AlreadyDecided, InvalidEdit, changes_text
from bot.policy.edits import field_errors
from handlers.blocks import edits as edit_blocks
from handlers.blocks.edit_submissions import errors_by_block, read_form
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request
from tests.conftest import BASE_CONFIG, make_config
from tests.support import pause_tools
from tests.support.scripted_model import ScriptedModel


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


def runner_for(repo: Repository, tool: str, ref: str | None = None) -> Runner:
    tools = [*BASE_CONFIG["tools"], *([ref] if ref else [])]
    policies = {
        **BASE_CONFIG["policies"],
        tool: {"approvers": ["U0APPROVER1"], "allow_edit": True},
    }
    return Runner(repo, make_config(tools=tools, policies=policies), worker_id="worker-a")


def last_tool_results() -> list[str]:
    return [p["output"] for m in ScriptedModel.seen[-1] if m["role"] == "tool" for p in m["parts"]]


async def test_an_edited_call_that_is_retried_runs_the_edited_arguments_again(
    repo: Repository,
) -> None:
    runner = runner_for(repo, "rate_limited", "tests.support.pause_tools:rate_limited")
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
        (approval,) = outcome.new_approvals
        decision = await runner.edit_and_approve(
            approval.id, actor="U0APPROVER1", arguments={"service": "db"}
        )
        assert decision.resume_claimed
        waiting = await runner.resume(outcome.run_id)
        assert waiting.status == "paused", waiting
        (retry,) = waiting.new_approvals
        assert retry.kind == "retry"
        assert retry.arguments == {"service": "api"} and retry.edited_arguments == {"service": "db"}
        clock.tick(timedelta(minutes=5))
        assert await runner.due_retries() == [outcome.run_id]
        resumed = await runner.resume(outcome.run_id)
    assert executed("rate_limited") == [{"service": "db"}, {"service": "db"}]
    assert 'service "api" → "db"' in (resumed.answer or "")
    assert "db answered on attempt 2" in (resumed.answer or "")


async def test_an_edited_call_that_fails_says_a_person_changed_it(repo: Repository) -> None:
    runner = runner_for(repo, "broken_tool")
    outcome = await runner.start(request(calls(("broken_tool", {"service": "api"}))))
    (approval,) = outcome.new_approvals
    await runner.edit_and_approve(approval.id, actor="U0APPROVER1", arguments={"service": "db"})
    done = await runner.resume(outcome.run_id)
    assert done.status == "completed"
    assert executed("broken_tool") == [{"service": "db"}]
    [result] = last_tool_results()
    assert "Approved by @U0APPROVER1 after editing the arguments" in result
    assert "It failed: db exploded" in result


async def test_the_result_of_an_edited_call_reads_the_same_when_replayed(
    repo: Repository,
) -> None:
    runner = runner_for(repo, "restart_service")
    outcome = await runner.start(request(calls(("restart_service", {"service": "api"}))))
    (approval,) = outcome.new_approvals
    await runner.edit_and_approve(approval.id, actor="U0APPROVER1", arguments={"service": "db"})
    await runner.resume(outcome.run_id)
    ran = await repo.get_approval(approval.id)
    assert ran is not None and ran.status == "executed" and ran.result == "restarted db"
    replayed = decision_text(ran)
    assert replayed.startswith("Approved by @U0APPROVER1 after editing the arguments")
    assert replayed.endswith("Result: restarted db")
    assert last_tool_results() == [replayed]


async def test_arguments_that_break_the_schema_are_refused_and_change_nothing(
    repo: Repository,
) -> None:
    runner = runner_for(repo, "restart_service")
    outcome = await runner.start(request(calls(("restart_service", {"service": "api"}))))
    (approval,) = outcome.new_approvals
    for bad in ({}, {"service": 5}, {"service": "db", "extra": 1}):
        with pytest.raises(InvalidEdit):
            await runner.edit_and_approve(approval.id, actor="U0APPROVER1", arguments=bad)
    after = await repo.get_approval(approval.id)
    assert after is not None and after.status == "pending" and after.edited_arguments is None
    assert after.payload_hash == approval.payload_hash


async def test_arguments_nested_past_the_gates_limit_are_refused(repo: Repository) -> None:
    runner = runner_for(repo, "scale_service", "tests.support.ops_tools:scale_service")
    proposed = {"service": "web", "replicas": 3}
    outcome = await runner.start(request(calls(("scale_service", proposed))))
    (approval,) = outcome.new_approvals
    deep: Any = "x"
    for _ in range(150):
        deep = [deep]
    with pytest.raises(InvalidEdit, match="nested more than 100 levels"):
        await runner.edit_and_approve(
            approval.id, actor="U0APPROVER1", arguments={**proposed, "labels": {"a": deep}}
        )
    after = await repo.get_approval(approval.id)
    assert after is not None and after.status == "pending" and after.edited_arguments is None


# -- the form and the words -----------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "service": {"type": "string"},
        "replicas": {"type": "integer", "maximum": 50},
        "ratio": {"type": "number"},
        "dry_run": {"type": "boolean"},
        "env": {"type": "string", "enum": ["staging", "prod"]},
        "labels": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    "required": ["service", "replicas"],
    "additionalProperties": False,
}


def test_field_kinds_follow_the_schema() -> None:
    kinds = {name: edit_blocks.field_kind(p) for name, p in SCHEMA["properties"].items()}
    assert kinds == {
        "service": "string",
        "replicas": "integer",
        "ratio": "number",
        "dry_run": "boolean",
        "env": "enum",
        "labels": "json",
        "limit": "integer",
    }


class _Approval:
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.id = "apr_1"
        self.kind = "approval"
        self.tool_name = "scale"
        self.requester = "U0REQ"
        self.arguments = arguments
        self.edited_arguments = None
        self.payload_hash = "ab" * 32


def _form(**fields: str) -> dict[str, Any]:
    return {
        edit_blocks.FIELD_PREFIX + k: {"value": {"type": "plain_text_input", "value": v}}
        for k, v in fields.items()
    }


def test_the_form_reads_back_typed_values_and_says_what_is_wrong() -> None:
    approval: Any = _Approval({"service": "web", "replicas": 3})
    modal = edit_blocks.render_edit_modal(approval, SCHEMA)
    assert modal["private_metadata"] == "apr_1:" + "ab" * 8  # the id, then what it shows
    assert len(modal["submit"]["text"]) <= 24
    ids = [b["block_id"] for b in modal["blocks"] if b["type"] == "input"]
    assert ids == [edit_blocks.FIELD_PREFIX + n for n in SCHEMA["properties"]]

    arguments, errors = read_form(
        approval,
        SCHEMA,
        _form(service="web", replicas="7", ratio="0.5", dry_run="true", labels='{"a": 1}'),
    )
    assert errors == {}
    assert arguments == {
        "service": "web",
        "replicas": 7,
        "ratio": 0.5,
        "dry_run": True,
        "labels": {"a": 1},
    }
    _, errors = read_form(
        approval, SCHEMA, _form(service="web", replicas="1.5", ratio="x", dry_run="maybe")
    )
    assert set(errors) == {"edit_arg:replicas", "edit_arg:ratio", "edit_arg:dry_run"}
    # A crafted form cannot add an argument the modal did not show.
    arguments, _ = read_form(approval, SCHEMA, {**_form(service="w"), "x:tool": {}})
    assert arguments == {"service": "w"}

    schema_errors = field_errors(SCHEMA, {"service": "web", "replicas": 99, "env": "dev"})
    by_block = errors_by_block(approval, SCHEMA, schema_errors)
    assert set(by_block) == {"edit_arg:replicas", "edit_arg:env"}
    assert "99 is greater than the maximum of 50" in by_block["edit_arg:replicas"]
    # An error about the whole call shows on the first input as it is, not as ": …".
    whole = errors_by_block(approval, SCHEMA, {"": "nested too deep"})
    assert whole == {edit_blocks.FIELD_PREFIX + "service": "nested too deep"}


def test_a_schema_without_properties_is_edited_as_one_json_object() -> None:
    approval: Any = _Approval({"anything": [1, 2]})
    modal = edit_blocks.render_edit_modal(approval, {"type": "object"})
    [field] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert field["block_id"] == edit_blocks.WHOLE_BLOCK
    whole = {edit_blocks.WHOLE_BLOCK: {"value": {"value": '{"anything": [3]}'}}}
    assert read_form(approval, {"type": "object"}, whole) == (
        {"anything": [3]},
        {},
    )
    bad = {edit_blocks.WHOLE_BLOCK: {"value": {"value": "[3]"}}}
    assert "JSON object" in read_form(approval, {}, bad)[1][edit_blocks.WHOLE_BLOCK]


def test_what_changed_is_said_argument_by_argument() -> None:
    text = changes_text(
        {"service": "web", "replicas": 30, "note": "x"},
        {"service": "web", "replicas": 10, "env": "prod"},
    )
    assert text == 'replicas 30 → 10, note "x" → (removed), env (not set) → "prod"'
    assert changes_text({"a": 1}, {"a": 1}) == "no argument changed"
    assert edit_note(_Approval({"a": 1})) is None


async def test_an_edit_and_a_click_at_once_run_the_tool_once(repo: Repository) -> None:
    """Both settle the approval through a conditional UPDATE under the run's lock: one wins,
    the other is told who did, and the call runs once, with the winner's arguments."""
    runner = runner_for(repo, "restart_service")
    outcome = await runner.start(request(calls(("restart_service", {"service": "api"}))))
    (approval,) = outcome.new_approvals
    settled = await asyncio.gather(
        runner.edit_and_approve(approval.id, actor="U0APPROVER1", arguments={"service": "db"}),
        runner.decide(approval.id, actor="U0APPROVER1", approve=True),
        return_exceptions=True,
    )
    won = [s for s in settled if not isinstance(s, BaseException)]
    lost = [s for s in settled if isinstance(s, BaseException)]
    assert len(won) == 1 and len(lost) == 1
    assert isinstance(lost[0], AlreadyDecided) and "Already approved by" in str(lost[0])
    await runner.resume(outcome.run_id)
    ran = await repo.get_approval(approval.id)
    assert ran is not None and ran.status == "executed"
    expected = "db" if ran.edited_arguments is not None else "api"
    assert executed("restart_service") == [{"service": expected}]


def test_allow_edit_must_be_true_or_false() -> None:
    policies = {"restart_service": {"allow_edit": "yes"}}
    with pytest.raises(ConfigError, match=r"policies\.restart_service\.allow_edit: must be true"):
        make_config(policies=policies)
    config = make_config(policies={"restart_service": {"allow_edit": True}})
    assert config.policies["restart_service"].allow_edit is True
    assert make_config().policies["restart_service"].allow_edit is False


async def test_an_edit_under_quorum_is_voted_on_afresh(repo: Repository) -> None:
    """One person's edit is never N approvals, and votes for the proposed arguments do not
    count for the edited ones: the edit is saved, the votes are cleared, it keeps waiting."""
    tools = [*BASE_CONFIG["tools"]]
    policy = {"approvers": ["U0A", "U0B", "U0C"], "allow_edit": True, "min_approvals": 2}
    config = make_config(
        tools=tools, policies={**BASE_CONFIG["policies"], "restart_service": policy}
    )
    runner = Runner(repo, config, worker_id="worker-a")
    outcome = await runner.start(request(calls(("restart_service", {"service": "api"}))))
    (approval,) = outcome.new_approvals
    await runner.decide(approval.id, actor="U0A", approve=True)
    edited = await runner.edit_and_approve(approval.id, actor="U0B", arguments={"service": "db"})
    assert edited.approval.status == "pending" and not edited.resume_claimed
    assert edited.approval.edited_arguments == {"service": "db"}
    assert not edited.approval.approved_by, "U0A approved other arguments"
    await runner.decide(approval.id, actor="U0B", approve=True)
    last = await runner.decide(approval.id, actor="U0A", approve=True)
    assert last.resume_claimed
    await runner.resume(outcome.run_id)
    assert executed("restart_service") == [{"service": "db"}]


async def test_a_same_arguments_grant_on_an_edited_call_binds_the_edited_arguments(
    repo: Repository,
) -> None:
    """An edit that crosses a rule waits for the stricter approver; their Approve with a
    "same arguments" grant covers the call that ran (the edited one), never the proposed
    arguments the editor rejected, and the grant is checked against the edited call's policy."""
    from bot.engine import approve_and_grant

    rules = [{"when": "args.service == 'db'", "approvers": ["U0LEAD"]}]
    policy = {"approvers": ["U0APPROVER1"], "allow_edit": True, "grant_max": "1h", "rules": rules}
    config = make_config(policies={**BASE_CONFIG["policies"], "restart_service": policy})
    runner = Runner(repo, config, worker_id="worker-a")
    outcome = await runner.start(request(calls(("restart_service", {"service": "api"}))))
    (approval,) = outcome.new_approvals
    edited = await runner.edit_and_approve(
        approval.id, actor="U0APPROVER1", arguments={"service": "db"}
    )
    assert edited.approval.status == "pending" and edited.approval.approvers == ["U0LEAD"]
    decision, _ = await approve_and_grant(
        runner, approval.id, actor="U0LEAD", duration=timedelta(hours=1), same_arguments=True
    )
    assert decision.resume_claimed
    await runner.resume(outcome.run_id)
    assert executed("restart_service") == [{"service": "db"}]

    # The edited arguments again: the grant covers them, nobody is asked.
    again = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    assert again.status == "completed" and not again.new_approvals, again
    # The proposed arguments the editor replaced: not covered, a person is asked.
    proposed = await runner.start(request(calls(("restart_service", {"service": "api"}))))
    assert proposed.status == "paused" and proposed.new_approvals, proposed
    assert executed("restart_service") == [{"service": "db"}, {"service": "db"}]
