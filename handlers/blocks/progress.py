"""What a long tool's ``progress()`` shows on the thread's progress message (pure text).

``migrate_tenants: 7,431 / 10,000 (acme)``: the tool, how far it got (with thousands
separators), of how many when it said, and its note, escaped.
"""

from __future__ import annotations

from bot.pauses import ToolProgress
from handlers.blocks.kit import escape, shown_name

NOTE_LIMIT = 200


def tool_progress_text(progress: ToolProgress) -> str:
    done = f"{progress.done:,}"
    if progress.total is not None:
        done = f"{done} / {progress.total:,}"
    text = f"{shown_name(progress.tool_name)}: {done}"
    if progress.note:
        text += f" ({escape(progress.note[:NOTE_LIMIT])})"
    return f":hourglass_flowing_sand: {text}"
