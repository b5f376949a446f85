"""The playground's channel page, driven the way a person would: in Chromium, and by its routes.

The browser test runs the whole playground (the real bot, our Slack-compatible server, the
offline demo model) in the test's event loop and uses the page like people in #ops would: ana
asks the bot for risky things, bo approves one, cy denies one with a reason, and ana lists what
is still waiting with ``/approvals all``. Screenshots of each step go to
``test-artifacts/playground/`` (git-ignored) so a person can check how the page looks.

It needs Playwright for Python and Debian's Chromium at /usr/bin/chromium (never a
Playwright-downloaded browser: nothing is fetched here). Without them the test is skipped, and
fails when ``CI`` is set. The route test needs neither: it checks with aiohttp what the page
relies on (who sees which ephemeral, escaping, threads, modals, bot errors surfacing).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from playground.app import running_playground

try:
    from playwright.async_api import Locator, Page, async_playwright, expect
except ImportError:  # reported by the test itself
    async_playwright = None  # type: ignore[assignment]

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts" / "playground"
CHROMIUM = Path("/usr/bin/chromium")
# One worker runs this module's tests in turn (scripts/test: --dist loadgroup): they share
# ARTIFACTS, which the first clears, and two Chromiums at once would only slow each other.
pytestmark = pytest.mark.xdist_group("browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 15_000
ANA, BO, CY, DEE = "U0REQUESTER", "U0APPROVER1", "U0APPROVER2", "U0OUTSIDER"
REASON = "Not during the freeze, please"


def _browser_unavailable() -> str | None:
    if async_playwright is None:
        return "playwright is not installed (pip install playwright; no browser download)"
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
    return None


@contextlib.asynccontextmanager
async def chromium_playground(
    tmp_path: Path, *, width: int = 1280, height: int = 900
) -> AsyncIterator[tuple[Any, Page, list[str]]]:
    """A playground on its own data directory and one Chromium page on it: (the running
    playground, the page, the page's errors as they come: uncaught exceptions and console
    errors). Without Chromium or playwright, the test fails in CI and is skipped elsewhere."""
    missing = _browser_unavailable()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=TIMEOUT_MS)
    page_errors: list[str] = []
    async with (
        running_playground(data_dir=tmp_path / "playground") as pg,
        async_playwright() as p,
    ):
        browser = await p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = await browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(TIMEOUT_MS)
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.on(
                "console",
                lambda m: page_errors.append(m.text) if m.type == "error" else None,
            )
            yield pg, page, page_errors
        finally:
            await browser.close()


# -- the browser journey -----------------------------------------------------------------------


async def _become(page: Page, user: str) -> None:
    """Switch identity with the page's own switch; the URL remembers it."""
    await page.get_by_test_id("identity").select_option(user)
    await expect(page).to_have_url(re.compile(rf"[?&]as={user}\b"))


async def _say(page: Page, text: str) -> None:
    composer = page.get_by_test_id("composer")
    await composer.fill(text)
    await composer.press("Enter")
    await expect(composer).to_have_value("")


def _conversation(page: Page, text: str) -> Locator:
    """A top-level message with its thread, found by what the person wrote."""
    return page.get_by_test_id("conversation").filter(has_text=text)


def _card(conversation: Locator) -> Locator:
    return (
        conversation.get_by_test_id("thread")
        .get_by_test_id("message")
        # Its context line ("Approval apr_… · run run_…") stays when its first line turns
        # from "Approval needed for" into the decision.
        .filter(has_text=re.compile(r"Approval apr_\w+ · run run_"))
    )


async def _screenshot(
    page: Page, name: str, shots: list[Path], focus: Locator | None = None
) -> None:
    if focus is not None:
        await focus.scroll_into_view_if_needed()
    path = ARTIFACTS / name
    await page.screenshot(path=str(path))
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    shots.append(path)


