"""The configuration file's typed form: pydantic models, their checks and their JSON Schema.

Every key is declared once here, with the type, default and check that the file's users see
(``approval-bot config schema`` prints the JSON Schema editors complete and check with).
Values keep the file's own syntax: durations are ``"45s"``, ``"30m"``, ``"2h"``, ``"1d"``;
conditions are CEL (checked by ``bot.policy.rules``). Unknown keys are errors. Validation collects
every problem in the file, each named by its key path (``policies.refund.rules[0].when``),
for ``bot.config`` to report at once. Owns no state.
"""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bot.config.fields import (
    AgentName,
    Approval,
    Count,
    DatabaseUrl,
    Duration,
    Flag,
    Ids,
    McpServerName,
    OnError,
    OnExpiry,
    OptionalApproval,
    OptionalChannel,
    OptionalCount,
    OptionalDuration,
    OptionalIds,
    OptionalOnError,
    OptionalOnExpiry,
    OptionalText,
    OptionalThreshold,
    Port,
    PublicUrl,
    SlashCommand,
    Streaming,
    Text,
    Threshold,
    ToolRefs,
    When,
)

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_SYSTEM_PROMPT = (
    "You are an operations assistant working in a Slack thread. Use the tools you are given. "
    "Some tools need a human's approval before they run; if a call is denied or expires, "
    "say so plainly and do not try to get around it."
)
ASK_USER = "ask_user"
DELEGATE = "delegate"  # the built-in tool of sub-agents (bot.pauses.DELEGATE)
# An MCP server's tools are named <server>__<tool>: a server's name is a tool name's start.
MCP_SEPARATOR = "__"


# -- value types: each its check (with the message users read) and its JSON Schema -----------


# -- the sections ----------------------------------------------------------------------------


class Section(BaseModel):
    """A table of the file: unknown keys are errors; defaults are checked like values."""

    model_config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, validate_default=True, frozen=True
    )


class RuleSection(Section):
    """One ``[[policies.<tool>.rules]]``: its condition, and the keys it overrides."""

    when: When
    approval: OptionalApproval = None
    approvers: OptionalIds = None
    min_approvals: OptionalCount = None
    ttl: OptionalDuration = None
    on_expiry: OptionalOnExpiry = None
    message: OptionalText = None


class ToolPolicySection(Section):
    """``[policies.<tool name>]``: who approves its calls, and its rules on arguments."""

    model_config = ConfigDict(
        json_schema_extra={
            "dependentRequired": {
                "escalate_after": ["escalate_to"],
                "escalate_to": ["escalate_after"],
            }
        }
    )

    approval: Approval = "required"
    approvers: Ids = Field(default_factory=list)
    allow_self_approval: Flag = False
    ttl: OptionalDuration = Field(None, description="Default: approval_ttl.")
    on_expiry: OnExpiry = "deny"
    message: OptionalText = Field(None, description='What the model reads on approval = "deny".')
    rules: list[RuleSection] = Field(default_factory=list)
    min_approvals: Count = 1
    allow_edit: Flag = False
    grant_max: OptionalDuration = None
    remind_after: OptionalDuration = None
    escalate_after: OptionalDuration = Field(None, description="Needs escalate_to.")
    escalate_to: Ids = Field(default_factory=list, description="Needs escalate_after.")
    batch_threshold: OptionalThreshold = Field(
        None, description="Default: the top-level batch_threshold; 0: no batch cards."
    )
    # Recovery by a person (bot.policy.recovery); None: the top-level key's value.
    on_error: OptionalOnError = Field(None, description='"fail" or "ask". Default: on_error.')
    recovery_by: OptionalIds = Field(None, description="Default: recovery_by.")
    max_recoveries: OptionalCount = Field(None, description="Default: max_recoveries.")
    recovery_ttl: OptionalDuration = Field(None, description="Default: recovery_ttl, else ttl.")

    @model_validator(mode="after")
    def _escalation_is_whole(self) -> ToolPolicySection:
        # One escalation: when, and whom it adds as approvers; either alone means nothing.
        if self.escalate_after is not None and not self.escalate_to:
            raise _key_problem(
                "escalate_after", "needs escalate_to, the people or groups to add as approvers"
            )
        if self.escalate_to and self.escalate_after is None:
            raise _key_problem("escalate_to", "needs escalate_after, when to add them")
        return self

    @model_validator(mode="after")
    def _quorum_can_be_reached(self) -> ToolPolicySection:
        # Users only (a user group's size is Slack's to know): no more approvals than the
        # people named, counting those escalate_to adds later.
        problem = _unreachable(self.approvers, self.escalate_to, self.min_approvals)
        if problem:
            raise _key_problem("min_approvals", problem)
        return self

    def unreachable_rule_quorums(self) -> list[str]:
        """``rules[i].min_approvals: why`` for each rule whose calls can never get their
        quorum (its own or the tool's approvers, and min_approvals). Warned about, not
        refused: such calls only ever expire, and the issue's own example has one."""
        found = []
        for index, rule in enumerate(self.rules):
            if (rule.approval or self.approval) != "required":
                continue  # nobody approves its calls
            approvers = self.approvers if rule.approvers is None else rule.approvers
            needed = self.min_approvals if rule.min_approvals is None else rule.min_approvals
            problem = _unreachable(approvers, self.escalate_to, needed)
            if problem:
                found.append(f"rules[{index}].min_approvals: {problem}")
        return found


