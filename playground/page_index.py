"""The playground page's HTML: the template filled in with the people, the examples and the
page's configuration (what ``static/page.js`` reads). Owns no state."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playground.people import Person

# The page itself: HTML with str.format fields ({channel}, {people}, …; braces doubled).
PAGE_TEMPLATE = (Path(__file__).resolve().parent / "templates" / "page.html").read_text()
BOT_HANDLE = "@approval-bot"
WORKSPACE_NAME = "Playground"
EXAMPLES = (
    f"{BOT_HANDLE} restart payments",
    f"{BOT_HANDLE} restart search by region",
    f"{BOT_HANDLE} deploy web",
    f"{BOT_HANDLE} scale checkout to 5",
    f"{BOT_HANDLE} scale checkout to 5 in staging",
    f"{BOT_HANDLE} scale web to 40",
    f"{BOT_HANDLE} rotate credentials of payments",
    f"{BOT_HANDLE} restart",
    "/approvals",
)
# What the empty channel offers (the sidebar, with every example, is a drawer on a phone).
EMPTY_EXAMPLES = (f"{BOT_HANDLE} restart payments", f"{BOT_HANDLE} rotate credentials of payments")


def render_index(
    people: Sequence[Person],
    current: str,
    *,
    channel: tuple[str, str],
    bot: tuple[str, str],
    channels: Mapping[str, str],
    version: str,
) -> str:
    """The page for ``current`` (a person's id); ``channel`` and ``bot`` are (id, name)."""
    e = html.escape
    options = "\n".join(
        f'<option value="{e(p.id)}"{" selected" if p.id == current else ""}>'
        f"{e(p.name)} ({e(p.role)})</option>"
        for p in people
    )
    people_list = "\n".join(
        f'<li><button type="button" class="person" data-testid="person" data-user="{e(p.id)}"'
        f' title="Be {e(p.name)}"><span class="avatar small">{e(p.name[:1].upper())}'
        f'</span><span class="who">{e(p.name)}</span><span class="role">{e(p.role)}</span>'
        "</button></li>"
        for p in people
    )
    approvers = [p.name for p in people if p.role == "approver"]
    config = {
        "people": [{"id": p.id, "name": p.name, "role": p.role} for p in people],
        "bot": {"id": bot[0], "name": bot[1]},
        "channel": {"id": channel[0], "name": channel[1]},
        "channels": dict(channels),
        "pollMs": 700,
    }
    config_json = json.dumps(config).replace("<", "\\u003c").replace(">", "\\u003e")
    return PAGE_TEMPLATE.format(
        channel=e(channel[1]),
        channel_id=e(channel[0]),
        workspace=e(WORKSPACE_NAME),
        options=options,
        people=people_list,
        examples=_example_buttons("example", EXAMPLES),
        approvers=e(" or ".join(approvers) or "an approver"),
        config=config_json.replace("&", "\\u0026"),
        version=e(version),
        bot=e(BOT_HANDLE),
        bot_name=e(bot[1]),
        empty_examples=_example_buttons("empty-example", EMPTY_EXAMPLES),
    )


def _example_buttons(testid: str, texts: Sequence[str]) -> str:
    """Buttons that put an example in the message box (the sidebar's, the empty page's)."""
    return "\n".join(
        f'<li><button type="button" class="example" data-testid="{testid}" '
        f'data-text="{html.escape(t)}" title="Put it in the message box"><code>{html.escape(t)}'
        "</code></button></li>"
        for t in texts
    )
