"""The request body is decoded once, by us, exactly as bolt would decode it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from hypothesis import given, settings
from hypothesis import strategies as st
from slack_bolt.request.internals import parse_body

from handlers.middleware import decode_body

FORM = "application/x-www-form-urlencoded"
# Characters that mean something to a form decoder, and some that need more than a byte.
FORM_TEXT = st.text(alphabet=st.sampled_from('%+&=;aZ09AFaf _-.~"{}[]:,é中\U0001f600\n'))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def both(text: str, content_type: str | None) -> tuple[Any, Any]:
    """What bolt and we make of ``text``: the decoded body, or the kind of error."""
    results = []
    for decode in (parse_body, decode_body):
        try:
            results.append(decode(text, content_type))
        except ValueError as exc:
            results.append(type(exc).__name__)
    return results[0], results[1]


@settings(max_examples=400)
@given(text=FORM_TEXT, content_type=st.sampled_from([FORM, "application/json", None]))
async def test_any_body_is_decoded_as_bolt_decodes_it(text: str, content_type: str | None) -> None:
    ours, bolts = both(text, content_type)
    assert ours == bolts


@settings(max_examples=200)
@given(payload=JSON_VALUES, extra=st.dictionaries(FORM_TEXT, FORM_TEXT, max_size=3))
async def test_interactive_forms_are_decoded_as_bolt_decodes_them(
    payload: Any, extra: dict[str, str]
) -> None:
    text = urlencode({**extra, "payload": json.dumps(payload)})
    ours, bolts = both(text, FORM)
    assert ours == bolts


@settings(max_examples=200)
@given(fields=st.dictionaries(FORM_TEXT, FORM_TEXT, max_size=6))
async def test_slash_command_forms_are_decoded_as_bolt_decodes_them(fields: dict[str, str]) -> None:
    text = urlencode(fields)
    ours, bolts = both(text, FORM)
    assert ours == bolts
