"""The approval gate: the one place that turns a decision into a tool result.

Every configured tool is wrapped in the gate (:func:`wrap_tools`) before the model sees it, so
every path that executes a tool passes here. A call its policy gates pauses the chain with a
row drafted for it; when the chain resumes, the same call re-executes through llm and the gate
answers it from its row: runs the approved call once (:mod:`bot.gate.answers`), or returns the
decision, an answer, a callback's body or a retry (:mod:`bot.gate.pausing`,
:mod:`bot.gate.pause_rows`). Rules that decide a call alone (:mod:`bot.gate.ruled_calls`) and
standing grants (:mod:`bot.gate.granted`) are tried first. :mod:`bot.gate.texts` holds every
sentence the model reads about a call; :mod:`bot.gate.turn` the drive's context and what the
gate raises.
"""

from bot.gate.answers import answer_unconfigured
from bot.gate.gate import gated_tool, wrap_tools
from bot.gate.safe_points import HoldRequested, check_hold, hold_at_safe_point, hold_requested
from bot.gate.texts import decision_text, edit_note, pause_text, refusal_text, unknown_text
from bot.gate.tool_calls import PreparedTool, call_tool
from bot.gate.turn import (
    ApprovalRequired,
    GateFailure,
    HandedOver,
    ToolRaised,
    TurnContext,
    current_turn,
)

__all__ = [
    "ApprovalRequired",
    "GateFailure",
    "HandedOver",
    "HoldRequested",
    "PreparedTool",
    "ToolRaised",
    "TurnContext",
    "answer_unconfigured",
    "call_tool",
    "check_hold",
    "current_turn",
    "decision_text",
    "edit_note",
    "gated_tool",
    "hold_at_safe_point",
    "hold_requested",
    "pause_text",
    "refusal_text",
    "unknown_text",
    "wrap_tools",
]
