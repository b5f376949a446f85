"""Loading the configuration: one TOML file, every key optional, secrets only from the environment.

The file is read and checked completely at start-up (bad TOML, unknown keys, bad durations,
rule conditions that are not valid CEL, tool references that do not import) so that a broken
file fails with one message naming every problem by its key, never later in the middle of a
run. The keys, their types and checks are the typed models of ``bot.config.models``; this
module turns a checked file into the ``Config`` the rest of the bot reads.
"""

from __future__ import annotations

import logging
import os
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from bot.config.agents import (
    configured_agents,
    load_agent_tools,
    load_top_level_tools,
)
from bot.config.config import Config, ConfigError, parse_duration
from bot.config.fields import check_public_url as _check_public_url
from bot.config.models import (
    ASK_USER,
    DEFAULT_DATABASE_URL,
    DEFAULT_MODEL,
    DEFAULT_SYSTEM_PROMPT,
    DELEGATE,
    MCP_SEPARATOR,
    Settings,
    SettingsWithAskUserTool,
    ToolPolicySection,
)
from bot.config.schema import validation_problems
from bot.policy import Policy, Rule
from storage.urls import check_database_url

if TYPE_CHECKING:
    # llm is imported when the tools are loaded (bot.tools), which commands that only read
    # the database skip (``load_config(tools=False)``): it is most of their start-up.
    import llm

DEFAULT_CONFIG_PATH = "approval-bot.toml"
__all__ = [
    "ASK_USER",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_DATABASE_URL",
    "DEFAULT_MODEL",
    "DEFAULT_SYSTEM_PROMPT",
    "Config",
    "ConfigError",
    "check_public_url",
    "config_from_dict",
    "load_config",
    "parse_duration",
]

log = logging.getLogger(__name__)


def config_path(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get("APPROVAL_BOT_CONFIG") or DEFAULT_CONFIG_PATH)


