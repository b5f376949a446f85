"""Sub-agents in the thread (issue 20 section 1): a child run's first message. Its cards
name the agent from their rows (``approvals.agent``, :func:`handlers.blocks.kit.asked_by`).

The durable part is the engine's and storage's (``delegation`` rows, the child's end settling
them and claiming the parent's resume); :func:`handlers.flows.runs.follow_delegations` drives
the children and resumes the parent. Here is only what people see.
"""

from __future__ import annotations

from handlers.blocks import child_intro
from handlers.services import Services
from storage.models import Run


async def announce_child(services: Services, run: Run) -> None:
    """ "🤖 researcher is working on: <task>" and the tools it may use, in the thread."""
    if run.agent is None or run.parent_approval_id is None:
        return
    row = await services.repo.get_approval(run.parent_approval_id)
    task = str(row.arguments.get("task", "")) if row is not None else ""
    tools = [tool.name for tool in await services.runner.drives.offered_to(run)]
    await services.publisher.note(run, child_intro(run.agent, task, tools))
