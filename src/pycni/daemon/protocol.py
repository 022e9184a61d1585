"""The wire protocol between an entry point (forwarder) and the pycni daemon, version 2.

One connection carries one request and one reply, optionally preceded by a HELLO and its
acknowledgement. All integers are big-endian.

Request::

    16-byte prefix  magic b"pCNI" | u8 version | u8 kind | u16 flags | u32 head_len | u32 body_len
    head            CALL: plugin type NUL, then environment entries "KEY=VALUE" NUL each
                    PING / STATS: empty
    body            CALL: the plugin's stdin; PING / STATS: empty
    SCM_RIGHTS      with the first byte: the caller's netns fd (flag bit 0), then the
                    target netns fd (flag bit 1), only those whose flag is set

Reply::

    20-byte prefix  magic | u8 version | u8 kind (request kind | 0x80) | u16 flags |
                    i32 exit_code | u32 stdout_len | u32 stderr_len
    stdout, stderr  exactly as a plugin process would have printed them

    Reply flag bit 0 (RUN_LOCALLY): nothing ran; the caller must run the plugin itself
    (sent to a caller in another mount or user namespace, to a caller of another protocol
    version, and when the daemon is out of fds). Older entry points ignore the flags and
    print stdout, which then holds a CNI error saying so.
    Reply flag bit 1 (AT_ACCEPT): an answer the daemon gave at accept, before it knew the
    caller's version; it is therefore in the version-1 layout (which every entry point reads).

Version 2 adds the HELLO (kind 4, a bare prefix) and its acknowledgement (a reply prefix of
kind 0x84 whose exit-code field is the most milliseconds the daemon will take to answer the
call, and no stdout or stderr). An entry point sends the HELLO first and sends its call only
once the acknowledgement arrived: a daemon that does not acknowledge within ACK_TIMEOUT_MS
has not received a byte of the call, so running the plugin in-process then can never run it
twice. A request of any other version is answered with a version-1 RUN_LOCALLY reply; a
version-1 daemon answers a HELLO with a version-1 error reply, which a version-2 entry point
takes as "run it yourself" too (docs/daemon.md, "Versioning").

The C forwarder (forwarder.c) and the Python forwarder (forwarder.py) implement the client
side on their own (they must start without importing pycni). Their copies of the constants
below are checked against this module by tests/unit/test_entrypoints_wire_constants.py, and the
magic and version are baked in at install time, so this module stays the one source of truth.
"""

from __future__ import annotations

import struct

from pycni.record import field, record
from pycni.spec.errors import DECODING_FAILURE, CNIError

DEFAULT_SOCKET = "/run/pycni/pycni.sock"

MAGIC = b"pCNI"
VERSION = 2
LEGACY_VERSION = 1  # the layout every entry point reads: answers given before the version is known

KIND_CALL = 1
KIND_PING = 2
KIND_STATS = 3
KIND_HELLO = 4  # version 2: "are you there?", answered with an acknowledgement
KINDS = (KIND_CALL, KIND_PING, KIND_STATS, KIND_HELLO)
REPLY_BIT = 0x80

FLAG_CALLER_NETNS = 0x1
FLAG_TARGET_NETNS = 0x2
KNOWN_FLAGS = FLAG_CALLER_NETNS | FLAG_TARGET_NETNS

REPLY_RUN_LOCALLY = 0x1  # reply flag: nothing ran, the entry point runs the plugin itself
REPLY_AT_ACCEPT = 0x2  # reply flag: answered at accept, in the version-1 layout

REQUEST_PREFIX = struct.Struct("!4sBBHII")
REPLY_PREFIX = struct.Struct("!4sBBHiII")

MAX_HEAD = 1 << 20  # environment block
MAX_BODY = 16 << 20  # stdin (a network config)
MAX_REPLY_PART = 64 << 20
MAX_FDS = 2

# Entry-point side limits and the CNI codes the forwarders print on their own.
CONNECT_TIMEOUT_MS = 1000  # a full backlog: give up and run in-process (nothing was sent)
ACK_TIMEOUT_MS = 2000  # no acknowledgement of the HELLO: give up and run in-process (no call sent)
REPLY_SLACK_MS = 5000  # added to the daemon's announced bound before the entry point gives up
TRY_AGAIN_LATER = 11
IO_FAILURE = 5
INTERNAL = 999


@record
class RequestPrefix:
    kind: int
    flags: int
    head_len: int
    body_len: int

    @property
    def fd_count(self) -> int:
        return bin(self.flags & KNOWN_FLAGS).count("1")


@record
class Request:
    """A decoded request; ``caller_netns_fd`` / ``target_netns_fd`` are owned by the receiver."""

    kind: int
    plugin_type: str = ""
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""
    caller_netns_fd: int | None = None
    target_netns_fd: int | None = None


@record
class Reply:
    exit_code: int
    stdout: bytes
    stderr: bytes
    kind: int = KIND_CALL
    flags: int = 0
    version: int = VERSION


@record(frozen=True)
class ReplyHeader:
    version: int
    kind: int
    flags: int
    exit_code: int
    stdout_len: int
    stderr_len: int


def malformed(msg: str) -> CNIError:
    return CNIError(DECODING_FAILURE, "malformed pycni daemon request", msg)


