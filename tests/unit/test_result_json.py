"""A result's JSON (runtime/models.py encode_json): what clients parse is
what the standard encoder wrote before, fast or not."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.models import ToolResult, encode_json

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=50)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(output=st.dictionaries(TEXT, VALUES, max_size=6))
def test_the_encoding_is_the_standard_encoders(output):
    standard = json.dumps(output, ensure_ascii=False, separators=(",", ":"))
    assert encode_json(output).decode() == standard
    assert ToolResult("c", output).output_json == standard


def test_what_the_fast_encoder_refuses_is_still_encoded():
    for odd in ({1: "non-string key"}, {"big": 2**70}, {"lone": "\ud800"}):
        assert json.loads(encode_json(odd).decode("utf-8", "surrogatepass")) == json.loads(
            json.dumps(odd)
        )
