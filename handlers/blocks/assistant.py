"""What the agent pane says: the greeting and its suggested prompts, the status lines while a
run works or waits, the "Waiting for @bo" line, and the answer to "What did I approve today?".

Pure text from rows, as every module here: the Slack calls are :mod:`handlers.slack.assistant`'s
and the choices (which prompt, which run) :mod:`handlers.flows.assistant`'s. Slack shows a
status as "<app name> is working on …", so each status starts with "is"; it is plain text (no
mentions render there), so it names people by name, and the thread line by mention.
"""

from __future__ import annotations

from handlers.blocks.cards import approvers_text, ran_text
from handlers.blocks.edits import current_arguments
from handlers.blocks.kit import escaped_arguments, shown_name
from storage.models import Approval

WAITING_FOR_ME = "What is waiting for me?"
MY_REQUESTS = "My open requests"
APPROVED_TODAY = "What did I approve today?"
# Slack shows at most four; each is a title and the message it sends when clicked.
SUGGESTED_PROMPTS = [
    {"title": WAITING_FOR_ME, "message": WAITING_FOR_ME},
    {"title": MY_REQUESTS, "message": MY_REQUESTS},
    {"title": APPROVED_TODAY, "message": APPROVED_TODAY},
]
GREETING = (
    "Hi! Tell me what you need done, like `restart payments`: I run it with the tools your "
    "team set up, and ask the approvers first where a policy says so."
)
PROMPTS_TITLE = "Ask me, or try:"
EMPTY_REQUEST = "Tell me what you need, for example `restart payments`."
# Slack cuts a status and a title; a long request is cut here, on a word where one fits.
STATUS_REQUEST_LIMIT = 60
TITLE_LIMIT = 200
APPROVED_LISTED = 20


def prompt_of(text: str) -> str | None:
    """Which suggested prompt ``text`` is (as clicked, or typed with other case or
    punctuation), or None for a request to run."""
    wanted = _normalized(text)
    for prompt in (WAITING_FOR_ME, MY_REQUESTS, APPROVED_TODAY):
        if _normalized(prompt) == wanted:
            return prompt
    return None


def _normalized(text: str) -> str:
    return " ".join(text.lower().strip().rstrip("?.!").split())


def cut(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    return line[: limit - 1].rstrip() + "…"


def working_status(request: str) -> str:
    """While the run works: "is working on “restart payments”…"."""
    return f"is working on “{cut(request, STATUS_REQUEST_LIMIT)}”…"


def running_status(call: str) -> str:
    """While a tool call runs: "is running restart_service(service="payments")…"."""
    return f"is running {cut(call, STATUS_REQUEST_LIMIT + 20)}…"


def waiting_status(names: list[str]) -> str:
    """While it waits: "is waiting for approval from Bo Lee"."""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"is waiting for approval from {shown}" if shown else "is waiting for a decision"


def title_of(request: str) -> str:
    return cut(request, TITLE_LIMIT) or "Request"


def waiting_line(approval: Approval, link: str | None) -> str:
    """The pane's line under a new card: who it waits for, and where the card is."""
    call = f"`{shown_name(approval.tool_name)}`"
    where = f" <{link}|See the card>" if link else ""
    return f":hourglass_flowing_sand: {call}: waiting for {approvers_text(approval, 500)}.{where}"


# Under a card no one else can see: a pane approval naming nobody, no assistant_cards_channel.
UNSEEN_CARD = (
    ":warning: Nobody else can see this card: set `assistant_cards_channel` or name approvers "
    "for this tool's policy."
)


def approved_today_text(approvals: list[Approval]) -> str:
    """The answer to "What did I approve today?"."""
    if not approvals:
        return "You have approved nothing today (UTC)."
    lines = [f"You approved {len(approvals)} call{'s' if len(approvals) != 1 else ''} today (UTC):"]
    for approval in approvals[:APPROVED_LISTED]:
        shown, _ = escaped_arguments(current_arguments(approval))
        lines.append(f"• `{shown_name(approval.tool_name)}` `{shown}`: {ran_text(approval)}")
    if len(approvals) > APPROVED_LISTED:
        lines.append(f"… and {len(approvals) - APPROVED_LISTED} more")
    return "\n".join(lines)
