"""A streamed answer with a task per tool call, in the playground page (issue 21 §1).

In Chromium, like the other playground browser tests: ana asks for a status (the answer
streams into the thread with a ✓ task for ``get_status``), then for a restart (the stream
stops with the call's task pending and the card follows; bo approves; the answer streams in
a new message whose task completes). Screenshots go to ``test-artifacts/playground/``.
Skipped without Playwright and Debian's Chromium, failed when ``CI`` is set.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.test_playground_browser import (
    ANA,
    BO,
    _become,
    _card,
    _conversation,
    _say,
    chromium_playground,
)

try:
    from playwright.async_api import async_playwright, expect
except ImportError:  # reported by the test itself
    async_playwright = None  # type: ignore[assignment]

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts" / "playground"
pytestmark = pytest.mark.xdist_group("browser")


@pytest.mark.browser
async def test_a_streamed_answer_with_its_tasks_in_the_browser(tmp_path: Path) -> None:
    async with chromium_playground(tmp_path) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")
        await expect(page.get_by_test_id("identity")).to_have_value(ANA)

        # A status: the answer streams, its call a task that completes.
        await _say(page, "@approval-bot status of payments")
        status = _conversation(page, "@approval-bot status of payments")
        stream = status.get_by_test_id("stream")
        await expect(stream).to_have_count(1)
        await expect(stream).to_have_attribute("data-stream", "stopped")
        task = stream.get_by_test_id("stream-task")
        await expect(task).to_have_count(1)
        await expect(task).to_have_attribute("data-status", "complete")
        await expect(task).to_contain_text('get_status(service="payments")')
        await expect(stream.get_by_test_id("stream-text")).to_contain_text("Here is what happened:")
        await expect(stream.get_by_test_id("stream-cursor")).to_have_count(0)
        await page.screenshot(path=str(ARTIFACTS / "s1-streamed-status.png"))

        # A restart: the stream stops with the call pending, the card follows it.
        await _say(page, "@approval-bot restart payments")
        restart = _conversation(page, "@approval-bot restart payments")
        card = _card(restart)
        await expect(card).to_be_visible()
        first = restart.get_by_test_id("stream").first
        await expect(first.get_by_test_id("stream-task")).to_have_attribute(
            "data-status", "pending"
        )
        await expect(first).to_contain_text("waiting for a person")
        await page.screenshot(path=str(ARTIFACTS / "s2-stream-paused.png"))

        # bo approves; the answer streams anew and its task completes.
        await _become(page, BO)
        await card.locator('[data-action-id="approval_approve"]').click()
        await page.get_by_test_id("confirm").get_by_role("button", name="Approve").click()
        await expect(card).to_contain_text("Approved by @bo")
        streams = restart.get_by_test_id("stream")
        await expect(streams).to_have_count(2)
        second = streams.nth(1)
        await expect(second.get_by_test_id("stream-task")).to_have_attribute(
            "data-status", "complete"
        )
        await expect(second.get_by_test_id("stream-text")).to_contain_text(
            re.compile(r"restart_service.*restarted payments", re.S)
        )
        await page.screenshot(path=str(ARTIFACTS / "s3-stream-resumed.png"))
    assert page_errors == []
