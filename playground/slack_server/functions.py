"""Custom steps (Slack "functions"): running one as a workflow would, and
``functions.completeSuccess`` / ``functions.completeError`` with Slack's rules.

Slack runs an app's custom step by sending ``function_executed`` (the function's definition,
its ``inputs``, a ``function_execution_id``, the workflow's execution id and a
``bot_access_token`` for this execution, the shape of docs.slack.dev's
reference/events/function_executed). The execution then waits until the app completes it,
once: a second completion is refused ``execution_not_in_running_state``, an unknown id
``function_execution_not_found``, outputs that do not match the function's
``output_parameters`` ``parameter_validation_failed``. The execution's token works like a bot
token of its workspace while the execution runs and is refused ``invalid_auth`` after.

Functions are defined from the app manifest's ``functions`` (``define_functions``), so the
stand-in checks the outputs the bot sends against what manifest.yml declares.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import secrets
import time
from typing import Any, Unpack

from playground.slack_server.records import (
    BotReply,
    DeliveryOptions,
    Json,
    _ApiError,
    _arg,
    _random_id,
)

_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]+$")


@dataclasses.dataclass
class FunctionExecution:
    """One run of a custom step: ``state`` running, completed or failed; what completed it."""

    id: str
    workflow_execution_id: str
    callback_id: str
    team_id: str
    token: str
    inputs: Json
    state: str = "running"
    outputs: Json | None = None
    error: str | None = None
    # Every completeSuccess / completeError accepted for it (Slack accepts one).
    completions: list[Json] = dataclasses.field(default_factory=list)


def _parameters(declared: Json) -> list[Json]:
    """A manifest's ``input_parameters`` / ``output_parameters`` as the event lists them."""
    listed = []
    for name, spec in declared.items():
        entry = {"name": name, **copy.deepcopy(spec)}
        entry.setdefault("is_required", False)
        listed.append(entry)
    return listed


def _type_problem(name: str, spec: Json, value: Any) -> str | None:
    kind = spec.get("type")
    if kind == "string" and not isinstance(value, str):
        return f"{name} must be a string"
    if kind == "slack#/types/user_id" and not (isinstance(value, str) and _USER_ID.match(value)):
        return f"{name} must be a user id"
    if kind == "slack#/types/channel_id" and not (
        isinstance(value, str) and _CHANNEL_ID.match(value)
    ):
        return f"{name} must be a channel id"
    if kind == "array":
        if not isinstance(value, list):
            return f"{name} must be an array"
        items = spec.get("items") or {}
        for item in value:
            problem = _type_problem(f"{name}[]", items, item)
            if problem:
                return problem
    if "enum" in spec and value not in spec["enum"]:
        return f"{name} must be one of {spec['enum']}"
    return None