def load_config(
    path: str | Path | None = None,
    *,
    extra_tools: list[llm.Tool] | None = None,
    environ: dict[str, str] | None = None,
    tools: bool = True,
) -> Config:
    """Load and check the configuration; a missing default file means all defaults.

    An explicitly named file that does not exist is an error: a typo should not silently
    run the bot with no policies at all. ``tools=False`` (commands that only read what is
    recorded): the tools are not imported, so policies are not checked against their names.
    """
    env = os.environ if environ is None else environ
    explicit = path is not None or "APPROVAL_BOT_CONFIG" in env
    resolved = Path(path) if path is not None else config_path(env.get("APPROVAL_BOT_CONFIG"))
    data: dict[str, Any] = {}
    if resolved.exists():
        try:
            data = tomllib.loads(resolved.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{resolved}: not valid TOML: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{resolved}: not UTF-8 text ({exc.reason})") from exc
        except OSError as exc:  # a folder, no permission: the user's path, not our bug
            raise ConfigError(f"{resolved}: cannot read it: {exc.strerror}") from exc
    elif explicit:
        raise ConfigError(f"{resolved}: no such configuration file")
    try:
        config = config_from_dict(data, extra_tools=extra_tools, tools=tools)
    except ConfigError as exc:
        raise ConfigError(f"{resolved}: {exc}", exc.problems) from exc
    config.source = str(resolved) if resolved.exists() else "(defaults)"
    if env.get("DATABASE_URL"):
        try:
            check_database_url(env["DATABASE_URL"])
        except ValueError as exc:
            raise ConfigError(f"DATABASE_URL: {exc}") from exc
        config.database_url = env["DATABASE_URL"]
    if env.get("APPROVAL_BOT_PUBLIC_URL"):
        try:
            config.public_url = check_public_url(env["APPROVAL_BOT_PUBLIC_URL"])
        except ConfigError as exc:
            raise ConfigError(f"APPROVAL_BOT_PUBLIC_URL: {exc}") from exc
    return config


def check_public_url(value: Any) -> str:
    """An http(s) base URL, without a trailing slash."""
    try:
        return _check_public_url(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def config_from_dict(
    data: dict[str, Any], *, extra_tools: list[llm.Tool] | None = None, tools: bool = True
) -> Config:
    """Check a parsed file and build its Config; ConfigError names every problem at once.

    ``tools=False``: no tool is imported (``Config.tools`` is empty), so policies are not
    checked against tool names, and a tool of the file may be called ``ask_user``."""
    problems: list[str] = []
    if not tools:
        return _config_without_tools(data)
    loaded = load_top_level_tools(data.get("tools", []), extra_tools or [], problems)
    agent_tools = load_agent_tools(data.get("agents"), problems)
    names = {tool.name for tool in loaded} if loaded is not None else None
    if names is not None and agent_tools is not None:
        names |= {tool.name for tools in agent_tools.values() for tool in tools}
    model = SettingsWithAskUserTool if names is not None and ASK_USER in names else Settings
    settings: Settings | None = None
    try:
        settings = model.model_validate(data)
    except ValidationError as exc:
        problems.extend(validation_problems(exc, model))
    if names is not None and isinstance(data.get("policies"), dict):
        servers = data.get("mcp_servers")
        mcp_prefixes = (
            tuple(f"{n}{MCP_SEPARATOR}" for n in servers or {}) if isinstance(servers, dict) else ()
        )
        for tool_name in data["policies"]:
            if tool_name.startswith(mcp_prefixes) and tool_name not in names:
                continue  # an MCP server's tool: known once the server is listed (at start-up)
            if tool_name not in names and not (tool_name == ASK_USER and model is Settings):
                known = ", ".join(sorted(names)) or "none configured"
                problems.append(
                    f"policies.{tool_name}: no tool named {tool_name!r} (tools: {known})"
                )
    if settings is not None and settings.agents and settings.delegate and DELEGATE in (names or ()):
        # Else it replaced the built-in tool for the main agent only, while the sub-agents'
        # built-in one was gated by that tool's policy.
        problems.append(
            f"tools: a tool is named {DELEGATE!r}, as the built-in tool that hands tasks to "
            "[agents] is: rename it, or set delegate = false"
        )
    if problems or settings is None or loaded is None or agent_tools is None:
        raise ConfigError.of(problems)
    return _config(settings, loaded, agent_tools)


def _config_without_tools(data: dict[str, Any]) -> Config:
    """The file checked as it would be with tools, but for their names (unknown here)."""
    problems: list[str] = []
    for model in (Settings, SettingsWithAskUserTool):
        try:
            return _config(model.model_validate(data), [])
        except ValidationError as exc:
            problems = problems or validation_problems(exc, model)
    raise ConfigError.of(problems)


def _config(
    settings: Settings,
    tools: list[llm.Tool],
    agent_tools: dict[str, list[llm.Tool]] | None = None,
) -> Config:
    config = Config(
        model=settings.model,
        system_prompt=settings.system_prompt,
        tool_refs=list(settings.tools),
        tools=tools,
        approval_ttl=settings.approval_ttl,
        database_url=settings.database_url,
        database_statement_cache=settings.database_statement_cache,
        chain_limit=settings.chain_limit,
        max_approvals_per_turn=settings.max_approvals_per_turn,
        run_lease=settings.run_lease,
        sweep_interval=settings.sweep_interval,
        api_rate_limit=settings.api_rate_limit,
        shutdown_grace=settings.shutdown_grace,
        metrics_port=settings.metrics_port,
        ask_user=settings.ask_user,
        public_url=settings.public_url,
        max_retry_wait=settings.max_retry_wait,
        max_retry_attempts=settings.max_retry_attempts,
        approver_dm_limit=settings.approver_dm_limit,
        slash_command=settings.slash_command,
        batch_threshold=settings.batch_threshold,
        on_error=settings.on_error,
        recovery_by=list(settings.recovery_by),
        max_recoveries=settings.max_recoveries,
        recovery_ttl=settings.recovery_ttl,
        admins=list(settings.admins),
        pause_ttl=settings.pause_ttl,
        assistant_cards_channel=settings.assistant_cards_channel,
        streaming=settings.streaming,
        mcp_servers=dict(settings.mcp_servers),
        agents=configured_agents(settings, agent_tools),
        delegate=settings.delegate,
        max_delegation_depth=settings.max_delegation_depth,
    )
    section = settings.policies.ask_user
    if section is not None and not isinstance(section, ToolPolicySection):
        config.ask_user_policy = Policy(
            approvers=list(section.answerers),
            ttl=section.ttl or config.approval_ttl,
            on_expiry=section.on_expiry,
        )
    config.policies = {
        name: _policy(name, section, config.approval_ttl, settings)
        for name, section in settings.policies.tools().items()
    }
    config.batch_thresholds = {
        name: section.batch_threshold
        for name, section in settings.policies.tools().items()
        if section.batch_threshold is not None
    }
    return config


def _policy(
    tool_name: str, section: ToolPolicySection, default_ttl: timedelta, settings: Settings
) -> Policy:
    for problem in section.unreachable_rule_quorums():
        # Its calls can only expire: said at every start, where the operator looks.
        log.warning("policies.%s.%s: its calls will wait until they expire", tool_name, problem)
    rules = tuple(
        Rule(
            label=f"policies.{tool_name}.rules[{index}]",
            when=rule.when,
            approval=rule.approval,
            approvers=rule.approvers,
            min_approvals=rule.min_approvals,
            ttl=rule.ttl,
            on_expiry=rule.on_expiry,
            message=rule.message,
        )
        for index, rule in enumerate(section.rules)
    )
    return Policy(
        approval=section.approval,
        approvers=list(section.approvers),
        allow_self_approval=section.allow_self_approval,
        ttl=section.ttl or default_ttl,
        on_expiry=section.on_expiry,
        rules=rules,
        message=section.message,
        min_approvals=section.min_approvals,
        allow_edit=section.allow_edit,
        grant_max=section.grant_max,
        remind_after=section.remind_after,
        escalate_after=section.escalate_after,
        escalate_to=list(section.escalate_to),
        on_error=section.on_error or settings.on_error,
        recovery_by=list(
            section.recovery_by if section.recovery_by is not None else settings.recovery_by
        ),
        max_recoveries=section.max_recoveries or settings.max_recoveries,
        recovery_ttl=section.recovery_ttl or settings.recovery_ttl,
    )
