"""Sub-agents as the drive sees them (issue 20 section 1): what the ``delegate`` tool needs in
a run (the agents, the depth limit, the agents up the run's chain), and the holds its new
children start with.

Owns no state: the chain is read from the run's ancestors (``runs.parent_run_id``), and the
children's rows, their settlement and the parent's resume claim are storage's
(:mod:`storage.stores.delegations`, :func:`storage.stores.transitions.settle_parent`).
"""

from __future__ import annotations

from datetime import datetime

from bot.config import Config
from bot.gate.turn import DelegationContext
from storage.models import Run
from storage.repository import Repository

# Ancestors read to find a run's chain of agents: past any sane max_delegation_depth.
MAX_CHAIN_READ = 32


async def delegation_context(
    repo: Repository, config: Config, run: Run
) -> DelegationContext | None:
    """What the delegate tool needs in this run; None when no agent is configured."""
    if not config.agents:
        return None
    chain: list[str] = []
    current: Run | None = run
    while current is not None and current.agent is not None:
        chain.insert(0, current.agent)
        if current.parent_run_id is None or len(chain) > MAX_CHAIN_READ:
            break
        current = await repo.get_run(current.parent_run_id)
    agents = {a.name: (a.model, a.system_prompt) for a in config.agents.values()}
    return DelegationContext(
        agents=agents, max_depth=config.max_delegation_depth, chain=tuple(chain)
    )


async def hold_new_children(repo: Repository, run_id: str, now: datetime) -> None:
    """A pause that started children under an operator's hold (asked for while the drive
    ran): its children start held too, so nothing of a paused run works on."""
    hold = await repo.hold_of(run_id)
    if hold is not None:
        await repo.hold_children(
            run_id, action=hold.action, actor=hold.requested_by, reason=hold.reason, now=now
        )
