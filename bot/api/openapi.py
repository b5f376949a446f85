"""``GET /api/v1/openapi.json``: the OpenAPI 3.1 description of ``/api/v1``, built here from
the same limits the routes enforce (:mod:`bot.engine.requests`), so the two cannot drift."""

from __future__ import annotations

from typing import Any

from bot.engine.requests import (
    CHOICES_LIMIT,
    KEY_LIMIT,
    ON_EXPIRY,
    PEOPLE_LIMIT,
    QUESTION_LIMIT,
    TITLE_LIMIT,
)

VERSION = "1.0.0"
STATUSES = ["pending", "approved", "denied", "expired", "cancelled", "answered"]


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


ERRORS = {
    "400": _error("A field is wrong (``field`` names it); nothing was stored."),
    "401": _error("No token, or an unknown, revoked or expired one."),
    "413": _error("The body is over 64 KiB."),
    "429": _error("Over the token's rate (``api_rate_limit``); see Retry-After."),
    "503": _error("The database failed; nothing was stored: send the request again."),
}
PEOPLE = {
    "type": "array",
    "maxItems": PEOPLE_LIMIT,
    "items": {"type": "string", "pattern": "^[UWS][A-Z0-9]{2,30}$"},
}
TTL = {
    "oneOf": [
        {"type": "integer", "minimum": 1, "description": "seconds"},
        {"type": "string", "examples": ["30m", "2h", "1d"]},
    ],
    "description": "How long it may stay pending (default: approval_ttl); at most 30 days.",
}
COMMON = {
    "channel": {"type": "string", "description": "A channel the token may post to."},
    "ttl": TTL,
    "webhook_url": {"type": "string", "format": "uri", "description": "http:// or https://"},
    "idempotency_key": {"type": "string", "maxLength": KEY_LIMIT},
}


def _item(kind: str, schema: str) -> dict[str, Any]:
    ok = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}
    param = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    wait = {
        "name": "wait",
        "in": "query",
        "schema": {"type": "integer", "minimum": 0, "maximum": 60},
        "description": "Hold the request up to this many seconds until the status changes.",
    }
    item: dict[str, Any] = {
        "get": {
            "summary": f"The {kind}'s status, who decided, why, when (long-poll with wait)",
            "parameters": [param, wait],
            "responses": {
                "200": {"description": "The request", **ok},
                "404": _error("Not the token's, or no such id."),
                **ERRORS,
            },
        }
    }
    item["delete"] = {
        "summary": f"Cancel the {kind} (only its creating token)",
        "parameters": [param],
        "responses": {
            "200": {"description": "Cancelled (or cancelled already)", **ok},
            "404": _error("Not the token's, or no such id."),
            "409": _error("Settled already."),
            **ERRORS,
        },
    }
    return item


def _create(kind: str, body: str) -> dict[str, Any]:
    created = {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Created"}}}
    }
    return {
        "post": {
            "summary": f"Ask for {kind} in Slack",
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}
                },
            },
            "responses": {
                "201": {"description": "Created; its card is posted", **created},
                "200": {
                    "description": "The same idempotency_key and body: the same one",
                    **created,
                },
                "403": _error("The token may not post to that channel."),
                "409": _error("idempotency_key reused with another body."),
                **ERRORS,
            },
        }
    }


def openapi() -> dict[str, Any]:
    view = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "kind": {"enum": ["approval", "question"]},
            "status": {"enum": STATUSES},
            "channel": {"type": "string"},
            "action": {"type": "string"},
            "details": {"type": "object"},
            "question": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "string"}},
            "on_expiry": {"enum": list(ON_EXPIRY)},
            "approved_by": {"type": "array", "items": {"type": "string"}},
            "decided_by": {
                "type": ["object", "null"],
                "properties": {"id": {"type": "string"}, "name": {"type": ["string", "null"]}},
            },
            "decided_at": {"type": ["string", "null"], "format": "date-time"},
            "reason": {"type": ["string", "null"]},
            "answer": {"type": ["string", "null"]},
            "created_at": {"type": "string", "format": "date-time"},
            "expires_at": {"type": "string", "format": "date-time"},
            "delivery_id": {"type": "string", "description": "Webhook bodies only."},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "approval-bot API",
            "version": VERSION,
            "description": (
                "Ask a person in Slack and wait for the decision. Webhooks POST the request's "
                "JSON (with delivery_id) to webhook_url, signed: X-Approval-Bot-Signature: "
                "v1=<hex HMAC-SHA256(webhook secret, X-Approval-Bot-Timestamp + '.' + body)>."
            ),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "ApprovalRequest": {
                    "type": "object",
                    "required": ["channel", "action"],
                    "additionalProperties": False,
                    "properties": {
                        **COMMON,
                        "action": {"type": "string", "maxLength": TITLE_LIMIT},
                        "details": {"type": "object"},
                        "approvers": PEOPLE,
                        "min_approvals": {"type": "integer", "minimum": 1},
                        "on_expiry": {"enum": list(ON_EXPIRY)},
                    },
                },
                "QuestionRequest": {
                    "type": "object",
                    "required": ["channel", "question"],
                    "additionalProperties": False,
                    "properties": {
                        **COMMON,
                        "question": {"type": "string", "maxLength": QUESTION_LIMIT},
                        "choices": {
                            "type": "array",
                            "maxItems": CHOICES_LIMIT,
                            "items": {"type": "string"},
                        },
                        "answerers": PEOPLE,
                    },
                },
                "Created": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"enum": STATUSES},
                        "expires_at": {"type": "string", "format": "date-time"},
                    },
                },
                "Request": view,
                "Error": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/approvals": _create("an approval", "ApprovalRequest"),
            "/api/v1/questions": _create("an answer", "QuestionRequest"),
            "/api/v1/approvals/{id}": _item("approval", "Request"),
            "/api/v1/questions/{id}": _item("question", "Request"),
        },
    }
