"""The payload hash never changes: pending approvals in the database carry hashes taken by
earlier versions, and a hash that changed would cancel every one of them at execution."""

from __future__ import annotations

import hashlib
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.hashes import PayloadHasher, canonical_json, payload_hash
from storage.values import storable

DEFINITION = {
    "name": "restart_service",
    "description": "Restart a service.",
    "input_schema": {
        "properties": {"service": {"title": "Service", "type": "string"}},
        "required": ["service"],
        "title": "restart_serviceInputSchema",
        "type": "object",
    },
}


def hash_as_first_defined(tool: str, arguments: Any, definition: dict[str, Any]) -> str:
    """The material as the first version wrote it: one canonical JSON object of all three."""
    material = canonical_json(
        storable({"tool": tool, "arguments": arguments, "definition": definition})
    )
    return hashlib.sha256(material.encode()).hexdigest()


def test_a_known_payload_keeps_its_hash() -> None:
    # Taken by the version that serialized the whole object at once (before PayloadHasher).
    arguments = {"service": "api", "odd": "a\x00\ud800é", "n": [1, 1.5, True, None]}
    expected = "9b192d6770c9eed05a1c37cb88450c2bd92790e5c3871e8891f242aacd41abd7"
    assert payload_hash("restart_service", arguments, DEFINITION) == expected
    assert PayloadHasher(DEFINITION)("restart_service", arguments) == expected


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    tool=st.text(max_size=12),
    arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    schema=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
def test_the_hasher_writes_the_same_material_as_one_object(
    tool: str, arguments: dict[str, Any], schema: dict[str, Any]
) -> None:
    definition = {"name": tool, "description": "d\x00\udc00", "input_schema": schema}
    assert PayloadHasher(definition)(tool, arguments) == hash_as_first_defined(
        tool, arguments, definition
    )


def test_odd_numbers_hash_as_stored() -> None:
    arguments = {"x": math.nan, "y": -math.inf}
    assert payload_hash("t", arguments, DEFINITION) == hash_as_first_defined(
        "t", {"x": "NaN", "y": "-Infinity"}, DEFINITION
    )
