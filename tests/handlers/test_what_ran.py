"""Every human-readable view of a decided call says what ran and who allowed it.

One edited approval ("replicas 40 → 4", edited by Bo) and one call a standing grant covered
(granted by Cy) are driven to completion through the real bolt app and our Slack-compatible
server; then every view a person reads is rendered and scanned: the thread, the decided card,
``/approvals history``, the App Home's recent decisions, the real command line
(``approvals show``, ``runs show``, ``approvals list``) and both audit exports (CSV, JSON lines).
Each must show the arguments that ran with the editor's name, and "standing grant" with the
granter's name, never a bare "approved by" as if someone had clicked for the granted call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from handlers.blocks import edits as edit_blocks
from handlers.slack import home
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.serve_process import ROOT
from tests.support.slack_harness import CHANNEL, Harness, running_bot

PEOPLE = {"U0APPROVER1": "bo", "U0APPROVER2": "cy", "U0REQUESTER": "ana"}
FULL_NAMES = {"U0APPROVER1": "Bo Lee", "U0APPROVER2": "Cy Park", "U0REQUESTER": "Ana Diaz"}
EDIT = "replicas 40 → 4"
# As Slack shows them (mentions), and as the command line and the exports do (names).
EDITED_IN_SLACK = f"{EDIT}, edited by <@U0APPROVER1>"
GRANT_IN_SLACK = "ran under <@U0APPROVER2>'s standing grant"
EDITED_IN_TEXT = f"{EDIT}, edited by Bo Lee (@bo)"
GRANT_IN_TEXT = "ran under Cy Park (@cy)'s standing grant"

CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:restart_service", "tests.support.ops_tools:scale_service"]

[policies.restart_service]
approvers = ["U0APPROVER1", "U0APPROVER2"]
grant_max = "1h"

[policies.scale_service]
approvers = ["U0APPROVER1"]
allow_edit = true
"""


@pytest.fixture
def backend() -> str:
    """SQLite: the command line is run as a separate process on the bot's own file."""
    return "sqlite"


def bot_config() -> Any:
    return make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.ops_tools:scale_service"],
        policies={
            **BASE_CONFIG["policies"],
            "restart_service": {**BASE_CONFIG["policies"]["restart_service"], "grant_max": "1h"},
            "scale_service": {"approvers": ["U0APPROVER1"], "allow_edit": True},
        },
    )


