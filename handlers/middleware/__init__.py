"""What stands between Slack's requests and the listeners: checks and instrumentation.

An HTTP request is verified, decoded once and shape checked before bolt sees it
(:mod:`~handlers.middleware.incoming`, :mod:`~handlers.middleware.payloads`); bolt's
middleware checks Socket Mode's payloads the same way (:func:`refuse_malformed`) and binds each
request's ids to its log lines and times its acknowledgement
(:mod:`~handlers.middleware.observe`). Nothing here decides anything: a request is refused
(401, 400) or passed on unchanged.
"""

from handlers.middleware.incoming import (
    MAX_AGE,
    decode_body,
    parsed_request,
    signed,
    signed_within,
)
from handlers.middleware.observe import (
    ANSWERED_EARLY,
    answered_before_dispatch,
    observe_answered,
    observe_request,
    request_ids,
    request_kind,
)
from handlers.middleware.payloads import problem, refuse_malformed

__all__ = [
    "ANSWERED_EARLY",
    "MAX_AGE",
    "answered_before_dispatch",
    "decode_body",
    "observe_answered",
    "observe_request",
    "parsed_request",
    "problem",
    "refuse_malformed",
    "request_ids",
    "request_kind",
    "signed",
    "signed_within",
]
