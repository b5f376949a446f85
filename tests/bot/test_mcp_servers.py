"""``[mcp_servers.test]``: a real MCP server process (tests.support.mcp_test_server) whose
tools the bot's agent gets as ``test__<tool>``, through the real bolt app, handlers, runner
and storage. The server appends a line per call to a file: what really ran, counted there."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.cli.app import main
from bot.config import ConfigError, config_from_dict
from playground.slack_server import SlackServer
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.handlers.test_slack_edits import form, open_edit
from tests.support.scripted_model import calls
from tests.support.serve_process import served_bot
from tests.support.served_flow import APPROVER, CHANNEL, wait_for_card, wait_for_text
from tests.support.slack_harness import SECRET, Harness, running_bot

SERVER = "tests.support.mcp_test_server"


def ran(calls_file: Path) -> list[dict[str, Any]]:
    if not calls_file.exists():
        return []
    return [json.loads(line) for line in calls_file.read_text().splitlines()]


def mcp_config(servers: dict[str, Any]) -> Any:
    policies = {
        **BASE_CONFIG["policies"],
        "test__deploy": {"approvers": ["U0APPROVER1"]},
    }
    return make_config(mcp_servers=servers, policies=policies)


def thread_text(slack: Harness, reply: Any) -> str:
    return "\n".join(m.text or "" for m in slack.thread_of(reply))


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


@pytest.fixture
async def slack(repo: Repository, calls_file: Path) -> AsyncIterator[Harness]:
    stdio = {"command": sys.executable, "args": ["-m", SERVER, str(calls_file)], "timeout": "3s"}
    async with running_bot(mcp_config({"test": stdio}), repo) as harness:
        yield harness


async def settle_until(slack: Harness, done: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    await slack.settle()


async def test_a_gated_mcp_tool_waits_for_the_card_and_runs_once(
    slack: Harness, calls_file: Path
) -> None:
    arguments = {"service": "api", "replicas": 2}
    reply = await slack.mention("U0REQUESTER", calls(("test__deploy", arguments)))
    [card] = slack.cards()
    assert "test__deploy" in json.dumps(card.blocks)
    assert ran(calls_file) == []  # nothing runs before a person says so

    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert "test__deploy=deployed api with 2 replicas" in thread_text(slack, reply)
    assert ran(calls_file) == [{"tool": "deploy", **arguments}]

    # A second click on a stale screen changes nothing: the call ran once, in the server.
    await slack.server.click_as_seen("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    assert len(ran(calls_file)) == 1


async def test_an_ungated_mcp_tool_runs_at_once(slack: Harness, calls_file: Path) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("test__status", {"service": "db"})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert slack.cards() == []
    assert "test__status=db is healthy" in thread_text(slack, reply)
    assert ran(calls_file) == [{"tool": "status", "service": "db"}]


async def test_bad_arguments_are_refused_before_anyone_is_asked(
    slack: Harness, calls_file: Path
) -> None:
    bad = {"service": "api", "replicas": "two"}
    reply = await slack.mention("U0REQUESTER", calls(("test__deploy", bad)))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert slack.cards() == []
    assert "do not fit the tool's schema" in thread_text(slack, reply)
    assert ran(calls_file) == []


async def test_a_slow_tool_times_out_with_an_error_the_model_reads(
    slack: Harness, calls_file: Path
) -> None:
    started = time.monotonic()
    reply = await slack.mention("U0REQUESTER", calls(("test__slow", {"seconds": 30})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert time.monotonic() - started < 15
    text = thread_text(slack, reply)
    assert "MCP server test did not answer test__slow within 3s" in text
    # The server is still usable for the next call.
    reply = await slack.mention("U0REQUESTER", calls(("test__status", {"service": "db"})))
    await settle_until(slack, lambda: "db is healthy" in thread_text(slack, reply))


async def test_a_server_that_dies_gives_a_clear_error_and_is_restarted(
    slack: Harness, calls_file: Path
) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("test__crash", {})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert "MCP server test failed during test__crash" in thread_text(slack, reply)
    # The next call reaches a new server process.
    reply = await slack.mention("U0REQUESTER", calls(("test__status", {"service": "db"})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert "test__status=db is healthy" in thread_text(slack, reply)


async def test_a_tool_error_of_the_server_reaches_the_model(
    slack: Harness, calls_file: Path
) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("test__broken", {"reason": "disk"})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert (
        "test__broken failed: Error executing tool broken: broken on purpose: disk"
        in thread_text(slack, reply)
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_http_server_down_at_start_up_is_offered_once_it_answers(
    repo: Repository, calls_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()
    http = {"url": f"http://127.0.0.1:{port}/mcp", "timeout": "3s"}
    with caplog.at_level(logging.WARNING, logger="bot.mcp_servers"):
        async with running_bot(mcp_config({"test": http}), repo) as slack:
            # The bot started; one clear line says the server is not reachable.
            assert any("MCP server test is not reachable" in r.message for r in caplog.records)
            names = lambda: {t.name for t in slack.bot.services.runner.tools}  # noqa: E731
            assert "test__status" not in names()
            server = subprocess.Popen(
                [sys.executable, "-m", SERVER, str(calls_file), "--http", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                await settle_until(slack, lambda: "test__status" in names(), seconds=20)
                reply = await slack.mention(
                    "U0REQUESTER", calls(("test__status", {"service": "db"}))
                )
                await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
                assert "test__status=db is healthy" in thread_text(slack, reply)
                assert ran(calls_file) == [{"tool": "status", "service": "db"}]
            finally:
                server.terminate()
                server.wait(10)


async def test_served_bot_runs_a_gated_mcp_tool_once_and_starts_with_a_server_down(
    tmp_path: Path, calls_file: Path
) -> None:
    """``approval-bot serve`` as users run it, the stdio server its child: one server is down
    (its command does not exist): one log line, and the other's gated tool works."""
    root = Path(__file__).resolve().parents[2]
    extra = (
        "mcp_servers.test = { command = "
        f'{json.dumps(sys.executable)}, args = ["-m", "{SERVER}", {json.dumps(str(calls_file))}],'
        f" env = {{ PYTHONPATH = {json.dumps(str(root))} }} }}\n"
        'mcp_servers.gone = { command = "/nonexistent/mcp-server" }\n'
        'policies.test__deploy = { approvers = ["U0APPROVER1"] }\n'
    )
    database = f"sqlite:///{tmp_path / 'serve.db'}"
    async with served_bot(database, tmp_path, capture_output=True, extra_config=extra) as served:
        prompt = {
            "prompt": "go",
            "tool_calls": [
                {"name": "test__deploy", "arguments": {"service": "web", "replicas": 3}}
            ],
        }
        reply = await served.slack.mention("U0REQUESTER", CHANNEL, f"<@U0BOT> {json.dumps(prompt)}")
        assert reply.status == 200
        card = await wait_for_card(served, "test__deploy")
        assert ran(calls_file) == []
        click = await served.slack.click(APPROVER, card, "approval_approve")
        assert click.status == 200
        await wait_for_text(served, "deployed web with 3 replicas")
        assert ran(calls_file) == [{"tool": "deploy", "service": "web", "replicas": 3}]
    output = served.output.decode()
    assert output.count("MCP server gone is not reachable") == 1, output
    assert "Traceback" not in output, output


