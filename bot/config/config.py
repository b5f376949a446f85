"""The configuration as the rest of the bot reads it: :class:`Config`, and the error a file
that does not check raises.

Owns no state. Why a module of its own: everything that runs reads a ``Config`` (the engine,
the handlers, the command line), while only start-up loads one (:mod:`bot.config.loading`,
which checks a file against :mod:`bot.config.models` and builds this from it). Its defaults
are those of an empty file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.config.agents import Agent
from bot.config.fields import duration_problem
from bot.config.models import (
    DEFAULT_DATABASE_URL,
    DEFAULT_MODEL,
    DEFAULT_SYSTEM_PROMPT,
    McpServerSection,
)
from bot.policy import Policy, RecoveryPolicy

if TYPE_CHECKING:
    # llm is imported when the tools are loaded (bot.tools), which commands that only read
    # the database skip (``load_config(tools=False)``): it is most of their start-up.
    import llm


class ConfigError(Exception):
    """Configuration problems, with a message that names the file and each key.

    ``problems`` holds one line per problem (``key.path: what is wrong``); the message is
    that line when there is one, else a count and every line.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems is not None else [message]

    @classmethod
    def of(cls, problems: list[str]) -> ConfigError:
        if len(problems) == 1:
            return cls(problems[0], problems)
        listed = "".join(f"\n  {p}" for p in problems)
        return cls(f"{len(problems)} problems:{listed}", problems)


def parse_duration(value: Any, key: str) -> timedelta:
    """``"30m"`` -> 30 minutes. Units: s, m, h, d."""
    parsed = duration_problem(value)
    if isinstance(parsed, str):
        raise ConfigError(f"{key}: {parsed}")
    return parsed


@dataclass
class Config:
    model: str = DEFAULT_MODEL
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tool_refs: list[str] = field(default_factory=list)
    tools: list[llm.Tool] = field(default_factory=list)
    approval_ttl: timedelta = timedelta(minutes=30)
    database_url: str = DEFAULT_DATABASE_URL
    # PostgreSQL behind a transaction-mode pooler: false (no prepared statements kept, no
    # session settings; storage.drivers.opening.open_database).
    database_statement_cache: bool = True
    chain_limit: int = 10
    # Gated calls one model response may ask for: a prompt-injected model could otherwise
    # post hundreds of cards from one mention.
    max_approvals_per_turn: int = 10
    run_lease: timedelta = timedelta(minutes=5)
    sweep_interval: timedelta = timedelta(seconds=30)
    api_rate_limit: int = 600  # /api/v1 requests a minute per token, per replica
    # How long SIGTERM waits for work in flight; under Kubernetes' 30 s before its SIGKILL.
    shutdown_grace: timedelta = timedelta(seconds=25)
    # /metrics, /readyz and /livez on a port of their own (not the public one); None: on the
    # main port beside /slack/events.
    metrics_port: int | None = None
    policies: dict[str, Policy] = field(default_factory=dict)
    # The built-in ask_user tool (bot.pauses): on unless ``ask_user = false``.
    ask_user: bool = True
    # [policies.ask_user]: answerers (default: the requester), ttl (default approval_ttl)
    # and on_expiry.
    ask_user_policy: Policy | None = None
    # Base of callback URLs (``callback_url()``); default http://HOST:PORT of ``serve``.
    public_url: str | None = None
    # The latest a RetryAt may ask for; later times are refused with a tool error.
    max_retry_wait: timedelta = timedelta(days=1)
    # How many times one call may be retried; its next RetryAt is a tool error ("gave up").
    max_retry_attempts: int = 5
    # Most members of one user group a new card is sent to by DM.
    approver_dm_limit: int = 25
    # The slash command the bot answers (manifest.yml must declare the same name).
    slash_command: str = "/approvals"
    # Batch cards: this many calls (or more) of one tool in one response, under the same
    # approvers and quorum, share one card (0: never); per tool in ``batch_thresholds``.
    batch_threshold: int = 3
    batch_thresholds: dict[str, int] = field(default_factory=dict)
    # Recovery by a person (bot.policy.recovery): the defaults a tool's keys override.
    on_error: str = "fail"
    recovery_by: list[str] = field(default_factory=list)
    max_recoveries: int = 3
    recovery_ttl: timedelta | None = None
    # Who may pause, resume and stop any run (users and groups), and how long a run may
    # stay paused by an operator before the sweeper cancels it (None: for ever).
    admins: list[str] = field(default_factory=list)
    pause_ttl: timedelta | None = None
    # The agent pane's cards are copied to this channel too (issue 21 §2); None: DMs only.
    assistant_cards_channel: str | None = None
    # The answer streamed into the thread with a task per tool call (handlers.slack.streams):
    # "auto" where Slack accepts it, "on", or "off" (the edited progress message).
    streaming: str = "auto"
    # [mcp_servers.NAME]: servers whose tools (NAME__tool) bot.mcp_servers lists at start-up
    # and appends to ``tools``.
    mcp_servers: dict[str, McpServerSection] = field(default_factory=dict)
    # [agents.NAME]: sub-agents the built-in delegate(agent, task) tool hands tasks to;
    # ``delegate = false`` does not offer the tool. ``max_delegation_depth``: how deep.
    agents: dict[str, Agent] = field(default_factory=dict)
    delegate: bool = True
    max_delegation_depth: int = 2
    source: str = "(defaults)"

    def question_policy(self) -> Policy:
        """Who may answer ask_user's questions (no answerers: the requester), for how long."""
        return self.ask_user_policy or Policy(ttl=self.approval_ttl)

    def wait_policy(self, tool_name: str) -> Policy:
        """A tool's ttl and on_expiry, for its waits on callbacks (whether or not it is gated)."""
        return self.policies.get(tool_name) or Policy(ttl=self.approval_ttl)

    def batch_threshold_for(self, tool_name: str) -> int:
        """How many calls of ``tool_name`` in one response share one card (0: never)."""
        return self.batch_thresholds.get(tool_name, self.batch_threshold)

    def recovery_policy(self, tool_name: str) -> RecoveryPolicy:
        """What a call of the tool that raises does (``on_error``), and who decides."""
        policy = self.policies.get(tool_name)
        own = policy or Policy(ttl=self.approval_ttl)
        return RecoveryPolicy(
            on_error=own.on_error if policy is not None else self.on_error,
            recovery_by=list(own.recovery_by if policy is not None else self.recovery_by),
            max_recoveries=own.max_recoveries if policy is not None else self.max_recoveries,
            ttl=own.recovery_ttl or self.recovery_ttl or own.ttl,
            approvers=list(own.approvers),
            allow_self_approval=own.allow_self_approval,
            gated=policy is not None and policy.approval == "required",
            allow_edit=own.allow_edit,
            remind_after=own.remind_after,
        )

    def tool_named(self, name: str) -> llm.Tool | None:
        """The configured tool of that name: a top-level one, else a sub-agent's (edits and
        recoveries read its schema)."""
        for tool in [*self.tools, *(t for agent in self.agents.values() for t in agent.tools)]:
            if tool.name == name:
                return tool
        return None

    def policy_for(self, tool_name: str) -> Policy | None:
        """The tool's policy when its calls pass through it (approval required or denied,
        or rules that decide per call); None when the tool just runs."""
        policy = self.policies.get(tool_name)
        if policy is None or (policy.approval == "never" and not policy.rules):
            return None
        return policy
