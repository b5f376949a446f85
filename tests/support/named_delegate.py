"""A tool named like the built-in ``delegate`` (the configuration must refuse it while
``[agents]`` are configured and ``delegate`` is on)."""

from __future__ import annotations


def delegate(agent: str, task: str) -> str:
    """Hand a ticket to a team (not the bot's sub-agents)."""
    return f"ticket for {agent}: {task}"
