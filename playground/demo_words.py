"""How the playground's demo model words its answer: plain sentences for people.

What a tool returns, and what the gate tells the model about a decision, is written for the
model: it may be JSON (a pipeline's callback body, rows of a query), carry instructions meant
for the model ("do not repeat the original call", "do not try to get around this") or the
edited call's arguments as JSON, and give times as ``2026-12-01 10:00 UTC``. A real model
rewords all that; the demo model does it here, so its answer reads like a person's: JSON
told in words, no instructions to itself, and times as people read them. Owns no state.
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import UTC, datetime
from typing import Any

from llm.parts import ToolResultPart

# The gate's note before an edited call's result (bot.gate.texts.edit_note), loosely.
_EDITED = re.compile(
    r"^Approved (?:by (?P<who>.+?) )?after editing the arguments: (?P<changes>.+?)\. "
    r"The call ran with .*?(?:; do not [^.]*)?\.(?:\s*Result:\s*(?P<result>.*))?$",
    re.DOTALL,
)
# Clauses addressed to the model: "…; do not try to get around this."
_TO_THE_MODEL = re.compile(r"[;,]?\s*\b(?:do not|don't) (?:try|repeat|retry|call)[^.]*\.", re.I)
_TIME = re.compile(
    r"\b(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(?: ?UTC|Z|\+00:00)"
)


def when(match: re.Match[str]) -> str:
    """``2026-12-01 10:00 UTC`` as people say it: ``10:00 UTC on Dec 1``. (Not a Slack date
    token: the bot escapes a model's answer, so the token would show as typed.)"""
    moment = datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}").replace(tzinfo=UTC)
    return f"{moment:%H:%M} UTC on {moment:%b} {moment.day}"


def _words(value: Any) -> str:
    """JSON told in words: ``{"status": "deployed", "build": "1"}`` -> ``status deployed,
    build 1``; a list of rows -> ``2 rows: …; …``."""
    if isinstance(value, dict):
        return ", ".join(f"{key.replace('_', ' ')} {_words(item)}" for key, item in value.items())
    if isinstance(value, list):
        if not value:
            return "nothing"
        rows = "; ".join(_words(item) for item in value)
        return f"{len(value)} rows: {rows}" if all(isinstance(i, dict) for i in value) else rows
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def plain(output: Any) -> str:
    """A tool's result (or the gate's word on a decision) as a sentence for people."""
    text = str(output).strip()
    edited = _EDITED.match(text)
    if edited:
        who = edited.group("who") or "a person"
        result = plain(edited.group("result") or "it ran")
        return f"{who} changed the call before approving it ({edited.group('changes')}): {result}"
    if text[:1] in "[{":
        with contextlib.suppress(ValueError):
            text = _words(json.loads(text))
    text = _TO_THE_MODEL.sub(".", text).replace("..", ".")
    return _TIME.sub(when, text).strip()


def summarize(results: list[ToolResultPart]) -> str:
    """The demo's answer once its tools have answered: what each did, in plain words."""
    lines = [f"• `{r.name}`: {plain(r.output)}" for r in results]
    return "Here is what happened:\n" + "\n".join(lines)
