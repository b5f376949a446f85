"""The thread's progress message with an operator's buttons: Pause and Stop while the run
works, Resume (and Stop) while an operator holds it (issue 19 §2).

Pure functions of rows: a button carries only the run's id; who clicked is checked again
when the click is handled (:mod:`handlers.flows.holds`). Reasons are escaped, then cut.
"""

from __future__ import annotations

from typing import Any

from handlers.blocks.kit import button, confirm, escaped_within, mention, slack_date

RUN_PAUSE = "run_pause"
RUN_RESUME = "run_resume"
RUN_STOP = "run_stop"
HOLD_ACTIONS = "run_hold_actions"
# A reason as shown, escaped (the CLI takes any length): well within a section's 3000.
REASON_LIMIT = 500

Block = dict[str, Any]


def _stop_button(run_id: str) -> Block:
    stop = button(RUN_STOP, "Stop", run_id, style="danger")
    stop["confirm"] = confirm(
        "Stop this run?",
        "The run is cancelled (at its next safe point if it is working), and its pending "
        "approvals with it.",
        "Stop",
        danger=True,
    )
    return stop


def working_blocks(text: str, run_id: str) -> list[Block]:
    """A working run's progress message: its text, Pause and Stop."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "block_id": HOLD_ACTIONS,
            "elements": [button(RUN_PAUSE, "Pause", run_id), _stop_button(run_id)],
        },
    ]


def hold_text(requested_by: str, reason: str | None, *, in_effect: bool) -> str:
    """Who paused the run and why; ``in_effect`` False: it pauses at its next safe point."""
    who = mention(requested_by)
    why = f": {escaped_within(reason, REASON_LIMIT)}" if reason else ""
    if not in_effect:
        return f":double_vertical_bar: Pausing at the next safe point (asked by {who}{why})…"
    return f":double_vertical_bar: Paused by {who}{why}. Resume to carry on."


def held_blocks(text: str, run_id: str) -> list[Block]:
    """A held run's progress message: its text, Resume and Stop."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "block_id": HOLD_ACTIONS,
            "elements": [
                button(RUN_RESUME, "Resume", run_id, style="primary"),
                _stop_button(run_id),
            ],
        },
    ]


# Held runs listed in /approvals and the App Home, at most.
HELD_LISTED = 5


def held_run_blocks(held: list[tuple[Any, Any]]) -> list[Block]:
    """ "Paused runs": each run an operator holds (``(run, hold)`` rows), who paused it, since
    when and why, with its Resume button. Empty when there are none."""
    if not held:
        return []
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Paused runs* ({len(held)})"}}
    ]
    for run, hold in held[:HELD_LISTED]:
        why = f": {escaped_within(hold.reason, REASON_LIMIT)}" if hold.reason else ""
        where = f" in <#{run.channel}>" if run.channel else ""
        text = (
            f"`{run.id}`{where}, asked by {mention(run.requester)}: paused by "
            f"{mention(hold.requested_by)} since {slack_date(hold.requested_at)}{why}"
        )
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": text},
                "accessory": button(RUN_RESUME, "Resume", run.id, style="primary"),
            }
        )
    return blocks
