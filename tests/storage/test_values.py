"""Odd values (NUL, lone surrogates, NaN and infinities) are stored and returned the same way
on SQLite and PostgreSQL, wherever they come from: tool outputs, model arguments, reasons."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bot.clock import utcnow
from bot.engine import Request, Runner
from storage.drivers.postgres import prepared
from storage.repository import PendingFilter, Repository
from storage.values import _strict_json, json_text, storable
from tests.conftest import Database, make_config
from tests.support import ops_tools

ODD = {
    "nul": "a\x00b",
    "lone high": "x\ud800y",
    "lone low": "\udc00",
    "pair": "\ud83d\ude00",  # two code points that make one character: joined, as JSON does
    "fine": "é😀 \\u0000",
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "number": 1.5,
    "nested": [{"key\x00": ["\ud800"]}],
}
STORED = {
    "nul": "a\ufffdb",
    "lone high": "x\ufffdy",
    "lone low": "\ufffd",
    "pair": "😀",
    "fine": "é😀 \\u0000",
    "nan": "NaN",
    "inf": "Infinity",
    "-inf": "-Infinity",
    "number": 1.5,
    "nested": [{"key\ufffd": ["\ufffd"]}],
}


def test_postgres_parameters_are_stored_text_and_the_rest_as_they_are() -> None:
    """The direct path checks a statement's text parameters together: one odd text among
    plain ones is still made storable, and nothing else is touched."""
    sql = "SELECT :a, :b, :c, :a, :d, :e"
    for odd, stored in [(t, STORED[k]) for k, t in ODD.items() if isinstance(t, str)]:
        params = {"a": "run_01", "b": odd, "c": 3, "d": None, "e": "plain"}
        assert prepared(sql, params) == (
            "SELECT $1, $2, $3, $1, $4, $5",
            ("run_01", stored, 3, None, "plain"),
        )
    assert prepared("SELECT :only", {"only": "a\x00b"}) == ("SELECT $1", ("a\ufffdb",))
    assert prepared("SELECT 1", None) == ("SELECT 1", ())


FRAGMENTS = ["a", "é", "😀", "\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\\", "\\u0000", "u"]


def test_json_text_is_the_stored_value_whichever_way_it_is_checked() -> None:
    """json_text only walks values that need it: the result is always that of the walk."""
    for first in FRAGMENTS:
        for second in FRAGMENTS:
            for third in FRAGMENTS:
                text = first + second + third
                value = {text: [text, 1.0]}
                assert json_text(value) == json.dumps(storable(value)), repr(text)
                stored = json.loads(json_text(value))
                assert "\x00" not in json.dumps(stored, ensure_ascii=False)
                json.dumps(stored, ensure_ascii=False).encode()  # valid UTF-8: no surrogates


def test_json_text_writes_what_json_dumps_writes() -> None:
    """The C encoder called directly (storage.values._strict_json) writes the same text as
    json.dumps, top-level scalars included; non-finite numbers are named; a circular value
    is refused as the encoder refused it."""
    for value in [
        ODD,
        {"b": 1, "a": [True, False, None, 2**70, -0.0, 1e300]},
        [],
        {},
        "plain",
        "é \x00 \ud800",
        3,
        2.5,
        None,
        (1, "tuple"),
    ]:
        assert json_text(value) == json.dumps(storable(value)), repr(value)
    assert json_text({"n": [float("nan"), float("inf"), float("-inf")]}) == (
        '{"n": ["NaN", "Infinity", "-Infinity"]}'
    )
    circular: list[Any] = []
    circular.append(circular)
    for _ in range(2):  # nothing is left over from the first
        with pytest.raises(ValueError, match="Circular reference"):
            _strict_json(circular)
    assert _strict_json([1, [2]]) == "[1, [2]]"


def read_raw_log(name: str) -> str:
    """Read a log file as it is, binary zeros included."""
    ops_tools.EXECUTED.append(("read_raw_log", {"name": name}))
    return "header\x00\x00payload \ud800"


def request(arguments: dict[str, Any], tool: str = "restart_service") -> Request:
    # json.dumps writes NaN and lone surrogates as the model's JSON would; the scripted model
    # reads them back as Python's json does (a float nan, a str with a surrogate).
    text = json.dumps({"tool_calls": [{"name": tool, "arguments": arguments}]})
    return Request(text=text, requester="U0REQUESTER", team_id="T1", channel="C0OPS")


async def test_odd_values_are_stored_and_returned_the_same_on_both_databases(
    repo: Repository,
) -> None:
    now = utcnow()
    message = {"role": "user", "parts": [{"type": "text", "text": "hi\x00"}], "odd": ODD}
    run = await repo.open_run(
        run_id="run_odd",
        conversation_key="odd",
        requester="U0REQ",
        model_id="scripted",
        new_messages=[message],
        worker="w",
        lease_until=now,
        now=now,
    )
    stored = await repo.get_run("run_odd")
    assert stored is not None
    assert stored.history[-1]["odd"] == STORED
    assert stored.history[-1]["parts"][0]["text"] == "hi\ufffd"
    assert run.history == stored.history, "what open_run returns is what it stored"

    await repo.finish_run(
        "run_odd", worker="w", status="failed", error="bad \x00 \ud800 end", now=now
    )
    finished = await repo.get_run("run_odd")
    assert finished is not None and finished.error == "bad \ufffd \ufffd end"
    events = await repo.audit_trail(run_id="run_odd")
    assert events[-1].detail == {"error": "bad \ufffd \ufffd end"}


async def test_a_tool_output_with_nul_is_recorded_and_the_run_completes(
    database: Database,
) -> None:
    config = make_config(
        tools=["tests.storage.test_values:read_raw_log"],
        policies={"read_raw_log": {"approvers": ["U0APPROVER1"]}},
    )
    runner = Runner(await database.open(), config, worker_id="w")
    paused = await runner.start(request({"name": "boot.log"}, tool="read_raw_log"))
    [approval] = paused.new_approvals
    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True, reason="ok\x00")
    assert decision.resume_claimed
    resumed = await runner.resume(paused.run_id)

    assert resumed.status == "completed"
    run = await runner.repo.get_run(paused.run_id)
    assert run is not None and run.status == "completed"
    assert run.answer == "Results: read_raw_log=header\ufffd\ufffdpayload \ufffd"
    recorded = await runner.repo.get_approval(approval.id)
    assert recorded is not None and recorded.status == "executed"
    assert recorded.result == "header\ufffd\ufffdpayload \ufffd"
    assert recorded.reason == "ok\ufffd"


@pytest.mark.parametrize(
    ("argument", "stored"),
    [(math.nan, "NaN"), (math.inf, "Infinity"), ("db\ud800", "db\ufffd"), ("a\x00", "a\ufffd")],
    ids=["nan", "infinity", "lone-surrogate", "nul"],
)
async def test_an_odd_argument_is_approved_and_run_as_stored(
    database: Database, argument: Any, stored: str
) -> None:
    """The card, the approval and the call that runs all carry the stored form."""
    # apply_settings takes any JSON value: the stored form fits its schema whatever it is.
    config = make_config(
        tools=["tests.support.ops_tools:apply_settings"],
        policies={"apply_settings": {"approvers": ["U0APPROVER1"]}},
    )
    runner = Runner(await database.open(), config, worker_id="w")
    paused = await runner.start(request({"settings": argument}, tool="apply_settings"))
    assert paused.status == "paused", paused.error
    [approval] = paused.new_approvals
    assert approval.arguments == {"settings": stored}
    reread = await runner.repo.get_approval(approval.id)
    assert reread is not None and reread.arguments == {"settings": stored}

    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    resumed = await runner.resume(paused.run_id)
    assert resumed.status == "completed", resumed.error
    ran = list(ops_tools.EXECUTED)
    assert ran == [("apply_settings", {"settings": stored})]
    executed = await runner.repo.get_approval(approval.id)
    assert executed is not None and executed.status == "executed"


async def test_odd_values_through_slack_card_decision_and_answer(repo: Repository) -> None:
    """Mention, card, approve, answer: the same outcome on both databases."""
    from tests.support.slack_harness import has_buttons, running_bot

    arguments = {"service": "db\ud800\x00", "replicas": math.nan}
    text = "<@U0BOT> " + json.dumps({"tool_calls": [{"name": "scale", "arguments": arguments}]})
    config = make_config(
        tools=["tests.storage.test_values:scale"],
        policies={"scale": {"approvers": ["U0APPROVER1"]}},
    )
    async with running_bot(config, repo) as slack:
        reply = await slack.server.mention("U0REQUESTER", "C0OPS", text)
        await slack.settle()
        [card] = slack.cards()
        assert "db\ufffd\ufffd" in json.dumps(card.blocks, ensure_ascii=False)
        [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
        assert approval.arguments == {"service": "db\ufffd\ufffd", "replicas": "NaN"}
        await slack.server.click("U0APPROVER1", card, "approval_approve")
        await slack.settle()
        assert not has_buttons(slack.card_for(approval.id))
        thread = slack.thread_of(reply)
    ran = list(ops_tools.EXECUTED)
    assert ran == [("scale", {"service": "db\ufffd\ufffd", "replicas": "NaN"})]
    assert any("scale=scaled db\ufffd\ufffd to NaN" in m.text for m in thread)


def scale(service: str, replicas: Any) -> str:
    """Scale a service. ``replicas`` is untyped: NaN is stored (and runs) as "NaN", which a
    number's schema would refuse before approval."""
    ops_tools.EXECUTED.append(("scale", {"service": service, "replicas": replicas}))
    return f"scaled {service} to {replicas}"
