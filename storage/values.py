"""The one rule for values we store, so that SQLite and PostgreSQL keep exactly the same ones.

Text from models, tools and people can hold what one database takes and the other refuses:
PostgreSQL rejects NUL in text ("invalid byte sequence") and NaN or Infinity in JSON, which
SQLite stored; a lone surrogate (half of a UTF-16 pair, which a model's JSON ``"\\ud800"``
escape produces) cannot be encoded as UTF-8 for either database's text, though both kept it
escaped inside JSON. Every text and JSON value bound to a statement passes through here:

- In text, NUL and lone surrogates become U+FFFD (the replacement character); a surrogate
  pair written as two code points becomes the one character it encodes, as JSON reads it.
- In JSON, the same for every string (keys too), and the numbers JSON has no spelling for,
  NaN, Infinity and -Infinity, become those words as strings.

Nothing is refused: a tool's output, a model's arguments or a person's reason is stored, and
read back, in this form on both databases. A gated call's arguments are approved in this form
(the payload hash is taken over it) and the call runs with it.
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
# In json.dumps output (ASCII, lowercase escapes): surrogate pairs (consumed, fine) or, in
# group 1, NUL or a surrogate escape left alone. An escaped backslash before "u0000" can raise
# a false alarm, which only costs a walk; nothing odd goes unseen.
_JSON_ESCAPES = re.compile(r"\\u(?:d[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|(0000|d[89a-f]))")
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
# ``json.dumps(value, allow_nan=False)`` builds an encoder per call (any non-default argument
# does); JSON columns and audit details are written several times per transaction.
_STRICT_ENCODER = json.JSONEncoder(allow_nan=False)


def _strict_json(value: Any) -> str:
    """``_STRICT_ENCODER.encode(value)``, straight through the C encoder: ``encode`` and
    ``iterencode`` spend about 1.5 µs per call in Python (a closure, checks, the list) before
    calling it, on every JSON value written (18 per pause -> decide -> resume cycle). A new
    ``markers`` dict per call, as ``iterencode`` makes: circular values still raise ValueError.
    """
    if c_make_encoder is None:  # no C accelerator in this Python
        return _STRICT_ENCODER.encode(value)
    encoder = c_make_encoder(
        {}, _STRICT_ENCODER.default, encode_basestring_ascii, None, ": ", ", ", False, False, False
    )
    return "".join(encoder(value, 0))


def storable_text(text: str) -> str:
    """``text`` without NUL or lone surrogates (each becomes U+FFFD)."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # UTF-16 joins the pairs and replaces what is left alone.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def storable(value: Any) -> Any:
    """A JSON value as it is stored: :func:`storable_text` strings, non-finite numbers named."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else _NON_FINITE[value]
    if isinstance(value, dict):
        return {
            storable_text(k) if isinstance(k, str) else k: storable(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def json_text(value: Any) -> str:
    """JSON column text, serialized as SQLAlchemy's JSON type does, of :func:`storable` values.

    Checks the serialized text (C speed) and walks the value only when something needs it.
    """
    try:
        text = _strict_json(value)
    except ValueError:  # NaN or an infinity somewhere
        return json.dumps(storable(value))
    if "\\u0000" not in text and "\\ud" not in text:
        return text
    if not any(match.group(1) for match in _JSON_ESCAPES.finditer(text)):
        return text
    return json.dumps(storable(value))