@pytest.mark.browser
async def test_approve_deny_and_list_in_the_browser(tmp_path: Path) -> None:
    for old in ARTIFACTS.glob("*.png"):  # this journey's screenshots are made anew
        old.unlink()
    shots: list[Path] = []
    async with chromium_playground(tmp_path) as (pg, page, page_errors):
        # ana, the requester, asks for a restart: a card with its buttons shows up.
        await page.goto(f"{pg.url}/?as={ANA}")
        await expect(page.get_by_test_id("identity")).to_have_value(ANA)
        await _say(page, "@approval-bot restart payments")
        payments = _conversation(page, "@approval-bot restart payments")
        card = _card(payments)
        await expect(card).to_be_visible()
        await expect(card).to_contain_text("Approval needed for restart_service")
        await expect(card).to_contain_text('"service": "payments"')
        await expect(card).to_contain_text("Asked by @ana")
        await expect(card.locator(".app-badge")).to_have_text("APP")
        await expect(card.locator('[data-action-id="approval_approve"]')).to_be_visible()
        await expect(card.locator('[data-action-id="approval_deny"]')).to_be_visible()
        await expect(payments.get_by_test_id("thread")).to_contain_text("Waiting for a human")
        await _screenshot(page, "01-requested.png", shots, card)

        # bo, an approver, approves: a confirm dialog first, then the card changes.
        await _become(page, BO)
        await card.locator('[data-action-id="approval_approve"]').click()
        confirm = page.get_by_test_id("confirm")
        await expect(confirm).to_be_visible()
        await expect(confirm).to_contain_text("Approve this call?")
        await expect(confirm).to_contain_text("restart_service will run")
        await _screenshot(page, "02-confirm-approve.png", shots)
        await confirm.get_by_role("button", name="Approve").click()
        await expect(confirm).to_be_hidden()
        await expect(card).to_contain_text("Approved by @bo")
        await expect(card.locator("[data-action-id]")).to_have_count(0)
        answer = payments.get_by_test_id("message").filter(has_text="Here is what happened:")
        await expect(answer).to_contain_text("restarted payments")
        await _screenshot(page, "03-approved.png", shots, answer)

        # ana asks to scale; cy denies with a reason typed in the modal.
        await _become(page, ANA)
        await _say(page, "@approval-bot scale checkout to 5")
        checkout = _conversation(page, "@approval-bot scale checkout to 5")
        checkout_card = _card(checkout)
        await expect(checkout_card).to_contain_text("scale_service")
        await _become(page, CY)
        await checkout_card.locator('[data-action-id="approval_deny"]').click()
        await expect(confirm).to_contain_text("Deny this call?")
        await expect(confirm.get_by_role("button", name="Deny")).to_have_class(
            re.compile(r"\bbtn-danger\b")
        )
        await confirm.get_by_role("button", name="Deny").click()
        modal = page.get_by_test_id("modal")
        await expect(modal).to_be_visible()
        await expect(modal.get_by_role("heading")).to_have_text("Deny this call")
        await modal.get_by_label("Reason").fill(REASON)
        await _screenshot(page, "04-deny-reason.png", shots)
        await modal.get_by_role("button", name="Deny").click()
        await expect(modal).to_be_hidden()
        await expect(checkout_card).to_contain_text("Denied by @cy")
        await expect(checkout_card).to_contain_text(REASON)
        await expect(checkout_card.locator("[data-action-id]")).to_have_count(0)
        denied_answer = checkout.get_by_test_id("message").filter(has_text="Here is what happened:")
        await expect(denied_answer).to_contain_text(REASON)
        await expect(denied_answer).to_contain_text("not run")
        await _screenshot(page, "05-denied.png", shots, denied_answer)

        # ana asks to scale web to 40; bo edits it down to 4 (after two wrong tries, each
        # answered next to the field), then approves: the tool runs the edited call.
        await _become(page, ANA)
        await _say(page, "@approval-bot scale web to 40")
        web = _conversation(page, "@approval-bot scale web to 40")
        web_card = _card(web)
        await expect(web_card).to_contain_text('"replicas": 40')
        await _become(page, BO)
        await web_card.locator('[data-action-id="approval_edit"]').click()
        await expect(modal).to_be_visible()
        await expect(modal.get_by_role("heading")).to_have_text("Edit, then approve")
        replicas = modal.get_by_label("replicas")
        replicas_error = modal.locator('[data-error-for="edit_arg:replicas"]')
        await expect(replicas).to_have_value("40")
        await replicas.fill("four")
        await modal.get_by_role("button", name="Approve as edited").click()
        await expect(replicas_error).to_contain_text("Enter a whole number")
        await replicas.fill("400")  # a number, but past the schema's maximum of 50
        await modal.get_by_role("button", name="Approve as edited").click()
        await expect(replicas_error).to_contain_text("50")
        await expect(replicas_error).to_be_visible()
        await expect(web_card).not_to_contain_text("Edited by")  # a wrong edit changes nothing
        await _screenshot(page, "05b-edit.png", shots)
        await replicas.fill("4")
        await modal.get_by_role("button", name="Approve as edited").click()
        await expect(modal).to_be_hidden()
        await expect(web_card).to_contain_text("✏️ Edited by @bo")
        await expect(web_card).to_contain_text("replicas 40 → 4")
        await expect(web_card).to_contain_text("Approved by @bo")
        edited_answer = web.get_by_test_id("message").filter(has_text="Here is what happened:")
        # The demo model says it in a sentence: who changed what (no JSON, nothing it
        # was told for itself).
        await expect(edited_answer).to_contain_text(
            "Bo Lee (@bo) changed the call before approving it (replicas 40 → 4)"
        )
        await expect(edited_answer).not_to_contain_text("do not repeat")
        await expect(edited_answer).to_contain_text("scaled web to 4 replicas")
        await _screenshot(page, "05c-edited.png", shots, edited_answer)

        # ana asks for another restart and lists everything waiting in the channel.
        await _become(page, ANA)
        await _say(page, "@approval-bot restart search")
        await expect(_card(_conversation(page, "@approval-bot restart search"))).to_contain_text(
            '"service": "search"'
        )
        await _say(page, "/approvals all")
        listing = page.locator('[data-testid="message"][data-ephemeral="true"]').filter(
            has_text="Everything waiting in this channel"
        )
        await expect(listing).to_be_visible()
        await expect(listing).to_contain_text("Only visible to you")
        item = listing.locator('[data-block-type="section"]').filter(has_text="restart_service")
        await expect(item).to_contain_text('service="search"')
        await expect(listing.locator('[data-action-id="approval_approve"]')).to_have_count(1)
        await expect(listing.locator('[data-action-id="approval_deny"]')).to_have_count(1)
        await _screenshot(page, "06-approvals-all.png", shots, listing)

        # The list was ana's alone. dee replies in a thread; typed markup stays text.
        await _become(page, DEE)
        await expect(_card(_conversation(page, "restart search"))).to_be_visible()
        await expect(page.get_by_text("Everything waiting in this channel")).to_have_count(0)
        parent = payments.get_by_test_id("message").first
        await parent.hover()
        await parent.get_by_test_id("reply-in-thread").click()
        await expect(page.get_by_test_id("reply-target")).to_contain_text("Replying in thread")
        await _say(page, "<img src=x onerror=alert(1)> & *nice* :tada: @bo")
        reply = payments.get_by_test_id("message").filter(has_text="onerror")
        await expect(reply).to_contain_text("<img src=x onerror=alert(1)> & nice 🎉 @bo")
        await expect(reply.locator("b")).to_have_text("nice")
        await expect(reply.locator("img")).to_have_count(0)
        await _screenshot(page, "07-thread-reply.png", shots, reply)

    assert page_errors == []
    assert [p.name for p in shots] == [
        "01-requested.png",
        "02-confirm-approve.png",
        "03-approved.png",
        "04-deny-reason.png",
        "05-denied.png",
        "05b-edit.png",
        "05c-edited.png",
        "06-approvals-all.png",
        "07-thread-reply.png",
    ]
    assert all(p.stat().st_size > 10_000 for p in shots)


