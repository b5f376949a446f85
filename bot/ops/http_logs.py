"""What aiohttp's server logs about requests it could not even parse: one line, no traceback.

aiohttp answers a malformed request (a request line or header over 8190 bytes, a bad method,
broken chunking) with a 400 itself, before any handler of ours runs, and logs it with
``logger.exception``: an ERROR with a traceback for what is a client's mistake, which also
quoted the first 100 bytes of the offending line (a token in a URL would be in the logs).
:data:`SERVER_LOGGER` replaces aiohttp's ``aiohttp.server`` logger for our servers (``serve``'s
Slack port and the metrics port): a request that did not parse is one WARNING line naming the
peer, the status it got and the kind of fault; everything else is logged as aiohttp logs it.
Owns no state.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError


class OneLineBadRequests(logging.LoggerAdapter):  # type: ignore[type-arg]
    """``aiohttp.server``, with unparseable requests said in one line."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kw: Any) -> None:
        if not self._bad_request(msg, args, exc_info, logging.WARNING):
            self.logger.exception(msg, *args, exc_info=exc_info, **kw)

    def debug(self, msg: object, *args: object, **kw: Any) -> None:
        # A first request with a bad method (TLS to a plain port, a scanner): debug, as aiohttp.
        if not self._bad_request(msg, args, kw.get("exc_info"), logging.DEBUG):
            self.logger.debug(msg, *args, **kw)

    def _bad_request(
        self, msg: object, args: tuple[object, ...], exc_info: Any, level: int
    ) -> bool:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        if exc is None and exc_info is True:
            exc = sys.exc_info()[1]
        if not isinstance(exc, HttpProcessingError):
            return False
        remote = args[0] if args and str(msg).endswith("%s") else "?"
        self.logger.log(
            level,
            "bad HTTP request from %s, answered %s (%s)",
            remote,
            exc.code,
            type(exc).__name__,
        )
        return True


SERVER_LOGGER = OneLineBadRequests(logging.getLogger("aiohttp.server"), {})
