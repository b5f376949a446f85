"""The playground's offline demo model never invents an argument: a request that names no
service gets a question (ask_user) and a thread's follow-up ("now restart it") uses the
service of the conversation. Driven through the whole playground: the real bot, our
Slack-compatible server, signed requests."""

from __future__ import annotations

import json
from pathlib import Path

from playground.app import CHANNEL, running_playground
from playground.demo_model import choose_tool
from playground.slack_server import Message

ANA, BO = "U0REQUESTER", "U0APPROVER1"


def _shown(message: Message) -> str:
    return "\n".join(str(b.get("text", {}).get("text", "")) for b in message.blocks)


def _cards(messages: list[Message], summary: str) -> list[Message]:
    """Cards in #ops (approvers may get a copy by DM)."""
    return [
        m
        for m in messages
        if m.channel == CHANNEL and any(b.get("block_id") == summary for b in m.blocks)
    ]


async def test_a_request_without_a_service_asks_which_and_a_follow_up_uses_the_thread(
    tmp_path: Path,
) -> None:
    async with running_playground(data_dir=tmp_path) as pg:
        server = pg.server
        asked = await server.mention(ANA, CHANNEL, "<@U0BOT> restart")
        await pg.settle()
        assert _cards(server.messages, "approval_summary") == [], "nothing was made up"
        [question] = _cards(server.messages, "question_summary")
        assert "Which service should I restart?" in json.dumps(question.blocks)
        labels = [e["text"]["text"] for _, e in question.buttons()]
        assert labels == ["payments", "checkout", "search", "web", "api"]

        await server.click(ANA, question, "question_choice:3")  # web
        await pg.settle()
        [card] = _cards(server.messages, "approval_summary")
        assert '"service": "web"' in _shown(card)
        assert card.thread_ts == asked.message.ts  # type: ignore[union-attr]

        # In the thread, "it" is the service the conversation is about.
        await server.click(BO, card, "approval_approve")
        await pg.settle()
        await server.mention(ANA, CHANNEL, "<@U0BOT> now restart it", thread_ts=card.thread_ts)
        await pg.settle()
        cards = _cards(server.messages, "approval_summary")
        assert len(cards) == 2 and '"service": "web"' in _shown(cards[-1])
        assert not any('"service": "it"' in _shown(m) for m in server.messages)


def test_the_demo_says_what_it_needs_when_it_cannot_ask() -> None:
    assert choose_tool("restart", can_ask=False) == (
        "Which service should I restart? Say it with the request, e.g. "
        "`@approval-bot restart payments`."
    )
    assert choose_tool("scale checkout") == (
        "How many replicas should checkout have? Say `@approval-bot scale checkout to 5`."
    )
    assert choose_tool("restart foo") == ("restart_service", {"service": "foo"})
    assert choose_tool("check it", ["deploy web"]) == ("get_status", {"service": "web"})


def test_the_demo_rotates_credentials_of_the_service_named() -> None:
    assert choose_tool("rotate credentials of payments") == (
        "rotate_credentials",
        {"service": "payments"},
    )
    assert choose_tool("rotate the search credentials") == (
        "rotate_credentials",
        {"service": "search"},
    )
    # "credentials" names no service: the demo asks which, never guesses.
    assert choose_tool("rotate credentials")[0] == "ask_user"  # type: ignore[index]