@pytest.fixture
async def slack(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    monkeypatch.setattr(home, "DEBOUNCE", 0.01)
    monkeypatch.setattr(home, "PUBLISH_INTERVAL", 0.0)
    async with running_bot(bot_config(), repo, users=PEOPLE, real_names=FULL_NAMES) as harness:
        yield harness


def cli(tmp_path: Path, *argv: str) -> str:
    """The real ``approval-bot`` entry, as a process, on the bot's database file."""
    config = tmp_path / "cli.toml"
    config.write_text(CONFIG)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}"}
    env.pop("SLACK_BOT_TOKEN", None)
    env.pop("SLACK_CLIENT_ID", None)
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--config", str(config), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_every_view_shows_what_ran_and_who_allowed_it(
    slack: Harness, repo: Repository, tmp_path: Path
) -> None:
    # An edited approval: the model asks for 40 replicas, Bo edits it to 4 and approves.
    await slack.mention(
        "U0REQUESTER", calls(("scale_service", {"service": "web", "replicas": 40, "env": "prod"}))
    )
    [card] = slack.cards()
    assert await slack.server.click("U0APPROVER1", card, edit_blocks.EDIT)
    await slack.settle()
    [view] = [v for v in slack.server.views.values() if v.user == "U0APPROVER1" and not v.closed]
    form = {
        edit_blocks.FIELD_PREFIX + name: {edit_blocks.VALUE: {"value": value}}
        for name, value in {"service": "web", "replicas": "4", "env": "prod"}.items()
    }
    assert (await slack.server.submit_view("U0APPROVER1", view.id, form)).status == 200
    await slack.settle()
    assert executed("scale_service") == [
        {"service": "web", "replicas": 4, "env": "prod", "labels": None}
    ]

    # A grant: Cy approves a restart and allows it in the thread for an hour; the next
    # restart in that thread runs without a card, under Cy's grant.
    granted = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    thread = granted.message.ts  # type: ignore[union-attr]
    restart_card = slack.cards()[-1]
    picked = await slack.server.select("U0APPROVER2", restart_card, "approval_grant", "for 1 hour")
    assert picked.status == 200
    await slack.settle()
    await slack.mention(
        "U0REQUESTER", calls(("restart_service", {"service": "api"})), thread_ts=thread
    )
    assert executed("restart_service") == [{"service": "web"}, {"service": "api"}]
    assert len(slack.cards()) == 2, "the granted call posted no card"

    decided = await repo.channel_decisions(team_id=slack.server.team_id, channel=CHANNEL, limit=10)
    [edited] = [a for a in decided if a.tool_name == "scale_service"]
    [covered] = [a for a in decided if a.grant_id is not None]
    assert edited.status == covered.status == "executed"

    # The thread: the granted call says it ran under Cy's grant, not "approved by".
    thread_texts = "\n".join(m.text for m in slack.server.thread(CHANNEL, thread))
    assert GRANT_IN_SLACK in thread_texts and "(until <!date^" in thread_texts

    # The decided card: its first block says its state; the edit and its editor are on it.
    decided_card = slack.server.message(CHANNEL, card.ts)
    assert decided_card is not None
    assert decided_card.blocks[0]["text"]["text"] == "*Approved:* `scale_service`"
    assert EDIT in json.dumps(decided_card.blocks, ensure_ascii=False)
    assert "<@U0APPROVER1>" in json.dumps(decided_card.blocks[-3:], ensure_ascii=False)

    # /approvals history.
    history = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="history")
    shown = json.dumps(json.loads(history.body)["blocks"], ensure_ascii=False)
    assert EDITED_IN_SLACK in shown and GRANT_IN_SLACK in shown

    # The App Home's recent decisions.
    await slack.server.open_home("U0APPROVER1")
    await slack.settle()
    home_view = slack.server.home_of("U0APPROVER1")
    assert home_view is not None
    shown = json.dumps(home_view["blocks"], ensure_ascii=False)
    assert EDITED_IN_SLACK in shown and GRANT_IN_SLACK in shown

    # The command line, by name (it never asks Slack: the bot stored the names).
    shown = cli(tmp_path, "approvals", "show", edited.id)
    assert EDITED_IN_TEXT in shown and 'ran with: service="web", replicas=4' in shown
    assert "asked by Ana Diaz (@ana)" in shown and "result: scaled web in prod to 4" in shown
    shown = cli(tmp_path, "approvals", "show", covered.id)
    assert GRANT_IN_TEXT in shown and "approved by" not in shown
    shown = cli(tmp_path, "runs", "show", edited.run_id)
    assert EDITED_IN_TEXT in shown and "result: scaled web in prod to 4" in shown
    shown = cli(tmp_path, "runs", "show", covered.run_id)
    assert GRANT_IN_TEXT in shown and "asked by Ana Diaz (@ana)" in shown
    assert "by Cy Park (@cy)  until " in cli(tmp_path, "grants", "list")

    # A call still waiting, in the list: people by name there too.
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    shown = cli(tmp_path, "approvals", "list")
    assert 'restart_service(service="db")  asked by Ana Diaz (@ana)' in shown
    assert "approvers: Bo Lee (@bo), Cy Park (@cy)" in shown
    listed = json.loads(cli(tmp_path, "runs", "show", covered.run_id, "--json"))
    [as_json] = [a for a in listed["approvals"] if a["id"] == covered.id]
    assert as_json["grant_id"] and as_json["grant_until"].endswith("+00:00")
    assert as_json["decided_by_name"] == "Cy Park (@cy)"

    # The audit exports, CSV and JSON lines: what ran, who allowed it, times with offsets.
    shown = cli(tmp_path, "audit", "export", "--since", "2000-01-01", "--format", "csv")
    assert EDITED_IN_TEXT in shown and GRANT_IN_TEXT in shown
    shown = cli(tmp_path, "audit", "export", "--since", "2000-01-01", "--format", "jsonl")
    rows = [json.loads(line) for line in shown.splitlines()]
    summaries = "\n".join(row["summary"] for row in rows)
    assert EDITED_IN_TEXT in summaries and GRANT_IN_TEXT in summaries
    assert all(row["at"].endswith("+00:00") for row in rows)
    assert {r["actor_name"] for r in rows if r["actor"] == "U0REQUESTER"} == {"Ana Diaz (@ana)"}
    [used] = [row for row in rows if row["event"] == "grant_used"]
    assert used["actor_name"] == "Cy Park (@cy)" and used["detail"]["until"].endswith("+00:00")
