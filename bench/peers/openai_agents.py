"""The OpenAI Agents SDK: a FunctionTool with ``needs_approval``, its RunState in one row.

The run stops with an interruption; ``RunState.to_string()`` (the SDK's serialized state) goes
into a row; the decision is a conditional UPDATE of that row; the resume reads it back
(``RunState.from_string``), approves the interruption and runs on; the answer and the
conversation (``to_input_list()``) go into the row. Three commits, as raw ``llm``. No tracing
(it would call OpenAI), no network: the model is a fake ``Model``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunConfig,
    Runner,
    RunState,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import assistant_message, function_call

from bench import engine_cycle
from bench.peers.common import ModelClock, connect
from bot.config.models import DEFAULT_SYSTEM_PROMPT

CLOCK = ModelClock()

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    decided_by TEXT,
    answer TEXT,
    conversation TEXT
)
"""


class FakeModel(Model):
    """Calls ``restart_service`` once, then answers with the tool's result (as BenchModel)."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        **_: Any,
    ) -> ModelResponse:
        with CLOCK.timing():
            last = input[-1] if isinstance(input, list) else {"content": input}
            if isinstance(last, dict) and last.get("type") == "function_call_output":
                output = assistant_message(f"Done: {last['output']}")
            else:
                service = str(last["content"]).split()[-1]
                output = function_call(
                    "restart_service", {"service": service}, call_id=f"call_{service}"
                )
            return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the benchmark does not stream")


@function_tool(needs_approval=True)
async def restart_service(service: str) -> str:
    """Restart a service."""
    return engine_cycle.restarted(service)


class OpenAIAgents:
    name = "OpenAI Agents SDK, RunState in one row"
    durability = "its connection's PRAGMA synchronous"

    def __init__(self) -> None:
        self.connection: sqlite3.Connection | None = None
        self.measuring = False
        self._paused_bytes = 0
        set_tracing_disabled(True)
        self.agent = Agent(
            name="ops",
            instructions=DEFAULT_SYSTEM_PROMPT,
            model=FakeModel(),
            tools=[restart_service],
        )
        self.run_config = RunConfig(tracing_disabled=True)

    async def open(self, directory: Path, synchronous: str) -> None:
        self.connection = connect(directory / "openai-agents.db", synchronous)
        self.connection.execute(SCHEMA)
        self.connection.commit()

    async def cycle(self, i: int) -> float:
        connection = self.connection
        assert connection is not None
        run_id = f"run{i}"
        model_before = CLOCK.seconds
        started = time.perf_counter()
        # Pause: the tool needs approval, the run stops with an interruption; store the state.
        paused = await Runner.run(self.agent, f"restart svc{i}", run_config=self.run_config)
        assert paused.interruptions, paused
        state_string = paused.to_state().to_string()
        self._paused_bytes = len(state_string)
        connection.execute(
            "INSERT INTO runs (id, status, state) VALUES (?, 'paused', ?)", (run_id, state_string)
        )
        connection.commit()
        # Decide: a conditional UPDATE of the row.
        cursor = connection.execute(
            "UPDATE runs SET status = 'approved', decided_by = ?"
            " WHERE id = ? AND status = 'paused'",
            ("U0APPROVER", run_id),
        )
        assert cursor.rowcount == 1
        connection.commit()
        # Resume: the stored state, approved, runs on.
        (stored,) = connection.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
        state = await RunState.from_string(self.agent, stored)
        for interruption in state.get_interruptions():
            state.approve(interruption)
        done = await Runner.run(self.agent, state, run_config=self.run_config)
        assert done.final_output == f"Done: restarted svc{i}", done.final_output
        connection.execute(
            "UPDATE runs SET status = 'completed', answer = ?, conversation = ? WHERE id = ?",
            (done.final_output, json.dumps(done.to_input_list()), run_id),
        )
        connection.commit()
        return time.perf_counter() - started - (CLOCK.seconds - model_before)

    async def stored_at_pause(self) -> int | None:
        """RunState.to_string(): the SDK's serialized state, in the row."""
        return self._paused_bytes

    async def settle(self) -> None:
        """Nothing runs on its connection between cycles."""

    def connections(self) -> list[sqlite3.Connection]:
        return [self.connection] if self.connection is not None else []

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