async def _approve_on(page: Page, card: Locator) -> None:
    """Approve on a card, through its confirm dialog."""
    await card.locator('[data-action-id="approval_approve"]').click()
    confirm = page.get_by_test_id("confirm")
    await confirm.get_by_role("button", name="Approve").click()
    await expect(confirm).to_be_hidden()


@pytest.mark.browser
async def test_two_people_approve_a_rule_and_a_grant_in_the_browser(tmp_path: Path) -> None:
    """Rotating credentials needs two approvals (``min_approvals = 2``): ana asks (her own
    Approve does not count), bo approves (twice: it counts once) and the card shows "1 of 2
    approvals", cy approves and the tool runs once. And
    the demo's rule: scaling in staging runs without asking anyone; and a standing grant: bo
    allows restarts in a thread for 30 minutes, so ana's next restart there runs unasked."""
    shots: list[Path] = []
    async with chromium_playground(tmp_path) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")
        await page.get_by_test_id("example").filter(has_text="rotate credentials").click()
        await page.get_by_test_id("composer").press("Enter")
        rotation = _conversation(page, "@approval-bot rotate credentials of payments")
        card = _card(rotation)
        await expect(card).to_contain_text("Approval needed for rotate_credentials")
        await expect(card).to_contain_text("0 of 2 approvals")
        answer = rotation.get_by_test_id("message").filter(has_text="Here is what happened:")
        ephemeral = page.locator('[data-testid="message"][data-ephemeral="true"]')

        # ana's own Approve never counts: she is told so, only she.
        await _approve_on(page, card)
        await expect(ephemeral.filter(has_text="someone else must decide it")).to_be_visible()
        await expect(card).to_contain_text("0 of 2 approvals")

        # bo approves: one of two; the card keeps its buttons and nothing has run.
        await _become(page, BO)
        await _approve_on(page, card)
        await expect(card).to_contain_text("👥 1 of 2 approvals: @bo")
        await expect(card.locator('[data-action-id="approval_approve"]')).to_be_visible()
        await _screenshot(page, "m1-one-of-two.png", shots, card)
        # bo twice is still one approval.
        await _approve_on(page, card)
        await expect(ephemeral.filter(has_text="You already approved")).to_be_visible()
        await expect(card).to_contain_text("1 of 2 approvals: @bo")
        await expect(answer).to_have_count(0)

        # cy approves: the second distinct approval runs the tool, once.
        await _become(page, CY)
        await _approve_on(page, card)
        await expect(card).to_contain_text("Approved by @bo, @cy")
        await expect(card.locator("[data-action-id]")).to_have_count(0)
        await expect(answer).to_contain_text("rotated the credentials of payments")
        await expect(answer).to_contain_text("now version 1")
        await _screenshot(page, "m2-two-of-two.png", shots, answer)
        await pg.settle()
        await expect(answer).to_have_count(1)
        ran = [m for m in pg.server.messages if "rotated the credentials" in m.text]
        assert len(ran) == 1, [m.text for m in ran]

        # A rule: staging never asks. No card, the tool just runs.
        await _become(page, ANA)
        await _say(page, "@approval-bot scale checkout to 5 in staging")
        staging = _conversation(page, "@approval-bot scale checkout to 5 in staging")
        staged = staging.get_by_test_id("message").filter(has_text="Here is what happened:")
        await expect(staged).to_contain_text("scaled checkout to 5 replicas in staging")
        await expect(_card(staging)).to_have_count(0)

        # A standing grant (grant_max): bo approves a restart and allows restarts in its
        # thread for 30 minutes, after a confirm; ana's next restart there runs unasked.
        await _say(page, "@approval-bot restart api")
        api = _conversation(page, "@approval-bot restart api")
        api_card = _card(api)
        await expect(api_card).to_contain_text('"service": "api"')
        await _become(page, BO)
        await api_card.locator('select[data-action-id="approval_grant"]').select_option(
            label="for 30 minutes"
        )
        confirm = page.get_by_test_id("confirm")
        await expect(confirm).to_contain_text("Approve and allow?")
        await confirm.get_by_role("button", name="Approve and allow").click()
        await expect(api_card).to_contain_text("Approved by @bo")
        await expect(api_card).to_contain_text("Standing grant: restart_service")
        restarted = api.get_by_test_id("message").filter(has_text="Here is what happened:")
        await expect(restarted).to_contain_text("restarted api")
        await _become(page, ANA)
        parent = api.get_by_test_id("message").first
        await parent.hover()
        await parent.get_by_test_id("reply-in-thread").click()
        await _say(page, "@approval-bot now restart it")
        await expect(restarted).to_have_count(2)
        await expect(restarted.last).to_contain_text("restarted api")
        await expect(_card(api)).to_have_count(1)
        await _screenshot(page, "m3-grant.png", shots, restarted.last)

    assert page_errors == []
    assert [p.name for p in shots] == ["m1-one-of-two.png", "m2-two-of-two.png", "m3-grant.png"]


