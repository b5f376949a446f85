"""API tokens: made here, stored by their hash only (storage.stores.api).

A token is ``abt_`` and 43 URL-safe characters (256 random bits); its SHA-256 in hex is what
the database keeps, so a copy of the database gives nobody a token. Its webhook secret
(``whsec_`` and 43 characters) is kept as it is, because every delivery is signed with it.
Both are printed once, by ``approval-bot api-tokens create``.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ulid import ULID

TOKEN_SHAPE = re.compile(r"abt_[A-Za-z0-9_-]{43}")


def new_token() -> tuple[str, str, str]:
    """(token id, token, webhook secret)."""
    return (
        f"tok_{ULID()}",
        "abt_" + secrets.token_urlsafe(32),
        "whsec_" + secrets.token_urlsafe(32),
    )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
