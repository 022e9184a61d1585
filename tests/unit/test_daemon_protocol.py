"""The daemon wire protocol: encoding round trips and strict parsing of bad input."""

from __future__ import annotations

import struct

import pytest

from pycni.daemon import protocol
from pycni.spec.errors import DECODING_FAILURE, CNIError


def _prefix(**overrides: int | bytes) -> bytes:
    fields: dict[str, int | bytes] = {
        "magic": protocol.MAGIC,
        "version": protocol.VERSION,
        "kind": protocol.KIND_CALL,
        "flags": 0,
        "head": 0,
        "body": 0,
    }
    fields.update(overrides)
    return protocol.REQUEST_PREFIX.pack(*fields.values())


def test_call_round_trip() -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_ARGS": "A=b;C=d=e", "EMPTY": ""}
    data = protocol.encode_request(
        protocol.KIND_CALL, "host-local", env, b'{"x": 1}', flags=protocol.FLAG_TARGET_NETNS
    )
    prefix = protocol.parse_request_prefix(data[: protocol.REQUEST_PREFIX.size])
    assert prefix.fd_count == 1
    head = data[protocol.REQUEST_PREFIX.size : protocol.REQUEST_PREFIX.size + prefix.head_len]
    assert protocol.parse_call_head(head) == ("host-local", env)
    assert data.endswith(b'{"x": 1}')
    assert prefix.body_len == len(b'{"x": 1}')


def test_reply_round_trip() -> None:
    reply = protocol.Reply(-3, b"out", b"err!")
    data = protocol.encode_reply(reply)
    head = protocol.parse_reply_header(data[:20])
    assert head == protocol.ReplyHeader(protocol.VERSION, protocol.KIND_CALL, 0, -3, 3, 4)
    assert data[20:] == b"outerr!"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"short", "short prefix"),
        (_prefix(magic=b"HTTP"), "bad magic"),
        (_prefix(kind=9), "unknown request kind"),
        (_prefix(flags=0x4), "unknown flags"),
        (_prefix(head=protocol.MAX_HEAD + 1), "exceeds"),
        (_prefix(body=protocol.MAX_BODY + 1), "exceeds"),
        (_prefix(kind=protocol.KIND_PING, body=3), "carry no"),
    ],
)
def test_bad_prefix_is_a_decoding_error(raw: bytes, needle: str) -> None:
    with pytest.raises(CNIError) as info:
        protocol.parse_request_prefix(raw)
    assert info.value.code == DECODING_FAILURE
    assert needle in str(info.value)


def test_other_protocol_version_says_how_to_fix() -> None:
    with pytest.raises(CNIError) as info:
        protocol.parse_request_prefix(_prefix(version=7))
    assert info.value.code == DECODING_FAILURE
    assert "version 7" in info.value.msg
    assert "pycni plugins install" in info.value.details


@pytest.mark.parametrize(
    "head",
    [b"bridge", b"\0", b"a/b\0", b"bridge\0NOEQUALS\0", b"bridge\0=value\0"],
)
def test_bad_call_head(head: bytes) -> None:
    with pytest.raises(CNIError) as info:
        protocol.parse_call_head(head)
    assert info.value.code == DECODING_FAILURE


def test_reply_prefix_rejects_a_request() -> None:
    with pytest.raises(ValueError):
        protocol.parse_reply_header(protocol.encode_request(protocol.KIND_PING) + b"\0" * 4)


def test_error_reply_is_cni_error_json() -> None:
    reply = protocol.error_reply(CNIError(11, "busy", "later"))
    assert reply.exit_code == 1
    assert CNIError.from_dict(__import__("json").loads(reply.stdout)) == CNIError(
        11, "busy", "later"
    )


def test_prefix_layout_is_the_documented_one() -> None:
    assert protocol.REQUEST_PREFIX.size == 16
    assert protocol.REPLY_PREFIX.size == 20
    assert struct.unpack("!4sB", _prefix()[:5]) == (b"pCNI", 2)


def test_another_version_is_a_foreign_version_answered_run_locally() -> None:
    for version in (0, 1, 3, 255):
        with pytest.raises(protocol.ForeignVersion) as info:
            protocol.parse_request_prefix(_prefix(version=version))
        assert info.value.version == version
        reply = protocol.foreign_version_reply(info.value)
        data = protocol.encode_reply(reply)
        # the version-1 layout, which every entry point reads, with RUN_LOCALLY set
        assert data[4] == protocol.LEGACY_VERSION
        head = protocol.parse_reply_header(data[:20])
        assert head.flags & protocol.REPLY_RUN_LOCALLY


def test_hello_is_a_bare_prefix_and_its_ack_carries_the_bound() -> None:
    hello = protocol.encode_request(protocol.KIND_HELLO)
    assert hello == protocol.MAGIC + bytes([protocol.VERSION, protocol.KIND_HELLO]) + bytes(10)
    assert protocol.parse_request_prefix(hello).kind == protocol.KIND_HELLO
    with pytest.raises(CNIError):
        protocol.parse_request_prefix(_prefix(kind=protocol.KIND_HELLO, body=1))
    head = protocol.parse_reply_header(protocol.encode_reply(protocol.ack_reply(123_000)))
    assert (head.version, head.kind, head.exit_code) == (2, protocol.KIND_HELLO, 123_000)
    assert head.stdout_len == head.stderr_len == 0


def test_answers_at_accept_use_the_version_1_layout() -> None:
    reply = protocol.accept_reply(CNIError(5, "no", "x"), run_locally=False)
    head = protocol.parse_reply_header(protocol.encode_reply(reply)[:20])
    assert head.version == protocol.LEGACY_VERSION
    assert head.flags == protocol.REPLY_AT_ACCEPT
