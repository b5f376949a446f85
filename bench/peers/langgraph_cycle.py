"""LangGraph with its SQLite checkpointer (SqliteSaver): ``interrupt()`` for the approval.

The graph is the smallest that does the cycle: ``agent`` (a fake chat model) asks for
``restart_service``; ``review`` calls ``interrupt()`` with the call, and once resumed with
``Command(resume=...)`` runs the tool if approved; back to ``agent``, which answers. The
decision is not stored apart from the checkpoint: it travels in the resume command.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from bench import engine_cycle
from bench.peers.common import ModelClock, connect
from bot.config.models import DEFAULT_SYSTEM_PROMPT

CLOCK = ModelClock()


class FakeChatModel(BaseChatModel):
    """Calls ``restart_service`` once, then answers with the tool's result (as BenchModel)."""

    @property
    def _llm_type(self) -> str:
        return "bench-deterministic"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        with CLOCK.timing():
            last = messages[-1]
            if isinstance(last, ToolMessage):
                message = AIMessage(content=f"Done: {last.content}")
            else:
                service = str(last.content).split()[-1]
                message = AIMessage(
                    content="Restarting.",
                    tool_calls=[
                        {"name": "restart_service", "args": {"service": service}, "id": "call_1"}
                    ],
                )
            return ChatResult(generations=[ChatGeneration(message=message)])


def build_graph(saver: SqliteSaver) -> Any:
    model = FakeChatModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "review" if isinstance(last, AIMessage) and last.tool_calls else END

    def review(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
        decision = interrupt({"tool": call["name"], "arguments": call["args"]})
        if decision["approved"]:
            output = engine_cycle.restarted(**call["args"])
        else:
            output = f"Denied by {decision['actor']}"
        return {"messages": [ToolMessage(content=output, tool_call_id=call["id"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("review", review)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["review", END])
    builder.add_edge("review", "agent")
    return builder.compile(checkpointer=saver)


class LangGraph:
    """``durability`` None is LangGraph's default ("async": each step's checkpoint is written
    while the next step runs); "exit" writes only when the graph stops (here: at the
    interrupt and at the end)."""

    def __init__(self, durability: str | None) -> None:
        self.mode = durability
        label = "default durability" if durability is None else f'durability "{durability}"'
        self.name = f"LangGraph, SqliteSaver, {label}"
        self.durability = "PRAGMA synchronous on the connection given to SqliteSaver"
        self.connection: sqlite3.Connection | None = None
        self.graph: Any = None
        self.measuring = False
        self._paused_bytes: int | None = None

    async def open(self, directory: Path, synchronous: str) -> None:
        name = "default" if self.mode is None else self.mode
        self.connection = connect(directory / f"langgraph-{name}.db", synchronous)
        saver = SqliteSaver(self.connection)
        saver.setup()
        self.graph = build_graph(saver)

    async def cycle(self, i: int) -> float:
        config = {"configurable": {"thread_id": f"run{i}"}}
        options: dict[str, Any] = {} if self.mode is None else {"durability": self.mode}
        model_before = CLOCK.seconds
        started = time.perf_counter()
        request = [SystemMessage(DEFAULT_SYSTEM_PROMPT), HumanMessage(f"restart svc{i}")]
        paused = self.graph.invoke({"messages": request}, config, **options)
        assert "__interrupt__" in paused, paused
        if self.measuring:
            self._paused_bytes = self._thread_bytes(f"run{i}")
        done = self.graph.invoke(
            Command(resume={"approved": True, "actor": "U0APPROVER"}), config, **options
        )
        assert done["messages"][-1].content == f"Done: restarted svc{i}", done
        return time.perf_counter() - started - (CLOCK.seconds - model_before)

    def _thread_bytes(self, thread_id: str) -> int:
        """The checkpoints and pending writes stored for a thread (LangGraph keeps them all)."""
        assert self.connection is not None
        (checkpoints,) = self.connection.execute(
            "SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints"
            " WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()
        (writes,) = self.connection.execute(
            "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        return int(checkpoints) + int(writes)

    async def stored_at_pause(self) -> int | None:
        """Its checkpoints and pending writes for the paused thread."""
        return self._paused_bytes

    async def settle(self) -> None:
        """Nothing runs on its connection between cycles."""

    def connections(self) -> list[sqlite3.Connection]:
        return [self.connection] if self.connection is not None else []

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
