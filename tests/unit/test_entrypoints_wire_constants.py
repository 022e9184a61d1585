"""The forwarders' copies of the wire constants agree with pycni.daemon.protocol.

The entry points must start without importing pycni, so forwarder.py and forwarder.c carry
their own copies of the protocol's numbers; this test is what keeps the three in step.
"""

from __future__ import annotations

import ast
import re
from importlib import resources

import pytest

from pycni.daemon import protocol
from pycni.spec import errors

EXPECTED: dict[str, int] = {
    "KIND_CALL": protocol.KIND_CALL,
    "KIND_HELLO": protocol.KIND_HELLO,
    "LEGACY_VERSION": protocol.LEGACY_VERSION,
    "REPLY_AT_ACCEPT": protocol.REPLY_AT_ACCEPT,
    "ACK_TIMEOUT_MS": protocol.ACK_TIMEOUT_MS,
    "REPLY_SLACK_MS": protocol.REPLY_SLACK_MS,
    "REPLY_BIT": protocol.REPLY_BIT,
    "FLAG_CALLER_NETNS": protocol.FLAG_CALLER_NETNS,
    "FLAG_TARGET_NETNS": protocol.FLAG_TARGET_NETNS,
    "REPLY_RUN_LOCALLY": protocol.REPLY_RUN_LOCALLY,
    "PREFIX_SIZE": protocol.REQUEST_PREFIX.size,
    "REPLY_SIZE": protocol.REPLY_PREFIX.size,
    "MAX_BODY": protocol.MAX_BODY,
    "MAX_REPLY_PART": protocol.MAX_REPLY_PART,
    "CONNECT_TIMEOUT_MS": protocol.CONNECT_TIMEOUT_MS,
    "TRY_AGAIN_LATER": protocol.TRY_AGAIN_LATER,
    "IO_FAILURE": protocol.IO_FAILURE,
    "INTERNAL": protocol.INTERNAL,
}


def _source(name: str) -> str:
    return resources.files("pycni.entrypoints").joinpath(name).read_text()


def python_constants() -> dict[str, object]:
    out: dict[str, object] = {}
    for node in ast.parse(_source("forwarder.py")).body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id.isupper():
            try:
                out[target.id] = eval(compile(ast.Expression(value), "forwarder.py", "eval"), {})
            except NameError:
                continue
    return out


def c_constants(source: str | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    text = _source("forwarder.c") if source is None else source
    for name, expr in re.findall(r"^#define ([A-Z_]+) (.+)$", text, re.M):
        python_expr = re.sub(r"(\d+)u\b", r"\1", expr)
        if re.fullmatch(r"[\d\s()<x*+a-fA-F]+", python_expr):
            out[name] = eval(python_expr, {})
    return out


def test_protocol_codes_are_the_spec_codes() -> None:
    assert protocol.TRY_AGAIN_LATER == errors.TRY_AGAIN_LATER
    assert protocol.IO_FAILURE == errors.IO_FAILURE
    assert protocol.INTERNAL == errors.INTERNAL


@pytest.mark.parametrize("read", [python_constants, c_constants], ids=["python", "c"])
def test_forwarder_constants_match_the_protocol(read: object) -> None:
    found = read()  # type: ignore[operator]
    missing = sorted(set(EXPECTED) - set(found))
    assert not missing, f"constants not found in the forwarder: {missing}"
    wrong = {k: (found[k], v) for k, v in EXPECTED.items() if found[k] != v}
    assert not wrong, f"forwarder disagrees with pycni.daemon.protocol (found, expected): {wrong}"


def test_python_forwarder_template_defaults_match() -> None:
    found = python_constants()
    assert found["MAGIC"] == protocol.MAGIC
    assert found["VERSION"] == protocol.VERSION
    assert found["SOCKET_PATH"] == protocol.DEFAULT_SOCKET


def test_the_check_notices_a_disagreement() -> None:
    source = _source("forwarder.c").replace("#define REPLY_SIZE 20", "#define REPLY_SIZE 24")
    assert c_constants(source)["REPLY_SIZE"] == 24 != EXPECTED["REPLY_SIZE"]
