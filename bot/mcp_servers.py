"""Tools from MCP servers: ``[mcp_servers.NAME]`` connections, owned in one place.

An MCP server's tools become ordinary ``llm.Tool`` objects named ``NAME__tool``, with the
server's own input schema and an async implementation that calls the server, so the gate
(policies, rules, edits, grants, recovery, the argument schema check, the executing and
executed records) treats them exactly as Python tools: nothing in ``bot.gate`` knows MCP.

The connections live here because an MCP client session is long-lived and its transports
(the stdio child process, the HTTP stream) are anyio task groups that must be entered and
left by the same task. So each server has one owner task on the bot's event loop: it
connects, lists the tools once, keeps the session open, reconnects (backing off) when the
server goes away, and closes everything at shutdown. Tool calls from any drive share that
session (requests are multiplexed by id); a call made from another event loop is handed to
the owner's loop.

A server that is down or slow never blocks a run: every call has the server's ``timeout``
(and ``connect_timeout`` first, when the server must be reached again), and fails with an
error naming the server, which the model reads (or ``on_error = "ask"`` puts to a person). A
server that is down at start-up does not stop the bot: one warning line, its tools are listed
by the owner task as soon as it answers, and ``on_listed`` adds them to the running agent. A
timed-out call is not retried: it may still run in the server, and a gated call runs at most
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection
from typing import TYPE_CHECKING, Any, TextIO

import llm

from bot.config.models import MCP_SEPARATOR, McpServerSection

if TYPE_CHECKING:
    # The SDK is imported when a server is configured (about 0.8 s): a bot without any
    # [mcp_servers] does not pay for it at start-up.
    from mcp.client.session import ClientSession

log = logging.getLogger(__name__)

# Model APIs accept tool names of this form (OpenAI's rule; Anthropic's is the same).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RETRY_FIRST, RETRY_MAX = 1.0, 60.0  # seconds between attempts to reach a server that is down


class McpToolError(Exception):
    """What the model reads when an MCP tool cannot give a result."""


class McpServer:
    """One configured server: its owner task, its session while connected, its tools."""

    def __init__(
        self,
        name: str,
        spec: McpServerSection,
        on_listed: Callable[[str, list[llm.Tool]], None],
        policies: Collection[str] = (),
    ) -> None:
        self.name = name
        self._policies = policies
        self.spec = spec
        self.timeout = spec.timeout.total_seconds()
        self.connect_timeout = spec.connect_timeout.total_seconds()
        self.tools: list[llm.Tool] | None = None  # listed once, when it first answers
        self.last_error = ""
        self._on_listed = on_listed
        self._session: ClientSession | None = None
        self._connected = asyncio.Event()
        self._first_attempt = asyncio.Event()
        self._attempt_failed = asyncio.Event()  # replaced after each failed attempt
        self._broken = asyncio.Event()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._own(), name=f"mcp-server-{name}")

    # -- the owner task ----------------------------------------------------------------------

    async def _own(self) -> None:
        delay = RETRY_FIRST
        while not self._stop.is_set():
            try:
                async with self._session_opened() as session:
                    async with asyncio.timeout(self.connect_timeout):
                        await session.initialize()
                        listed = await _list_tools(session)
                    if self.tools is None:
                        self.tools = self._llm_tools(listed)
                        self._on_listed(self.name, self.tools)
                        self._check_policies()
                    if self.last_error:
                        log.info("MCP server %s answers again", self.name)
                    self._session, self.last_error, delay = session, "", RETRY_FIRST
                    self._connected.set()
                    self._first_attempt.set()
                    await _first_of(self._stop, self._broken)
                    # No call may take this session while it closes (a stdio server's exit
                    # takes a moment): the next one waits for the reconnection.
                    self._session = None
                    self._connected.clear()
            except Exception as exc:
                problem = describe(exc)
                if problem != self.last_error:  # one line per new problem, not per attempt
                    log.warning(
                        "MCP server %s is not reachable (%s); its calls fail until it answers, "
                        "retried in the background",
                        self.name,
                        problem,
                    )
                self.last_error = problem
            finally:
                self._session = None
                self._connected.clear()
                self._broken.clear()
            self._first_attempt.set()
            failed, self._attempt_failed = self._attempt_failed, asyncio.Event()
            failed.set()
            if self._stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first_of(self._stop, self._wake), delay)
            self._wake.clear()
            delay = min(delay * 2, RETRY_MAX)

    @contextlib.asynccontextmanager
    async def _session_opened(self) -> AsyncIterator[ClientSession]:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        spec = self.spec
        async with contextlib.AsyncExitStack() as stack:
            if spec.command is not None:
                params = StdioServerParameters(
                    command=spec.command, args=list(spec.args), env=_expanded(spec.env) or None
                )
                errlog = _errlog()
                read, write = await stack.enter_async_context(stdio_client(params, errlog))
            else:
                import httpx2  # the mcp SDK's HTTP client

                assert spec.url is not None
                client = httpx2.AsyncClient(
                    headers=_expanded(spec.headers), timeout=httpx2.Timeout(self.timeout)
                )
                await stack.enter_async_context(client)
                transport = streamable_http_client(spec.url, http_client=client)
                read, write = await stack.enter_async_context(transport)
            yield await stack.enter_async_context(ClientSession(read, write))

    def _llm_tools(self, listed: list[Any]) -> list[llm.Tool]:
        tools = []
        for mcp_tool in listed:
            name = f"{self.name}{MCP_SEPARATOR}{mcp_tool.name}"
            if not TOOL_NAME.match(name):
                log.warning(
                    "MCP server %s: tool %r skipped: %r is not a valid tool name",
                    self.name,
                    mcp_tool.name,
                    name,
                )
                continue
            tools.append(
                llm.Tool(
                    name=name,
                    description=mcp_tool.description or "",
                    input_schema=dict(mcp_tool.input_schema or {"type": "object"}),
                    implementation=self._implementation(mcp_tool.name),
                    plugin=f"mcp:{self.name}",
                )
            )
        return tools

    def _check_policies(self) -> None:
        """A policy naming a tool the server does not offer is a typo (or a tool gone): said
        once, since that policy gates nothing."""
        offered = {tool.name for tool in self.tools or []}
        prefix = f"{self.name}{MCP_SEPARATOR}"
        for name in self._policies:
            if name.startswith(prefix) and name not in offered:
                log.warning(
                    "policies.%s: MCP server %s offers no such tool (it offers: %s)",
                    name,
                    self.name,
                    ", ".join(sorted(offered)) or "none",
                )

    def _implementation(self, tool: str) -> Callable[..., Any]:
        async def call_mcp_tool(**arguments: Any) -> str:
            return await self.call(tool, arguments)

        call_mcp_tool.__name__ = f"{self.name}{MCP_SEPARATOR}{tool}"
        return call_mcp_tool

    # -- calls ---------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool`` once; McpToolError (naming the server) when it cannot answer."""
        if asyncio.get_running_loop() is not self._loop:
            future = asyncio.run_coroutine_threadsafe(self.call(tool, arguments), self._loop)
            return await asyncio.wrap_future(future)
        full = f"{self.name}{MCP_SEPARATOR}{tool}"
        try:
            # Reaching the server (a restart after it died) has its own budget: a cold start
            # of a stdio server is no measure of the tool's answer time.
            async with asyncio.timeout(self.connect_timeout):
                session = await self._connected_session(full)
        except TimeoutError:
            raise McpToolError(
                f"MCP server {self.name} is not reachable (no connection within "
                f"{self.connect_timeout:g}s); {full} was not run"
            ) from None
        try:
            async with asyncio.timeout(self.timeout):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            raise McpToolError(
                f"MCP server {self.name} did not answer {full} within {self.timeout:g}s; "
                "the call may still be running there"
            ) from None
        except Exception as exc:
            self._broken.set()  # the owner reconnects for the next call
            raise McpToolError(
                f"MCP server {self.name} failed during {full} ({describe(exc)}); "
                "the call may or may not have run there"
            ) from exc
        text = result_text(result)
        if result.is_error:
            raise McpToolError(f"{full} failed: {text}")
        return text

    async def _connected_session(self, full: str) -> ClientSession:
        if self._broken.is_set():  # a call saw it fail: the owner is closing it
            self._session = None
        while self._session is None:
            failed = self._attempt_failed
            self._wake.set()  # try now rather than after the backoff
            await _first_of(self._connected, failed)
            if self._session is None and self.last_error:
                break  # the attempt failed: say why (a closed session's end is no failure)
        if self._session is None:
            raise McpToolError(
                f"MCP server {self.name} is not reachable ({self.last_error}); {full} was not run"
            )
        return self._session

    async def close(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class McpServers:
    """Every ``[mcp_servers.NAME]`` of the configuration, connected (or trying to be)."""

    def __init__(self, servers: list[McpServer]) -> None:
        self.servers = servers

    @classmethod
    async def start(
        cls,
        specs: dict[str, McpServerSection],
        on_listed: Callable[[str, list[llm.Tool]], None],
        *,
        policies: Collection[str] = (),
    ) -> McpServers:
        """Start every server's owner task and wait for each first attempt (at most its
        timeout): tools of the servers that answered are handed to ``on_listed`` now, those
        of the others when they first answer."""
        servers = [McpServer(name, spec, on_listed, policies) for name, spec in specs.items()]
        await asyncio.gather(
            *(asyncio.wait_for(s._first_attempt.wait(), s.connect_timeout + 1) for s in servers),
            return_exceptions=True,
        )
        return cls(servers)

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.servers), return_exceptions=True)


async def _list_tools(session: ClientSession) -> list[Any]:
    listed: list[Any] = []
    cursor: str | None = None
    while True:
        if cursor is None:
            page = await session.list_tools()
        else:
            from mcp_types import PaginatedRequestParams

            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        listed.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return listed


def result_text(result: Any) -> str:
    """A call's result as the model reads it: its text parts, else its structured content."""
    parts = []
    for part in result.content or []:
        text = getattr(part, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(part, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


def describe(exc: BaseException) -> str:
    """One line for an exception, looking inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _errlog() -> TextIO:
    """Where a stdio server's stderr (its log) goes: ours, as a file with a descriptor (the
    child inherits it), even when ``sys.stderr`` was replaced by a wrapper without one."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            continue
    return _devnull()


@functools.cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")  # one, for the process's lifetime


def _expanded(values: dict[str, str]) -> dict[str, str]:
    """``${VAR}`` in a value read from the environment (a missing one is an error)."""

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise McpToolError(f"${{{name}}} is not set in the environment")
        return os.environ[name]

    return {
        key: re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", variable, v) for key, v in values.items()
    }


async def _first_of(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