async def test_rules_and_recovery_apply_to_mcp_tools_as_to_python_tools(
    repo: Repository, calls_file: Path
) -> None:
    stdio = {"command": sys.executable, "args": ["-m", SERVER, str(calls_file)]}
    policies = {
        **BASE_CONFIG["policies"],
        "test__deploy": {
            "approvers": ["U0APPROVER1"],
            "rules": [{"when": "args.replicas <= 2", "approval": "never"}],
        },
        "test__broken": {"approval": "never", "on_error": "ask", "recovery_by": ["U0APPROVER1"]},
    }
    config = make_config(mcp_servers={"test": stdio}, policies=policies)
    async with running_bot(config, repo) as slack:
        # A rule on the arguments lets a small deploy through without a card.
        small = {"service": "api", "replicas": 1}
        reply = await slack.mention("U0REQUESTER", calls(("test__deploy", small)))
        await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
        assert slack.cards() == []
        assert ran(calls_file) == [{"tool": "deploy", **small}]

        # The server's tool error puts the call on a recovery card; Retry runs it once more.
        await slack.mention("U0REQUESTER", calls(("test__broken", {"reason": "disk"})))
        await settle_until(slack, lambda: bool(recovery_cards(slack)))
        [card] = recovery_cards(slack)
        assert "broken on purpose: disk" in json.dumps(card.blocks)
        await slack.server.click("U0APPROVER1", card, "recovery_retry")
        await settle_until(slack, lambda: len(recovery_cards(slack)) == 2)
        assert [c["tool"] for c in ran(calls_file)] == ["deploy", "broken", "broken"]


