"""JSON logs: every line a process writes is a JSON object, and no secret is ever in one.

The end-to-end test runs ``approval-bot serve`` as users do (``-v``, so debug lines and
access logs are in too), drives a whole approval through it (mention, card, click, resumed
run, answer) and greps everything the process wrote for every secret it was given.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.ops.logs import REDACTED, Redactor
from tests.support.serve_process import ROOT, SECRET, served_bot
from tests.support.served_flow import APPROVER, CHANNEL, approve_one, leave_pending

# Secrets of the environment the served bot gets, beside its signing secret and bot token.
EXTRA_SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai-key-0123456789",
    "SLACK_APP_TOKEN": "xapp-1-A0TEST-0123456789-abcdef",
    "SLACK_CLIENT_SECRET": "client-secret-0123456789",
}


def json_lines(output: bytes) -> list[dict[str, Any]]:
    """Every line parsed; fails naming the first line that is not a JSON object."""
    records = []
    for number, line in enumerate(output.decode().splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {number} is not JSON: {line!r}") from None
        assert isinstance(record, dict), f"line {number} is not a JSON object: {line!r}"
        records.append(record)
    return records


@pytest.mark.postgres
async def test_a_served_approval_logs_json_lines_with_ids_and_no_secret(
    database_url: str, tmp_path: Path
) -> None:
    async with served_bot(
        database_url,
        tmp_path,
        capture_output=True,
        cli_args=("-v",),
        env={"APPROVAL_BOT_LOG_FORMAT": "json", **EXTRA_SECRETS},
    ) as served:
        click = await approve_one(served, "svc-logged")
        # A refused click: the bot logs nothing secret about who may not decide, either.
        card = await leave_pending(served, "svc-waiting")
        refused = await served.slack.click("U0OUTSIDER", card, "approval_approve")
        assert refused.status == 200
        bot_token = served.slack.bot_token
    output = served.output
    assert served.process.returncode == 0, output.decode()[-3000:]

    # The click's response_url lets whoever holds it post to the channel as the app.
    secrets = [SECRET, bot_token, click.response_url, *EXTRA_SECRETS.values()]
    password = _password(database_url)
    if password:
        secrets.append(password)
    text = output.decode()
    for secret in secrets:
        assert secret not in text, f"a secret ({secret[:6]}…) is in the logs"

    records = json_lines(output)
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys(), record
    loggers = {r["logger"] for r in records}
    assert "aiohttp.access" in loggers  # access logs are JSON too (with -v)
    assert any("listening on" in r["message"] for r in records)  # and the banner
    # Bolt's warning that SLACK_BOT_TOKEN goes unused (we pass our own client) said nothing
    # to act on, at every start.
    assert not [r for r in records if "will be unused" in r["message"]]
    approved = [r for r in records if r.get("approval_id") and r.get("run_id")]
    assert approved, "no line carries a run id and an approval id"
    assert any(r.get("channel") == CHANNEL and r.get("workspace") for r in records)
    click_lines = [r for r in records if r.get("approval_id") and r.get("workspace")]
    assert click_lines, "the click's log lines carry neither approval nor workspace"
    assert APPROVER  # the approver's id may appear: ids are not secrets


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    return urlsplit(url).password


# -- everything the process writes -----------------------------------------------------------

NOISY_PROGRAM = r"""
import asyncio, logging, sys, threading, warnings
from bot.ops.logs import bind, register_secret
from bot.ops.log_output import process_logging

with process_logging("json", verbose=False) as output:
    output.wrap_stdout()
    register_secret("cb-token-0123456789")
    bind(run_id="R1", approval_id="A1", workspace="T1", channel="C1")
    logging.getLogger("bot.test").info("a callback with cb-token-0123456789 arrived")
    print("a banner on stdout")
    print("an error on stderr", file=sys.stderr)
    warnings.warn("a library's warning")
    thread = threading.Thread(target=lambda: 1 / 0, name="worker")
    thread.start()
    thread.join()

    async def main():
        async def fail():
            raise RuntimeError("a task nobody awaited")
        task = asyncio.get_running_loop().create_task(fail())
        await asyncio.sleep(0.05)
        del task

    asyncio.run(main())
    import gc; gc.collect()
    raise ValueError("uncaught, with xoxb-1234-5678-abcdefgh inside")