async def test_the_cli_run_in_the_data_directory_sees_the_playground(tmp_path: Path) -> None:
    """The playground writes its configuration into --data-dir under the names the CLI looks
    for by default, and the demo tools keep their pretend state there too: `cd DATA_DIR &&
    approval-bot approvals list` lists the card the page shows, and deciding it from the CLI
    restarts the playground's own pretend service."""
    import os
    import subprocess
    import sys
    import tomllib

    from playground.demo import demo_config_dict
    from tests.support.serve_process import ROOT

    data_dir = tmp_path / "data"
    async with running_playground(data_dir=data_dir) as pg:
        await pg.server.mention(ANA, CHANNEL, "<@U0BOT> restart payments")
        await pg.settle()
        [card] = _cards(pg.server.messages, "approval_summary")
    written = tomllib.loads((data_dir / "approval-bot.toml").read_text())
    assert written == demo_config_dict("demo")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "APPROVAL_BOT_CONFIG")}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("APPROVAL_BOT_DEMO_STATE", None)  # as in a fresh shell

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bot.cli", *argv],
            cwd=data_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    listed = cli("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["tool"] == "restart_service" and row["id"] in json.dumps(card.blocks)
    decided = cli("approvals", "decide", row["id"], "--approve", "--as", BO)
    assert decided.returncode == 0, decided.stderr + decided.stdout
    status = cli("ask", "status of payments", "--as", ANA)
    assert status.returncode == 0, status.stderr
    assert "restarted 1 times" in status.stdout
    assert not (data_dir / "data").exists() and len(list(data_dir.glob("*-state.db"))) == 1


def test_the_demo_answers_in_plain_sentences() -> None:
    """What tools and the gate tell the model (JSON, instructions to the model, the edited
    call's arguments as JSON, times as 2026-12-01 10:00 UTC) is reworded for people."""
    from llm.parts import ToolResultPart

    from bot.gate.texts import refusal_text
    from bot.policy.policy import Policy
    from playground.demo_words import plain, summarize

    deployed = plain('{"service": "web", "status": "deployed", "build": "2026.11.30-1"}')
    assert deployed == "service web, status deployed, build 2026.11.30-1"
    rows = plain('[{"name": "payments", "replicas": 3}, {"name": "web", "replicas": 4}]')
    assert rows == "2 rows: name payments, replicas 3; name web, replicas 4"
    edited = plain(
        "Approved by Bo Lee (@bo) after editing the arguments: replicas 40 → 4. The call ran "
        'with {"replicas": 4, "service": "web"} instead of the proposed arguments; do not '
        "repeat the original call. Result: scaled web to 4 replicas"
    )
    assert edited == (
        "Bo Lee (@bo) changed the call before approving it (replicas 40 → 4): "
        "scaled web to 4 replicas"
    )
    refused = plain(refusal_text("run_sql", Policy(approval="deny", message="Read-only")))
    assert "do not" not in refused.lower() and refused.endswith("was asked for.")
    expired = plain("Expired at 2026-12-01 10:00 UTC with no decision. The call was not run.")
    assert expired == "Expired at 10:00 UTC on Dec 1 with no decision. The call was not run."
    answer = summarize([ToolResultPart(name="deploy_service", output='{"status": "deployed"}')])
    assert answer == "Here is what happened:\n• `deploy_service`: status deployed"
    for text in (deployed, rows, edited, refused, expired, answer):
        assert "{" not in text and "instead of" not in text and "UTC with" not in text[:8]


async def test_the_researcher_sub_agent_looks_up_each_service_at_once(tmp_path: Path) -> None:
    async with running_playground(data_dir=tmp_path) as pg:
        server = pg.server
        asked = await server.mention(ANA, CHANNEL, "<@U0BOT> research payments and checkout")
        await pg.settle()
        thread = server.thread(CHANNEL, asked.message.ts)  # type: ignore[union-attr]
        texts = [m.text for m in thread]
        assert any(t.startswith("🤖 researcher is working on: status of payments") for t in texts)
        assert any(t.startswith("🤖 researcher is working on: status of checkout") for t in texts)
        assert any("`get_status`, `run_sql`" in t for t in texts)
        final = [t for t in texts if "`delegate`" in t and "Here is what happened" in t]
        assert len(final) == 1, texts
        assert "payments" in final[0] and "checkout" in final[0]
        assert _cards(server.messages, "approval_summary") == [], "read-only: nobody asked"