def _question(conversation: Locator) -> Locator:
    return (
        conversation.get_by_test_id("thread")
        .get_by_test_id("message")
        .filter(has_text="The agent asks")
    )


@pytest.mark.browser
async def test_answer_the_agents_question_in_the_browser(tmp_path: Path) -> None:
    """ana asks for a restart "by region": the agent asks her which, dee may not answer, ana
    picks one; the restart in that region then waits for an approval. A deploy's pipeline
    reports back by itself, and its notice in the thread says so."""
    shots: list[Path] = []
    async with chromium_playground(tmp_path) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")
        await _say(page, "@approval-bot restart search by region")
        search = _conversation(page, "@approval-bot restart search by region")
        question = _question(search)
        await expect(question).to_contain_text("Restart search in which region?")
        choices = question.locator('[data-action-id^="question_choice:"]')
        await expect(choices).to_have_text(["eu-west", "us-east", "ap-south"])
        await _screenshot(page, "q1-question.png", shots, question)

        # dee may not answer: told so, only dee; the question still waits.
        await _become(page, DEE)
        await question.get_by_role("button", name="us-east").click()
        refusal = page.locator('[data-testid="message"][data-ephemeral="true"]').filter(
            has_text="answer"
        )
        await expect(refusal).to_be_visible()
        await expect(choices).to_have_count(3)

        # ana answers: the card says so, and the agent asks to restart in that region.
        await _become(page, ANA)
        await question.get_by_role("button", name="us-east").click()
        await expect(question).to_contain_text("💬 @ana answered: us-east")
        await expect(question.locator("[data-action-id]")).to_have_count(0)
        await expect(_card(search)).to_contain_text('"region": "us-east"')
        await _screenshot(page, "q2-answered.png", shots, _card(search))

        # A deploy: the thread waits, then the pipeline's report edits the notice.
        await _say(page, "@approval-bot deploy web")
        deploy = _conversation(page, "@approval-bot deploy web")
        notice = deploy.get_by_test_id("message").filter(has_text="the deploy of web")
        await expect(notice.first).to_be_visible()
        await expect(notice.first).to_contain_text("reported back")
        answer = deploy.get_by_test_id("message").filter(has_text="Here is what happened:")
        await expect(answer).to_contain_text("deployed")
        await _screenshot(page, "q3-deployed.png", shots, answer)

    assert page_errors == []
    assert [p.name for p in shots] == ["q1-question.png", "q2-answered.png", "q3-deployed.png"]


