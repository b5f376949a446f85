"""The playground's agent pane in Chromium (issue 21 §2): the app's Messages tab opened gets
the bot's suggested prompts; one clicked is answered; a request typed there runs the agent,
the pane says whom it waits for (and the status line), the approver approves from their own
DM copy, and the pane gets the answer with the status cleared. Screenshots go to
``test-artifacts/playground/`` as in ``test_playground_browser.py``, whose helpers and
Chromium set-up this module shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.test_playground_browser import (
    ANA,
    BO,
    _become,
    _screenshot,
    chromium_playground,
)

try:
    from playwright.async_api import async_playwright, expect
except ImportError:  # reported by _browser_unavailable
    async_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.xdist_group("browser")


@pytest.mark.browser
async def test_the_agent_pane_in_the_messages_tab(tmp_path: Path) -> None:
    shots: list[Path] = []
    async with chromium_playground(tmp_path, width=1400) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")
        await page.get_by_test_id("open-home").click()
        home = page.get_by_test_id("home")
        await home.get_by_test_id("home-tab-messages").click()

        # Opening the tab is Slack's app_home_opened (tab "messages"): the bot's prompts.
        prompts = home.get_by_test_id("pane-prompts")
        await expect(prompts.get_by_test_id("pane-prompt")).to_have_count(3)
        await expect(prompts).to_contain_text("What is waiting for me?")
        # A prompt clicked is a message in the pane, answered from the database.
        await prompts.get_by_role("button", name="My open requests").click()
        dms = home.get_by_test_id("dms")
        await expect(dms).to_contain_text("My open requests")
        await expect(dms).to_contain_text("None of your requests")

        # A request typed in the pane runs the agent; its card waits for the approvers.
        await home.get_by_test_id("pane-input").fill("restart payments")
        await home.get_by_test_id("pane-send").click()
        await expect(dms).to_contain_text("restart_service")
        await expect(dms).to_contain_text("waiting for")
        await expect(dms).to_contain_text("See the card")
        status = home.get_by_test_id("pane-status")
        await expect(status).to_contain_text("approval-bot is waiting for approval from")
        await _screenshot(page, "p1-agent-pane-waiting.png", shots, home)

        # bo approves from his own Messages tab (his DM copy of the card).
        await _become(page, BO)
        await home.get_by_test_id("home-tab-messages").click()
        approve = dms.locator('[data-action-id="approval_approve"]')
        await expect(approve).to_have_count(1)
        await approve.click()
        confirm = page.get_by_test_id("confirm")
        await confirm.get_by_role("button", name="Approve").click()
        await expect(confirm).to_be_hidden()

        # ana's pane: the answer, and no status any more.
        await _become(page, ANA)
        await home.get_by_test_id("home-tab-messages").click()
        await expect(dms).to_contain_text("Approved")
        await expect(status).to_be_hidden()
        await _screenshot(page, "p2-agent-pane-answered.png", shots, home)
        assert page_errors == []
    assert shots
