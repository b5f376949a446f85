"""Configuration: one TOML file, every key optional, secrets only from the environment.

The file is read and checked completely at start-up (bad TOML, unknown keys, bad durations,
tool references that do not import) so that a broken file fails with one clear message that
names the key, never later in the middle of a run.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import llm

from bot.policy import ON_EXPIRY_CHOICES, Policy
from bot.tools import ToolLoadError, load_tools
from storage.urls import check_database_url

DEFAULT_CONFIG_PATH = "approval-bot.toml"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_SYSTEM_PROMPT = (
    "You are an operations assistant working in a Slack thread. Use the tools you are given. "
    "Some tools need a human's approval before they run; if a call is denied or expires, "
    "say so plainly and do not try to get around it."
)

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

TOP_LEVEL_KEYS = {
    "model",
    "system_prompt",
    "tools",
    "approval_ttl",
    "database_url",
    "chain_limit",
    "max_approvals_per_turn",
    "run_lease",
    "sweep_interval",
    "shutdown_grace",
    "metrics_port",
    "policies",
    "ask_user",
    "public_url",
    "max_retry_wait",
    "max_retry_attempts",
    "approver_dm_limit",
}
POLICY_KEYS = {
    "approval",
    "approvers",
    "allow_self_approval",
    "ttl",
    "on_expiry",
    "remind_after",
    "escalate_after",
    "escalate_to",
    "grant_max",
}
# The built-in ask_user tool's section: who may answer, how long a question stays open.
ASK_USER = "ask_user"
ASK_USER_KEYS = {"answerers", "ttl", "on_expiry"}


class ConfigError(Exception):
    """A configuration problem, with a message that names the file and the key."""


def parse_duration(value: Any, key: str) -> timedelta:
    """``"30m"`` -> 30 minutes. Units: s, m, h, d."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match and int(match.group(1)) > 0:
            return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    raise ConfigError(
        f"{key}: {value!r} is not a duration; write a positive number and a unit, "
        'like "45s", "30m", "2h" or "1d"'
    )


@dataclass
class Config:
    model: str = DEFAULT_MODEL
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tool_refs: list[str] = field(default_factory=list)
    tools: list[llm.Tool] = field(default_factory=list)
    approval_ttl: timedelta = timedelta(minutes=30)
    database_url: str = DEFAULT_DATABASE_URL
    chain_limit: int = 10
    # Gated calls one model response may ask for: a prompt-injected model could otherwise
    # post hundreds of cards from one mention.
    max_approvals_per_turn: int = 10
    run_lease: timedelta = timedelta(minutes=5)
    sweep_interval: timedelta = timedelta(seconds=30)
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
    # Most members of one user group that get a DM copy of a card (handlers.reach).
    approver_dm_limit: int = 25
    source: str = "(defaults)"

    def question_policy(self) -> Policy:
        """Who may answer ask_user's questions (no answerers: the requester), for how long."""
        return self.ask_user_policy or Policy(ttl=self.approval_ttl)

    def wait_policy(self, tool_name: str) -> Policy:
        """A tool's ttl and on_expiry, for its waits on callbacks (whether or not it is gated)."""
        return self.policies.get(tool_name) or Policy(ttl=self.approval_ttl)

    def policy_for(self, tool_name: str) -> Policy | None:
        """The tool's policy when it requires approval; None when the tool just runs."""
        policy = self.policies.get(tool_name)
        return policy if policy is not None and policy.approval == "required" else None


def config_path(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get("APPROVAL_BOT_CONFIG") or DEFAULT_CONFIG_PATH)