async def _approvals_list(page: Page) -> Locator:
    await _say(page, "/approvals")
    listing = page.locator('[data-testid="message"][data-ephemeral="true"]').filter(
        has_text="Waiting for your decision"
    )
    await expect(listing).to_be_visible()
    return listing


@pytest.mark.browser
async def test_stale_clicks_lists_narrow_screens_reloads_and_reset(tmp_path: Path) -> None:
    """What a newcomer tripped over: a click on a card someone decided meanwhile (a stale
    screen), a list whose buttons stayed after a decision, a phone-width window, a reload
    with a modal open; plus the sidebar's examples, the identity tip, folding a thread and
    resetting the demo."""
    shots: list[Path] = []
    async with chromium_playground(tmp_path) as (pg, page, page_errors):
        await page.goto(f"{pg.url}/?as={ANA}")

        # A sidebar example fills the composer; ana sends it and a second request.
        await page.get_by_test_id("example").filter(has_text="restart payments").click()
        composer = page.get_by_test_id("composer")
        await expect(composer).to_have_value("@approval-bot restart payments")
        await composer.press("Enter")
        await _say(page, "@approval-bot restart search")
        payments = _conversation(page, "@approval-bot restart payments")
        search = _conversation(page, "@approval-bot restart search")
        await expect(_card(search)).to_contain_text('"service": "search"')
        # Both cards are shown before bo decides: a decision from /approvals that comes
        # before a card was posted leaves no card to show it (the card is posted pending).
        await expect(_card(payments)).to_contain_text('"service": "payments"')
        # The timestamp shows the whole date on hover.
        stamp = payments.get_by_test_id("ts").first
        await expect(stamp).to_have_attribute("title", re.compile(r"20\d\d"))

        # ana may not approve her own calls: the tip says whom to become, and does it.
        tip = page.get_by_test_id("switch-tip")
        await expect(tip).to_contain_text("switch to bo")
        await tip.get_by_role("button", name="Switch to bo").click()
        await expect(page).to_have_url(re.compile(rf"[?&]as={BO}\b"))
        await expect(tip).to_be_hidden()

        # bo approves payments from /approvals: the list item shows the outcome in place.
        listing = await _approvals_list(page)
        await expect(listing.locator('[data-action-id="approval_approve"]')).to_have_count(2)
        item = listing.locator('[data-block-type="section"]').filter(has_text="payments")
        await listing.locator('[data-action-id="approval_approve"]').nth(1).click()
        await page.get_by_test_id("confirm").get_by_role("button", name="Approve").click()
        await expect(listing).to_contain_text("Approved by @bo")
        await expect(listing.locator('[data-action-id="approval_approve"]')).to_have_count(1)
        await expect(item).to_be_visible()
        await expect(_card(payments)).to_contain_text("Approved by @bo")
        # The thread's "Waiting for a human" was edited when the run moved on.
        await expect(payments.get_by_test_id("thread")).to_contain_text("No longer waiting")
        await expect(payments.get_by_test_id("thread")).not_to_contain_text("Waiting for a human")
        await _screenshot(page, "s1-list-refreshed.png", shots, listing)

        # A stale screen: bo's page stops updating while cy approves search; bo then
        # clicks the Approve his screen still shows. Slack delivers it; the bot answers.
        frozen = await page.evaluate(f"fetch('/playground/state?user={BO}').then((r) => r.text())")

        async def stale(route: Any) -> None:
            await route.fulfill(status=200, content_type="application/json", body=frozen)

        await page.route(re.compile(r"/playground/state\?"), stale)
        [search_card] = [
            m
            for m in pg.server.messages
            if m.channel == "C0OPS"  # approvers may also get a copy by DM
            and "approval_approve" in str(m.blocks)
            and "search" in str(m.blocks)
            and not m.is_ephemeral
        ]
        await pg.server.click(CY, search_card, "approval_approve")
        await pg.settle()
        await _card(search).locator('[data-action-id="approval_approve"]').click()
        await page.get_by_test_id("confirm").get_by_role("button", name="Approve").click()
        await page.unroute(re.compile(r"/playground/state\?"))
        race = page.locator('[data-testid="message"][data-ephemeral="true"]').filter(
            has_text="Already approved by @cy"
        )
        await expect(race).to_be_visible()
        await expect(page.get_by_test_id("error")).to_be_hidden()
        await expect(_card(search)).to_contain_text("Approved by @cy")
        await _screenshot(page, "s2-stale-click.png", shots, race)

        # A reload with the deny modal open: it is still open, with what bo typed.
        await _become(page, ANA)
        await _say(page, "@approval-bot scale checkout to 5")
        checkout = _conversation(page, "@approval-bot scale checkout to 5")
        await expect(_card(checkout)).to_contain_text("scale_service")
        await _become(page, BO)
        await _card(checkout).locator('[data-action-id="approval_deny"]').click()
        await page.get_by_test_id("confirm").get_by_role("button", name="Deny").click()
        modal = page.get_by_test_id("modal")
        await modal.get_by_label("Reason").fill(REASON)
        await page.reload()
        await expect(modal).to_be_visible()
        await expect(modal.get_by_label("Reason")).to_have_value(REASON)
        await modal.get_by_test_id("modal-close").click()
        await expect(modal).to_be_hidden()
        await page.reload()
        await expect(_card(checkout)).to_be_visible()
        await expect(modal).to_have_count(0)

        # Threads fold and unfold.
        toggle = checkout.get_by_test_id("thread-toggle")
        await toggle.click()
        await expect(_card(checkout)).to_be_hidden()
        await expect(toggle).to_have_attribute("aria-expanded", "false")
        await toggle.click()
        await expect(_card(checkout)).to_be_visible()

        # A phone-width window: no sideways scrolling; the sidebar is a drawer.
        await page.set_viewport_size({"width": 420, "height": 860})
        await expect(page.get_by_test_id("menu")).to_be_visible()
        await expect(page.get_by_test_id("reset-demo")).not_to_be_in_viewport()
        await _card(checkout).scroll_into_view_if_needed()
        widths = await page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth,"
            " document.querySelector('.messages').scrollWidth,"
            " document.querySelector('.messages').clientWidth]"
        )
        assert widths[0] <= widths[1] and widths[2] <= widths[3], widths
        await _screenshot(page, "s3-narrow.png", shots)
        await page.get_by_test_id("menu").click()
        await expect(page.get_by_test_id("reset-demo")).to_be_in_viewport()
        await _screenshot(page, "s4-narrow-sidebar.png", shots)

        # Reset the demo (after a confirmation): the channel is empty, the bot works.
        await page.get_by_test_id("reset-demo").click()
        confirm = page.get_by_test_id("confirm")
        await expect(confirm).to_contain_text("Reset the demo?")
        await confirm.get_by_role("button", name="Reset").click()
        await expect(page.get_by_test_id("empty")).to_be_visible()
        await expect(page.get_by_test_id("conversation")).to_have_count(0)
        await page.set_viewport_size({"width": 1280, "height": 900})
        await _say(page, "@approval-bot status of payments")
        status = _conversation(page, "status of payments")
        await expect(status).to_contain_text("restarted 0 times")

    assert page_errors == []
    assert [p.name for p in shots] == [
        "s1-list-refreshed.png",
        "s2-stale-click.png",
        "s3-narrow.png",
        "s4-narrow-sidebar.png",
    ]


