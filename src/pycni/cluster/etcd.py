"""A small etcd v3 client over etcd's HTTP/JSON gateway, standard library only.

etcd 3.4 (Debian's) serves the gRPC API as JSON under ``/v3/...`` on its client URL, so
range, put, transactions, leases and watches need nothing but ``http.client``: no grpc,
no generated stubs, nothing that fights over protobuf versions. Keys and values travel
base64-encoded; 64-bit integers come back as JSON strings and fields at their default
value are left out (``succeeded`` missing means false).

When ``netns`` is given every connection is opened from inside that network namespace
(a socket stays in the namespace it was created in), so a process in the root namespace
can talk to an etcd that only listens inside another one.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pycni.net.ns import NetNS


class EtcdError(RuntimeError):
    """etcd could not be reached or refused a request."""


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's range_end)."""
    out = bytearray(prefix)
    while out:
        if out[-1] < 0xFF:
            out[-1] += 1
            return bytes(out)
        out.pop()
    return b"\0"


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> KeyValue:
        return cls(
            key=_unb64(item.get("key")).decode(),
            value=_unb64(item.get("value")),
            create_revision=int(item.get("create_revision", 0)),
            mod_revision=int(item.get("mod_revision", 0)),
            lease=int(item.get("lease", 0)),
        )


@dataclass(frozen=True)
class WatchEvent:
    kind: str  # "PUT" or "DELETE"
    key: str


class Etcd:
    """One etcd endpoint (``http://host:port``); every call is one HTTP request."""

    def __init__(self, endpoint: str, *, netns: str | None = None, timeout: float = 5.0) -> None:
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme != "http" or not url.hostname:
            raise EtcdError(f"unsupported etcd endpoint {endpoint!r} (want http://HOST:PORT)")
        self.endpoint = endpoint
        self.host = url.hostname
        self.port = url.port or 2379
        self.netns = netns
        self.timeout = timeout

    # --- transport ----------------------------------------------------------------------------

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        if self.netns is None:
            conn.connect()
            return conn
        with NetNS.open(self.netns) as ns, ns.entered():
            conn.connect()
        return conn

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` and return the decoded answer."""
        try:
            conn = self._connect(self.timeout)
            try:
                conn.request(
                    "POST",
                    f"/v3/{path}",
                    body=json.dumps(body),
                    headers={"Content-Type": "application/json"},
                )
                resp = conn.getresponse()
                data = resp.read()
            finally:
                conn.close()
        except OSError as exc:
            raise EtcdError(f"etcd at {self.endpoint}: {exc}") from None
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            raise EtcdError(f"etcd at {self.endpoint}: unparsable answer to {path}") from None
        if resp.status != 200 or not isinstance(answer, dict) or "error" in answer:
            message = (
                answer.get("error") or answer.get("message") if isinstance(answer, dict) else ""
            )
            raise EtcdError(f"etcd {path}: {message or f'HTTP {resp.status}'}")
        return answer

    def healthy(self) -> bool:
        try:
            conn = self._connect(2.0)
            try:
                conn.request("GET", "/health")
                data = conn.getresponse().read()
            finally:
                conn.close()
            return bool(json.loads(data).get("health") in ("true", True))
        except (OSError, ValueError, AttributeError):
            return False

    # --- key/value ------------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        kvs = self.call("kv/range", {"key": _b64(key)}).get("kvs", [])
        return KeyValue.from_json(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` and the store revision they were read at."""
        raw = prefix.encode()
        answer = self.call("kv/range", {"key": _b64(raw), "range_end": _b64(prefix_end(raw))})
        revision = int(answer.get("header", {}).get("revision", 0))
        return [KeyValue.from_json(kv) for kv in answer.get("kvs", [])], revision

    def put(self, key: str, value: bytes | str, lease: int = 0) -> None:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        self.call("kv/put", body)

    def delete(self, key: str) -> int:
        return int(self.call("kv/deleterange", {"key": _b64(key)}).get("deleted", 0))

    def delete_prefix(self, prefix: str) -> int:
        raw = prefix.encode()
        body = {"key": _b64(raw), "range_end": _b64(prefix_end(raw))}
        return int(self.call("kv/deleterange", body).get("deleted", 0))

    def create(self, key: str, value: bytes | str, lease: int = 0) -> bool:
        """Put ``key`` only if it does not exist (one transaction); True when we created it."""
        compare = {"key": _b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        return self._txn(compare, key, value, lease)

    def replace(self, key: str, value: bytes | str, mod_revision: int, lease: int = 0) -> bool:
        """Put ``key`` only if it was not modified since ``mod_revision``; True when done."""
        compare = {
            "key": _b64(key),
            "result": "EQUAL",
            "target": "MOD",
            "mod_revision": str(mod_revision),
        }
        return self._txn(compare, key, value, lease)

    def _txn(self, compare: dict[str, Any], key: str, value: bytes | str, lease: int) -> bool:
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        answer = self.call("kv/txn", {"compare": [compare], "success": [{"request_put": put}]})
        return bool(answer.get("succeeded", False))

    # --- leases ---------------------------------------------------------------------------------

    def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds; returns its ID."""
        return int(self.call("lease/grant", {"TTL": str(ttl)})["ID"])

    def keepalive(self, lease: int) -> int:
        """Renew ``lease``; returns the TTL left (0 when the lease no longer exists)."""
        answer = self.call("lease/keepalive", {"ID": str(lease)})
        result = answer.get("result", answer)
        return int(result.get("TTL", 0))

    def revoke(self, lease: int) -> None:
        with contextlib.suppress(EtcdError):  # already gone is fine
            self.call("lease/revoke", {"ID": str(lease)})

    # --- watch ----------------------------------------------------------------------------------

    def watch_prefix(self, prefix: str, start_revision: int) -> Watch:
        """A stream of changes under ``prefix`` from ``start_revision`` (see ``Watch``)."""
        return Watch(self, prefix, start_revision)


class Watch:
    """One watch stream. ``run`` blocks, calling back per batch of events, until the stream
    ends, breaks or ``close`` is called from another thread; the caller then re-lists."""

    def __init__(self, etcd: Etcd, prefix: str, start_revision: int) -> None:
        self.etcd = etcd
        raw = prefix.encode()
        self.request = {
            "create_request": {
                "key": _b64(raw),
                "range_end": _b64(prefix_end(raw)),
                "start_revision": str(start_revision),
            }
        }
        self._conn: http.client.HTTPConnection | None = None
        self._closed = threading.Event()

    def run(self, on_events: Callable[[list[WatchEvent]], None]) -> None:
        try:
            conn = self.etcd._connect(None)
        except OSError as exc:
            raise EtcdError(f"etcd at {self.etcd.endpoint}: {exc}") from None
        self._conn = conn
        try:
            if self._closed.is_set():
                return
            conn.request("POST", "/v3/watch", body=json.dumps(self.request))
            resp = conn.getresponse()
            for line in _lines(resp):
                try:
                    message = json.loads(line).get("result", {})
                except ValueError:
                    continue
                events = [
                    WatchEvent(
                        ev.get("type", "PUT"),
                        _unb64(ev.get("kv", {}).get("key")).decode(errors="replace"),
                    )
                    for ev in message.get("events", [])
                ]
                if events:
                    on_events(events)
        except (OSError, http.client.HTTPException):
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)


def _lines(resp: http.client.HTTPResponse) -> Iterator[bytes]:
    """The newline-delimited JSON messages of a streamed answer."""
    pending = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
