"""The MCP server itself (the official ``mcp`` SDK's ``MCPServer``), on stdio or streamable
HTTP, and who the caller is on each.

Every call acts for one API token (``approval-bot api-tokens create``), as a request to
``/api/v1`` does: the token decides which channels it may post to, whose idempotency keys
it shares, and who the card says asked. On stdio the process is started for one caller, so
the token is given once (``--token`` or ``APPROVAL_BOT_TOKEN``) and looked up again on every
call (a revoked token stops working at once). Over HTTP every request carries
``Authorization: Bearer <token>``: the SDK's bearer middleware refuses a missing or unknown
one with 401 before the MCP session sees it (:class:`ApiTokenVerifier`), and each tool call
reads the header of its own request, so two clients with two tokens share one server.

A tool's failure is always a tool error (``isError``) with a sentence: a bad argument, a
refused channel, a database that failed. Nothing a client sends stops the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from bot.mcp_server.tools import Asking, Refusal, database_failure, token_by_bearer
from storage.repository import Repository, StoredToken

log = logging.getLogger(__name__)

NAME = "approval-bot"
INSTRUCTIONS = (
    "Ask a person in Slack before a risky step, and wait for the answer. request_approval "
    "posts an Approve / Deny card and returns the decision (status approved, denied, expired "
    "or cancelled, who decided, their reason); ask_human posts a question and returns the "
    "answer. Both wait until a person has acted. Pass an idempotency_key: if the call is cut "
    "off, calling again with the same key and arguments waits for the same request."
)

MAX_WAIT = (
    "seconds to wait at most, then return status pending (for clients that cut long calls "
    "off; call again with the same idempotency_key); default: until a person acts"
)
TokenOf = Callable[[Context], Awaitable[StoredToken]]


class ApiTokenVerifier:
    """The SDK's ``TokenVerifier`` over the API's tokens: HTTP requests without a live one
    are refused with 401 before any MCP message is read."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            stored = await token_by_bearer(self.repo, token)
        except Exception as exc:
            if database_failure(exc) is None:
                raise
            return None
        if stored is None:
            return None
        expires = None if stored.expires_at is None else int(stored.expires_at.timestamp())
        return AccessToken(token=token, client_id=stored.id, scopes=[], expires_at=expires)


def stdio_token(repo: Repository, bearer: str) -> TokenOf:
    """The one caller of a stdio server: its token, checked again on every call."""

    async def token_of(_ctx: Context) -> StoredToken:
        stored = await token_by_bearer(repo, bearer)
        if stored is None:
            raise Refusal("the API token of this server is unknown, revoked or expired")
        return stored

    return token_of


def http_token(repo: Repository) -> TokenOf:
    """An HTTP call's caller: the bearer token of its own request."""

    async def token_of(ctx: Context) -> StoredToken:
        headers = ctx.headers or {}
        scheme, _, bearer = (headers.get("authorization") or "").partition(" ")
        stored = await token_by_bearer(repo, bearer) if scheme.lower() == "bearer" else None
        if stored is None:
            raise Refusal("a live API token is required (Authorization: Bearer …)")
        return stored

    return token_of


def http_url(host: str, port: int) -> str:
    """``http://HOST:PORT``, an IPv6 address in brackets (``--host ::1``)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def build_server(
    asking: Asking, token_of: TokenOf, *, http: tuple[str, int] | None = None
) -> MCPServer:
    """The server with its two tools; ``http`` (host, port): authenticated by API tokens."""
    auth: dict[str, Any] = {}
    if http is not None:
        host, port = http
        auth = {
            # The SDK's bearer check wants an issuer; the tokens are ours (no OAuth routes).
            "auth": AuthSettings.model_validate(
                {"issuer_url": http_url(host, port), "resource_server_url": None}
            ),
            "token_verifier": ApiTokenVerifier(asking.repo),
        }
    server: MCPServer = MCPServer(NAME, instructions=INSTRUCTIONS, log_level="WARNING", **auth)

    async def calling(ctx: Context, ask: Callable[[StoredToken], Awaitable[Any]]) -> Any:
        try:
            return await ask(await token_of(ctx))
        except Refusal as refused:
            raise ToolError(str(refused)) from None
        except Exception as exc:
            if (failure := database_failure(exc)) is not None:
                raise ToolError(str(failure)) from None
            log.exception("mcp: a tool call failed")
            raise ToolError("the bot failed to record the request; call again") from None

    def gone_of(ctx: Context) -> Any:
        """Over HTTP, whether the call's own connection is closed (Starlette's
        ``is_disconnected``); None on stdio, whose client going away ends the process."""
        return getattr(ctx.request_context.request, "is_disconnected", None)

    def progress_of(ctx: Context) -> Any:
        async def report(done: float, total: float | None, message: str) -> None:
            await ctx.report_progress(done, total, message)

        return report

    @server.tool()
    async def request_approval(
        action: Annotated[str, Field(description="what will be done: the card's title")],
        ctx: Context,
        details: Annotated[
            dict[str, Any] | None,
            Field(description="the details as a JSON object, shown on the card"),
        ] = None,
        channel: Annotated[
            str | None, Field(description="a Slack channel id (C…) the token may post to")
        ] = None,
        approvers: Annotated[
            list[str] | None, Field(description="Slack user or group ids who may decide")
        ] = None,
        timeout: Annotated[
            str | int | None,
            Field(description="how long the request stays open: seconds, or 30m, 2h, 1d"),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(description="the same key and arguments again wait for the same request"),
        ] = None,
        max_wait: Annotated[int | None, Field(description=MAX_WAIT)] = None,
    ) -> dict[str, Any]:
        """Ask a person in Slack to approve an action, and wait for the decision.

        Returns status (approved, denied, expired or cancelled), decided_by, reason."""
        return await calling(
            ctx,
            lambda token: asking.request_approval(
                token,
                progress_of(ctx),
                action=action,
                details=details,
                channel=channel,
                approvers=approvers,
                timeout=timeout,
                idempotency_key=idempotency_key,
                max_wait=max_wait,
                gone=gone_of(ctx),
            ),
        )

    @server.tool()
    async def ask_human(
        question: Annotated[str, Field(description="the question for a person in Slack")],
        ctx: Context,
        choices: Annotated[
            list[str] | None, Field(description="answers to offer as buttons (else free text)")
        ] = None,
        channel: Annotated[
            str | None, Field(description="a Slack channel id (C…) the token may post to")
        ] = None,
        answerers: Annotated[
            list[str] | None, Field(description="Slack user or group ids who may answer")
        ] = None,
        timeout: Annotated[
            str | int | None,
            Field(description="how long the question stays open: seconds, or 30m, 2h, 1d"),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(description="the same key and arguments again wait for the same question"),
        ] = None,
        max_wait: Annotated[int | None, Field(description=MAX_WAIT)] = None,
    ) -> dict[str, Any]:
        """Ask a person in Slack a question, and wait for the answer (status answered,
        answer, decided_by)."""
        return await calling(
            ctx,
            lambda token: asking.ask_human(
                token,
                progress_of(ctx),
                question=question,
                choices=choices,
                channel=channel,
                answerers=answerers,
                timeout=timeout,
                idempotency_key=idempotency_key,
                max_wait=max_wait,
                gone=gone_of(ctx),
            ),
        )

    return server
