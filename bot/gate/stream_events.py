"""What a drive tells the thread while it works: the model's text as it comes, and each tool
call as a task (pending, in progress, complete or error) with a one-line summary.

Nothing here is durable or needed for correctness: the events feed Slack's text streaming
(``handlers.slack.streams``), which shows them as they happen and keeps nothing. The run's
answer still goes through the answer outbox, so an event lost with a crashed process costs
only what the thread showed meanwhile. Listeners are called on the event loop and must not
block: they queue the event and return.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

TaskStatus = Literal["pending", "in_progress", "complete", "error"]
# A task's title and summary are one line each: Slack shows them in a timeline.
TITLE_LIMIT = 80
SUMMARY_LIMIT = 120


@dataclass(frozen=True)
class RunEvent:
    """``kind`` "text": ``text`` is the model's next words. ``kind`` "task": the tool call
    ``task_id`` (its tool call id) titled ``title`` is now ``status``, ``summary`` says how."""

    run_id: str
    kind: Literal["text", "task"]
    text: str = ""
    task_id: str = ""
    title: str = ""
    status: TaskStatus = "pending"
    summary: str = ""


EventListener = Callable[[RunEvent], None]


def one_line(text: object, limit: int) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters with an ellipsis."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def call_title(name: str, arguments: Mapping[str, Any]) -> str:
    """``restart_service(service="web")``, on one line and cut to TITLE_LIMIT."""
    shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in arguments.items())
    return one_line(f"{name}({shown})", TITLE_LIMIT)


def task_event(
    run_id: str,
    tool_call_id: str,
    name: str,
    arguments: Mapping[str, Any],
    status: TaskStatus,
    summary: object = "",
) -> RunEvent:
    return RunEvent(
        run_id=run_id,
        kind="task",
        task_id=tool_call_id,
        title=call_title(name, arguments),
        status=status,
        summary=one_line(summary, SUMMARY_LIMIT),
    )