def _unreachable(approvers: list[str], escalate_to: list[str], needed: int) -> str | None:
    named = {*approvers, *escalate_to} if approvers else set()
    if named and not any(a.startswith("S") for a in named) and needed > len(named):
        return f"{needed} distinct approvals can never be given by the {len(named)} approvers named"
    return None


def _key_problem(key: str, message: str) -> PydanticCustomError:
    """A problem a section's check finds with one of its keys (named in the path)."""
    return PydanticCustomError("config_key", message, {"key": key})


class AskUserSection(Section):
    """``[policies.ask_user]``: who may answer the built-in ask_user tool's questions."""

    answerers: Ids = Field(default_factory=list)
    ttl: OptionalDuration = None
    on_expiry: OnExpiry = "deny"


class Policies(Section):
    """``[policies]``: a section per tool, and ``ask_user`` for the built-in tool."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, ToolPolicySection] = Field(init=False)

    ask_user: AskUserSection | None = None

    def tools(self) -> dict[str, ToolPolicySection]:
        return dict(self.__pydantic_extra__ or {})


class ToolPolicies(Policies):
    """``[policies]`` when a configured tool is itself named ask_user: its section is a
    tool's like any other."""

    ask_user: ToolPolicySection | None = None  # type: ignore[assignment]

    def tools(self) -> dict[str, ToolPolicySection]:
        extra = super().tools()
        return {**extra, ASK_USER: self.ask_user} if self.ask_user is not None else extra


