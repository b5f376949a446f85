"""The demo's model: a real ``llm.AsyncModel`` (``demo``) that needs no key and no network.

It picks a tool from the request's words and, once results come back, reports them
(worded by :mod:`playground.demo_words`). It is deterministic, so the browser tests and the
playground's walkthrough see the same calls every time, and it never makes an argument up:
what a request does not name it asks for (``ask_user``) or says it needs. Holds no state:
everything it knows is in the conversation ``llm`` hands it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import llm
from llm.parts import TextPart, ToolCallPart, ToolResultPart

from playground.demo_words import summarize

DEMO_MODEL_ID = "demo"
SERVICES = ("payments", "checkout", "search", "web", "api")
REGIONS = ("eu-west", "us-east", "ap-south")
HELP = (
    "I'm the offline demo agent. Try: `@approval-bot status of payments`, "
    "`@approval-bot restart payments`, `@approval-bot restart search by region` (I ask you "
    "which), `@approval-bot deploy web` (its pipeline reports back in a few seconds), "
    "`@approval-bot scale checkout to 5` (an approver may edit it before approving; "
    "`… in staging` needs nobody's approval), "
    "`@approval-bot rotate credentials of payments` (two people approve) or "
    "`@approval-bot sql select name, replicas from services` or "
    "`@approval-bot migrate tenants` (long: stop the playground half-way, it carries on) or "
    "`@approval-bot research payments and checkout` (a researcher sub-agent looks each up, "
    "at the same time)."
)


# Between two words of the demo's answer, so the playground shows it streaming.
STREAM_PAUSE = 0.02


class DemoModel(llm.AsyncModel):
    model_id = DEMO_MODEL_ID
    supports_tools = True
    can_stream = True

    async def execute(
        self, prompt: Any, stream: bool, response: Any, conversation: Any = None
    ) -> AsyncGenerator[str, None]:
        messages = list(prompt.messages)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        results = [
            part
            for message in messages[last_user + 1 :]
            if message.role == "tool"
            for part in message.parts
            if isinstance(part, ToolResultPart)
        ]
        text = ""
        if last_user >= 0:
            text = _text_of(messages[last_user])
        # What the thread said before, newest first: "now restart it" means its service.
        earlier = [_said(m) for m in reversed(messages[: max(last_user, 0)])]
        can_ask = any(getattr(t, "name", None) == "ask_user" for t in prompt.tools or [])
        if results:
            follow_up = after_question(text, results, earlier)
            if follow_up is None:
                # Word by word, as a model writes: the thread shows the answer streaming.
                for word in re.findall(r"\S+\s*|\s+", summarize(results)):
                    await asyncio.sleep(STREAM_PAUSE)
                    yield word
                return
            yield _reply(response, follow_up)
            return
        can_delegate = any(getattr(t, "name", None) == "delegate" for t in prompt.tools or [])
        tasks = research_tasks(text) if can_delegate else []
        if tasks:
            # Sub-agents (issue 20 section 1): one researcher per service, concurrently.
            for task in tasks:
                arguments = {"agent": "researcher", "task": task}
                response.add_tool_call(llm.ToolCall(name="delegate", arguments=arguments))
            yield f"Asking the researcher about {len(tasks)} service(s)."
            return
        call = choose_tool(text, earlier, can_ask=can_ask)
        yield HELP if call is None else _reply(response, call)


def _reply(response: Any, call: tuple[str, dict[str, Any]] | str) -> str:
    """The demo's words for what it chose: text as it is; a tool call added and named."""
    if isinstance(call, str):
        return call
    name, arguments = call
    response.add_tool_call(llm.ToolCall(name=name, arguments=arguments))
    return f"Calling `{name}`."


def _text_of(message: Any) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


def _said(message: Any) -> str:
    """A person's words, the arguments of tool calls and tools' results (not the demo's own
    words: its help names every service)."""
    said = []
    for part in message.parts:
        if isinstance(part, TextPart) and message.role == "user":
            said.append(part.text)
        elif isinstance(part, ToolCallPart):
            said.append(json.dumps(part.arguments))
        elif isinstance(part, ToolResultPart):
            said.append(str(part.output))
    return " ".join(said)


def research_tasks(text: str) -> list[str]:
    """ "research payments and checkout": a researcher's task per service named."""
    lowered = text.lower()
    if not re.search(r"\bresearch\b", lowered):
        return []
    named = [s for s in SERVICES if re.search(rf"\b{s}\b", lowered)]
    return [f"status of {service}" for service in named]


# The question the demo asks when a request names no service; its answer names one.
WHICH_SERVICE = "Which service should I {verb}?"


