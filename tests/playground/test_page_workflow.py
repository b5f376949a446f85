"""The playground's Workflow panel by its routes (the browser journey is in
tests/browser/test_playground_workflow_browser.py): the step is defined from manifest.yml,
what the workflow's form would not take is answered 400 with nothing sent to the bot, a
timeout only the bot judges fails the step as Slack records it (``functions.completeError``),
and a run decided on its card completes with the decision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from playground.app import running_playground
from playground.page_workflow import MANIFEST, manifest_functions

ANA, BO, CY = "U0REQUESTER", "U0APPROVER1", "U0APPROVER2"
RUN = "/playground/workflow/run"


async def _state(http: aiohttp.ClientSession, user: str) -> dict[str, Any]:
    async with http.get("/playground/state", params={"user": user}) as response:
        assert response.status == 200
        return await response.json()


async def _run(http: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with http.post(RUN, json=body) as response:
        return response.status, await response.json()


def test_the_step_is_defined_from_the_manifest(tmp_path: Path) -> None:
    functions, why = manifest_functions()
    assert why is None
    assert functions["request_approval"]["title"] == "Request approval"
    assert MANIFEST.name == "manifest.yml"
    none, why = manifest_functions(tmp_path / "manifest.yml")
    assert none == {} and why is not None and "manifest.yml is not here" in why


BAD_INPUT = [
    ({"details": "d", "approvers": [BO]}, "Title is required"),
    ({"title": "   ", "details": "d", "approvers": [BO]}, "Title is required"),
    ({"title": "t", "details": "d"}, "Approvers is required"),
    ({"title": "t", "details": "d", "approvers": ["U0NOBODY"]}, "unknown approver 'U0NOBODY'"),
    ({"title": "t", "details": "d", "approvers": [BO, ANA]}, "cannot approve it too"),
    ({"title": "t", "details": "d", "approvers": [BO], "channel": "C0ELSE"}, "#ops (C0OPS)"),
    ({"title": ["t"], "details": "d", "approvers": [BO]}, "title must be text"),
    ({"user": "U0NOBODY", "title": "t", "approvers": [BO]}, "unknown user"),
]


async def test_bad_input_is_answered_clearly_and_nothing_runs(tmp_path: Path) -> None:
    async with (
        running_playground(data_dir=tmp_path / "playground") as pg,
        aiohttp.ClientSession(pg.url) as http,
    ):
        for body, error in BAD_INPUT:
            status, answer = await _run(http, {"user": ANA, **body})
            assert (status, answer["ok"]) == (400, False), body
            assert error in answer["error"], (body, answer)
        async with http.post(RUN, data=b"not json") as response:
            assert response.status == 400
        await pg.settle()
        assert pg.server.function_executions == {}
        assert pg.server.calls == []  # the bot was told nothing, so it called nothing
        assert pg.server.messages == []
        assert (await _state(http, ANA))["workflow"]["runs"] == []


async def test_a_run_completes_with_its_decision_or_fails_as_slack_records_it(
    tmp_path: Path,
) -> None:
    async with (
        running_playground(data_dir=tmp_path / "playground") as pg,
        aiohttp.ClientSession(pg.url) as http,
    ):
        workflow = (await _state(http, ANA))["workflow"]
        assert workflow["available"] is True and workflow["title"] == "Request approval"

        # A timeout that is not a duration: only the bot judges it; the step fails.
        status, answer = await _run(
            http,
            {"user": ANA, "title": "Open the vault", "details": "d", "approvers": [BO],
             "timeout": "soonish"},
        )  # fmt: skip
        assert (status, answer["status"]) == (200, "started")
        await pg.settle()
        [failed] = (await _state(http, ANA))["workflow"]["runs"]
        assert failed["state"] == "failed" and failed["method"] == "functions.completeError"
        assert failed["completion"].startswith("failed: Request approval: timeout")
        assert pg.server.messages == []  # no card

        # A good run: the card in #ops names ana as the requester; bo approves it.
        status, answer = await _run(
            http,
            {"user": ANA, "title": "Ship <the> release", "details": "v2 & notes",
             "approvers": [BO, CY], "timeout": "2h"},
        )  # fmt: skip
        assert status == 200
        execution = pg.server.function_executions[answer["execution_id"]]
        assert execution.inputs["requester"] == ANA
        assert execution.inputs["channel"] == "C0OPS"
        await pg.settle()
        [running, _] = (await _state(http, ANA))["workflow"]["runs"]
        assert running["state"] == "running"
        assert running["approvers"] == ["@bo", "@cy"] and running["requester"] == "@ana"
        [card] = [m for m in pg.server.messages if m.channel == "C0OPS" and "Ship" in m.text]
        reply = await pg.server.click_as_seen(BO, card, "approval_approve")
        assert reply.status == 200
        await pg.settle()
        [done, _] = (await _state(http, ANA))["workflow"]["runs"]
        assert done["state"] == "completed" and done["method"] == "functions.completeSuccess"
        assert done["completion"] == "completed: decision approved, decided_by @bo, reason (none)"
        assert done["title"] == "Ship <the> release"  # as typed: the page escapes it
