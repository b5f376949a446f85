"""Tools that pause on another system or a time, for the Slack tests of waits: each records
what it did, so tests can count real executions and find the callback URL it handed out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.pauses import RetryAt, WaitForCallback, callback_url

# (tool, arguments, callback URL or None) for every real execution.
CALLS: list[tuple[str, dict[str, str], str | None]] = []
# How long flaky_api asks to wait before its retry.
RETRY_AFTER = timedelta(seconds=1)


def start_deploy(service: str) -> str:
    """Start a deploy; the pipeline reports back to the callback URL."""
    url = callback_url()
    CALLS.append(("start_deploy", {"service": service}, url))
    raise WaitForCallback(f"deploy of {service}", timeout="1h")


def flaky_api(name: str) -> str:
    """Rate limited the first time; answers on the retry."""
    attempts = sum(1 for tool, _, _ in CALLS if tool == "flaky_api")
    CALLS.append(("flaky_api", {"name": name}, None))
    if attempts == 0:
        raise RetryAt(datetime.now(UTC) + RETRY_AFTER, "rate limited")
    return f"{name}: ok"