class FunctionsMixin:
    """Custom steps: definitions, executions, ``function_executed`` and ``functions.*``.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _init_functions(self) -> None:
        self.function_definitions: dict[str, Json] = {}
        self.function_executions: dict[str, FunctionExecution] = {}
        self._execution_tokens: dict[str, str] = {}  # token -> execution id
        self._expired_execution_tokens: set[str] = set()

    def define_functions(self, functions: Json) -> None:
        """The app manifest's ``functions`` (callback_id -> title, description, parameters)."""
        for callback_id, definition in functions.items():
            self.function_definitions[callback_id] = copy.deepcopy(definition)

    def forget_function_executions(self) -> None:
        """Forget every execution and its token (the playground's "reset demo")."""
        self.function_executions.clear()
        self._execution_tokens.clear()
        self._expired_execution_tokens.clear()

    def expire_execution_token(self, execution_id: str) -> None:
        """The execution's token is refused ``token_expired`` from now on (a test of what the
        app does when the token it stored no longer works; the execution still runs)."""
        self._expired_execution_tokens.add(self.function_executions[execution_id].token)

    def _team_of_token(self, token: str) -> str | None:
        if token in self._expired_execution_tokens:
            raise _ApiError("token_expired")
        execution_id = self._execution_tokens.get(token)
        if execution_id is not None:
            execution = self.function_executions[execution_id]
            if execution.state != "running":
                raise _ApiError("invalid_auth")  # a JIT token lives as long as its execution
            return execution.team_id
        return super()._team_of_token(token)  # type: ignore[misc]

    # -- running a step -------------------------------------------------------------------------

    def function_executed_payload(
        self, callback_id: str, inputs: Json, *, team_id: str | None = None
    ) -> tuple[FunctionExecution, Json]:
        """Start an execution of ``callback_id`` and build its ``function_executed`` event."""
        definition = self.function_definitions.get(callback_id)
        if definition is None:
            raise LookupError(f"no function {callback_id!r}: call define_functions first")
        team = team_id or self.team_id  # type: ignore[attr-defined]
        execution = FunctionExecution(
            id=_random_id("Fx"),
            workflow_execution_id=_random_id("Wx"),
            callback_id=callback_id,
            team_id=team,
            token="xwfp-" + secrets.token_hex(16),
            inputs=copy.deepcopy(inputs),
        )
        self.function_executions[execution.id] = execution
        self._execution_tokens[execution.token] = execution.id
        now = int(time.time())
        event = {
            "type": "function_executed",
            "function": {
                "id": "Fn" + callback_id.upper()[:10],
                "callback_id": callback_id,
                "title": definition.get("title", callback_id),
                "description": definition.get("description", ""),
                "type": "app",
                "input_parameters": _parameters(definition.get("input_parameters") or {}),
                "output_parameters": _parameters(definition.get("output_parameters") or {}),
                "app_id": self.app_id,  # type: ignore[attr-defined]
                "date_created": now,
                "date_updated": now,
                "date_deleted": 0,
            },
            "inputs": copy.deepcopy(inputs),
            "function_execution_id": execution.id,
            "workflow_execution_id": execution.workflow_execution_id,
            "event_ts": f"{time.time():.6f}",
            "bot_access_token": execution.token,
        }
        payload = self._event_callback(event, _random_id("Ev"), team_id=team)  # type: ignore[attr-defined]
        return execution, payload

    async def run_function(
        self,
        callback_id: str,
        inputs: Json,
        *,
        team_id: str | None = None,
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """A workflow reaches the app's step: ``function_executed`` is sent, signed.
        ``reply.execution_id`` names the execution (``function_executions``)."""
        execution, payload = self.function_executed_payload(callback_id, inputs, team_id=team_id)
        reply: BotReply = await self.send_event(payload, **delivery)  # type: ignore[attr-defined]
        reply.execution_id = execution.id
        return reply

    # -- functions.* ----------------------------------------------------------------------------

    def _running_execution(self, args: Json) -> FunctionExecution:
        execution_id = _arg(args, "function_execution_id")
        execution = self.function_executions.get(execution_id)
        if execution is None:
            raise _ApiError("function_execution_not_found")
        call = self._current_call  # type: ignore[attr-defined]
        if call is not None and call.team != execution.team_id:
            raise _ApiError("function_execution_not_found")  # another workspace's
        if execution.state != "running":
            raise _ApiError("execution_not_in_running_state")
        return execution

    def _api_functions_complete_success(self, args: Json) -> Json:
        execution = self._running_execution(args)
        outputs = args.get("outputs")
        if not isinstance(outputs, dict):
            raise _ApiError("invalid_arguments")
        declared = self.function_definitions[execution.callback_id].get("output_parameters") or {}
        errors = [f"{name}: unknown output parameter" for name in outputs if name not in declared]
        for name, spec in declared.items():
            if name not in outputs:
                if spec.get("is_required"):
                    errors.append(f"{name}: required output parameter missing")
                continue
            problem = _type_problem(name, spec, outputs[name])
            if problem:
                errors.append(problem)
        if errors:
            raise _ApiError("parameter_validation_failed", errors=errors)
        execution.state, execution.outputs = "completed", copy.deepcopy(outputs)
        execution.completions.append({"method": "functions.completeSuccess", "outputs": outputs})
        return {"ok": True}

    def _api_functions_complete_error(self, args: Json) -> Json:
        execution = self._running_execution(args)
        error = _arg(args, "error")
        execution.state, execution.error = "failed", error
        execution.completions.append({"method": "functions.completeError", "error": error})
        return {"ok": True}
