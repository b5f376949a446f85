"""Approvals and questions another system asks for: the one place that checks such a request
and stores it (``POST /api/v1/approvals`` and ``/questions``, and the MCP server's tools).

A request is an approval (or a question) with no agent behind it, as a Workflow Builder step
is: the action is the title where a tool's name goes, ``details`` its arguments, stored with
a run of its own (status ``step``: nothing resumes it) by :mod:`storage.stores.api` and
settled by the same conditional UPDATEs as every approval, so cards, DM copies, reminders,
quorum, expiry and audit are those of a tool's approval. :func:`read_approval` and
:func:`read_question` check a request's JSON before anything is stored and name the field
that is wrong (:class:`RequestInputError`); :func:`create_request` stores it, once per
idempotency key: the same key with the same body is the same request, with another body a
:class:`IdempotencyConflict`. :func:`request_view` is what every reader is told about it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from bot.clock import utcnow
from bot.config import Config
from bot.config.fields import duration_problem
from bot.ids import SLACK_APPROVER_ID, SLACK_CHANNEL_ID, new_approval_id, new_run_id
from storage.models import Approval
from storage.repository import (
    ApprovalDraft,
    Repository,
    StoredToken,
    canonical_json,
    payload_hash,
)

TITLE_LIMIT = 255  # approvals.tool_name
QUESTION_LIMIT = 2000
DETAILS_LIMIT = 16 * 1024  # the details as JSON
PEOPLE_LIMIT = 100
CHOICES_LIMIT = 20
CHOICE_LIMIT = 75  # a button's text
KEY_LIMIT = 200  # api_requests.idempotency_key
URL_LIMIT = 2000
LONGEST_TTL = timedelta(days=30)
APPROVER = SLACK_APPROVER_ID
CHANNEL_ID = SLACK_CHANNEL_ID
ON_EXPIRY = ("deny", "cancel")
# A request's definition, bound into the approval's payload hash as a tool's definition is.
DEFINITION = {"api": "v1"}
APPROVAL_FIELDS = {
    "channel",
    "action",
    "details",
    "approvers",
    "min_approvals",
    "ttl",
    "on_expiry",
    "webhook_url",
    "idempotency_key",
}
QUESTION_FIELDS = {
    "channel",
    "question",
    "choices",
    "answerers",
    "ttl",
    "webhook_url",
    "idempotency_key",
}


class RequestInputError(ValueError):
    """The request cannot be stored; ``field`` names the part that is wrong."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class ChannelNotAllowed(PermissionError):
    """The token may not post to that channel."""


class IdempotencyConflict(Exception):
    """The idempotency key was used before with another body."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"idempotency_key was used for {approval_id} with another body")
        self.approval_id = approval_id


@dataclass(frozen=True)
class HumanRequest:
    """A checked request: an approval (``kind`` approval) or a question."""

    kind: str
    channel: str
    title: str
    details: dict[str, Any] = field(default_factory=dict)
    choices: tuple[str, ...] = ()
    people: tuple[str, ...] = ()
    min_approvals: int = 1
    ttl: timedelta | None = None
    on_expiry: str = "deny"
    webhook_url: str | None = None
    idempotency_key: str | None = None

    def body_hash(self) -> str:
        """What the idempotency key binds: every field but the key itself."""
        material = {
            "kind": self.kind,
            "channel": self.channel,
            "title": self.title,
            "details": self.details,
            "choices": list(self.choices),
            "people": list(self.people),
            "min_approvals": self.min_approvals,
            "ttl": None if self.ttl is None else self.ttl.total_seconds(),
            "on_expiry": self.on_expiry,
            "webhook_url": self.webhook_url,
        }
        return hashlib.sha256(canonical_json(material).encode()).hexdigest()


@dataclass(frozen=True)
class RequestCreated:
    approval_id: str
    created: bool  # False: the idempotency key's earlier request, returned again


def read_approval(body: Any) -> HumanRequest:
    """``POST /api/v1/approvals``'s JSON, checked."""
    data = _object(body, APPROVAL_FIELDS)
    details = data.get("details", {})
    if details is None:
        details = {}
    if not isinstance(details, dict):
        raise RequestInputError("details", "must be a JSON object")
    if len(canonical_json(details)) > DETAILS_LIMIT:
        raise RequestInputError("details", f"may be at most {DETAILS_LIMIT} bytes as JSON")
    approvers = _people(data, "approvers")
    min_approvals = data.get("min_approvals", 1)
    if min_approvals is None:
        min_approvals = 1
    if isinstance(min_approvals, bool) or not isinstance(min_approvals, int) or min_approvals < 1:
        raise RequestInputError("min_approvals", "must be a whole number, at least 1")
    if min_approvals > max(len(approvers), 1):
        raise RequestInputError("min_approvals", "may not exceed the number of approvers")
    on_expiry = data.get("on_expiry") or "deny"
    if on_expiry not in ON_EXPIRY:
        raise RequestInputError("on_expiry", "must be one of: " + ", ".join(ON_EXPIRY))
    return HumanRequest(
        kind="approval",
        channel=_channel(data),
        title=_text(data, "action", TITLE_LIMIT),
        details=details,
        people=approvers,
        min_approvals=min_approvals,
        ttl=_ttl(data),
        on_expiry=on_expiry,
        webhook_url=_url(data),
        idempotency_key=_key(data),
    )


