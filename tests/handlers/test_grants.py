"""Standing grants end to end: the real bolt app over signed HTTP, our Slack-compatible
server, the scripted model, real SQLite and PostgreSQL, and freezegun for time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

from bot.config import load_config
from playground.slack_server import Message
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

GRANT = "approval_grant"
GRANT_SAME = "approval_grant_same_arguments"


def grants_config() -> Any:
    policies = {**BASE_CONFIG["policies"]}
    policies["restart_service"] = {**policies["restart_service"], "grant_max": "1h"}
    return make_config(policies=policies)


@pytest.fixture
def clock() -> Any:
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as frozen:
        yield frozen


@pytest.fixture
async def slack(repo: Repository, clock: Any) -> AsyncIterator[Harness]:
    async with running_bot(grants_config(), repo) as harness:
        yield harness


async def ask(slack: Harness, text: str, thread_ts: str | None = None) -> str:
    """A mention (in ``thread_ts`` when given); the thread's ts."""
    reply = await slack.mention("U0REQUESTER", text, thread_ts=thread_ts)
    assert reply.status == 200 and reply.message is not None
    return thread_ts or reply.message.ts


def live_cards(slack: Harness) -> list[Message]:
    return [c for c in slack.cards() if has_buttons(slack.server.message(CHANNEL, c.ts))]  # type: ignore[arg-type]


async def grant(
    slack: Harness, user: str, card: Message, option: str, *, same: bool = False
) -> None:
    reply = await slack.server.select(user, card, GRANT_SAME if same else GRANT, option)
    assert reply.status == 200
    await slack.settle()


async def audit_events(repo: Repository) -> list[str]:
    return [e.event for e in await repo.audit_trail()]


async def test_a_grant_lets_later_calls_in_the_thread_run_without_a_card_until_it_expires(
    slack: Harness, repo: Repository, clock: Any
) -> None:
    thread = await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    menus = [e for _, e in card.buttons() if e.get("type") == "static_select"]
    assert [m["action_id"] for m in menus] == [GRANT, GRANT_SAME]
    offered = [o["text"]["text"] for o in menus[0]["options"]]
    assert offered == ["for 5 minutes", "for 15 minutes", "for 30 minutes", "for 1 hour"]

    await grant(slack, "U0APPROVER1", card, "for 30 minutes")
    assert executed("restart_service") == [{"service": "web"}], "the granting call ran once"
    [made] = await repo.list_grants(now=_now())
    assert (made.tool_name, made.grantor, made.payload_scope) == (
        "restart_service",
        "U0APPROVER1",
        None,
    )
    assert made.thread_ts == thread
    assert any("allowed it in this thread" in t for t in slack.ephemeral_texts("U0APPROVER1"))

    # A later call in the thread runs without a card, exactly once, through the records.
    clock.tick(timedelta(minutes=10))
    await ask(slack, calls(("restart_service", {"service": "api"})), thread)
    assert len(slack.cards()) == 1, "no new card"
    assert executed("restart_service") == [{"service": "web"}, {"service": "api"}]
    run = (await repo.list_grants(now=_now()))[0].run_id
    [ran] = [
        a
        for a in await repo.approvals_for_run(run)  # type: ignore[arg-type]
        if a.arguments == {"service": "api"}
    ]
    assert (ran.status, ran.decided_by) == ("executed", "U0APPROVER1")
    assert made.id in (ran.reason or "")
    trail = [e.event for e in await repo.audit_trail(approval_id=ran.id)]
    assert trail == ["approval_requested", "grant_used", "execution_started", "execution_finished"]
    thread_texts = [m.text for m in slack.server.thread(CHANNEL, thread)]
    assert any("restart_service=restarted api" in t for t in thread_texts)

    # After expiry the same call asks again, and the expiry is audited once.
    clock.tick(timedelta(minutes=21))
    await ask(slack, calls(("restart_service", {"service": "api"})), thread)
    assert len(live_cards(slack)) == 1, "asks again after the grant expired"
    assert len(executed("restart_service")) == 2
    assert (await audit_events(repo)).count("grant_expired") == 1


