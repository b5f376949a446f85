"""The playground's offline demo: a deterministic model and four pretend ops tools.

The model is a real ``llm.AsyncModel`` (registered as ``demo``) that needs no key: it picks a
tool from the request's words and, once results come back, reports them. The tools keep
their pretend state in the playground's own SQLite file, next to the bot's database, so a
restarted playground remembers how many replicas "payments" has.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
import threading
import urllib.request
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import llm
from llm.parts import TextPart, ToolCallPart, ToolResultPart

from bot.pauses import WaitForCallback, callback_url
from playground.demo_words import summarize

log = logging.getLogger(__name__)

DEMO_MODEL_ID = "demo"
SERVICES = ("payments", "checkout", "search", "web", "api")
REGIONS = ("eu-west", "us-east", "ap-south")
# How long the pretend deploy pipeline takes before it reports back to its callback URL.
DEPLOY_SECONDS = 3.0
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
            if isinstance(follow_up, str):
                yield follow_up
                return
            name, arguments = follow_up
            response.add_tool_call(llm.ToolCall(name=name, arguments=arguments))
            yield f"Calling `{name}`."
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
        if call is None:
            yield HELP
            return
        if isinstance(call, str):
            yield call
            return
        name, arguments = call
        response.add_tool_call(llm.ToolCall(name=name, arguments=arguments))
        yield f"Calling `{name}`."


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


# -- the pretend infrastructure ----------------------------------------------------------


# In the playground's --data-dir (the playground sets APPROVAL_BOT_DEMO_STATE); elsewhere (the
# CLI run in that directory, `serve` with the demo tools) in the working directory.
DEMO_STATE_FILE = "playground-state.db"


def _state_path() -> Path:
    return Path(os.environ.get("APPROVAL_BOT_DEMO_STATE", DEMO_STATE_FILE))


def _connect() -> sqlite3.Connection:
    connection = sqlite3.connect(_state_path())
    connection.execute(
        "CREATE TABLE IF NOT EXISTS services (name TEXT PRIMARY KEY, replicas INTEGER, "
        "restarts INTEGER)"
    )
    connection.executemany(
        "INSERT OR IGNORE INTO services VALUES (?, 3, 0)", [(name,) for name in SERVICES]
    )
    connection.commit()
    return connection


def get_status(service: str) -> str:
    """Read the health and replica count of a service. Safe: never needs approval."""
    with _connect() as db:
        row = db.execute(
            "SELECT replicas, restarts FROM services WHERE name = ?", (service,)
        ).fetchone()
    if row is None:
        return f"{service}: no such service (known: {', '.join(SERVICES)})"
    return f"{service}: healthy, {row[0]} replicas, restarted {row[1]} times"


def restart_service(service: str, region: str | None = None) -> str:
    """Restart every replica of a service (in one region, if given). Needs approval."""
    with _connect() as db:
        updated = db.execute(
            "UPDATE services SET restarts = restarts + 1 WHERE name = ?", (service,)
        ).rowcount
    if not updated:
        return f"{service}: no such service"
    return f"restarted {service} in {region}" if region else f"restarted {service}"


def deploy_service(service: str) -> str:
    """Deploy the latest build of a service. The pipeline reports back when it is done."""
    if service not in SERVICES:
        return f"{service}: no such service (known: {', '.join(SERVICES)})"
    url = callback_url()
    pipeline = threading.Timer(DEPLOY_SECONDS, _report_deploy, args=(url, service))
    pipeline.daemon = True
    pipeline.start()
    raise WaitForCallback(f"the deploy of {service}", timeout="10m")


def _report_deploy(url: str, service: str) -> None:
    """The pretend pipeline, a few seconds later: POST its outcome to the callback URL."""
    body = json.dumps({"service": service, "status": "deployed", "build": "2026.11.30-1"})
    request = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
    except OSError as exc:  # the playground stopped meanwhile: nothing to tell
        log.warning("the pretend pipeline could not report the deploy of %s: %s", service, exc)


MAX_REPLICAS = 50


def _scale_service(service: str, replicas: int, env: str = "prod") -> str:
    if not 0 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas must be between 0 and {MAX_REPLICAS}")
    if env == "staging":  # the pretend staging is not kept: it just says so
        return f"scaled {service} to {replicas} replicas in staging"
    with _connect() as db:
        updated = db.execute(
            "UPDATE services SET replicas = ? WHERE name = ?", (replicas, service)
        ).rowcount
    return f"scaled {service} to {replicas} replicas" if updated else f"{service}: no such service"


# A tool with its limits in its schema, so the gate refuses `scale checkout to 100000` before
# anyone is asked to approve it (a function's type hints cannot carry a maximum to llm).
scale_service = llm.Tool(
    name="scale_service",
    description="Change how many replicas of a service run. Needs approval.",
    input_schema={
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "replicas": {"type": "integer", "minimum": 0, "maximum": MAX_REPLICAS},
            "env": {"type": "string", "enum": ["prod", "staging"], "default": "prod"},
        },
        "required": ["service", "replicas"],
    },
    implementation=_scale_service,
)


def rotate_credentials(service: str) -> str:
    """Rotate the database credentials of a service. Two people must approve."""
    if service not in SERVICES:
        return f"{service}: no such service (known: {', '.join(SERVICES)})"
    with _connect() as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS credentials (service TEXT PRIMARY KEY, version INTEGER)"
        )
        db.execute(
            "INSERT INTO credentials VALUES (?, 1) "
            "ON CONFLICT (service) DO UPDATE SET version = version + 1",
            (service,),
        )
        (version,) = db.execute(
            "SELECT version FROM credentials WHERE service = ?", (service,)
        ).fetchone()
    return f"rotated the credentials of {service} (now version {version})"


def run_sql(query: str) -> str:
    """Run a read-only SQL query against the services table."""
    connection = sqlite3.connect(f"file:{_state_path()}?mode=ro", uri=True)
    try:
        _connect().close()  # make sure the table exists
        rows = connection.execute(query).fetchmany(20)
    except sqlite3.Error as exc:
        return f"SQL error: {exc}"
    finally:
        connection.close()
    return json.dumps(rows)


def demo_config_dict(model: str = DEMO_MODEL_ID) -> dict[str, Any]:
    """The playground's configuration: the demo tools and who may approve what."""
    return {
        "model": model,
        "tools": [
            "playground.demo:get_status",
            "playground.demo:restart_service",
            "playground.demo:deploy_service",
            "playground.demo:scale_service",
            "playground.demo:rotate_credentials",
            "playground.demo:run_sql",
            "playground.migrations:migrate_tenants",
        ],
        # A sub-agent with read-only tools: "research payments and checkout".
        "agents": {
            "researcher": {
                "description": "looks up a service's status and the services table, read-only",
                "tools": ["playground.demo:get_status", "playground.demo:run_sql"],
            }
        },
        "approval_ttl": "30m",
        "sweep_interval": "5s",
        # A playground killed with -9 carries its long tool on within seconds of a restart.
        "run_lease": "20s",
        "policies": {
            "restart_service": {
                "approvers": ["U0APPROVER1", "U0APPROVER2"],
                "ttl": "15m",
                # Standing grants: "Approve, and allow restarts in this thread for 30 minutes".
                "grant_max": "1h",
            },
            # Quorum: both bo and cy approve (the requester never counts), then it runs once.
            "rotate_credentials": {
                "approvers": ["U0APPROVER1", "U0APPROVER2"],
                "min_approvals": 2,
                "ttl": "30m",
            },
            "migrate_tenants": {"approvers": ["U0APPROVER1", "U0APPROVER2"], "ttl": "30m"},
            "scale_service": {
                "approvers": ["U0APPROVER1", "U0APPROVER2"],
                "ttl": "15m",
                # Rules on arguments: staging scales without asking anyone.
                "rules": [{"when": 'has(args.env) && args.env == "staging"', "approval": "never"}],
                "allow_edit": True,  # Edit, then approve
            },
        },
    }


def register_demo_model() -> None:
    from bot.llm_setup import register_model

    register_model(DemoModel())
