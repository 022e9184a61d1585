"""A small etcd v3 client over etcd's HTTP/JSON gateway, standard library only.

etcd 3.4 (Debian's) serves the gRPC API as JSON under ``/v3/...`` on its client URL, so
range, put, transactions, leases and watches need nothing but ``http.client``: no grpc,
no generated stubs, nothing that fights over protobuf versions. Keys and values travel
base64-encoded; 64-bit integers come back as JSON strings and fields at their default
value are left out (``succeeded`` missing means false).

Several endpoints (members) may be given: a call goes to the one that answered last and
moves on when it is down. HTTPS with a CA, a client certificate and username/password
authentication (a token per member, renewed when etcd no longer accepts it) are supported.
Every answer is read with a size cap: etcd content is not trusted to be small.

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
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pycni.net.ns import NetNS
from pycni.record import record

MAX_RESPONSE = 8 << 20  # one answer (a whole lease list included)
SMALL_RESPONSE = 64 << 10  # one key, a token, a health answer
MAX_WATCH_MESSAGE = 1 << 20  # one watch message; longer ones only wake the watcher
PAGE_KEYS = 1000  # keys per page of a paged scan (fewer when their names are long)

# Errors after which another member may do better than this one.
_UNAVAILABLE = ("no leader", "leader changed", "timed out", "not capable", "stopped")
_BAD_TOKEN = ("invalid auth token", "auth token is expired", "user name is empty")


class EtcdError(RuntimeError):
    """etcd could not be reached or refused a request."""


class _BadToken(EtcdError):
    """The member no longer accepts our token."""


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


@record(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> KeyValue:
        return cls(
            key=_unb64(item.get("key")).decode(errors="replace"),  # any bytes: never crash
            value=_unb64(item.get("value")),
            create_revision=int(item.get("create_revision", 0)),
            mod_revision=int(item.get("mod_revision", 0)),
            lease=int(item.get("lease", 0)),
        )


@record(frozen=True)
class WatchEvent:
    kind: str  # "PUT" or "DELETE"
    key: str
    kv: KeyValue | None = None  # the key after the change (a DELETE's: no value)

    @property
    def revision(self) -> int:
        """The store revision of the change (0 when etcd did not say)."""
        return self.kv.mod_revision if self.kv is not None else 0


@record(frozen=True)
class EtcdCredentials:
    """How the agent proves itself to etcd and checks etcd's identity (flannel's
    ``--etcd-cafile``, ``--etcd-certfile``, ``--etcd-keyfile``, ``--etcd-username``,
    ``--etcd-password``). Any of them needs ``https://`` endpoints: a password or a client
    certificate is never offered over plain HTTP, and a CA file with an ``http://``
    endpoint is a mistake (nothing would be checked), not a silent downgrade."""

    cafile: str = ""
    certfile: str = ""
    keyfile: str = ""
    username: str = ""
    password: str = ""

    @property
    def any_secret(self) -> bool:
        return bool(self.certfile or self.keyfile or self.username or self.password)


@record(frozen=True)
class Endpoint:
    url: str
    https: bool
    host: str
    port: int


def parse_endpoints(endpoints: str | Sequence[str]) -> list[Endpoint]:
    """``http(s)://HOST:PORT`` URLs (a comma-separated string or a list); no paths, no users."""
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out: list[Endpoint] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            url = urllib.parse.urlsplit(item)
            port = url.port or 2379
        except ValueError:
            raise EtcdError(f"bad etcd endpoint {item!r} (want http(s)://HOST:PORT)") from None
        if (
            url.scheme not in ("http", "https")
            or not url.hostname
            or url.username is not None
            or url.path not in ("", "/")
            or url.query
            or url.fragment
        ):
            raise EtcdError(f"bad etcd endpoint {item!r} (want http(s)://HOST:PORT)")
        out.append(Endpoint(item, url.scheme == "https", url.hostname, port))
    if not out:
        raise EtcdError("no etcd endpoint given")
    return out