async def test_later_cards_show_the_standing_grant(slack: Harness) -> None:
    thread = await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    await grant(slack, "U0APPROVER1", card, "for 1 hour")
    await ask(slack, calls(("deploy", {"service": "web", "version": "2"})), thread)
    [deploy_card] = live_cards(slack)
    shown = json.dumps(deploy_card.blocks)
    assert "Standing grant: `restart_service` allowed here until <!date^" in shown
    assert "by <@U0APPROVER1>" in shown
    # deploy's policy has no grant_max: its card offers no grant.
    assert not [e for _, e in deploy_card.buttons() if e.get("type") == "static_select"]


async def test_a_grant_never_covers_another_thread_or_another_tool(slack: Harness) -> None:
    thread = await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    await grant(slack, "U0APPROVER1", card, "for 1 hour")

    await ask(slack, calls(("restart_service", {"service": "web"})))  # a new thread
    assert len(live_cards(slack)) == 1
    await ask(slack, calls(("deploy", {"service": "web", "version": "2"})), thread)
    assert len(live_cards(slack)) == 2
    assert executed("restart_service") == [{"service": "web"}]
    assert executed("deploy") == []


async def test_a_grant_for_the_same_arguments_asks_for_other_arguments(slack: Harness) -> None:
    thread = await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    await grant(slack, "U0APPROVER2", card, "for 15 minutes", same=True)

    await ask(slack, calls(("restart_service", {"service": "web"})), thread)
    assert live_cards(slack) == []
    assert executed("restart_service") == [{"service": "web"}, {"service": "web"}]
    await ask(slack, calls(("restart_service", {"service": "db"})), thread)
    assert len(live_cards(slack)) == 1, "other arguments ask again"
    assert len(executed("restart_service")) == 2


async def test_a_non_approver_cannot_grant(slack: Harness, repo: Repository) -> None:
    await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    await grant(slack, "U0OUTSIDER", card, "for 1 hour")
    await grant(slack, "U0REQUESTER", card, "for 1 hour")
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0OUTSIDER"))
    assert any("someone else must decide" in t for t in slack.ephemeral_texts("U0REQUESTER"))
    assert await repo.list_grants(now=_now()) == []
    assert executed("restart_service") == []
    assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]


async def test_a_forged_duration_beyond_grant_max_grants_nothing(
    slack: Harness, repo: Repository
) -> None:
    await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    approval_id = next(  # the Approve button carries the id, then the fingerprint
        e["value"] for _, e in card.buttons() if e.get("action_id") == "approval_approve"
    ).partition(":")[0]
    forged = await slack.server.click_raw(
        "U0APPROVER1", CHANNEL, "approval_grant", "", message_ts=card.ts
    )
    assert forged.status == 200
    # A menu option whose duration is longer than grant_max (a crafted request): refused.
    message = slack.server.message(CHANNEL, card.ts)
    assert message is not None
    [menu] = [e for _, e in message.buttons() if e.get("action_id") == GRANT]
    menu["options"] = [
        {"text": {"type": "plain_text", "text": "for 9 hours"}, "value": f"{approval_id}|32400"}
    ]
    await grant(slack, "U0APPROVER1", message, "for 9 hours")
    texts = slack.ephemeral_texts("U0APPROVER1")
    assert any("not one of the durations" in t for t in texts)
    assert any("lasts at most 1 hour" in t for t in texts)
    assert await repo.list_grants(now=_now()) == []
    assert executed("restart_service") == []