def read_question(body: Any) -> HumanRequest:
    """``POST /api/v1/questions``'s JSON, checked."""
    data = _object(body, QUESTION_FIELDS)
    choices = data.get("choices") or []
    if not isinstance(choices, list) or len(choices) > CHOICES_LIMIT:
        raise RequestInputError("choices", f"must be a list of at most {CHOICES_LIMIT} strings")
    for choice in choices:
        if not isinstance(choice, str) or not choice.strip() or len(choice) > CHOICE_LIMIT:
            raise RequestInputError(
                "choices", f"each choice must be a non-empty string of at most {CHOICE_LIMIT}"
            )
    if len({choice.strip() for choice in choices}) != len(choices):
        raise RequestInputError("choices", "must differ from each other")
    return HumanRequest(
        kind="question",
        channel=_channel(data),
        title=_text(data, "question", QUESTION_LIMIT),
        choices=tuple(choices),
        people=_people(data, "answerers"),
        ttl=_ttl(data),
        webhook_url=_url(data),
        idempotency_key=_key(data),
    )


def _object(body: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestInputError("body", "must be a JSON object")
    unknown = sorted(set(body) - known)
    if unknown:
        raise RequestInputError(unknown[0], "is not a known field: " + ", ".join(sorted(known)))
    return body


def _channel(data: Mapping[str, Any]) -> str:
    channel = data.get("channel")
    if not isinstance(channel, str) or not CHANNEL_ID.match(channel):
        raise RequestInputError("channel", "must be a Slack channel id (C…, G… or D…)")
    return channel


def _text(data: Mapping[str, Any], name: str, limit: int) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise RequestInputError(name, "must be a non-empty string")
    if len(value) > limit:
        raise RequestInputError(name, f"may be at most {limit} characters long")
    return value.strip()


def _people(data: Mapping[str, Any], name: str) -> tuple[str, ...]:
    people = data.get(name) or []
    if not isinstance(people, list) or len(people) > PEOPLE_LIMIT:
        raise RequestInputError(name, f"must be a list of at most {PEOPLE_LIMIT} Slack ids")
    for person in people:
        if not isinstance(person, str) or not APPROVER.match(person):
            raise RequestInputError(name, f"{str(person)[:40]!r} is not a Slack user or group id")
    return tuple(dict.fromkeys(people))


def _ttl(data: Mapping[str, Any]) -> timedelta | None:
    value = data.get("ttl")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        # Compared before timedelta(): a huge number overflows it (an OverflowError, not a
        # refusal).
        if value > LONGEST_TTL.total_seconds():
            raise RequestInputError("ttl", "may be at most 30 days")
        parsed: timedelta | str = (
            timedelta(seconds=value) if value > 0 else "must be positive seconds"
        )
    else:
        parsed = duration_problem(value)
    if isinstance(parsed, str):
        raise RequestInputError("ttl", f"{parsed} (or a number of seconds)")
    if parsed > LONGEST_TTL:
        raise RequestInputError("ttl", "may be at most 30 days")
    return parsed


def _url(data: Mapping[str, Any]) -> str | None:
    url = data.get("webhook_url")
    if url is None:
        return None
    if not isinstance(url, str) or len(url) > URL_LIMIT:
        raise RequestInputError("webhook_url", "must be an http:// or https:// URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RequestInputError("webhook_url", "must be an http:// or https:// URL")
    return url


def _key(data: Mapping[str, Any]) -> str | None:
    key = data.get("idempotency_key")
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > KEY_LIMIT:
        raise RequestInputError("idempotency_key", f"must be a string of 1 to {KEY_LIMIT}")
    return key


async def create_request(
    repo: Repository,
    config: Config,
    token: StoredToken,
    request: HumanRequest,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> RequestCreated:
    """Store an approval or question for ``token`` (pending; its card goes out through the
    card outbox). The same idempotency key with the same body returns the first request
    (``created`` False); with another body raises IdempotencyConflict. ChannelNotAllowed:
    the token may not post there."""
    if request.channel not in token.channels:
        raise ChannelNotAllowed(f"this token may not post to {request.channel}")
    if request.kind == "question" and not request.people and not APPROVER.match(token.requester):
        raise RequestInputError("answerers", "name who may answer (the token has no requester)")
    now = clock()
    approval_id = new_approval_id()
    if request.kind == "question":
        arguments: dict[str, Any] = {
            "question": request.title,
            "choices": list(request.choices) or None,
        }
        title = "ask_user"
        ttl = request.ttl or config.question_policy().ttl
    else:
        arguments = dict(request.details)
        title = request.title
        ttl = request.ttl or config.approval_ttl
    body_hash = request.body_hash()
    draft = ApprovalDraft(
        id=approval_id,
        tool_call_id=f"api_{approval_id}",
        tool_name=title,
        arguments=arguments,
        payload_hash=payload_hash(title, arguments, DEFINITION),
        approvers=list(request.people),
        allow_self_approval=False,
        on_expiry=request.on_expiry,
        expires_at=now + ttl,
        kind=request.kind,
        min_approvals=request.min_approvals,
    )
    started = await repo.start_api_request(
        token=token,
        run_id=new_run_id(),
        idempotency_key=request.idempotency_key,
        body_hash=body_hash,
        webhook_url=request.webhook_url,
        delivery_id=f"dlv_{approval_id.removeprefix('apr_')}",
        channel=request.channel,
        draft=draft,
        now=now,
    )
    if not started.created and started.body_hash != body_hash:
        raise IdempotencyConflict(started.approval_id)
    return RequestCreated(approval_id=started.approval_id, created=started.created)


def api_status(approval: Approval) -> str:
    """The API's status: pending, approved, denied, expired, cancelled or answered."""
    if approval.status in ("approved", "executing", "executed"):
        return "approved"
    if approval.status in ("denied", "expired", "cancelled", "answered", "pending"):
        return approval.status
    return "cancelled"  # an unknown end (never for an API request's approval)


def request_view(approval: Approval, *, delivery_id: str | None = None) -> dict[str, Any]:
    """What ``GET /api/v1/approvals/{id}``, the webhook and the MCP tools say of a request."""
    status = api_status(approval)
    decided = approval.decided_by if status in ("approved", "denied", "answered") else None
    view: dict[str, Any] = {
        "id": approval.id,
        "kind": approval.kind,
        "status": status,
        "channel": approval.channel,
        "created_at": _iso(approval.created_at),
        "expires_at": _iso(approval.expires_at),
        "decided_by": (
            {"id": decided, "name": approval.decided_by_name or None} if decided else None
        ),
        "decided_at": _iso(approval.decided_at) if status != "pending" else None,
        "reason": approval.reason if status != "answered" else None,
        "answer": approval.result if status == "answered" else None,
    }
    if approval.kind == "question":
        view["question"] = approval.arguments.get("question")
        view["choices"] = approval.arguments.get("choices") or []
    else:
        view["action"] = approval.tool_name
        view["details"] = approval.arguments
        view["on_expiry"] = approval.on_expiry
        view["approved_by"] = list(approval.approved_by or [])
    if delivery_id is not None:
        view["delivery_id"] = delivery_id
    return view


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds") + "Z"
