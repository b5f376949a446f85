"""Sub-agents in the thread (issue 20 section 1): a child run's first message, and the line
that names the agent on its cards.

The durable part is the engine's and storage's (``delegation`` rows, the child's end settling
them and claiming the parent's resume); :func:`handlers.flows.runs.follow_delegations` drives
the children and resumes the parent. Here is only what people see.
"""

from __future__ import annotations

from typing import Any

from handlers.blocks import agent_line, child_intro
from handlers.services import Services
from storage.models import Approval, Run
from storage.repository import Repository

Blocks = list[dict[str, Any]]


async def announce_child(services: Services, run: Run) -> None:
    """ "🤖 researcher is working on: <task>" and the tools it may use, in the thread."""
    if run.agent is None or run.parent_approval_id is None:
        return
    row = await services.repo.get_approval(run.parent_approval_id)
    task = str(row.arguments.get("task", "")) if row is not None else ""
    tools = [tool.name for tool in services.runner.drives.tools_for(run)]
    await services.publisher.note(run, child_intro(run.agent, task, tools))


class AgentCards:
    """Decorates a card whose call a sub-agent asked for: "requested by agent researcher for
    @ana" (then whatever ``then`` adds, the standing grants' line)."""

    def __init__(self, repo: Repository, then: Any = None) -> None:
        self.repo = repo
        self.then = then

    async def decorate(self, approval: Approval, blocks: Blocks) -> Blocks:
        if self.then is not None:
            blocks = await self.then(approval, blocks)
        run = await self.repo.get_run(approval.run_id)
        if run is None or run.agent is None:
            return blocks
        line = agent_line(run.agent, approval.requester)
        return [*blocks[:1], line, *blocks[1:]]