async def test_a_garbled_grant_option_is_answered_and_grants_nothing(slack: Harness) -> None:
    """Crafted option values: digits that are not ASCII (``²`` passed ``isdigit`` and then
    broke ``int``, so the click got no answer), extra pipes, an empty fingerprint. Each gets
    "not one of the durations" and grants and runs nothing."""
    await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    approval_id = next(
        e["value"] for _, e in card.buttons() if e.get("action_id") == "approval_approve"
    ).partition(":")[0]
    await slack.server.click_raw("U0APPROVER1", CHANNEL, "approval_grant", "", message_ts=card.ts)
    message = slack.server.message(CHANNEL, card.ts)
    assert message is not None
    [menu] = [e for _, e in message.buttons() if e.get("action_id") == GRANT]
    fp = "0" * 16
    values = [
        f"{approval_id}|\u00b2|{fp}",
        f"{approval_id}|\u0663\u0666\u0660\u0660|{fp}",
        f"{approval_id}|3600|{fp}|x",
        f"{approval_id}|3600|",
        f"|3600|{fp}",
    ]
    menu["options"] = [
        {"text": {"type": "plain_text", "text": f"garbled {i}"}, "value": v}
        for i, v in enumerate(values)
    ]
    before = len(slack.ephemeral_texts("U0APPROVER1"))
    for i in range(len(values)):
        await grant(slack, "U0APPROVER1", message, f"garbled {i}")
    texts = slack.ephemeral_texts("U0APPROVER1")[before:]
    assert sum("not one of the durations" in t for t in texts) == len(values), texts
    assert await slack.repo.list_grants(now=_now()) == []
    assert executed("restart_service") == []


async def test_an_approve_and_allow_option_must_show_the_arguments_as_they_are(
    slack: Harness, repo: Repository
) -> None:
    """An option carries the fingerprint of the arguments its card showed, as Approve does:
    a forged one grants and runs nothing; an option of the previous release (id and
    duration only) still works while the arguments were never edited."""
    await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    message = slack.server.message(CHANNEL, card.ts)
    assert message is not None
    [menu] = [e for _, e in message.buttons() if e.get("action_id") == GRANT]
    approval_id = menu["options"][0]["value"].split("|")[0]
    menu["options"] = [
        {
            "text": {"type": "plain_text", "text": "forged"},
            "value": f"{approval_id}|600|{'f' * 16}",
        },
    ]
    await grant(slack, "U0APPROVER1", message, "forged")
    assert any(
        "arguments changed since this copy" in t for t in slack.ephemeral_texts("U0APPROVER1")
    )
    assert await repo.list_grants(now=_now()) == []
    assert executed("restart_service") == []

    message = slack.server.message(CHANNEL, card.ts)  # redrawn by the refusal
    assert message is not None
    [menu] = [e for _, e in message.buttons() if e.get("action_id") == GRANT]
    menu["options"] = [
        {"text": {"type": "plain_text", "text": "old"}, "value": f"{approval_id}|600"}
    ]
    await grant(slack, "U0APPROVER1", message, "old")
    assert executed("restart_service") == [{"service": "web"}]
    assert len(await repo.list_grants(now=_now())) == 1


async def test_revocation_from_the_grants_list_and_who_may_revoke(
    slack: Harness, repo: Repository
) -> None:
    thread = await ask(slack, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    await grant(slack, "U0APPROVER1", card, "for 1 hour")

    listed = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="grants")
    assert listed.status == 200
    assert "restart_service" in json.dumps(listed.json()["blocks"])
    [listing] = [
        m for m in slack.server.ephemerals_for("U0OUTSIDER") if "grant_revoke" in str(m.blocks)
    ]
    await slack.server.click("U0OUTSIDER", listing, "grant_revoke")
    await slack.settle()
    assert any("can revoke it" in t for t in slack.ephemeral_texts("U0OUTSIDER"))
    assert len(await repo.list_grants(now=_now())) == 1

    await slack.server.slash_command("U0APPROVER2", CHANNEL, text="grants")
    [listing] = [
        m for m in slack.server.ephemerals_for("U0APPROVER2") if "grant_revoke" in str(m.blocks)
    ]
    await slack.server.click("U0APPROVER2", listing, "grant_revoke")
    await slack.settle()
    assert await repo.list_grants(now=_now()) == []
    revoked = slack.server.message(listing.channel, listing.ts)
    assert revoked is not None and "Revoked" in json.dumps(revoked.blocks)
    events = [(e.event, e.actor) for e in await repo.audit_trail()]
    assert ("grant_revoked", "U0APPROVER2") in events

    await ask(slack, calls(("restart_service", {"service": "web"})), thread)
    assert len(live_cards(slack)) == 1, "asks again once revoked"
    assert len(executed("restart_service")) == 1


def _now() -> Any:
    from bot.clock import utcnow

    return utcnow()


