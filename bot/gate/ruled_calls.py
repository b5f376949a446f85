"""Calls a rule on arguments decides without asking anyone: run them, or refuse them.

``approval = "never"`` (from a rule, or a tool whose rules did not match) runs the call as an
ungated tool runs; ``approval = "deny"`` refuses it with the policy's ``message``, which the
model reads as the call's result. When a rule decided, the match is audited first (who asked,
which rule, what it decided) so a call that ran or was refused without a card still leaves a
trace. Owns no state of its own; the audit rows are storage's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.gate.texts import refusal_text
from bot.policy import Policy

if TYPE_CHECKING:
    from bot.gate.turn import TurnContext


async def ruled_call(
    turn: TurnContext, tool_name: str, policy: Policy, run: Callable[[], Awaitable[Any]]
) -> Any:
    """The result of a call whose effective policy is "never" (``run`` it) or "deny"."""
    if policy.rule is not None:
        await turn.repo.record_rule_match(
            turn.run_id,
            actor=turn.requester,
            tool=tool_name,
            rule=policy.rule,
            when=policy.rule_when,
            approval=policy.approval,
            error=policy.rule_error,
            now=turn.clock(),
        )
    if policy.approval == "never":
        return await run()
    return refusal_text(tool_name, policy)
