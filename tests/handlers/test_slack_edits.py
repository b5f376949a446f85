"""Edit, then approve, end to end: the real bolt app over signed HTTP, our Slack-compatible
server, the scripted model, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from bot.policy import EditRefused
from handlers.blocks import edits as edit_blocks
from storage.errors import EditConflict
from storage.records import EditRequest
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import ScriptedModel
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

APPROVERS = ["U0APPROVER1", "U0APPROVER2"]
PROPOSED = {"service": "web", "replicas": 30, "env": "prod"}


def calls(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


def edit_config(**policy: Any) -> Any:
    return make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.ops_tools:scale_service"],
        policies={
            **BASE_CONFIG["policies"],
            "scale_service": {"approvers": APPROVERS, "allow_edit": True, **policy},
        },
    )


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(edit_config(), repo) as harness:
        yield harness


def typed(value: str | None) -> dict[str, Any]:
    return {edit_blocks.VALUE: {"type": "plain_text_input", "value": value}}


def form(**fields: str | None) -> dict[str, Any]:
    return {edit_blocks.FIELD_PREFIX + name: typed(value) for name, value in fields.items()}


async def open_edit(slack: Harness, user: str, card: Any) -> Any:
    """``user`` clicks Edit on ``card``; the modal Slack opened for them."""
    click = await slack.server.click(user, card, edit_blocks.EDIT)
    assert click.status == 200
    await slack.settle()
    opened = [v for v in slack.server.views.values() if v.user == user and not v.closed]
    assert len(opened) == 1, slack.ephemeral_texts(user)
    return opened[0]


def approval_id_of(view: Any) -> str:
    """The approval an edit form is for (its metadata: the id, then what it showed)."""
    return str(view.view["private_metadata"]).partition(":")[0]


async def stale_click(slack: Harness, user: str, action_id: str, approval_id: str) -> None:
    """A click on a button a card no longer shows (a stale client, a crafted request)."""
    payload = slack.server.click_payload(user, CHANNEL, action_id, approval_id)
    body = urlencode({"payload": json.dumps(payload)}).encode()
    await slack.server.send_raw(body, "application/x-www-form-urlencoded")
    await slack.settle()


def tool_results() -> list[str]:
    return [p["output"] for m in ScriptedModel.seen[-1] if m["role"] == "tool" for p in m["parts"]]


async def audit_events(repo: Repository, approval_id: str) -> list[Any]:
    return await repo.audit_trail(approval_id=approval_id)


async def test_edit_then_approve_runs_exactly_the_edited_arguments_once(
    slack: Harness, repo: Repository
) -> None:
    reply = await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    actions = [e["action_id"] for _, e in card.buttons()]
    assert actions == ["approval_approve", "approval_deny", edit_blocks.EDIT]

    view = await open_edit(slack, "U0APPROVER1", card)
    inputs = {b["block_id"]: b for b in view.view["blocks"] if b["type"] == "input"}
    # The approval id and the fingerprint of the arguments the form shows, nothing else.
    assert re.fullmatch(r"apr_[^:]+:[0-9a-f]{16}", view.view["private_metadata"])
    assert inputs["edit_arg:replicas"]["element"]["initial_value"] == "30"
    assert inputs["edit_arg:service"]["element"]["initial_value"] == "web"
    assert "initial_value" not in inputs["edit_arg:labels"]["element"]
    assert "scale_service" in json.dumps(view.view["blocks"][0])  # shown, not an input

    submitted = await slack.server.submit_view(
        "U0APPROVER1", view.id, form(service="web", replicas="10", env="prod")
    )
    assert submitted.status == 200 and submitted.body in ("", "null")
    await slack.settle()

    assert executed("scale_service") == [
        {"service": "web", "replicas": 10, "env": "prod", "labels": None}
    ]
    approval = await repo.get_approval(approval_id_of(view))
    assert approval is not None
    assert approval.arguments == PROPOSED  # what the model proposed stays on record
    assert approval.edited_arguments == {"service": "web", "replicas": 10, "env": "prod"}
    assert approval.edited_by == "U0APPROVER1" and approval.status == "executed"
    assert approval.decided_by == "U0APPROVER1"

    # The model reads that a person changed the call, and what changed.
    [result] = tool_results()
    assert result.startswith("Approved by @U0APPROVER1 after editing the arguments: ")
    assert "replicas 30 → 10" in result
    assert result.endswith("Result: scaled web in prod to 10")
    assert "Results: scale_service=Approved by @U0APPROVER1" in slack.thread_of(reply)[-1].text

    card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
    shown = json.dumps(card.blocks, ensure_ascii=False)
    assert not has_buttons(card)
    assert "Edited by <@U0APPROVER1>" in shown and "replicas 30 → 10" in shown
    assert '\\"replicas\\": 10' in shown  # the card shows what ran
    assert any("with your edits" in t for t in slack.ephemeral_texts("U0APPROVER1"))

    events = await audit_events(repo, approval.id)
    [edited] = [e for e in events if e.event == "approval_edited"]
    assert edited.actor == "U0APPROVER1"
    assert edited.detail["proposed_arguments"] == PROPOSED
    assert edited.detail["edited_arguments"]["replicas"] == 10

    # A late Approve click runs nothing again.
    await stale_click(slack, "U0APPROVER2", "approval_approve", approval.id)
    assert len(executed("scale_service")) == 1
    assert any(
        "Already approved by <@U0APPROVER1>" in t for t in slack.ephemeral_texts("U0APPROVER2")
    )


async def test_an_invalid_edit_shows_field_errors_and_changes_nothing(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    before = await repo.get_approval(approval_id)

    cases = [
        (form(service="web", replicas="ten"), {"edit_arg:replicas": "Enter a whole number"}),
        (form(service=None, replicas="3"), {"edit_arg:service": "'service' is a required"}),
        (form(service="web", replicas="3", labels="{nope"), {"edit_arg:labels": "Not valid JSON"}),
        (form(service="web", replicas="3", labels="[1]"), {"edit_arg:labels": "is not valid"}),
    ]
    for values, expected in cases:
        reply = await slack.server.submit_view("U0APPROVER1", view.id, values)
        assert reply.status == 200
        answer = json.loads(reply.body)
        assert answer["response_action"] == "errors"
        assert set(answer["errors"]) == set(expected), answer
        for block, words in expected.items():
            assert words in answer["errors"][block], answer
        assert not slack.server.views[view.id].closed  # the form stays open to fix
    await slack.settle()

    after = await repo.get_approval(approval_id)
    assert after == before or (
        after is not None
        and before is not None
        and (after.status, after.edited_arguments, after.payload_hash)
        == (before.status, None, before.payload_hash)
    )
    assert executed("scale_service") == []
    assert not [e for e in await audit_events(repo, approval_id) if e.event == "approval_edited"]
    assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]


async def test_who_may_not_approve_may_not_edit(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    for user, words in [
        ("U0OUTSIDER", "not one of the approvers"),
        ("U0REQUESTER", "someone else must decide"),
    ]:
        await slack.server.click(user, card, edit_blocks.EDIT)
        await slack.settle()
        assert not [v for v in slack.server.views.values() if v.user == user]
        assert any(words in t for t in slack.ephemeral_texts(user)), slack.ephemeral_texts(user)

    # A submission crafted in an approver's form but signed as someone else's: refused.
    view = await open_edit(slack, "U0APPROVER1", card)
    payload = slack.server.submission_payload(
        "U0APPROVER1", view.id, form(service="web", replicas="10")
    )
    payload["user"] = {**payload["user"], "id": "U0OUTSIDER"}
    reply = await slack.server.send_raw(
        urlencode({"payload": json.dumps(payload)}).encode(), "application/x-www-form-urlencoded"
    )
    assert reply.status == 200
    await slack.settle()
    approval = await repo.get_approval(approval_id_of(view))
    assert approval is not None and approval.status == "pending"
    assert approval.edited_arguments is None
    assert executed("scale_service") == []
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0OUTSIDER"))


async def test_an_edit_after_the_decision_is_refused(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    await slack.server.click("U0APPROVER2", card, "approval_approve")
    await slack.settle()
    assert executed("scale_service") == [{**PROPOSED, "labels": None}]

    reply = await slack.server.submit_view(
        "U0APPROVER1", view.id, form(service="web", replicas="10")
    )
    answer = json.loads(reply.body)
    assert answer["response_action"] == "errors"
    # A modal error is plain text, where Slack renders no mention: the id, as for the CLI.
    assert "Already approved by @U0APPROVER2" in json.dumps(answer["errors"])
    await slack.settle()
    approval = await repo.get_approval(approval_id_of(view))
    assert approval is not None and approval.edited_arguments is None
    assert executed("scale_service") == [{**PROPOSED, "labels": None}]

    # And its Edit button is gone: a click on the stale card says why.
    await stale_click(slack, "U0APPROVER1", edit_blocks.EDIT, approval.id)
    texts = slack.ephemeral_texts("U0APPROVER1")
    assert any("Already approved by <@U0APPROVER2>" in t for t in texts), texts


async def test_an_edit_that_lost_the_race_to_a_decision_changes_nothing(
    slack: Harness, repo: Repository
) -> None:
    """The submission is checked, then the approval is decided before the edit is stored:
    the conditional UPDATE refuses it and the approver is told who decided."""
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    runner = slack.bot.services.runner
    await runner.decide(approval_id, actor="U0APPROVER2", approve=False, claim_resume=False)
    from bot.policy import AlreadyDecided

    with pytest.raises(AlreadyDecided, match="Already denied by @U0APPROVER2"):
        await runner.edit_and_approve(
            approval_id, actor="U0APPROVER1", arguments={"service": "web", "replicas": 10}
        )
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.edited_arguments is None


async def test_without_allow_edit_there_is_no_edit(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", calls("restart_service", {"service": "db"}))
    [card] = slack.cards()
    assert edit_blocks.EDIT not in [e["action_id"] for _, e in card.buttons()]
    [approval_id] = [
        e["value"].partition(":")[0]
        for _, e in card.buttons()
        if e["action_id"] == "approval_approve"
    ]
    await stale_click(slack, "U0APPROVER1", edit_blocks.EDIT, approval_id)
    assert not slack.server.views
    assert any("does not allow editing" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    from bot.policy import EditRefused

    with pytest.raises(EditRefused, match="allow_edit"):
        await slack.bot.services.runner.edit_and_approve(
            approval_id, actor="U0APPROVER1", arguments={"service": "web"}
        )
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert approval.edited_arguments is None


# -- an edit re-checked against the rules ---------------------------------------------------


RULES = [
    {
        "when": "args.replicas > 100",
        "approval": "deny",
        "message": "Over 100 replicas needs a capacity review.",
    },
    {"when": "args.replicas > 20", "approvers": ["U0SRELEAD"]},
]


@pytest.fixture
async def ruled(repo: Repository) -> AsyncIterator[Harness]:
    """scale_service with rules on its arguments: more than 20 replicas needs the SRE lead,
    more than 100 is refused."""
    async with running_bot(edit_config(rules=RULES), repo) as harness:
        yield harness


async def test_an_edit_that_crosses_a_rule_asks_for_the_stricter_approval(
    ruled: Harness, repo: Repository
) -> None:
    slack = ruled
    await slack.mention("U0REQUESTER", calls("scale_service", {"service": "web", "replicas": 5}))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    await slack.server.submit_view("U0APPROVER1", view.id, form(service="web", replicas="30"))
    await slack.settle()

    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert approval.approvers == ["U0SRELEAD"]
    assert approval.edited_arguments == {"service": "web", "replicas": 30}
    assert executed("scale_service") == []
    assert any("was not approved" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
    shown = json.dumps(card.blocks)
    assert "<@U0SRELEAD>" in shown and "Still waiting" in shown
    assert "policies.scale_service.rules[1]" in shown  # the rule that asks for more
    assert approval.rule == "policies.scale_service.rules[1]"
    listed = await slack.server.slash_command("U0SRELEAD", CHANNEL, text="")
    assert "replicas=30" in listed.body, "lists show the edited call, the one to decide"
    [edited] = [e for e in await audit_events(repo, approval_id) if e.event == "approval_edited"]
    assert edited.detail["approvers"] == ["U0SRELEAD"]
    assert edited.detail["approvers_before"] == APPROVERS

    # The old approvers may no longer decide it; the SRE lead's Approve runs the edited call.
    await slack.server.click("U0APPROVER2", card, "approval_approve")
    await slack.settle()
    assert executed("scale_service") == []
    await slack.server.click("U0SRELEAD", card, "approval_approve")
    await slack.settle()
    assert executed("scale_service") == [
        {"service": "web", "replicas": 30, "env": "staging", "labels": None}
    ]
    [result] = tool_results()
    assert "Approved by @U0SRELEAD after editing the arguments: replicas 5 → 30" in result


async def test_an_edit_a_rule_denies_is_refused(ruled: Harness, repo: Repository) -> None:
    slack = ruled
    await slack.mention("U0REQUESTER", calls("scale_service", {"service": "web", "replicas": 5}))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    await slack.server.submit_view("U0APPROVER1", view.id, form(service="web", replicas="500"))
    await slack.settle()
    approval = await repo.get_approval(approval_id_of(view))
    assert approval is not None and approval.status == "pending"
    assert approval.edited_arguments is None and approval.approvers == APPROVERS
    assert any("capacity review" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    # An edit within the rules is still approved at once by the same approver.
    view = await open_edit(slack, "U0APPROVER1", card)
    await slack.server.submit_view("U0APPROVER1", view.id, form(service="web", replicas="7"))
    await slack.settle()
    assert [a["replicas"] for a in executed("scale_service")] == [7]


async def test_a_malformed_edit_submission_gets_an_answer_and_changes_nothing(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    base = slack.server.submission_payload("U0APPROVER1", view.id, {})
    shapes: list[tuple[list[str], Any]] = [
        (["view", "state"], []),
        (["view", "state"], {"values": "x"}),
        (["view", "state", "values"], {"edit_arg:replicas": 5}),
        (["view", "state", "values"], {"edit_arg:replicas": {"value": {"value": 5}}}),
        (["view", "state", "values"], {"edit_arg:service": {"value": []}}),
        (["view", "private_metadata"], {"id": approval_id}),
        (["view", "private_metadata"], "apr_nonexistent"),
        (["view", "blocks"], "nope"),
        (["team"], "T0001TEAM"),
    ]
    for path, replacement in shapes:
        payload = json.loads(json.dumps(base))
        target = payload
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = replacement
        reply = await slack.server.send_raw(
            urlencode({"payload": json.dumps(payload)}).encode(),
            "application/x-www-form-urlencoded",
        )
        # 400: the app's own check of Slack's payload shape answered
        # (handlers/middleware/payloads.py)
        assert reply.status in (200, 400), (path, replacement, reply.body)
        if reply.status == 200 and reply.body not in ("", "null"):
            assert json.loads(reply.body)["response_action"] == "errors"
    await slack.settle()
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert approval.edited_arguments is None
    assert executed("scale_service") == []


async def test_json_a_person_types_is_checked_in_the_modal_as_it_would_run(
    slack: Harness, repo: Repository
) -> None:
    """NaN, Infinity, 1e400 (which JSON reads as infinity) and nesting past the gate's limit
    pass json.loads and a schema check of the raw value, but not the stored form the tool
    runs with: the modal says so, instead of closing and refusing (or running "Infinity")."""
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    deep = '{"a": ' * 150 + "1" + "}" * 150
    for labels in ('{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}', '{"a": [-Infinity]}', deep):
        reply = await slack.server.submit_view(
            "U0APPROVER1", view.id, form(service="web", replicas="3", labels=labels)
        )
        assert reply.status == 200 and reply.body not in ("", "null"), labels[:40]
        answer = json.loads(reply.body)
        assert answer["response_action"] == "errors"
        assert set(answer["errors"]) == {"edit_arg:labels"}, answer
        assert not slack.server.views[view.id].closed
    await slack.settle()
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert approval.edited_arguments is None
    assert executed("scale_service") == []


async def test_a_forged_edit_of_an_approval_that_is_not_editable_is_answered_in_the_modal(
    slack: Harness, repo: Repository
) -> None:
    """A submission naming an approval whose policy does not allow edits gets the reason in
    the modal (not an empty answer that closes it, then a refusal elsewhere): nothing changes."""
    await slack.mention("U0REQUESTER", calls("restart_service", {"service": "api"}))
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    restart, scale = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", scale)
    payload = slack.server.submission_payload("U0APPROVER1", view.id, form(service="api"))
    restart_id = next(e["value"] for _, e in restart.buttons()).partition(":")[0]
    payload["view"]["private_metadata"] = restart_id
    reply = await slack.server.send_raw(
        urlencode({"payload": json.dumps(payload)}).encode(),
        "application/x-www-form-urlencoded",
    )
    assert reply.status == 200 and reply.body not in ("", "null")
    [why] = json.loads(reply.body)["errors"].values()
    assert "allow_edit" in why
    await slack.settle()
    after = await repo.get_approval(restart_id)
    assert after is not None and after.status == "pending" and after.edited_arguments is None
    assert executed("restart_service") == []


# -- stale copies of a card after an edit ---------------------------------------------------


async def my_list(slack: Harness, user: str) -> Any:
    """The ephemeral ``/approvals all`` list ``user`` opens now."""
    before = {m.ts for m in slack.server.ephemerals_for(user)}
    await slack.server.slash_command(user, CHANNEL, text="all")
    [listing] = [m for m in slack.server.ephemerals_for(user) if m.ts not in before]
    return listing


STALE = "The arguments changed since this copy was shown"


async def test_a_copy_shown_before_an_edit_cannot_approve_the_edited_arguments(
    ruled: Harness, repo: Repository
) -> None:
    """An edit that keeps the approval waiting (a stricter rule) changes what Approve runs: a
    list opened before it still shows the old arguments, so its Approve is refused and
    changes nothing; a list opened after it approves."""
    slack = ruled
    await slack.mention("U0REQUESTER", calls("scale_service", {"service": "web", "replicas": 5}))
    [card] = slack.cards()
    old_list = await my_list(slack, "U0SRELEAD")
    assert "replicas=5" in json.dumps(old_list.blocks)
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    await slack.server.submit_view("U0APPROVER1", view.id, form(service="web", replicas="30"))
    await slack.settle()

    await slack.server.click_as_seen("U0SRELEAD", old_list, "approval_approve")
    await slack.settle()
    assert any(STALE in t for t in slack.ephemeral_texts("U0SRELEAD"))
    approval = await repo.get_approval(approval_id)
    assert approval is not None and (approval.status, approval.approved_by) == ("pending", None)
    assert executed("scale_service") == []
    assert not [e for e in await audit_events(repo, approval_id) if e.event == "approval_approved"]

    fresh = await my_list(slack, "U0SRELEAD")
    assert "replicas=30" in json.dumps(fresh.blocks)
    await slack.server.click("U0SRELEAD", fresh, "approval_approve")
    await slack.settle()
    assert executed("scale_service") == [
        {"service": "web", "replicas": 30, "env": "staging", "labels": None}
    ]


async def test_an_id_only_approve_counts_only_while_the_arguments_were_never_edited(
    ruled: Harness, repo: Repository
) -> None:
    """Buttons posted by the previous release carry the id alone: they showed the arguments
    as proposed. Accepted while those still stand; refused once edited, as a forged
    fingerprint is."""
    slack = ruled
    await slack.mention("U0REQUESTER", calls("scale_service", {"service": "web", "replicas": 5}))
    [card] = slack.cards()
    view = await open_edit(slack, "U0APPROVER1", card)
    approval_id = approval_id_of(view)
    await slack.server.submit_view("U0APPROVER1", view.id, form(service="web", replicas="30"))
    await slack.settle()

    forged = [approval_id, f"{approval_id}:{'0' * 16}", f"{approval_id}:short", f"{approval_id}:"]
    for value in forged:
        await stale_click(slack, "U0SRELEAD", "approval_approve", value)
    refusals = [t for t in slack.ephemeral_texts("U0SRELEAD") if STALE in t]
    assert len(refusals) == len(forged)
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert executed("scale_service") == []

    # An unedited approval: its id alone approves, as the previous release's button did.
    await slack.mention("U0REQUESTER", calls("scale_service", {"service": "api", "replicas": 3}))
    unedited = slack.cards()[-1]
    [value] = [e["value"] for _, e in unedited.buttons() if e["action_id"] == "approval_approve"]
    await stale_click(slack, "U0APPROVER2", "approval_approve", value.partition(":")[0])
    assert executed("scale_service") == [
        {"service": "api", "replicas": 3, "env": "staging", "labels": None}
    ]


# -- an edit form left open while someone else edits ---------------------------------------


@pytest.fixture
async def quorum(repo: Repository) -> AsyncIterator[Harness]:
    """scale_service needing two approvals: an edit keeps it waiting, voted on afresh."""
    async with running_bot(edit_config(min_approvals=2), repo) as harness:
        yield harness


async def test_an_edit_form_opened_before_another_edit_is_refused_on_submit(
    quorum: Harness, repo: Repository
) -> None:
    """Two approvers open Edit on the same card; the first one's edit is saved (two
    approvals needed, so it stays pending). The second form still shows the proposed
    arguments: its submission is refused in the form and does not replace the first edit
    with one made over arguments its author never saw."""
    slack = quorum
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    first = await open_edit(slack, "U0APPROVER1", card)
    second = await open_edit(slack, "U0APPROVER2", card)
    approval_id = approval_id_of(first)
    await slack.server.submit_view(
        "U0APPROVER1", first.id, form(service="web", replicas="10", env="prod")
    )
    await slack.settle()
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"
    assert approval.edited_arguments == {"service": "web", "replicas": 10, "env": "prod"}

    reply = await slack.server.submit_view(
        "U0APPROVER2", second.id, form(service="web", replicas="50", env="prod")
    )
    assert reply.status == 200 and reply.body not in ("", "null")
    [why] = json.loads(reply.body)["errors"].values()
    assert "Someone else edited this call" in why
    await slack.settle()
    after = await repo.get_approval(approval_id)
    assert after is not None and after.status == "pending"
    assert (after.edited_by, after.edited_arguments) == ("U0APPROVER1", approval.edited_arguments)
    edits = [e for e in await audit_events(repo, approval_id) if e.event == "approval_edited"]
    assert [e.actor for e in edits] == ["U0APPROVER1"]

    # A form of the previous release (the id alone) showed the proposed arguments: refused
    # too, now that they were edited.
    old = slack.server.submission_payload("U0APPROVER2", second.id, form(replicas="50"))
    old["view"]["private_metadata"] = approval_id
    reply = await slack.server.send_raw(
        urlencode({"payload": json.dumps(old)}).encode(), "application/x-www-form-urlencoded"
    )
    assert "Someone else edited this call" in reply.body
    # A form opened after the edit applies.
    third = await open_edit(slack, "U0APPROVER1", slack.server.message(CHANNEL, card.ts))
    await slack.server.submit_view(
        "U0APPROVER1", third.id, form(service="web", replicas="12", env="prod")
    )
    await slack.settle()
    last = await repo.get_approval(approval_id)
    assert last is not None and last.edited_by == "U0APPROVER1"
    assert last.edited_arguments == {"service": "web", "replicas": 12, "env": "prod"}


async def test_an_edit_that_raced_another_is_refused_not_a_failure(
    quorum: Harness, repo: Repository
) -> None:
    """The runner decides from the approval as it read it whether one edit approves; an
    edit by someone else committed in between (here: one that asks for two approvals) must
    make storage refuse, not trip an assertion after the row was already rewritten."""
    slack = quorum
    await slack.mention("U0REQUESTER", calls("scale_service", PROPOSED))
    [card] = slack.cards()
    approval_id = approval_id_of(await open_edit(slack, "U0APPROVER1", card))
    before = await repo.get_approval(approval_id)
    assert before is not None and before.min_approvals == 2
    # What a runner that read the approval as needing one approval asks storage for.
    stale = EditRequest(arguments={"service": "web", "replicas": 3}, payload_hash="0" * 64)
    now = slack.bot.services.runner.clock()
    with pytest.raises(EditConflict):
        await repo.edit_approval(
            approval_id,
            actor="U0APPROVER1",
            edit=stale,
            worker="w",
            lease_until=now + timedelta(minutes=1),
            now=now,
        )
    after = await repo.get_approval(approval_id)
    assert after is not None and after.status == "pending" and after.edited_arguments is None
    assert not [e for e in await audit_events(repo, approval_id) if e.event == "approval_edited"]

    # Through the runner: a form that showed other arguments than the stored ones.
    with pytest.raises(EditRefused, match="Someone else edited"):
        await slack.bot.services.runner.edit_and_approve(
            approval_id,
            actor="U0APPROVER1",
            arguments={"service": "web", "replicas": 3},
            shown="f" * 16,
        )