class McpServerSection(Section):
    """``[mcp_servers.<name>]``: an MCP server whose tools the agent gets as ``<name>__<tool>``
    (bot.mcp_servers). ``command`` (with ``args`` and ``env``) starts it over stdio; ``url``
    (with ``headers``) reaches it over streamable HTTP. ``${VAR}`` in env and headers values
    is read from the bot's environment, so secrets stay out of the file."""

    command: OptionalText = Field(None, description="Start the server over stdio.")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: OptionalText = Field(None, description="Reach the server over streamable HTTP.")
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = Field("30s", description="Longest wait for one call's answer.")
    connect_timeout: Duration = Field(
        "15s", description="Longest wait to start or reach the server and list its tools."
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSection:
        if (self.command is None) == (self.url is None):
            raise _key_problem("command", "give either command (stdio) or url (HTTP), not both")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise _key_problem("url", "must be an http:// or https:// URL")
        if self.command is not None and self.headers:
            raise _key_problem("headers", "only for url (HTTP) servers")
        if self.url is not None and (self.args or self.env):
            raise _key_problem("args" if self.args else "env", "only for command (stdio) servers")
        return self


class AgentSection(Section):
    """``[agents.<name>]``: a sub-agent the main agent may hand a task to with the built-in
    ``delegate(agent, task)`` tool (issue 20 section 1). Its tools are gated by the same
    ``[policies]`` as the top-level ones."""

    description: Text = Field(
        description="What the agent does: the delegate tool's description lists it."
    )
    model: OptionalText = Field(None, description="Default: the top-level model.")
    system_prompt: OptionalText = Field(None, description="Default: a prompt naming its job.")
    tools: ToolRefs = Field(default_factory=list)


class Settings(Section):
    """The whole file (``approval-bot.toml``); every key is optional."""

    model_config = ConfigDict(title="approval-bot configuration")

    model: Text = DEFAULT_MODEL
    system_prompt: Text = DEFAULT_SYSTEM_PROMPT
    tools: ToolRefs = Field(default_factory=list)
    approval_ttl: Duration = "30m"
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL
    database_statement_cache: Flag = Field(
        True,
        description="PostgreSQL: keep prepared statements per connection; false behind a "
        "transaction-mode pooler (PgBouncer pool_mode = transaction).",
    )
    chain_limit: Count = 10
    max_approvals_per_turn: Count = 10
    run_lease: Duration = "5m"
    sweep_interval: Duration = "30s"
    shutdown_grace: Duration = "25s"
    metrics_port: Port = None
    policies: Policies = Field(default_factory=Policies)
    ask_user: Flag = True
    public_url: PublicUrl = None
    max_retry_wait: Duration = "1d"
    max_retry_attempts: Count = 5
    approver_dm_limit: Count = 25
    slash_command: SlashCommand = "/approvals"
    batch_threshold: Threshold = Field(
        3, description="Calls of one tool in one response that share one card; 0: off."
    )
    # Recovery by a person when a tool raises: the defaults of every tool's keys.
    on_error: OnError = "fail"
    recovery_by: Ids = Field(default_factory=list)
    max_recoveries: Count = 3
    recovery_ttl: OptionalDuration = Field(None, description="Default: the tool's ttl.")
    admins: Ids = Field(
        default_factory=list,
        description="Users and groups who may pause, resume and stop any run.",
    )
    pause_ttl: OptionalDuration = Field(
        None, description="A run paused by an operator longer than this is cancelled."
    )
    assistant_cards_channel: OptionalChannel = Field(
        None, description="Where the agent pane's approval cards are copied, besides DMs."
    )
    streaming: Streaming = Field(
        "auto",
        description='Stream answers with a task per tool call: "auto" (where Slack accepts '
        'it), "on" or "off" (the edited progress message).',
    )
    mcp_servers: dict[McpServerName, McpServerSection] = Field(
        default_factory=dict,
        description="MCP servers whose tools the agent gets, named <server>__<tool>.",
    )
    agents: dict[AgentName, AgentSection] = Field(
        default_factory=dict,
        description="Sub-agents the main agent may delegate a task to (delegate(agent, task)).",
    )
    delegate: Flag = Field(
        True, description="Offer the built-in delegate tool when an agent is configured."
    )
    max_delegation_depth: Count = Field(
        2, description="How deep sub-agents may delegate: 1, only the main agent delegates."
    )
    api_rate_limit: Count = Field(
        600,
        description="Requests a minute each API token may make to /api/v1 (per replica); "
        "more answer 429.",
    )


class SettingsWithAskUserTool(Settings):
    policies: ToolPolicies = Field(default_factory=ToolPolicies)


# -- errors, each named by its key path ---------------------------------------------------------