class ForeignVersion(CNIError):
    """A request of another protocol version: the caller runs the plugin itself."""

    def __init__(self, version: int) -> None:
        super().__init__(
            DECODING_FAILURE,
            f"pycni daemon protocol version {version} not spoken here (daemon speaks {VERSION}): "
            "run the plugin in-process",
            "reinstall the entry points with `pycni plugins install DIR` to use the daemon",
        )
        self.version = version


def parse_request_prefix(data: bytes) -> RequestPrefix:
    """Check the fixed prefix strictly; raise CNIError (code 6) on anything unexpected."""
    if len(data) != REQUEST_PREFIX.size:
        raise malformed(f"short prefix: {len(data)} of {REQUEST_PREFIX.size} bytes")
    magic, version, kind, flags, head_len, body_len = REQUEST_PREFIX.unpack(data)
    if magic != MAGIC:
        raise malformed(f"bad magic {magic!r}")
    if version != VERSION:
        raise ForeignVersion(version)
    if kind not in KINDS:
        raise malformed(f"unknown request kind {kind}")
    if flags & ~KNOWN_FLAGS:
        raise malformed(f"unknown flags {flags:#x}")
    if head_len > MAX_HEAD:
        raise malformed(f"head of {head_len} bytes exceeds {MAX_HEAD}")
    if body_len > MAX_BODY:
        raise malformed(f"body of {body_len} bytes exceeds {MAX_BODY}")
    if kind != KIND_CALL and (head_len or body_len or flags):
        raise malformed("HELLO, PING and STATS requests carry no head, body or fds")
    return RequestPrefix(kind, flags, head_len, body_len)


def parse_call_head(head: bytes) -> tuple[str, dict[str, str]]:
    """Split the CALL head into the plugin type and the environment."""
    if not head.endswith(b"\0"):
        raise malformed("head must end with NUL")
    parts = head[:-1].split(b"\0")
    plugin_type = parts[0].decode("utf-8", "surrogateescape")
    if not plugin_type or "/" in plugin_type:
        raise malformed(f"bad plugin type {plugin_type!r}")
    env: dict[str, str] = {}
    for entry in parts[1:]:
        key, sep, value = entry.partition(b"=")
        if not sep or not key:
            raise malformed(f"bad environment entry {entry[:40]!r}")
        env[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
    return plugin_type, env


def encode_call_head(plugin_type: str, env: dict[str, str]) -> bytes:
    out = [plugin_type.encode("utf-8", "surrogateescape"), b"\0"]
    for key, value in env.items():
        out.append(f"{key}={value}".encode("utf-8", "surrogateescape"))
        out.append(b"\0")
    return b"".join(out)


def encode_request(
    kind: int,
    plugin_type: str = "",
    env: dict[str, str] | None = None,
    stdin: bytes = b"",
    *,
    flags: int = 0,
) -> bytes:
    head = encode_call_head(plugin_type, env or {}) if kind == KIND_CALL else b""
    return REQUEST_PREFIX.pack(MAGIC, VERSION, kind, flags, len(head), len(stdin)) + head + stdin


def encode_reply(reply: Reply) -> bytes:
    prefix = REPLY_PREFIX.pack(
        MAGIC,
        reply.version,
        reply.kind | REPLY_BIT,
        reply.flags,
        reply.exit_code,
        len(reply.stdout),
        len(reply.stderr),
    )
    return prefix + reply.stdout + reply.stderr


def parse_reply_header(data: bytes) -> ReplyHeader:
    """Decode a reply prefix; ValueError when it is not a reply."""
    if len(data) != REPLY_PREFIX.size:
        raise ValueError(f"short reply: {len(data)} of {REPLY_PREFIX.size} bytes")
    magic, version, kind, flags, code, out_len, err_len = REPLY_PREFIX.unpack(data)
    if magic != MAGIC or version not in (VERSION, LEGACY_VERSION) or not kind & REPLY_BIT:
        raise ValueError("not a pycni daemon reply")
    if out_len > MAX_REPLY_PART or err_len > MAX_REPLY_PART:
        raise ValueError("reply too large")
    return ReplyHeader(version, kind & ~REPLY_BIT, flags, code, out_len, err_len)


def error_reply(
    err: CNIError, kind: int = KIND_CALL, flags: int = 0, version: int = VERSION
) -> Reply:
    """A CNI error as a plugin prints it: JSON on stdout, exit code 1."""
    return Reply(1, (err.to_json() + "\n").encode(), b"", kind, flags, version)


def accept_reply(err: CNIError, *, run_locally: bool) -> Reply:
    """An answer given at accept, before the caller's version is known: the version-1 layout,
    which entry points of every version read (flag AT_ACCEPT tells a version-2 one)."""
    flags = REPLY_AT_ACCEPT | (REPLY_RUN_LOCALLY if run_locally else 0)
    return error_reply(err, flags=flags, version=LEGACY_VERSION)


def foreign_version_reply(err: ForeignVersion) -> Reply:
    """A request of another version: run it yourself, in the layout every version reads."""
    return error_reply(err, flags=REPLY_RUN_LOCALLY, version=LEGACY_VERSION)


def ack_reply(bound_ms: int) -> Reply:
    """The acknowledgement of a HELLO: the call may be sent; its answer comes within bound_ms."""
    return Reply(min(bound_ms, 0x7FFFFFFF), b"", b"", KIND_HELLO)
