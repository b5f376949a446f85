"""Raw ``llm``: a tool that raises PauseChain until approved, the history in one JSON row.

The least an application can do with llm alone: three commits (the paused history; the
decision; the answer and final history), no audit, no leases, no record around the call.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import llm
from llm.parts import Message, TextPart

from bench import engine_cycle
from bench.peers.common import connect
from bot.config.models import DEFAULT_SYSTEM_PROMPT

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    history TEXT NOT NULL,
    decided_by TEXT,
    answer TEXT
)
"""


class RawLlm:
    name = "raw `llm`: PauseChain + one JSON row"
    durability = "its connection's PRAGMA synchronous"

    def __init__(self) -> None:
        self.connection: sqlite3.Connection | None = None
        self.model = engine_cycle.BenchModel()
        self._approved = False
        self.measuring = False
        self._paused_bytes = 0
        # Built once: passing the function itself would rebuild its schema (a pydantic model)
        # on every chain, about 1 ms.
        self.tool = llm.Tool.function(self.restart_service)

    async def open(self, directory: Path, synchronous: str) -> None:
        self.connection = connect(directory / "raw-llm.db", synchronous)
        self.connection.execute(SCHEMA)
        self.connection.commit()

    async def restart_service(self, service: str) -> str:
        """Restart a service."""
        if not self._approved:
            raise llm.PauseChain("needs approval")
        return engine_cycle.restarted(service)

    async def _drive(self, chain: Any) -> tuple[list[Message], str | None]:
        """Run a chain to its end or its pause: the history, and the answer if it ended."""
        last: Any = None
        try:
            async for response in chain.responses():
                last = response
                await response.text()
        except llm.PauseChain:
            return list(last.prompt.messages) + list(await last.messages()), None
        history = list(last.prompt.messages) + list(await last.messages())
        return history, await last.text()

    async def cycle(self, i: int) -> float:
        connection = self.connection
        assert connection is not None
        run_id = f"run{i}"
        model_before = len(engine_cycle.MODEL_SECONDS)
        started = time.perf_counter()
        # Pause: the model asks for the call, the tool raises PauseChain; store the history.
        self._approved = False
        system = Message(role="system", parts=[TextPart(text=DEFAULT_SYSTEM_PROMPT)])
        chain = self.model.chain(f"restart svc{i}", messages=[system], tools=[self.tool])
        history, answer = await self._drive(chain)
        assert answer is None
        paused = json.dumps([m.to_dict() for m in history])
        self._paused_bytes = len(paused)
        connection.execute(
            "INSERT INTO runs (id, status, history) VALUES (?, 'paused', ?)", (run_id, paused)
        )
        connection.commit()
        # Decide: a conditional UPDATE, as any approval has to be.
        cursor = connection.execute(
            "UPDATE runs SET status = 'approved', decided_by = ?"
            " WHERE id = ? AND status = 'paused'",
            ("U0APPROVER", run_id),
        )
        assert cursor.rowcount == 1
        connection.commit()
        # Resume: read the history back; the trailing call runs again, now allowed.
        (stored,) = connection.execute(
            "SELECT history FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        self._approved = True
        chain = self.model.chain(
            messages=[Message.from_dict(m) for m in json.loads(stored)],
            tools=[self.tool],
        )
        history, answer = await self._drive(chain)
        assert answer == f"Done: restarted svc{i}", answer
        connection.execute(
            "UPDATE runs SET status = 'completed', answer = ?, history = ? WHERE id = ?",
            (answer, json.dumps([m.to_dict() for m in history]), run_id),
        )
        connection.commit()
        model = sum(engine_cycle.MODEL_SECONDS[model_before:])
        return time.perf_counter() - started - model

    async def stored_at_pause(self) -> int | None:
        """The history JSON in the row."""
        return self._paused_bytes

    async def settle(self) -> None:
        """Nothing runs on its connection between cycles."""

    def connections(self) -> list[sqlite3.Connection]:
        return [self.connection] if self.connection is not None else []

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