def recovery_cards(slack: Harness) -> list[Any]:
    """In the channel (the DM copies to recovery_by are not counted)."""
    return [
        m
        for m in slack.server.messages
        if m.channel == CHANNEL
        and not m.is_ephemeral
        and any(b.get("block_id") == "recovery_summary" for b in m.blocks)
    ]


def test_the_terminal_asks_and_approves_an_mcp_tool_that_then_runs_once(
    tmp_path: Path,
    calls_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "bot.toml"
    config.write_text(
        'model = "scripted"\n'
        "[mcp_servers.test]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = ["-m", "{SERVER}", {json.dumps(str(calls_file))}]\n'
        "[policies.test__deploy]\n"
        'approvers = ["U0APPROVER1"]\n'
    )
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    cfg = ["--config", str(config)]

    def cli(*argv: str) -> str:
        code = main([*cfg, *argv])
        out = capsys.readouterr().out
        assert code == 0, out
        return out

    cli("db", "upgrade")
    call = {"name": "test__deploy", "arguments": {"service": "web", "replicas": 3}}
    assert ": paused" in cli("ask", json.dumps({"tool_calls": [call]}), "--as", "U0REQUESTER")
    [listed] = json.loads(cli("approvals", "list", "--json"))
    assert listed["tool"] == "test__deploy" and ran(calls_file) == []
    out = cli("approvals", "decide", listed["id"], "--approve", "--as", "U0APPROVER1")
    assert "test__deploy=deployed web with 3 replicas" in out
    assert ran(calls_file) == [{"tool": "deploy", "service": "web", "replicas": 3}]


def test_mcp_server_sections_are_checked_with_the_rest_of_the_file() -> None:
    with pytest.raises(ConfigError) as error:
        config_from_dict(
            {
                "mcp_servers": {
                    "both": {"command": "x", "url": "http://127.0.0.1/mcp"},
                    "neither": {"timeout": "5s"},
                    "a__b": {"command": "x"},
                    "ftp": {"url": "ftp://example.com"},
                    "mixed": {"command": "x", "headers": {"A": "b"}},
                    "slow": {"command": "x", "timeout": "soon"},
                },
                # A tool of a configured server is known only once it is listed: accepted.
                "policies": {"test__deploy": {}, "slow__anything": {}, "ghost__tool": {}},
            }
        )
    assert error.value.problems == [
        "mcp_servers.both.command: give either command (stdio) or url (HTTP), not both",
        "mcp_servers.neither.command: give either command (stdio) or url (HTTP), not both",
        "mcp_servers.a__b: 'a__b' is not a server name: letters, digits, '-' and single '_' "
        "inside, at most 32 characters (its tools are named NAME__tool)",
        "mcp_servers.ftp.url: must be an http:// or https:// URL",
        "mcp_servers.mixed.headers: only for url (HTTP) servers",
        "mcp_servers.slow.timeout: 'soon' is not a duration; write a positive number and a "
        'unit, like "45s", "30m", "2h" or "1d"',
        "policies.test__deploy: no tool named 'test__deploy' (tools: none configured)",
        "policies.ghost__tool: no tool named 'ghost__tool' (tools: none configured)",
    ]


async def test_a_policy_naming_a_tool_the_server_does_not_offer_is_warned_about(
    repo: Repository, calls_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stdio = {"command": sys.executable, "args": ["-m", SERVER, str(calls_file)]}
    config = make_config(
        mcp_servers={"test": stdio},
        policies={**BASE_CONFIG["policies"], "test__deplyo": {"approvers": ["U0APPROVER1"]}},
    )
    with caplog.at_level(logging.WARNING, logger="bot.mcp_servers"):
        async with running_bot(config, repo):
            pass
    [warning] = [r.getMessage() for r in caplog.records if "test__deplyo" in r.getMessage()]
    assert warning == (
        "policies.test__deplyo: MCP server test offers no such tool "
        "(it offers: test__broken, test__crash, test__deploy, test__slow, test__status)"
    )


async def test_an_approved_call_whose_server_is_down_since_start_up_waits_for_it(
    repo: Repository, calls_file: Path
) -> None:
    """Approved while the bot cannot reach the server (down since its start): the call is not
    cancelled as "no longer configured"; it runs once, when the server answers."""
    port = _free_port()
    slack_server = SlackServer(signing_secret=SECRET)
    await slack_server.start()
    try:
        stdio = {"command": sys.executable, "args": ["-m", SERVER, str(calls_file)]}
        arguments = {"service": "api", "replicas": 4}
        async with running_bot(mcp_config({"test": stdio}), repo, server=slack_server) as slack:
            reply = await slack.mention("U0REQUESTER", calls(("test__deploy", arguments)))
            [card] = slack.cards()

        http = {"url": f"http://127.0.0.1:{port}/mcp"}
        config = mcp_config({"test": http})
        config.run_lease = timedelta(seconds=2)
        config.sweep_interval = timedelta(seconds=1)
        async with running_bot(config, repo, server=slack_server, sweep=True) as slack:
            await slack.server.click("U0APPROVER1", card, "approval_approve")
            await slack.settle()
            await asyncio.sleep(3)  # past the lease: the sweeper's take-over waits too
            assert ran(calls_file) == []
            assert "no longer configured" not in thread_text(slack, reply)
            server = subprocess.Popen(
                [sys.executable, "-m", SERVER, str(calls_file), "--http", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                await settle_until(
                    slack, lambda: "deployed api" in thread_text(slack, reply), seconds=40
                )
                await asyncio.sleep(2)  # another sweep or two: still once
                assert ran(calls_file) == [{"tool": "deploy", **arguments}]
            finally:
                server.terminate()
                server.wait(10)
    finally:
        await slack_server.stop()


async def test_edit_then_approve_runs_the_edited_arguments_in_the_server_once(
    repo: Repository, calls_file: Path
) -> None:
    stdio = {"command": sys.executable, "args": ["-m", SERVER, str(calls_file)]}
    policies = {
        **BASE_CONFIG["policies"],
        "test__deploy": {"approvers": ["U0APPROVER1"], "allow_edit": True},
    }
    config = make_config(mcp_servers={"test": stdio}, policies=policies)
    async with running_bot(config, repo) as slack:
        proposed = {"service": "api", "replicas": 30}
        reply = await slack.mention("U0REQUESTER", calls(("test__deploy", proposed)))
        [card] = slack.cards()
        view = await open_edit(slack, "U0APPROVER1", card)  # the form from the server's schema
        submitted = await slack.server.submit_view(
            "U0APPROVER1", view.id, form(service="api", replicas="3")
        )
        assert submitted.status == 200
        await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
        assert ran(calls_file) == [{"tool": "deploy", "service": "api", "replicas": 3}]
        assert "deployed api with 3 replicas" in thread_text(slack, reply)


async def test_a_standing_grant_lets_a_later_mcp_call_in_the_thread_run_once_without_a_card(
    repo: Repository, calls_file: Path
) -> None:
    stdio = {"command": sys.executable, "args": ["-m", SERVER, str(calls_file)]}
    policies = {
        **BASE_CONFIG["policies"],
        "test__deploy": {"approvers": ["U0APPROVER1"], "grant_max": "1h"},
    }
    config = make_config(mcp_servers={"test": stdio}, policies=policies)
    async with running_bot(config, repo) as slack:
        first = {"service": "api", "replicas": 2}
        reply = await slack.mention("U0REQUESTER", calls(("test__deploy", first)))
        assert reply.message is not None
        thread = reply.message.ts
        [card] = slack.cards()
        chosen = await slack.server.select("U0APPROVER1", card, "approval_grant", "for 30 minutes")
        assert chosen.status == 200
        await settle_until(slack, lambda: len(ran(calls_file)) == 1)

        second = {"service": "web", "replicas": 5}
        await slack.mention("U0REQUESTER", calls(("test__deploy", second)), thread_ts=thread)
        await settle_until(slack, lambda: len(ran(calls_file)) == 2)
        assert len(slack.cards()) == 1, "no new card"
        assert ran(calls_file) == [
            {"tool": "deploy", **first},
            {"tool": "deploy", **second},
        ]


async def test_a_server_that_cannot_be_restarted_fails_calls_clearly_until_it_can(
    slack: Harness, calls_file: Path
) -> None:
    down = calls_file.with_suffix(".down")
    down.touch()  # from now on the server exits as soon as it is started
    reply = await slack.mention("U0REQUESTER", calls(("test__crash", {})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))

    reply = await slack.mention("U0REQUESTER", calls(("test__status", {"service": "db"})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    text = thread_text(slack, reply)
    assert "MCP server test is not reachable (" in text, text
    assert "test__status was not run" in text
    assert [c["tool"] for c in ran(calls_file)] == ["crash"]

    down.unlink()  # it starts again: the next call reaches it
    reply = await slack.mention("U0REQUESTER", calls(("test__status", {"service": "db"})))
    await settle_until(slack, lambda: "Results:" in thread_text(slack, reply))
    assert "test__status=db is healthy" in thread_text(slack, reply)
