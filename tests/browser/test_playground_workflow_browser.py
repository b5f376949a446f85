"""The playground's Workflow panel in Chromium (issue 21 §3): ana runs a workflow whose step
is "Request approval" from the panel (the stand-in sends the bot a signed
``function_executed``), the card appears in #ops, bo approves it there, and the panel shows
the step's completion as the stand-in recorded ``functions.completeSuccess``: decision
approved, decided_by @bo. A run whose timeout the bot refuses shows its
``functions.completeError``. Screenshots go to ``test-artifacts/playground/`` as in
``test_playground_browser.py``, whose helpers and Chromium set-up this module shares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.test_playground_browser import (
    ANA,
    BO,
    _approve_on,
    _become,
    _screenshot,
    chromium_playground,
)

try:
    from playwright.async_api import async_playwright, expect
except ImportError:  # reported by _browser_unavailable
    async_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.xdist_group("browser")

TITLE = "Ship <b>release</b> 2.4"


@pytest.mark.browser
async def test_the_request_approval_step_from_the_workflow_panel(tmp_path: Path) -> None:
    shots: list[Path] = []
    async with chromium_playground(tmp_path, width=1400) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")
        await page.get_by_test_id("open-workflow").click()
        await expect(page).to_have_url(re.compile(r"[?&]tab=workflow\b"))
        panel = page.get_by_test_id("workflow")
        await expect(panel).to_be_visible()
        await expect(page.get_by_test_id("composer")).to_be_hidden()
        # ana runs it, so she is not offered as an approver.
        approvers = panel.get_by_test_id("workflow-approver")
        await expect(approvers).to_have_count(3)
        await expect(panel.get_by_role("checkbox", name="ana")).to_have_count(0)

        # The bot refuses a timeout that is not a duration: the step fails at once.
        await panel.get_by_test_id("workflow-title").fill("Open the vault")
        await panel.get_by_test_id("workflow-details").fill("For the audit")
        await panel.get_by_role("checkbox", name="bo").check()
        await panel.get_by_test_id("workflow-timeout").fill("soonish")
        await panel.get_by_test_id("workflow-submit").click()
        runs = panel.get_by_test_id("workflow-run")
        await expect(runs).to_have_count(1)
        await expect(runs.first).to_contain_text("functions.completeError")
        await expect(runs.first).to_contain_text("failed: Request approval: timeout")

        # The step as a workflow would run it: title, details, approvers, channel, timeout.
        await panel.get_by_test_id("workflow-title").fill(TITLE)
        await panel.get_by_test_id("workflow-details").fill("Notes & <i>changelog</i>")
        await panel.get_by_role("checkbox", name="bo").check()
        await panel.get_by_role("checkbox", name="cy").check()
        await expect(panel.get_by_test_id("workflow-channel")).to_have_value("C0OPS")
        await panel.get_by_test_id("workflow-timeout").fill("2h")
        await panel.get_by_test_id("workflow-submit").click()
        await expect(runs).to_have_count(2)
        run = runs.first
        await expect(run).to_contain_text(TITLE)  # as typed: text, never markup
        await expect(run).to_contain_text("asked by @ana")
        await expect(run).to_contain_text("approvers @bo, @cy")
        await expect(run).to_contain_text("running: waiting for a decision")
        await expect(panel.get_by_test_id("workflow-title")).to_have_value("")
        await expect(run).to_contain_text("Notes & <i>changelog</i>")
        assert await panel.locator("b", has_text=re.compile(r"^release$")).count() == 0
        assert await panel.locator("i").count() == 0
        await _screenshot(page, "w1-workflow-running.png", shots, panel)

        # The card is in #ops as any approval's; bo approves it there.
        await page.get_by_test_id("open-channel").click()
        card = (
            page.get_by_test_id("messages")
            .get_by_test_id("message")
            .filter(has_text=re.compile(r"Approval apr_\w+ · run run_"))
            .filter(has_text="Ship")
        )
        await expect(card).to_have_count(1)
        await expect(card).to_contain_text(TITLE)
        await _become(page, BO)
        await _approve_on(page, card)
        await expect(card).to_contain_text("Approved")

        # The panel shows the step's completion as Slack records it.
        await page.get_by_test_id("open-workflow").click()
        await _become(page, ANA)
        completion = run.get_by_test_id("workflow-completion")
        await expect(completion).to_contain_text("functions.completeSuccess")
        await expect(completion).to_contain_text(
            "completed: decision approved, decided_by @bo, reason (none)"
        )
        await _screenshot(page, "w2-workflow-completed.png", shots, panel)
        # A reload keeps the panel (?tab=workflow), and its runs.
        await page.reload()
        await expect(panel).to_be_visible()
        await expect(completion).to_contain_text("decision approved")
        assert page_errors == []
    assert shots