def after_question(
    text: str,
    results: list[ToolResultPart],
    earlier: Sequence[str] = (),
) -> tuple[str, dict[str, Any]] | str | None:
    """After a question was answered: the call it was asked for (a restart in the chosen
    region, the request with the chosen service), or why nothing is done (text); None when
    no question is waiting for its follow-up."""
    answers = [r.output for r in results if r.name == "ask_user"]
    if not answers or any(r.name != "ask_user" for r in results):
        return None
    answer = str(answers[-1]).strip()
    # The request with what was answered before this answer ("restart by region": which
    # service, then which region).
    asked = " ".join([text, *(str(a).strip() for a in answers[:-1])])
    if re.search(r"\bregions?\b", asked.lower()) and _service(asked.lower()) is not None:
        if answer not in REGIONS:
            return f"No region was chosen ({answer}), so I restarted nothing."
        return "restart_service", {"service": _service(asked.lower()), "region": answer}
    if answer not in SERVICES:
        return f"No service was chosen ({answer}), so I did nothing."
    call = choose_tool(f"{asked} {answer}", earlier)
    return call if call is not None else f"I don't know what to do with {answer}."


def choose_tool(
    text: str,
    earlier: Sequence[str] = (),
    *,
    can_ask: bool = True,
) -> tuple[str, dict[str, Any]] | str | None:
    """The tool call a request's words ask for, if any; or what the demo needs to know (an
    ask_user call, or text when it cannot ask). It never makes an argument up: a service
    comes from the request, else from what the thread said before ("restart it")."""
    lowered = text.lower()
    sql = re.search(r"\b(?:sql|query)\b[:\s]*(.+)$", text, re.IGNORECASE | re.DOTALL)
    if sql or lowered.strip().startswith("select "):
        query = sql.group(1).strip() if sql else text.strip()
        return "run_sql", {"query": query}
    if re.search(r"\bmigrat(e|ion)\b", lowered):
        return "migrate_tenants", {"count": 200}  # playground.migrations: long, checkpointed
    scale = re.search(r"\bscale\b(?:.*?\bto\s+(\d+))?", lowered)
    if scale:
        verb = "scale"
    elif re.search(r"\brotate\b", lowered):
        verb = "rotate"
    elif re.search(r"\b(restart|reboot|bounce)\b", lowered):
        verb = "restart"
    elif re.search(r"\b(deploy|ship|release)\b", lowered):
        verb = "deploy"
    elif re.search(r"\b(status|health|how is|check)\b", lowered):
        verb = "check"
    else:
        return None
    service = _service(lowered) or next(
        (found for t in earlier if (found := _service(t.lower(), known_only=True))), None
    )
    if service is None:
        question = WHICH_SERVICE.format(verb=verb)
        if can_ask:
            return "ask_user", {"question": question, "choices": list(SERVICES)}
        return f"{question} Say it with the request, e.g. `@approval-bot {verb} payments`."
    if verb == "scale":
        if scale is None or scale.group(1) is None:
            return (
                f"How many replicas should {service} have? Say "
                f"`@approval-bot scale {service} to 5`."
            )
        arguments: dict[str, Any] = {"service": service, "replicas": int(scale.group(1))}
        if re.search(r"\bstaging\b", lowered):
            arguments["env"] = "staging"  # a rule lets staging scale without asking
        return "scale_service", arguments
    if verb == "restart":
        if re.search(r"\bregions?\b", lowered):
            # A person has to say which: the agent asks, then restarts there (approved).
            question = f"Restart {service} in which region?"
            if not can_ask:
                return f"{question} ({', '.join(REGIONS)})"
            return "ask_user", {"question": question, "choices": list(REGIONS)}
        return "restart_service", {"service": service}
    if verb == "deploy":
        return "deploy_service", {"service": service}
    if verb == "rotate":
        return "rotate_credentials", {"service": service}
    return "get_status", {"service": service}


# Words after a verb that name no service: "restart it", "restart it now", "check the…".
NOT_A_SERVICE = frozenset(
    {"it", "this", "that", "them", "these", "those", "one", "all", "everything", "again"}
    | {"please", "now", "the", "a", "an", "my", "our", "service", "services", "to", "in", "by"}
    | {"credentials", "credential", "secrets", "keys", "password", "passwords", "of", "for"}
)


def _service(lowered: str, *, known_only: bool = False) -> str | None:
    """The service a request names: a known one, else the word after its verb (an unknown
    service is the tool's to refuse), else None (nothing named: ask, never guess)."""
    for name in SERVICES:
        if re.search(rf"\b{name}\b", lowered):
            return name
    if known_only:
        return None
    verb = re.search(
        r"\b(?:restart|reboot|bounce|scale|deploy|ship|release|status of|check|rotate)"
        r"\s+([a-z][\w-]*)",
        lowered,
    )
    if verb is None or verb.group(1) in NOT_A_SERVICE:
        return None
    return verb.group(1)
