"""The playground's first-hour surfaces in Chromium: the App Home tab (the Home the bot
publishes, a decision made from it, and the Messages tab with the bot's DM copies), the
"switch to …" bar in a quorum and when an approver asked, the grant menus at phone width,
"Reset demo…" in sight at 1400×900, the empty page's examples, and `/approvals history` and
`/approvals grants` with a Revoke. Screenshots go to ``test-artifacts/playground/`` as in
``test_playground_browser.py``, whose helpers and Chromium set-up this module shares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.test_playground_browser import (
    ANA,
    BO,
    CY,
    _approve_on,
    _become,
    _card,
    _conversation,
    _say,
    _screenshot,
    chromium_playground,
)

try:
    from playwright.async_api import Page, async_playwright, expect
except ImportError:  # reported by _browser_unavailable
    async_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.xdist_group("browser")


async def _no_sideways_scroll(page: Page) -> None:
    """Neither the page nor the message list scrolls sideways, and every menu and button on
    screen ends inside the window."""
    widths = await page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " document.querySelector('.messages').scrollWidth,"
        " document.querySelector('.messages').clientWidth]"
    )
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths
    overflowing = await page.evaluate(
        "[...document.querySelectorAll('.messages select, .messages button')]"
        ".filter((e) => e.offsetParent !== null)"
        ".map((e) => [e.textContent.slice(0, 40), e.getBoundingClientRect().right])"
        ".filter(([, right]) => right > document.documentElement.clientWidth + 0.5)"
    )
    assert overflowing == []


@pytest.mark.browser
async def test_app_home_switch_bar_in_a_quorum_and_phone_width_grant_menus(
    tmp_path: Path,
) -> None:
    shots: list[Path] = []
    async with chromium_playground(tmp_path, width=1400) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")
        # "Reset demo…" is in sight on a laptop's screen, without scrolling the sidebar.
        await expect(page.get_by_test_id("reset-demo")).to_be_in_viewport()

        # The empty page at phone width points at the examples, which fill the composer.
        await page.set_viewport_size({"width": 420, "height": 860})
        empty = page.get_by_test_id("empty")
        await expect(empty).to_contain_text("example")
        example = page.get_by_test_id("empty-example").filter(has_text="rotate credentials")
        await expect(example).to_be_in_viewport()
        await _screenshot(page, "h1-empty-phone.png", shots)
        await example.click()
        composer = page.get_by_test_id("composer")
        await expect(composer).to_have_value("@approval-bot rotate credentials of payments")
        await composer.press("Enter")
        await page.set_viewport_size({"width": 1400, "height": 900})

        # A quorum: ana may not approve; the bar names an approver who can.
        rotation = _conversation(page, "@approval-bot rotate credentials of payments")
        card = _card(rotation)
        await expect(card).to_contain_text("0 of 2 approvals")
        tip = page.get_by_test_id("switch-tip")
        await expect(tip).to_contain_text("you asked for it")
        await expect(tip).to_contain_text("switch to bo")
        await tip.get_by_role("button", name="Switch to bo").click()
        await expect(page).to_have_url(re.compile(rf"[?&]as={BO}\b"))
        await expect(tip).to_be_hidden()
        # bo approves: one of two. bo cannot act again, so the bar names cy, not bo.
        await _approve_on(page, card)
        await expect(card).to_contain_text("1 of 2 approvals")
        await expect(tip).to_contain_text("you approved it already")
        await expect(tip).to_contain_text("switch to cy")
        await _screenshot(page, "h2-quorum-bar.png", shots, tip)
        await tip.get_by_role("button", name="Switch to cy").click()
        await expect(page).to_have_url(re.compile(rf"[?&]as={CY}\b"))
        await expect(tip).to_be_hidden()

        # An approver asks: the bar names the other approver, never the one who asked.
        await _say(page, "@approval-bot restart payments")
        payments = _conversation(page, "@approval-bot restart payments")
        await expect(_card(payments)).to_contain_text('"service": "payments"')
        await expect(tip).to_contain_text("switch to bo")

        # Phone width, as bo, with a restart's card and its two grant menus on screen.
        await _become(page, BO)
        await page.set_viewport_size({"width": 420, "height": 860})
        grant = _card(payments).locator('select[data-action-id="approval_grant"]')
        await expect(grant).to_have_count(1)
        await grant.scroll_into_view_if_needed()
        await expect(grant).to_be_in_viewport()
        await _no_sideways_scroll(page)
        await _screenshot(page, "h3-phone-grant-menus.png", shots)
        await page.set_viewport_size({"width": 1400, "height": 900})

        # The App Home: the Home the bot published for bo, with the same buttons.
        await page.get_by_test_id("open-home").click()
        await expect(page).to_have_url(re.compile(r"[?&]tab=home\b"))
        home = page.get_by_test_id("home")
        blocks = home.get_by_test_id("home-blocks")  # the Home pane, not Messages
        await expect(home).to_be_visible()
        await expect(page.get_by_test_id("messages")).to_be_hidden()
        await expect(blocks).to_contain_text("Waiting for you")
        item = blocks.locator('[data-block-type="section"]').filter(has_text="restart_service")
        await expect(item).to_contain_text("payments")
        await expect(blocks).to_contain_text("rotate_credentials")
        await _screenshot(page, "h4-app-home.png", shots, home)
        # The app's Messages tab: the DM copies of the cards bo may decide, read-only.
        await home.get_by_test_id("home-tab-messages").click()
        dms = home.get_by_test_id("dms")
        await expect(dms).to_contain_text("rotate_credentials")
        await expect(dms).to_contain_text("restart_service")
        await expect(page.get_by_test_id("composer")).to_be_hidden()
        await home.get_by_test_id("home-tab-home").click()
        await expect(home.get_by_test_id("home-blocks")).to_be_visible()
        approve = blocks.locator('[data-action-id="approval_approve"]')
        await expect(approve).to_have_count(2)
        # Approve restart_service from the Home (the item after rotate_credentials' or
        # before it: found by its section's neighbour buttons).
        restart_buttons = blocks.locator('[data-block-type="actions"]').filter(
            has=page.locator('[data-action-id="approval_approve"]')
        )
        for index in range(await restart_buttons.count()):
            block = restart_buttons.nth(index)
            value = await block.locator('[data-action-id="approval_approve"]').get_attribute(
                "data-value"
            )
            if value and value in await _card(payments).inner_html():
                await block.locator('[data-action-id="approval_approve"]').click()
                break
        else:
            raise AssertionError("no Approve on the Home for the payments restart")
        confirm = page.get_by_test_id("confirm")
        if await confirm.count():
            await confirm.get_by_role("button", name="Approve").click()
        await expect(approve).to_have_count(1)
        await expect(blocks).to_contain_text("Recent decisions")
        # Back in the channel, the card says who decided and the tool ran once.
        await page.get_by_test_id("open-channel").click()
        await expect(_card(payments)).to_contain_text("Approved by @bo")
        answer = payments.get_by_test_id("message").filter(has_text="restarted payments")
        await expect(answer).to_have_count(1)
        # A reload on the Home tab comes back to the Home; switching person shows theirs.
        await page.get_by_test_id("open-home").click()
        await page.reload()
        await expect(home).to_be_visible()
        await _become(page, ANA)
        await expect(blocks).to_contain_text("Your requests")
        await expect(blocks).to_contain_text("rotate_credentials")
        await expect(blocks.locator('[data-action-id="approval_approve"]')).to_have_count(0)

        # /approvals history and /approvals grants, with a grant revoked from the list.
        await page.get_by_test_id("open-channel").click()
        await _say(page, "@approval-bot restart api")
        api = _conversation(page, "@approval-bot restart api")
        await expect(_card(api)).to_contain_text('"service": "api"')
        await _become(page, BO)
        await (
            _card(api)
            .locator('select[data-action-id="approval_grant"]')
            .select_option(label="for 30 minutes")
        )
        await confirm.get_by_role("button", name="Approve and allow").click()
        await expect(_card(api)).to_contain_text("Approved by @bo")
        ephemeral = page.locator('[data-testid="message"][data-ephemeral="true"]')
        await _say(page, "/approvals history")
        history = ephemeral.filter(has_text="restart_service").filter(has_text="api")
        await expect(history.last).to_contain_text("@bo")
        await _say(page, "/approvals grants")
        grants = ephemeral.filter(has_text="Standing grants in this channel")
        await expect(grants.last).to_contain_text("restart_service")
        await _screenshot(page, "h5-grants-list.png", shots, grants.last)
        await grants.last.locator("[data-action-id]").filter(has_text="Revoke").click()
        await confirm.get_by_role("button", name="Revoke").click()
        await expect(grants.last).not_to_contain_text("(1)")

    assert page_errors == []
    assert [p.name for p in shots] == [
        "h1-empty-phone.png",
        "h2-quorum-bar.png",
        "h3-phone-grant-menus.png",
        "h4-app-home.png",
        "h5-grants-list.png",
    ]
