"""Batch cards (issue 19 section 4): many calls of one tool from one model response share
one card; Approve all, Deny all and Review each decide them in one transaction. Signed
clicks against the real bolt app and our Slack server, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.clock import utcnow
from handlers.flows import sweep_once
from playground.slack_server import Message
from storage.hashes import batch_fingerprint
from storage.models import Approval, Run
from storage.repository import PendingFilter, Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, running_bot

TWELVE = calls(*[("restart_service", {"service": f"svc-{i:02d}"}) for i in range(12)])


def batch_cards(slack: Harness) -> list[Message]:
    dms = set(slack.server.dm_channels.values())
    return [
        m
        for m in slack.server.messages
        if m.channel not in dms and any(b.get("block_id") == "batch_summary" for b in m.blocks)
    ]


def shown(message: Message | None) -> str:
    assert message is not None
    return json.dumps(message.blocks)


def action_ids(message: Message) -> list[str]:
    return [element.get("action_id", "") for _, element in message.buttons()]


async def rows_of_run(repo: Repository) -> list[Approval]:
    """Every approval row (each test starts one run)."""
    pending, _ = await repo.list_pending(PendingFilter(), now=utcnow())
    run_ids = {a.run_id for a in pending} or set(RUNS)
    assert len(run_ids) == 1
    RUNS[:] = list(run_ids)
    return await repo.approvals_for_run(run_ids.pop())


async def the_run(repo: Repository) -> Run:
    run = await repo.get_run(RUNS[0])
    assert run is not None
    return run


RUNS: list[str] = []


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    RUNS.clear()


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(max_approvals_per_turn=30)
    async with running_bot(config, repo) as harness:
        yield harness


async def test_twelve_calls_get_one_card_and_approve_all_runs_each_once(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    assert slack.cards() == [], "no card of its own for any call of the batch"
    rows = await rows_of_run(repo)
    assert len(rows) == 12 and len({r.payload_hash for r in rows}) == 12
    assert {r.batch_id for r in rows} == {min(rows, key=lambda r: r.created_at).batch_id}
    text = shown(card)
    assert "12 calls of `restart_service`" in text
    assert all(f"svc-{i:02d}" in text for i in range(12))
    assert action_ids(card) == ["batch_approve_all", "batch_deny_all", "batch_review"]
    assert "Approve all 12" in text
    # One DM copy of the batch per approver, not twelve.
    dm_copies = [
        m
        for m in slack.server.messages
        if m.channel in set(slack.server.dm_channels.values())
        and any(b.get("block_id") == "batch_summary" for b in m.blocks)
    ]
    assert len(dm_copies) == 2

    await slack.server.click("U0APPROVER1", card, "batch_approve_all")
    await slack.settle()
    assert sorted(a["service"] for a in executed("restart_service")) == [
        f"svc-{i:02d}" for i in range(12)
    ]
    rows = await rows_of_run(repo)
    assert {r.status for r in rows} == {"executed"}
    assert {r.decided_by for r in rows} == {"U0APPROVER1"}
    run = await the_run(repo)
    assert run.status == "completed"
    card_now = slack.server.message(CHANNEL, card.ts)
    assert card_now is not None and action_ids(card_now) == []
    assert "All decided: 12 approved" in shown(card_now)
    assert any("approved 12" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    # A second click (a stale screen) decides nothing more and runs nothing again.
    await slack.server.click_as_seen("U0APPROVER2", card, "batch_approve_all")
    await slack.settle()
    assert len(executed("restart_service")) == 12


async def test_review_each_approves_the_checked_and_denies_the_rest(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    await slack.server.click("U0APPROVER2", card, "batch_review")
    await slack.settle()
    [opened] = [v for v in slack.server.views.values() if v.user == "U0APPROVER2"]
    inputs = [b for b in opened.view["blocks"] if b.get("type") == "input"]
    boxes = [b for b in inputs if b["element"]["type"] == "checkboxes"]
    assert sum(len(b["element"]["options"]) for b in boxes) == 12
    keep_out = {"svc-03", "svc-07"}
    values: dict[str, dict[str, Any]] = {}
    for block in boxes:
        chosen = [
            o
            for o in block["element"]["options"]
            if not any(s in o["text"]["text"] for s in keep_out)
        ]
        values[block["block_id"]] = {"calls": {"type": "checkboxes", "selected_options": chosen}}
    values["batch_reason"] = {"reason": {"type": "plain_text_input", "value": "not <!here> now"}}
    submitted = await slack.server.submit_view("U0APPROVER2", opened.id, values)
    assert submitted.status == 200
    await slack.settle()
    ran = sorted(a["service"] for a in executed("restart_service"))
    assert ran == [f"svc-{i:02d}" for i in range(12) if f"svc-{i:02d}" not in keep_out]
    rows = {r.arguments["service"]: r for r in await rows_of_run(repo)}
    assert {rows[s].status for s in keep_out} == {"denied"}
    assert {rows[s].reason for s in keep_out} == {"not <!here> now"}
    card_now = shown(slack.server.message(CHANNEL, card.ts))
    assert "10 approved" in card_now and "2 denied" in card_now
    assert "not &lt;!here&gt; now" in card_now


async def test_a_call_decided_meanwhile_keeps_its_decision_and_the_card_says_so(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    rows = await rows_of_run(repo)
    first = next(r for r in rows if r.arguments["service"] == "svc-05")
    await slack.bot.services.runner.decide(
        first.id, actor="U0APPROVER2", approve=False, reason="that one is fine"
    )
    await slack.server.click("U0APPROVER1", card, "batch_approve_all")
    await slack.settle()
    assert len(executed("restart_service")) == 11
    assert "svc-05" not in {a["service"] for a in executed("restart_service")}
    assert any("1 had been decided already" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    text = shown(slack.server.message(CHANNEL, card.ts))
    assert "Denied* by <@U0APPROVER2>" in text and "11 approved" in text


async def test_deny_all_denies_every_call_and_runs_none(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    await slack.server.click("U0APPROVER1", card, "batch_deny_all")
    await slack.settle()
    assert executed("restart_service") == []
    assert {r.status for r in await rows_of_run(repo)} == {"denied"}
    run = await the_run(repo)
    assert run.status == "completed"


async def test_a_stale_card_is_refused_and_changes_nothing(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    rows = await rows_of_run(repo)
    batch_id = rows[0].batch_id
    # A card that showed another set of calls (one of them with other arguments).
    other = [*rows[1:], Approval(id=rows[0].id, payload_hash="0" * 64)]
    await slack.server.click_raw(
        "U0APPROVER1",
        CHANNEL,
        "batch_approve_all",
        f"{batch_id}:{batch_fingerprint(other)}",
        block_id=f"batch:{batch_id}",
        message_ts=card.ts,
    )
    await slack.settle()
    assert any("no longer shows the calls" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    assert {r.status for r in await rows_of_run(repo)} == {"pending"}
    assert executed("restart_service") == []


async def test_a_batch_from_another_channel_is_refused(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    assert len(batch_cards(slack)) == 1
    rows = await rows_of_run(repo)
    await slack.server.click_raw(
        "U0APPROVER1",
        "C0ELSEWHERE",
        "batch_approve_all",
        f"{rows[0].batch_id}:{batch_fingerprint(rows)}",
    )
    await slack.settle()
    assert {r.status for r in await rows_of_run(repo)} == {"pending"}


async def test_someone_who_may_not_approve_is_refused(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    await slack.server.click("U0STRANGER", card, "batch_approve_all")
    await slack.settle()
    assert {r.status for r in await rows_of_run(repo)} == {"pending"}
    assert slack.ephemeral_texts("U0STRANGER")


async def test_a_call_a_rule_treats_differently_gets_its_own_card(repo: Repository) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {
            "approvers": ["U0APPROVER1", "U0APPROVER2"],
            "rules": [{"when": 'args.service == "db"', "approvers": ["U0DBA"]}],
        },
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    four = calls(*[("restart_service", {"service": s}) for s in ("a", "b", "db", "c")])
    async with running_bot(config, repo) as slack:
        await slack.mention("U0REQUESTER", four)
        [batch] = batch_cards(slack)
        [own] = slack.cards()
        assert '\\"db\\"' not in shown(batch) and "db" in shown(own)
        assert "3 calls of `restart_service`" in shown(batch)


async def test_below_the_threshold_or_turned_off_each_call_gets_its_own_card(
    repo: Repository,
) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {
            "approvers": ["U0APPROVER1", "U0APPROVER2"],
            "batch_threshold": 0,
        },
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    three = calls(*[("restart_service", {"service": s}) for s in ("a", "b", "c")])
    async with running_bot(config, repo) as slack:
        await slack.mention("U0REQUESTER", three)
        assert batch_cards(slack) == [] and len(slack.cards()) == 3


async def test_with_a_quorum_one_approve_all_is_one_vote_on_each_call(repo: Repository) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {
            "approvers": ["U0APPROVER1", "U0APPROVER2", "U0APPROVER3"],
            "min_approvals": 2,
        },
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    four = calls(*[("restart_service", {"service": s}) for s in ("a", "b", "c", "d")])
    async with running_bot(config, repo) as slack:
        await slack.mention("U0REQUESTER", four)
        [card] = batch_cards(slack)
        assert len(await rows_of_run(repo)) == 4
        await slack.server.click("U0APPROVER1", card, "batch_approve_all")
        await slack.settle()
        rows = await rows_of_run(repo)
        assert {r.status for r in rows} == {"pending"}
        assert [r.approved_by for r in rows] == [["U0APPROVER1"]] * 4
        assert executed("restart_service") == []
        # The card shows every call's vote: the sweeper has no card edit left to make.
        assert await repo.card_edits_due(before=utcnow() + timedelta(hours=1)) == []
        # The same person again: their votes are there already, nothing changes.
        await slack.server.click("U0APPROVER1", card, "batch_approve_all")
        await slack.settle()
        assert [r.approved_by for r in await rows_of_run(repo)] == [["U0APPROVER1"]] * 4
        # The requester's Approve all never counts towards a quorum.
        await slack.server.click("U0REQUESTER", card, "batch_approve_all")
        await slack.settle()
        assert executed("restart_service") == []
        await slack.server.click("U0APPROVER2", card, "batch_approve_all")
        await slack.settle()
        assert sorted(a["service"] for a in executed("restart_service")) == ["a", "b", "c", "d"]
        assert {r.status for r in await rows_of_run(repo)} == {"executed"}


async def test_approvals_lists_the_batch_as_one_item_and_approve_all_works_there(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    await slack.mention("U0REQUESTER", calls(("deploy", {"service": "web", "version": "2"})))
    assert len(await repo.approvals_for_run(await rows_of_run_first(repo))) == 12
    await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
    [listing] = slack.server.ephemerals_for("U0APPROVER1")
    text = shown(listing)
    assert "12 of 12 calls waiting" in text
    assert text.count("batch_approve_all") == 1 and text.count("approval_approve") == 1
    await slack.server.click("U0APPROVER1", listing, "batch_approve_all")
    await slack.settle()
    assert len(executed("restart_service")) == 12


async def rows_of_run_first(repo: Repository) -> str:
    """The run of the batch (the first run with a batch)."""
    pending, _ = await repo.list_pending(PendingFilter(), now=utcnow())
    return next(a.run_id for a in pending if a.batch_id)


async def test_the_reminder_of_a_batch_is_one_with_its_count(repo: Repository) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": ["U0APPROVER1"], "remind_after": "10m", "ttl": "1h"},
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention("U0REQUESTER", TWELVE)
            assert len(batch_cards(slack)) == 1
            clock.tick(timedelta(minutes=11))
            for _ in range(3):
                await sweep_once(slack.bot.services)
                await slack.settle()
            dm = slack.server.dm_channels["U0APPROVER1"]
            copies = [
                m
                for m in slack.server.messages
                if m.channel == dm and any(b.get("block_id") == "batch_summary" for b in m.blocks)
            ]
            reminders = [
                m.text for m in slack.server.messages if m.channel == dm and "Reminder" in m.text
            ]
            assert len(copies) == 1
            assert len(reminders) == 1 and "12 `restart_service` calls" in reminders[0]


async def test_approve_all_on_a_dm_copy_decides_the_batch_and_edits_card_and_copies(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", TWELVE)
    [card] = batch_cards(slack)
    assert len(await rows_of_run(repo)) == 12
    dm = slack.server.dm_channels["U0APPROVER2"]
    [copy] = [
        m
        for m in slack.server.messages
        if m.channel == dm and any(b.get("block_id") == "batch_summary" for b in m.blocks)
    ]
    await slack.server.click("U0APPROVER2", copy, "batch_approve_all")
    await slack.settle()
    assert len(executed("restart_service")) == 12
    for message in (card, copy):
        now = slack.server.message(message.channel, message.ts)
        assert now is not None and action_ids(now) == []
        assert "All decided: 12 approved" in shown(now)


async def test_approve_all_on_a_card_shown_before_a_call_was_edited_is_refused(
    repo: Repository,
) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": ["U0APPROVER1", "U0APPROVER2"], "allow_edit": True},
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    four = calls(*[("restart_service", {"service": s}) for s in ("a", "b", "c", "d")])
    async with running_bot(config, repo) as slack:
        await slack.mention("U0REQUESTER", four)
        [card] = batch_cards(slack)
        rows = await rows_of_run(repo)
        # Someone edits (and so approves) one call: the set the card showed has changed.
        edited = next(r for r in rows if r.arguments["service"] == "b")
        await slack.bot.services.runner.edit_and_approve(
            edited.id, actor="U0APPROVER2", arguments={"service": "b-canary"}
        )
        # A screen still showing the card as first posted.
        await slack.server.click_as_seen("U0APPROVER1", card, "batch_approve_all")
        await slack.settle()
        assert any("no longer shows the calls" in t for t in slack.ephemeral_texts("U0APPROVER1"))
        statuses = {r.arguments["service"]: r.status for r in await rows_of_run(repo)}
        assert statuses == {"a": "pending", "b": "approved", "c": "pending", "d": "pending"}
        assert executed("restart_service") == []


async def test_a_batch_escalates_once_and_the_added_approver_may_approve_all(
    repo: Repository,
) -> None:
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {
            "approvers": ["U0APPROVER1"],
            "escalate_after": "20m",
            "escalate_to": ["U0BOSS"],
            "ttl": "1h",
        },
    }
    config = make_config(policies=policies, max_approvals_per_turn=30)
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention("U0REQUESTER", TWELVE)
            assert len(await rows_of_run(repo)) == 12
            clock.tick(timedelta(minutes=21))
            for _ in range(3):
                await sweep_once(slack.bot.services)
                await slack.settle()
            dm = slack.server.dm_channels["U0BOSS"]
            [copy] = [
                m
                for m in slack.server.messages
                if m.channel == dm and any(b.get("block_id") == "batch_summary" for b in m.blocks)
            ]
            assert {tuple(r.approvers) for r in await rows_of_run(repo)} == {
                ("U0APPROVER1", "U0BOSS")
            }
            await slack.server.click("U0BOSS", copy, "batch_approve_all")
            await slack.settle()
            assert len(executed("restart_service")) == 12


async def test_approve_all_after_the_calls_expired_moves_the_run_on_at_once(
    repo: Repository,
) -> None:
    config = make_config(max_approvals_per_turn=30)  # restart_service: ttl 15m, deny
    four = calls(*[("restart_service", {"service": s}) for s in ("a", "b", "c", "d")])
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention("U0REQUESTER", four)
            [card] = batch_cards(slack)
            rows = await rows_of_run(repo)
            clock.tick(timedelta(minutes=16))  # no sweep has run
            await slack.server.click("U0APPROVER1", card, "batch_approve_all")
            await slack.settle()
            assert any("4 had expired" in t for t in slack.ephemeral_texts("U0APPROVER1"))
            assert {r.status for r in await rows_of_run(repo)} == {"expired"}
            assert executed("restart_service") == []
            run = await repo.get_run(rows[0].run_id)
            assert run is not None and run.status == "completed"
            assert action_ids(slack.server.message(CHANNEL, card.ts) or card) == []
