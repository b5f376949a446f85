"""The page's Workflow panel: a workflow whose step is the app's "Request approval", run as
Slack's Workflow Builder would run it, and the step's completion as Slack records it.

The step's definition is read from manifest.yml (``functions``), the one file Slack reads it
from too, and given to the Slack stand-in (``define_functions``), so the outputs the bot
completes with are checked against what the manifest declares. Running the workflow
(``POST /playground/workflow/run``) sends the bot a signed ``function_executed`` with the
form's inputs (``SlackServer.run_function``), the person who ran it as ``requester``, as a
workflow maps "Person who used this workflow". What the panel shows of each run is read from
the stand-in's own record of the execution: running, or the ``functions.completeSuccess`` /
``functions.completeError`` the bot sent ("completed: decision approved, decided_by @bo,
reason …"). Inputs the workflow's form would not take (no title, someone who is not one of
the page's people) are answered 400 and nothing is sent; inputs only the bot judges (a
timeout that is not a duration) reach it, and the step fails as it would in Slack.

manifest.yml is at the top of a checkout (``scripts/playground`` runs from one); an
installed package without it has no Workflow panel, and the page says why. Owns no state:
the runs are the stand-in's executions, forgotten by a reset or a restart (as the channel's
cards are by a reset).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web

from bot.engine.steps import STEP_CALLBACK_ID
from playground.page import ChannelPage, PageError, _ok

if TYPE_CHECKING:
    from playground.slack_server import FunctionExecution

log = logging.getLogger(__name__)

Json = dict[str, Any]

# The repository's top in a checkout (an editable install, as scripts/playground makes).
MANIFEST = Path(__file__).resolve().parents[1] / "manifest.yml"
# The inputs the panel's form sends (the step's other inputs are left unset, as a workflow
# may leave its optional ones); ``requester`` is the person who runs it.
FORM_INPUTS = ("title", "details", "approvers", "channel", "timeout")
RUNS_SHOWN = 20


def manifest_functions(path: Path = MANIFEST) -> tuple[Json, str | None]:
    """The manifest's ``functions``, or ``{}`` and why there are none."""
    try:
        manifest = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return {}, f"{path.name} is not here (the Workflow panel needs a checkout of approval-bot)"
    except (OSError, yaml.YAMLError) as exc:
        return {}, f"{path.name} could not be read: {exc}"
    functions = manifest.get("functions") if isinstance(manifest, dict) else None
    if not isinstance(functions, dict) or STEP_CALLBACK_ID not in functions:
        return {}, f"{path.name} declares no functions.{STEP_CALLBACK_ID}"
    return functions, None


class WorkflowRoutes:
    """The panel's part of the page's state, and its one action: run the workflow."""

    def __init__(self, page: ChannelPage, unavailable: str | None = None) -> None:
        self.page = page
        self.unavailable = unavailable

    @property
    def definition(self) -> Json | None:
        return self.page.server.function_definitions.get(STEP_CALLBACK_ID)

    def _at(self, user: Any) -> str:
        """``@bo`` for one of the page's people, else the id as sent ("?" for none)."""
        name = self.page.names.get(user) if isinstance(user, str) else None
        return f"@{name}" if name else str(user or "?")

    def state(self) -> Json:
        """The step's definition and the newest runs, each with what completed it."""
        definition = self.definition
        if definition is None:
            why = self.unavailable or f"the stand-in has no {STEP_CALLBACK_ID} function"
            return {"available": False, "why": why, "runs": []}
        executions = [
            e
            for e in self.page.server.function_executions.values()
            if e.callback_id == STEP_CALLBACK_ID
        ]
        runs = [self._run_json(e) for e in reversed(executions[-RUNS_SHOWN:])]
        return {
            "available": True,
            "title": definition.get("title", STEP_CALLBACK_ID),
            "description": definition.get("description", ""),
            "runs": runs,
        }

    def _run_json(self, execution: FunctionExecution) -> Json:
        inputs = execution.inputs
        approvers = inputs.get("approvers") or []
        return {
            "id": execution.id,
            "title": str(inputs.get("title") or ""),
            "details": str(inputs.get("details") or ""),
            "requester": self._at(inputs.get("requester")),
            "approvers": [self._at(a) for a in approvers] if isinstance(approvers, list) else [],
            "channel": "#" + self.page.server.channels.get(str(inputs.get("channel")), "?"),
            "timeout": str(inputs.get("timeout") or ""),
            "state": execution.state,
            "method": execution.completions[-1]["method"] if execution.completions else None,
            "completion": self.completion_text(execution),
        }

    def completion_text(self, execution: FunctionExecution) -> str:
        """The step's end as Slack records it: its outputs, or its error."""
        if execution.state == "completed":
            parts = []
            for name, value in (execution.outputs or {}).items():
                if name == "decided_by":
                    parts.append(f"{name} {self._at(value)}")
                elif name == "reason":
                    parts.append(f'{name} "{value}"' if value else f"{name} (none)")
                else:
                    parts.append(f"{name} {value}")
            return "completed: " + ", ".join(parts)
        if execution.state == "failed":
            return f"failed: {execution.error}"
        return "running: waiting for a decision on the card"

    def _inputs(self, user: str, body: Json) -> Json:
        """The form's inputs as the workflow would send them; PageError for what it refuses."""
        definition = self.definition or {}
        declared: Json = definition.get("input_parameters") or {}
        inputs: Json = {}
        for name in ("title", "details", "timeout"):
            value = body.get(name)
            if value is not None and not isinstance(value, str):
                raise PageError(400, f"{name} must be text")
            if value and value.strip():
                inputs[name] = value.strip()
        approvers = body.get("approvers")
        if isinstance(approvers, str):
            approvers = [approvers]
        if approvers is not None and not isinstance(approvers, list):
            raise PageError(400, "approvers must be a list of people")
        known = ", ".join(f"{p.name} ({p.id})" for p in self.page.people)
        for approver in approvers or []:
            if approver not in self.page.names:
                raise PageError(400, f"unknown approver {str(approver)[:40]!r}; one of {known}")
            if approver == user:
                raise PageError(
                    400, f"{self.page.names[user]} runs the workflow, so cannot approve it too"
                )
        if approvers:
            inputs["approvers"] = list(dict.fromkeys(approvers))
        channel = body.get("channel") or self.page.channel
        if channel != self.page.channel:
            ops = f"#{self.page.channel_name} ({self.page.channel})"
            raise PageError(400, f"the channel must be {ops}, the playground's one channel")
        inputs["channel"] = channel
        for name in FORM_INPUTS:
            spec = declared.get(name) or {}
            if spec.get("is_required") and name not in inputs:
                label = spec.get("title") or name
                raise PageError(400, f"{label} is required: the step's definition says so")
        inputs["requester"] = user
        return inputs

    async def post_run(self, request: web.Request) -> web.Response:
        """Run the workflow: its step sends the bot ``function_executed``."""
        body = await self.page._body(request)
        user = self.page._person(body.get("user"))
        if self.definition is None:
            raise PageError(404, f"no Workflow panel here: {self.state()['why']}")
        inputs = self._inputs(user, body)
        reply = await self.page._drive(
            self.page.server.run_function(STEP_CALLBACK_ID, inputs), "workflow step"
        )
        log.info("playground: %s ran the workflow (execution %s)", user, reply.execution_id)
        return _ok("started", reply, execution_id=reply.execution_id)