# -- the command line: grants list | revoke ID --as USER -------------------------------

CLI_CONFIG = """
model = "scripted"
streaming = "off"
tools = ["tests.support.ops_tools:restart_service", "tests.support.ops_tools:deploy"]

[policies.restart_service]
approvers = ["U0APPROVER1", "U0APPROVER2"]
grant_max = "1h"

[policies.deploy]
approvers = ["U0APPROVER1"]
"""


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from bot.cli.app import main

    code = await asyncio.to_thread(main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_grants_list_and_revoke_from_the_command_line(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config_path = tmp_path / "bot.toml"
    config_path.write_text(CLI_CONFIG)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    cfg = ["--config", str(config_path)]
    repo = await Repository.open(database_url)
    try:
        async with running_bot(load_config(config_path), repo) as slack:
            thread = await ask(slack, calls(("restart_service", {"service": "web"})))
            [card] = slack.cards()
            await grant(slack, "U0APPROVER1", card, "for 30 minutes", same=True)
            [made] = await repo.list_grants(now=_now())

            code, out, _ = await run_cli(capsys, *cfg, "grants", "list")
            assert code == 0
            assert made.id in out and "restart_service (same arguments only)" in out
            assert "by U0APPROVER1" in out
            code, out, _ = await run_cli(capsys, *cfg, "grants", "list", "--json")
            [listed] = json.loads(out)
            assert (listed["id"], listed["live"], listed["scope"]) == (
                made.id,
                True,
                "same arguments",
            )

            code, _, err = await run_cli(capsys, *cfg, "grants", "revoke", made.id, "--as", "U0X")
            assert code == 1 and err.startswith(f"approval-bot: {made.id}: ") and "--force" in err
            code, _, err = await run_cli(
                capsys, *cfg, "grants", "revoke", "grt_nope", "--as", "U0X"
            )
            assert code == 1 and err == "approval-bot: grt_nope: there is no such grant\n"
            assert len(await repo.list_grants(now=_now())) == 1

            code, out, _ = await run_cli(
                capsys, *cfg, "grants", "revoke", made.id, "--as", "U0APPROVER2"
            )
            assert code == 0 and f"Revoked {made.id}" in out
            code, _, err = await run_cli(
                capsys, *cfg, "grants", "revoke", made.id, "--as", "U0APPROVER2"
            )
            assert code == 1 and "revoked by U0APPROVER2" in err
            code, out, _ = await run_cli(capsys, *cfg, "grants", "list")
            assert out.strip() == "No live standing grants."
            code, out, _ = await run_cli(capsys, *cfg, "grants", "list", "--all")
            assert "revoked by U0APPROVER2" in out

            await ask(slack, calls(("restart_service", {"service": "web"})), thread)
            assert len(live_cards(slack)) == 1, "asks again once revoked"
    finally:
        await repo.close()


async def test_a_grantor_revokes_while_slack_cannot_list_groups(
    repo: Repository, clock: Any
) -> None:
    """usergroups.users.list rate limited: the grantor, named by id, needs no group lookup
    to approve-and-grant, nor to revoke."""
    policies = {**BASE_CONFIG["policies"]}
    policies["restart_service"] = {"approvers": ["U0APPROVER1", "S0ONCALL"], "grant_max": "1h"}
    config = make_config(policies=policies)
    async with running_bot(config, repo, usergroups={"S0ONCALL": ["U0ONCALL"]}) as slack:
        slack.server.fail("usergroups.users.list", "ratelimited", times=100)
        await ask(slack, calls(("restart_service", {"service": "web"})))
        [card] = slack.cards()
        await grant(slack, "U0APPROVER1", card, "for 1 hour")
        assert len(await repo.list_grants(now=_now())) == 1
        await slack.server.slash_command("U0APPROVER1", CHANNEL, text="grants")
        [listing] = [
            m for m in slack.server.ephemerals_for("U0APPROVER1") if "grant_revoke" in str(m.blocks)
        ]
        await slack.server.click("U0APPROVER1", listing, "grant_revoke")
        await slack.settle()
        assert await repo.list_grants(now=_now()) == []