"""


async def test_every_line_a_json_process_writes_is_a_json_object(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        NOISY_PROGRAM,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 1
    stdout, stderr = json_lines(out), json_lines(err)
    assert [r["message"] for r in stdout] == ["a banner on stdout"]
    messages = [r["message"] for r in stderr]
    assert "an error on stderr" in messages
    assert any("a library's warning" in m for m in messages), messages
    assert any("uncaught exception in thread worker" in m for m in messages), messages
    assert any("a task nobody awaited" in json.dumps(r) for r in stderr), messages
    last = stderr[-1]
    assert last["message"] == "uncaught exception" and "ValueError" in last["exc_info"]
    callback = next(r for r in stderr if r["logger"] == "bot.test")
    assert callback["message"] == "a callback with [redacted] arrived"
    assert (callback["run_id"], callback["approval_id"]) == ("R1", "A1")
    assert (callback["workspace"], callback["channel"]) == ("T1", "C1")
    everything = (out + err).decode()
    assert "cb-token-0123456789" not in everything
    assert "xoxb-1234-5678-abcdefgh" not in everything


async def test_log_format_flag_and_environment(tmp_path: Path) -> None:
    async def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, bytes]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            *args,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await process.communicate()
        return process.returncode or 0, err

    code, err = await run("--log-format", "json", "approvals", "list", "--limit", "0")
    assert code == 2
    [record] = json_lines(err)
    assert record["level"] == "ERROR" and "--limit" in record["message"]

    code, err = await run(
        "--config", "missing.toml", "runs", "show", "R1", env={"APPROVAL_BOT_LOG_FORMAT": "json"}
    )
    assert code == 2 and "no such configuration file" in json_lines(err)[0]["message"]

    code, err = await run("approvals", "list", env={"APPROVAL_BOT_LOG_FORMAT": "xml"})
    assert code == 2
    assert err.decode().strip() == (
        "approval-bot: APPROVAL_BOT_LOG_FORMAT: 'xml' is not a log format (choose from text, json)"
    )

    code, err = await run("--log-format", "xml", "approvals", "list")
    assert code == 2 and b"invalid choice: 'xml'" in err


def test_redactor_replaces_registered_values_and_slack_token_shapes() -> None:
    redactor = Redactor()
    redactor.add_environment(
        {
            "SLACK_SIGNING_SECRET": "s3cr3t-signing",
            "MY_SERVICE_PASSWORD": "hunter2-hunter2",
            "DATABASE_URL": "postgresql://bot:p%40ss-word@db/bot",
            "HOME": "/root",
            "SHORT_TOKEN": "abc",  # too short to redact without blanking out words
        }
    )
    text = (
        'signed with s3cr3t-signing, "hunter2-hunter2", p@ss-word, xoxb-1-2-abcdef, '
        "xapp-1-A1-abc, xoxe.xoxp-1-abcdef, in /root, abc"
    )
    assert redactor.redact(text) == (
        'signed with [redacted], "[redacted]", [redacted], [redacted], [redacted], '
        "[redacted], in /root, abc"
    )


def test_callback_urls_are_redacted_wherever_they_are_logged() -> None:
    """Nothing registered callback tokens, though the module said so: a tool (or an HTTP
    client's log at -v) writing the URL it hands to a pipeline put a live token in the log."""
    from bot.ops.logs import redact
    from bot.pauses import TOKEN_BYTES

    token = secrets.token_urlsafe(TOKEN_BYTES)
    for line in (
        f"started deploy, notify=http://bot.example.com/callbacks/{token}",
        f"HTTP Request: POST https://ci/hook?notify=https%3A%2F%2Fbot%2Fcallbacks%2F{token} 200",
        f'{{"notify": "https:\\/\\/bot.example.com\\/callbacks\\/{token}"}}',
    ):
        redacted = redact(line)
        assert token not in redacted, redacted
        assert "callbacks" in redacted and REDACTED in redacted, redacted