def _tls_context(creds: EtcdCredentials) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=creds.cafile or None)
        if creds.certfile:
            context.load_cert_chain(creds.certfile, creds.keyfile or None)
    except (OSError, ssl.SSLError) as exc:
        raise EtcdError(f"cannot load the etcd TLS files: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class _Unavailable(EtcdError):
    """This member cannot serve the request; another endpoint may."""


class EtcdResponseTooLarge(EtcdError):
    """An answer was larger than the caller allows (a hostile or runaway value)."""


class Etcd:
    """An etcd cluster reached through one or more endpoints; every call is one HTTP(S)
    request to the endpoint that answered last, moving on to the next one when a member is
    down, unreachable or has lost its leader."""

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        netns: str | None = None,
        timeout: float = 5.0,
        credentials: EtcdCredentials | None = None,
    ) -> None:
        self.endpoints = parse_endpoints(endpoints)
        self.credentials = credentials or EtcdCredentials()
        plain = [e.url for e in self.endpoints if not e.https]
        if self.credentials.any_secret and plain:
            raise EtcdError(
                "a client certificate or a username/password needs https:// etcd endpoints "
                f"(they would travel in clear text to {', '.join(plain)})"
            )
        if self.credentials.cafile and plain:
            raise EtcdError(
                f"--etcd-cafile is given but {', '.join(plain)} is plain http://: nothing "
                "would be checked against the CA and everything would travel in clear text "
                "(use https:// endpoints, or drop --etcd-cafile)"
            )
        if self.credentials.username and not self.credentials.password:
            raise EtcdError("an etcd username needs a password")
        self._tls = _tls_context(self.credentials) if any(e.https for e in self.endpoints) else None
        self.netns = netns
        self.timeout = timeout
        self._lock = threading.Lock()
        self._current = 0
        self._tokens: dict[str, str] = {}  # per member: etcd's simple tokens are local

    @property
    def endpoint(self) -> str:
        """The endpoint in use (the last one that answered)."""
        return self.endpoints[self._current].url

    # --- transport ----------------------------------------------------------------------------

    def _connect(self, ep: Endpoint, timeout: float | None) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if ep.https:
            conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=self._tls)
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)
        if self.netns is None:
            conn.connect()
            return conn
        with NetNS.open(self.netns) as ns, ns.entered():
            conn.connect()
        return conn

    def _order(self) -> list[int]:
        with self._lock:
            first = self._current
        n = len(self.endpoints)
        return [(first + i) % n for i in range(n)]

    def _answered(self, index: int) -> None:
        with self._lock:
            self._current = index

    def _headers(self, ep: Endpoint) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.credentials.username:
            token = self._tokens.get(ep.url) or self._authenticate(ep)
            headers["Authorization"] = token
        return headers

    def _authenticate(self, ep: Endpoint) -> str:
        body = {"name": self.credentials.username, "password": self.credentials.password}
        answer = self._post(ep, "auth/authenticate", body, {}, SMALL_RESPONSE)
        token = answer.get("token")
        if not isinstance(token, str) or not token:
            raise EtcdError(f"etcd at {ep.url}: no token in the authentication answer")
        self._tokens[ep.url] = token
        return token

    def _post(
        self, ep: Endpoint, path: str, body: dict[str, Any], headers: dict[str, str], limit: int
    ) -> dict[str, Any]:
        try:
            conn = self._connect(ep, self.timeout)
            try:
                conn.request("POST", f"/v3/{path}", body=json.dumps(body), headers=headers)
                resp = conn.getresponse()
                length = resp.getheader("Content-Length")
                if length is not None and length.isdigit() and int(length) > limit:
                    raise EtcdResponseTooLarge(
                        f"etcd at {ep.url}: answer to {path} is {length} bytes (limit {limit})"
                    )
                data = resp.read(limit + 1)
            finally:
                conn.close()
        except (OSError, http.client.HTTPException) as exc:
            raise _Unavailable(f"etcd at {ep.url}: {exc}") from None
        if len(data) > limit:
            raise EtcdResponseTooLarge(f"etcd at {ep.url}: answer to {path} is over {limit} bytes")
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            raise EtcdError(f"etcd at {ep.url}: unparsable answer to {path}") from None
        if resp.status != 200 or not isinstance(answer, dict) or "error" in answer:
            message = ""
            if isinstance(answer, dict):
                message = str(answer.get("error") or answer.get("message") or "")
            text = f"etcd at {ep.url}: {path}: {message or f'HTTP {resp.status}'}"
            if resp.status in (502, 503, 504) or any(m in message for m in _UNAVAILABLE):
                raise _Unavailable(text)
            if any(m in message for m in _BAD_TOKEN):
                raise _BadToken(text)
            raise EtcdError(text)
        return answer

    def call(self, path: str, body: dict[str, Any], *, limit: int = MAX_RESPONSE) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` and return the decoded answer (at most ``limit``
        bytes), failing over to the next endpoint when a member cannot serve it."""
        failures: list[str] = []
        for index in self._order():
            ep = self.endpoints[index]
            try:
                try:
                    answer = self._post(ep, path, body, self._headers(ep), limit)
                except _BadToken:  # expired or issued by another member: log in again
                    self._tokens.pop(ep.url, None)
                    answer = self._post(ep, path, body, self._headers(ep), limit)
            except _Unavailable as exc:
                failures.append(str(exc))
                continue
            self._answered(index)
            return answer
        raise EtcdError("; ".join(failures))

    def healthy(self) -> bool:
        """Whether some endpoint reports a healthy member."""
        for index in self._order():
            ep = self.endpoints[index]
            try:
                conn = self._connect(ep, 2.0)
                try:
                    conn.request("GET", "/health")
                    data = conn.getresponse().read(SMALL_RESPONSE)
                finally:
                    conn.close()
                if json.loads(data).get("health") in ("true", True):
                    return True
            except (OSError, ValueError, AttributeError, http.client.HTTPException):
                continue
        return False

    # --- key/value ------------------------------------------------------------------------------

    def get(
        self, key: str, *, limit: int = MAX_RESPONSE, keys_only: bool = False, revision: int = 0
    ) -> KeyValue | None:
        """``key`` (without its value when ``keys_only``), as of ``revision`` (0: now)."""
        body: dict[str, Any] = {"key": _b64(key)}
        if keys_only:
            body["keys_only"] = True
        if revision:
            body["revision"] = str(revision)
        kvs = self.call("kv/range", body, limit=limit).get("kvs", [])
        return KeyValue.from_json(kvs[0]) if kvs else None

    def scan_prefix(
        self, prefix: str, keep: Callable[[str], bool], *, page: int = PAGE_KEYS
    ) -> tuple[list[KeyValue], int, int]:
        """The keys under ``prefix`` that ``keep`` wants (no values), the revision they
        were read at and how many keys there were. Read in pages of at most ``page`` keys
        (fewer when a page's answer would be over the size cap: long key names), every page
        at the first one's revision, continuing after the last key's raw bytes. However
        many keys, and however long their names, only the kept ones are held; each answer
        stays under the cap."""
        raw = prefix.encode()
        start, end = raw, prefix_end(raw)
        revision = seen = 0
        kept: list[KeyValue] = []
        while True:
            body: dict[str, Any] = {
                "key": _b64(start),
                "range_end": _b64(end),
                "keys_only": True,
                "limit": str(page),
            }
            if revision:
                body["revision"] = str(revision)
            try:
                answer = self.call("kv/range", body)
            except EtcdResponseTooLarge:
                if page == 1:
                    raise
                page = max(page // 4, 1)
                continue
            if not revision:
                revision = int(answer.get("header", {}).get("revision", 0))
            items = [i for i in answer.get("kvs", []) if isinstance(i, dict)]
            seen += len(items)
            for item in items:
                kv = KeyValue.from_json(item)
                if keep(kv.key):
                    kept.append(kv)
            if not items or not answer.get("more"):
                return kept, revision, seen
            start = _unb64(items[-1].get("key")) + b"\0"  # the raw bytes: any key resumes

    def get_prefix(
        self, prefix: str, *, keys_only: bool = False, limit: int = MAX_RESPONSE
    ) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` (without values when ``keys_only``) and the store
        revision they were read at. EtcdResponseTooLarge when the answer exceeds ``limit``."""
        raw = prefix.encode()
        body: dict[str, Any] = {"key": _b64(raw), "range_end": _b64(prefix_end(raw))}
        if keys_only:
            body["keys_only"] = True
        answer = self.call("kv/range", body, limit=limit)
        revision = int(answer.get("header", {}).get("revision", 0))
        return [KeyValue.from_json(kv) for kv in answer.get("kvs", [])], revision

    def revision(self, prefix: str) -> int:
        """The store's current revision, read with a count of ``prefix``'s keys (a small
        answer however many keys or however large values there are)."""
        return self.count_prefix(prefix)[1]

    def count_prefix(self, prefix: str) -> tuple[int, int]:
        """How many keys ``prefix`` has, and the store revision (one small answer)."""
        raw = prefix.encode()
        body = {"key": _b64(raw), "range_end": _b64(prefix_end(raw)), "count_only": True}
        answer = self.call("kv/range", body, limit=SMALL_RESPONSE)
        return int(answer.get("count", 0)), int(answer.get("header", {}).get("revision", 0))

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
        return self.create_at(key, value, lease) != 0

    def create_at(self, key: str, value: bytes | str, lease: int = 0) -> int:
        """``create``, returning the key's create revision (0: it existed)."""
        compare = {"key": _b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        answer = self.call("kv/txn", {"compare": [compare], "success": [{"request_put": put}]})
        if not answer.get("succeeded", False):
            return 0
        return int(answer.get("header", {}).get("revision", 0)) or -1

    def delete_if(self, key: str, mod_revision: int) -> bool:
        """Delete ``key`` only if it was not modified since ``mod_revision``; True when done."""
        compare = {
            "key": _b64(key),
            "result": "EQUAL",
            "target": "MOD",
            "mod_revision": str(mod_revision),
        }
        request = {"request_delete_range": {"key": _b64(key)}}
        answer = self.call("kv/txn", {"compare": [compare], "success": [request]})
        return bool(answer.get("succeeded", False))

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

    def time_to_live(self, lease: int) -> int:
        """The seconds ``lease`` has left; -1 when it does not exist (expired or revoked)."""
        answer = self.call("lease/timetolive", {"ID": str(lease)}, limit=SMALL_RESPONSE)
        return int(answer.get("TTL", -1))

    def revoke(self, lease: int) -> None:
        with contextlib.suppress(EtcdError):  # already gone is fine
            self.call("lease/revoke", {"ID": str(lease)})

    # --- watch ----------------------------------------------------------------------------------

    def watch_prefix(self, prefix: str, start_revision: int) -> Watch:
        """A stream of changes under ``prefix`` from ``start_revision`` (see ``Watch``)."""
        return Watch(self, prefix, start_revision)


class Watch:
    """One watch stream. ``run`` blocks, calling back per batch of events, until the stream
    ends, breaks or ``close`` is called from another thread; the caller then re-lists. An
    empty batch is a message too long to read: something changed, the caller must list."""

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

    def _open(self) -> tuple[http.client.HTTPConnection, Endpoint, dict[str, str]]:
        failures = []
        for index in self.etcd._order():
            ep = self.etcd.endpoints[index]
            try:
                headers = self.etcd._headers(ep)
                conn = self.etcd._connect(ep, None)
            except (OSError, EtcdError) as exc:
                failures.append(str(exc))
                continue
            self.etcd._answered(index)
            return conn, ep, headers
        raise EtcdError("; ".join(failures) or "no etcd endpoint")

    def run(self, on_events: Callable[[list[WatchEvent]], None]) -> None:
        conn, ep, headers = self._open()
        self._conn = conn
        try:
            if self._closed.is_set():
                return
            conn.request("POST", "/v3/watch", body=json.dumps(self.request), headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise EtcdError(f"etcd at {ep.url}: watch: HTTP {resp.status}")
            for line in _lines(resp, MAX_WATCH_MESSAGE):
                if line is None:  # too long to read: something changed, look again
                    on_events([])
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                if "error" in message:  # e.g. an expired token: the caller watches again
                    self.etcd._tokens.pop(ep.url, None)
                    return
                result = message.get("result")
                if not isinstance(result, dict):
                    continue
                events = [_event(ev) for ev in result.get("events", []) if isinstance(ev, dict)]
                if events:
                    on_events(events)
        except (OSError, http.client.HTTPException, TypeError, AttributeError):
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)


def _event(item: dict[str, Any]) -> WatchEvent:
    """One event of a watch message (its kv as etcd sent it: value included on a PUT); an
    event that cannot be read has no kv (the caller must look at the whole prefix again)."""
    raw = item.get("kv")
    try:
        kv = KeyValue.from_json(raw) if isinstance(raw, dict) else None
    except (ValueError, TypeError):
        kv = None
    kind = "DELETE" if item.get("type") == "DELETE" else "PUT"
    return WatchEvent(kind, kv.key if kv is not None else "", kv)


def _lines(resp: http.client.HTTPResponse, limit: int) -> Iterator[bytes | None]:
    """The newline-delimited JSON messages of a streamed answer; a message longer than
    ``limit`` is skipped (never held in memory) and reported as None."""
    pending = b""
    skipping = False
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if skipping:
                skipping = False
                yield None
            elif line.strip():
                yield line
        if len(pending) > limit:
            pending = b""
            skipping = True