# -- the routes, without a browser -------------------------------------------------------------


async def _state(http: aiohttp.ClientSession, user: str) -> dict[str, Any]:
    async with http.get("/playground/state", params={"user": user}) as response:
        assert response.status == 200
        return await response.json()


async def _post(
    http: aiohttp.ClientSession, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with http.post(path, json=body) as response:
        return response.status, await response.json()


def _all_messages(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for top in state["messages"] for m in [top, *top["replies"]]]


def _button_value(message: dict[str, Any], action_id: str) -> str:
    return next(
        element["value"]
        for block in message["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"] == action_id
    )


async def test_page_routes(tmp_path: Path) -> None:
    async with (
        running_playground(data_dir=tmp_path / "playground") as pg,
        aiohttp.ClientSession(pg.url) as http,
    ):
        async with http.get("/", params={"as": BO}) as response:
            assert response.status == 200
            page = await response.text()
        assert 'data-testid="identity"' in page
        assert f'<option value="{BO}" selected>' in page
        async with http.get("/playground/static/page.js") as response:
            assert response.status == 200

        # A slash command's answer is ephemeral: ana sees it, bo does not.
        status, body = await _post(
            http, "/playground/message", {"user": ANA, "text": "/approvals help"}
        )
        assert (status, body["ok"], body["status"]) == (200, True, "command")
        ana_sees = [m for m in _all_messages(await _state(http, ANA)) if m["ephemeral"]]
        assert len(ana_sees) == 1 and "/approvals" in ana_sees[0]["text"]
        assert not [m for m in _all_messages(await _state(http, BO)) if m["ephemeral"]]

        # Typed text is escaped like Slack's composer does; a reply lands in its thread.
        status, body = await _post(
            http, "/playground/message", {"user": DEE, "text": "hi <b>@ana</b> & @bo"}
        )
        assert status == 200 and body["status"] == "posted"
        parent_ts = body["ts"]
        status, body = await _post(
            http,
            "/playground/message",
            {"user": ANA, "text": "a reply", "thread_ts": parent_ts},
        )
        assert status == 200
        top = {m["ts"]: m for m in (await _state(http, BO))["messages"]}
        assert top[parent_ts]["text"] == "hi &lt;b&gt;<@U0REQUESTER>&lt;/b&gt; &amp; <@U0APPROVER1>"
        assert [r["text"] for r in top[parent_ts]["replies"]] == ["a reply"]

        # A mention runs the bot; bo's Deny opens a modal for bo only, which bo can cancel.
        status, body = await _post(
            http, "/playground/message", {"user": ANA, "text": "@approval-bot restart web"}
        )
        assert (status, body["status"]) == (200, "mention")
        await pg.settle()
        card = next(
            m for m in _all_messages(await _state(http, ANA)) if "Approval needed" in m["text"]
        )
        status, body = await _post(
            http,
            "/playground/click",
            {
                "user": BO,
                "channel": "C0OPS",
                "ts": card["ts"],
                "action_id": "approval_deny",
                "value": _button_value(card, "approval_deny"),
            },
        )
        assert (status, body["status"]) == (200, "clicked")
        modal = (await _state(http, BO))["modal"]
        assert modal["title"]["text"] == "Deny this call"
        assert (await _state(http, CY))["modal"] is None
        status, body = await _post(http, "/playground/close", {"user": CY, "view_id": modal["id"]})
        assert status == 404 and not body["ok"]
        status, _ = await _post(http, "/playground/close", {"user": BO, "view_id": modal["id"]})
        assert status == 200 and (await _state(http, BO))["modal"] is None

        # Mistakes and a failing bot come back as errors the page shows.
        status, body = await _post(http, "/playground/message", {"user": "U0NOBODY", "text": "x"})
        assert status == 400 and "unknown user" in body["error"]
        status, body = await _post(http, "/playground/message", {"user": DEE, "text": "/nope"})
        assert (status, body["error"]) == (400, "/nope is not a valid command.")
        status, body = await _post(
            http,
            "/playground/click",
            {"user": BO, "channel": "C0OPS", "ts": ana_sees[0]["ts"], "action_id": "x"},
        )
        assert status == 404 and not body["ok"]
        status, body = await _post(
            http,
            "/playground/click",
            {"user": BO, "channel": "C0OPS", "ts": card["ts"], "action_id": "no_such_button"},
        )
        assert status == 409 and "no button 'no_such_button'" in body["error"]
        status, body = await _post(
            http, "/playground/submit", {"user": BO, "view_id": modal["id"], "values": {}}
        )
        assert status == 409 and "no open view" in body["error"]
        secret = pg.server.signing_secret
        pg.server.signing_secret = "not-the-bot-s-secret"
        try:
            status, body = await _post(
                http, "/playground/message", {"user": ANA, "text": "@approval-bot status of api"}
            )
        finally:
            pg.server.signing_secret = secret
        assert status == 502 and body["ok"] is False
        assert "HTTP 401" in body["error"]

        # A click on a button the card no longer shows (a stale screen) reaches the bot,
        # which answers it; a button the card never had is still refused (above).
        await _post(
            http,
            "/playground/click",
            {
                "user": CY,
                "channel": "C0OPS",
                "ts": card["ts"],
                "action_id": "approval_approve",
                "value": _button_value(card, "approval_approve"),
            },
        )
        await pg.settle()
        status, body = await _post(
            http,
            "/playground/click",
            {
                "user": BO,
                "channel": "C0OPS",
                "ts": card["ts"],
                "action_id": "approval_approve",
                "value": _button_value(card, "approval_approve"),
            },
        )
        assert (status, body["status"]) == (200, "clicked")
        await pg.settle()
        told = [m["text"] for m in _all_messages(await _state(http, BO)) if m["ephemeral"]]
        assert any("Already approved by <@U0APPROVER2>" in t for t in told), told

        # Reset: only when asked for in so many words; then the channel is empty.
        status, body = await _post(http, "/playground/reset", {})
        assert status == 400 and not body["ok"]
        assert (await _state(http, ANA))["messages"]
        status, body = await _post(http, "/playground/reset", {"confirm": "reset"})
        assert (status, body["status"]) == (200, "reset")
        assert (await _state(http, ANA))["messages"] == []
        status, body = await _post(
            http, "/playground/message", {"user": ANA, "text": "@approval-bot status of api"}
        )
        assert (status, body["status"]) == (200, "mention")
        await pg.settle()
        assert any("restarted 0 times" in m["text"] for m in _all_messages(await _state(http, ANA)))


def test_playground_config_uses_your_file_and_keeps_data_in_its_directory(
    tmp_path: Path,
) -> None:
    from playground.app import playground_config

    demo = playground_config(tmp_path)
    assert demo.model == "demo"
    assert {t.name for t in demo.tools} == {
        "get_status",
        "restart_service",
        "deploy_service",
        "scale_service",
        "rotate_credentials",
        "run_sql",
        "migrate_tenants",
    }
    assert demo.ask_user, "the demo agent asks which region to restart"
    # What the demo shows off besides the staging rule: a quorum tool and a standing grant.
    assert demo.policies["rotate_credentials"].min_approvals == 2
    assert demo.policies["restart_service"].grant_max == timedelta(hours=1)
    assert demo.database_url.endswith(str(tmp_path / "approval-bot.db"))

    own = tmp_path / "own.toml"
    own.write_text('model = "echo"\ntools = ["tests.support.ops_tools:get_status"]\n')
    mine = playground_config(tmp_path, config_path=str(own), model="scripted")
    assert mine.model == "scripted" and [t.name for t in mine.tools] == ["get_status"]
    assert mine.database_url.endswith(str(tmp_path / "approval-bot.db"))


async def test_the_playground_keeps_its_channel_across_restarts(tmp_path: Path) -> None:
    from playground.app import running_playground

    async with running_playground(data_dir=tmp_path) as first:
        reply = await first.server.mention("U0REQUESTER", "C0OPS", "<@U0BOT> restart payments")
        assert reply.status == 200
        await first.settle()
        before = [(m.ts, m.text) for m in first.server.messages]
    assert any("Approval needed" in text for _, text in before)

    async with running_playground(data_dir=tmp_path) as second:
        assert [(m.ts, m.text) for m in second.server.messages] == before
        [card] = [
            m
            for m in second.server.messages
            if "approval_summary" in str(m.blocks) and not m.channel.startswith("D")
        ]
        # The card's buttons still work after the restart: the approval is in the database.
        await second.server.click("U0APPROVER1", card, "approval_approve")
        await second.settle()
        assert any("restarted payments" in m.text for m in second.server.messages)
        assert second.server.messages[-1].ts > before[-1][0]
