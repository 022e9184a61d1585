"""pycni.spec.jsoncodec returns exactly what the json package returns, on generated documents
and on the inputs json handles specially (BOMs, UTF-16, errors, NaN, circular containers)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.spec import jsoncodec

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.text(max_size=6) | st.integers() | st.booleans() | st.none(), inner, max_size=4
        )
    ),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to itself (json round-trips it as NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300)
@given(documents, st.sampled_from([None, 0, 2, 4]), st.booleans())
def test_dumps_matches_json(doc: Any, indent: int | None, ensure_ascii: bool) -> None:
    assert jsoncodec.dumps(doc, indent=indent, ensure_ascii=ensure_ascii) == json.dumps(
        doc, indent=indent, ensure_ascii=ensure_ascii
    )


@settings(max_examples=300)
@given(documents, st.sampled_from([None, 4]), st.sampled_from(["", " ", "\n\t "]))
def test_loads_matches_json(doc: Any, indent: int | None, pad: str) -> None:
    text = pad + json.dumps(doc, indent=indent) + pad
    assert same(jsoncodec.loads(text), json.loads(text))
    assert same(jsoncodec.loads(text.encode()), json.loads(text.encode()))


@given(st.text(max_size=30))
def test_loads_garbage_fails_as_json_does(text: str) -> None:
    try:
        expected: Any = json.loads(text)
    except (ValueError, RecursionError) as err:
        with pytest.raises(type(err)) as ours:
            jsoncodec.loads(text)
        assert str(ours.value) == str(err)
    else:
        assert same(jsoncodec.loads(text), expected)


@pytest.mark.parametrize(
    "data",
    [
        '{"a": 1}'.encode("utf-16"),
        '{"a": 1}'.encode("utf-32-le"),
        b'\xef\xbb\xbf{"a": 1}',
        "\ufeff{}",
        "",
        "   ",
        "[1,",
        '{"a": 1} x',
        "NaN",
        b"\xff\xfe",
    ],
)
def test_special_inputs_match_json(data: str | bytes) -> None:
    try:
        expected: Any = json.loads(data)
    except ValueError as err:
        with pytest.raises(type(err)) as ours:
            jsoncodec.loads(data)
        assert str(ours.value) == str(err)
    else:
        assert same(jsoncodec.loads(data), expected)


def test_parse_constant_and_allow_nan() -> None:
    def refuse(name: str) -> Any:
        raise ValueError(f"no {name}")

    with pytest.raises(ValueError, match="no NaN"):
        jsoncodec.loads("[NaN]", parse_constant=refuse)
    for indent in (None, 4):
        with pytest.raises(ValueError, match="not JSON compliant"):
            jsoncodec.dumps([math.inf], indent=indent, allow_nan=False)


def test_unserializable_and_circular_fail_as_json_does() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for indent in (None, 4):
        for value in (object(), {1j: 1}, loop, {"a": {1, 2}}):
            with pytest.raises((TypeError, ValueError)) as expected:
                json.dumps(value, indent=indent)
            with pytest.raises(type(expected.value)) as ours:
                jsoncodec.dumps(value, indent=indent)
            assert str(ours.value) == str(expected.value)


@pytest.mark.parametrize("field", ["name", "bridge", "cniVersion"])
def test_hostile_10mb_strings_through_skel_are_config_errors(field: str) -> None:
    """The plugin path parses stdin with jsoncodec: 10 MB of newlines, quotes, ';', '#', NUL
    (as JSON escapes) and a lone surrogate in a field give a CNI error JSON naming the
    problem, exit 1, never a traceback, and the error text is itself valid JSON."""
    from pycni.skel import run as skel

    hostile = ("\n\"';#\x00\\" * (10_000_000 // 7))[:10_000_000]
    config = {"cniVersion": "1.0.0", "name": "net", "type": "bridge", field: hostile}
    for stdin in (
        json.dumps(config).encode(),
        json.dumps(config)[:-1].encode() + b',"x":"\\ud800"}',
    ):
        env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent",
               "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}  # fmt: skip
        outcome = skel.run("bridge", env, stdin)
        assert outcome.exit_code == 1
        error = json.loads(outcome.stdout)
        assert error["code"] in (1, 4, 6, 7), error
        assert "Traceback" not in outcome.stdout.decode()
        assert len(outcome.stdout) < 100_000  # the hostile value is not echoed back whole


def test_syntax_errors_in_an_interpreter_that_never_imported_json() -> None:
    """The C scanner builds most syntax errors from ``sys.modules["json.decoder"]``; in a
    one-shot in-process plugin call nothing had imported it, and the scanner raised
    SystemError (the entry point exited 1 with an empty stdout)."""
    import subprocess
    import sys
    from pathlib import Path

    import pycni

    code = (
        "import sys\n"
        "from pycni.spec import jsoncodec\n"
        "assert 'json.decoder' not in sys.modules\n"
        "for text in (b'{bad json', b'{\"a\" 1}', b'\"open', b'[1,'):\n"
        "    try:\n"
        "        jsoncodec.loads(text)\n"
        "    except ValueError as exc:\n"
        "        assert jsoncodec.syntax_error(exc), repr(exc)\n"
        "        print(type(exc).__name__, exc.pos)\n"
    )
    src = str(Path(pycni.__file__).parent.parent)
    proc = subprocess.run(
        [sys.executable, "-IS", "-c", f"import sys; sys.path.insert(0, {src!r})\n" + code],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == [
        "JSONDecodeError 1",
        "JSONDecodeError 5",
        "JSONDecodeError 0",
        "JSONDecodeError 3",
    ]
