"""Go's encoding/json syntax errors, as cnitool v1.3.0 prints them (pycni.spec.goscan).

The expected texts were taken from cnitool v1.3.0 itself (tests/interop/test_cli_cnitool.py
compares them live when the reference is present)."""

from __future__ import annotations

import pytest

from pycni.spec.gojson import go_unmarshal
from pycni.spec.goscan import syntax_error

CASES = [
    ("{bad", "invalid character 'b' looking for beginning of object key string"),
    ('{"a":1,}', "invalid character '}' looking for beginning of object key string"),
    ("{} x", "invalid character 'x' after top-level value"),
    ("[1 2]", "invalid character '2' after array element"),
    ('{"a" 1}', "invalid character '1' after object key"),
    ('{"a":1 "b"}', "invalid character '\"' after object key:value pair"),
    ("trux", "invalid character 'x' in literal true (expecting 'e')"),
    ('"a\\q"', "invalid escape sequence `\\q` in string"),
    ('"\\u12"', 'invalid escape sequence `\\u12"` in string'),
    ('"\\u12', "unexpected end of JSON input"),
    ("1.e", "invalid character 'e' in numeric literal"),
    ('"\t"', "invalid character '\\t' in string"),
    ("'x'", "invalid character '\\'' looking for beginning of value"),
    ("\u200b", "invalid character '\\u200b' looking for beginning of value"),
    ("\u00e9", "invalid character '\u00e9' looking for beginning of value"),
    (b"\xff", "invalid character '\\xff' looking for beginning of value"),
    ("[1,2", "unexpected end of JSON input"),
    ("-01", "invalid character '1' after top-level value"),
]


@pytest.mark.parametrize(("text", "message"), CASES)
def test_syntax_errors_are_worded_as_go(text: str | bytes, message: str) -> None:
    assert syntax_error(text) == message
    with pytest.raises(ValueError) as err:
        go_unmarshal(text)
    assert str(err.value) == message


@pytest.mark.parametrize("text", ['{"a":[1,{"b":null}]}', "1e400", '"\\ud800"', " 7 ", "[]"])
def test_valid_texts_have_no_syntax_error(text: str) -> None:
    assert syntax_error(text) is None


def test_a_bad_object_key_before_json_decoder_is_loaded_is_a_value_error() -> None:
    """CPython 3.11's C scanner returns NULL without an exception for '{x' while json.decoder
    is not imported yet; jsoncodec falls back to json.loads (a fresh interpreter shows it)."""
    import subprocess
    import sys

    code = (
        "from pycni.spec.gojson import go_unmarshal as g\n"
        "try: g('{x')\nexcept ValueError as e: print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "invalid character 'x' looking for beginning of object key string"
