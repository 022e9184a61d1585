"""gojson.shape_problem gives the same answer with the config's bytes (its C pre-check of
them) as by walking the decoded value alone, on generated documents and the edge inputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.spec import jsoncodec
from pycni.spec.gojson import shape_problem

texts = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=()), max_size=5)
documents = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=12,
)


def encodings(doc: Any) -> list[bytes]:
    out = []
    for ensure_ascii in (True, False):
        text = json.dumps(doc, ensure_ascii=ensure_ascii)
        out.append(text.encode("utf-8", "surrogatepass"))
        if ensure_ascii or not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
            out.append(text.encode("utf-16-le", "surrogatepass"))
    return out


@settings(max_examples=300)
@given(documents, st.integers(1, 6))
def test_the_pre_check_never_changes_the_answer(doc: Any, max_depth: int) -> None:
    for source in encodings(doc):
        value = jsoncodec.loads(source)
        assert shape_problem(value, max_depth, source) == shape_problem(value, max_depth)


@pytest.mark.parametrize(
    "source",
    [
        b'{"a": "\\ud800"}',
        b'{"\\udfff": 1}',
        b'{"a": "\xed\xa0\x80"}',
        '{"a": "\\ud800"}'.encode("utf-16-le"),
        '{"a": "\\ud800"}'.encode("utf-16"),
        b"[" * 4 + b"]" * 4,
        b"[" * 5 + b"]" * 5,
        b'{"a": "[[[[[["}',
        b'{"a": {"b": {"c": {"d": [1]}}}}',
        b'{"name": "\\\\u", "x": [[[[[[]]]]]]}',
    ],
)
def test_edge_inputs(source: bytes) -> None:
    value = jsoncodec.loads(source)
    for max_depth in (3, 4, 5, 64):
        assert shape_problem(value, max_depth, source) == shape_problem(value, max_depth)
    assert shape_problem(value, 4, source.decode("utf-8", "replace")) == shape_problem(value, 4)  # type: ignore[arg-type]