def load_config(
    path: str | Path | None = None,
    *,
    extra_tools: list[llm.Tool] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Load and check the configuration; a missing default file means all defaults.

    An explicitly named file that does not exist is an error: a typo should not silently
    run the bot with no policies at all.
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
        config = config_from_dict(data, extra_tools=extra_tools)
    except ConfigError as exc:
        raise ConfigError(f"{resolved}: {exc}") from exc
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
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+(/\S*)?$", value.strip()):
        raise ConfigError(
            f"{value!r} is not an http(s) URL like https://bot.example.com (where the "
            "outside world reaches this bot's port)"
        )
    return value.strip().rstrip("/")


def config_from_dict(data: dict[str, Any], *, extra_tools: list[llm.Tool] | None = None) -> Config:
    unknown = sorted(set(data) - TOP_LEVEL_KEYS)
    if unknown:
        known = ", ".join(sorted(TOP_LEVEL_KEYS))
        raise ConfigError(f"unknown key {unknown[0]!r} (known: {known})")
    config = Config()
    config.model = _string(data, "model", config.model)
    config.system_prompt = _string(data, "system_prompt", config.system_prompt)
    config.database_url = _string(data, "database_url", config.database_url)
    try:
        check_database_url(config.database_url)
    except ValueError as exc:
        raise ConfigError(f"database_url: {exc}") from exc
    if "approval_ttl" in data:
        config.approval_ttl = parse_duration(data["approval_ttl"], "approval_ttl")
    if "run_lease" in data:
        config.run_lease = parse_duration(data["run_lease"], "run_lease")
    if "sweep_interval" in data:
        config.sweep_interval = parse_duration(data["sweep_interval"], "sweep_interval")
    if "shutdown_grace" in data:
        config.shutdown_grace = parse_duration(data["shutdown_grace"], "shutdown_grace")
    config.chain_limit = _count(data, "chain_limit", config.chain_limit)
    config.max_approvals_per_turn = _count(
        data, "max_approvals_per_turn", config.max_approvals_per_turn
    )
    if "metrics_port" in data:
        config.metrics_port = _port(data["metrics_port"], "metrics_port")
    refs = data.get("tools", [])
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise ConfigError('tools: must be a list of import references like "pkg.module:name"')
    config.tool_refs = list(refs)
    try:
        config.tools = [*load_tools(refs), *(extra_tools or [])]
    except ToolLoadError as exc:
        raise ConfigError(f"tools: {exc}") from exc
    names = [tool.name for tool in config.tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"tools: two tools are named {duplicates[0]!r}")
    if "max_retry_wait" in data:
        config.max_retry_wait = parse_duration(data["max_retry_wait"], "max_retry_wait")
    config.max_retry_attempts = _count(data, "max_retry_attempts", config.max_retry_attempts)
    config.approver_dm_limit = _count(data, "approver_dm_limit", config.approver_dm_limit)
    ask_user = data.get("ask_user", True)
    if not isinstance(ask_user, bool):
        raise ConfigError("ask_user: must be true or false")
    config.ask_user = ask_user
    if "public_url" in data:
        try:
            config.public_url = check_public_url(data["public_url"])
        except ConfigError as exc:
            raise ConfigError(f"public_url: {exc}") from exc
    policies = dict(data.get("policies", {})) if isinstance(data.get("policies"), dict) else None
    if policies is not None and ASK_USER in policies and ASK_USER not in names:
        config.ask_user_policy = _ask_user_policy(policies.pop(ASK_USER), config.approval_ttl)
    config.policies = _policies(
        data.get("policies", {}) if policies is None else policies,
        config.approval_ttl,
        set(names),
    )
    return config


def _ask_user_policy(section: Any, default_ttl: timedelta) -> Policy:
    key = f"policies.{ASK_USER}"
    if not isinstance(section, dict):
        raise ConfigError(f"{key}: must be a table")
    unknown = sorted(set(section) - ASK_USER_KEYS)
    if unknown:
        known = ", ".join(sorted(ASK_USER_KEYS))
        raise ConfigError(f"{key}.{unknown[0]}: unknown key (known: {known})")
    answerers = section.get("answerers", [])
    if not isinstance(answerers, list) or not all(
        isinstance(a, str) and a.strip() for a in answerers
    ):
        raise ConfigError(f"{key}.answerers: must be a list of Slack user or user-group ids")
    on_expiry = section.get("on_expiry", "deny")
    if on_expiry not in ON_EXPIRY_CHOICES:
        raise ConfigError(f'{key}.on_expiry: {on_expiry!r} must be "deny" or "cancel"')
    ttl = parse_duration(section["ttl"], f"{key}.ttl") if "ttl" in section else default_ttl
    return Policy(approvers=[a.strip() for a in answerers], ttl=ttl, on_expiry=on_expiry)


def _count(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key}: {value!r} must be a whole number of at least 1")
    return value


def _port(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise ConfigError(f"{key}: {value!r} must be a TCP port (1-65535)")
    return value


def _string(data: dict[str, Any], key: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: must be a non-empty string")
    return value


def _policies(raw: Any, default_ttl: timedelta, tool_names: set[str]) -> dict[str, Policy]:
    if not isinstance(raw, dict):
        raise ConfigError("policies: must be a table of [policies.<tool name>] sections")
    policies: dict[str, Policy] = {}
    for tool_name, section in raw.items():
        key = f"policies.{tool_name}"
        if not isinstance(section, dict):
            raise ConfigError(f"{key}: must be a table")
        if tool_name not in tool_names:
            known = ", ".join(sorted(tool_names)) or "none configured"
            raise ConfigError(f"{key}: no tool named {tool_name!r} (tools: {known})")
        unknown = sorted(set(section) - POLICY_KEYS)
        if unknown:
            known = ", ".join(sorted(POLICY_KEYS))
            raise ConfigError(f"{key}.{unknown[0]}: unknown key (known: {known})")
        approval = section.get("approval", "required")
        if approval not in ("required", "never"):
            raise ConfigError(f'{key}.approval: {approval!r} must be "required" or "never"')
        approvers = section.get("approvers", [])
        if not isinstance(approvers, list) or not all(
            isinstance(a, str) and a.strip() for a in approvers
        ):
            raise ConfigError(f"{key}.approvers: must be a list of Slack user or user-group ids")
        allow_self = section.get("allow_self_approval", False)
        if not isinstance(allow_self, bool):
            raise ConfigError(f"{key}.allow_self_approval: must be true or false")
        on_expiry = section.get("on_expiry", "deny")
        if on_expiry not in ON_EXPIRY_CHOICES:
            raise ConfigError(f'{key}.on_expiry: {on_expiry!r} must be "deny" or "cancel"')
        ttl = parse_duration(section["ttl"], f"{key}.ttl") if "ttl" in section else default_ttl
        grant_max = (
            parse_duration(section["grant_max"], f"{key}.grant_max")
            if "grant_max" in section
            else None
        )
        remind_after, escalate_after, escalate_to = _reach(section, key)
        policies[tool_name] = Policy(
            approval=approval,
            approvers=[a.strip() for a in approvers],
            allow_self_approval=allow_self,
            ttl=ttl,
            on_expiry=on_expiry,
            grant_max=grant_max,
            remind_after=remind_after,
            escalate_after=escalate_after,
            escalate_to=escalate_to,
        )
    return policies


def _reach(
    section: dict[str, Any], key: str
) -> tuple[timedelta | None, timedelta | None, list[str]]:
    """remind_after, escalate_after and escalate_to of one policy (issue 8's reach)."""
    remind_after = escalate_after = None
    if "remind_after" in section:
        remind_after = parse_duration(section["remind_after"], f"{key}.remind_after")
    if "escalate_after" in section:
        escalate_after = parse_duration(section["escalate_after"], f"{key}.escalate_after")
    escalate_to = section.get("escalate_to", [])
    if not isinstance(escalate_to, list) or not all(
        isinstance(a, str) and a.strip() for a in escalate_to
    ):
        raise ConfigError(f"{key}.escalate_to: must be a list of Slack user or user-group ids")
    escalate_to = [a.strip() for a in escalate_to]
    if escalate_after is not None and not escalate_to:
        raise ConfigError(
            f"{key}.escalate_after: needs escalate_to, the people or groups to add as approvers"
        )
    if escalate_to and escalate_after is None:
        raise ConfigError(f"{key}.escalate_to: needs escalate_after, when to add them")
    return remind_after, escalate_after, escalate_to
