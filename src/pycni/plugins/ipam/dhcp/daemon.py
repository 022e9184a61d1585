"""The DHCP daemon: holds a lease per (container, network, interface) and serves the plugin.

:class:`DhcpDaemon` is the logic (allocate, release, restore from the lease store) and takes
requests as decoded dicts, so it can be hosted by ``pycni dhcp-daemon`` (:class:`DhcpServer`,
its own unix socket) or by another long-running pycni process. Leases are renewed by their
own threads; stopping the daemon stops them without releasing (as the reference: the leases
stay valid at the server and a restarted daemon resumes them from the store).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pycni.net.ns import NetNS
from pycni.plugins.ipam.dhcp import config as dhcp_config
from pycni.plugins.ipam.dhcp import protocol
from pycni.plugins.ipam.dhcp.client import ClientTuning, DhcpError
from pycni.plugins.ipam.dhcp.lease import Lease
from pycni.plugins.ipam.dhcp.message import (
    OPT_PARAM_REQUEST_LIST,
    OPT_ROUTER,
    OPT_SUBNET_MASK,
    parse_option_name,
)
from pycni.plugins.ipam.dhcp.store import LeaseStore
from pycni.spec.decode import section
from pycni.spec.errors import INTERNAL, CNIError, InternalError, InvalidConfig
from pycni.spec.result import Result

log = logging.getLogger("pycni.dhcp")

DEFAULT_REQUEST = (OPT_ROUTER, OPT_SUBNET_MASK)


def client_id(container_id: str, network: str, ifname: str) -> str:
    return f"{container_id}/{network}/{ifname}"[:254]


def _cni_args(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in raw.split(";"):
        key, sep, value = pair.partition("=")
        if sep:
            out[key] = value
    return out


def prepare_options(args: str, ipam: dict[str, Any]) -> dict[int, bytes]:
    """The options every packet carries: ``provide`` values, then the request list."""
    opts: dict[int, bytes] = {}
    from_args = _cni_args(args)
    conf = dhcp_config.load(ipam)
    for entry in conf.provide:
        name = entry.name
        code = _code(name)
        value, arg = entry.value, entry.from_arg
        for text, origin in ((value, ""), (from_args.get(arg, "") if arg else "", arg)):
            if not text:
                continue
            if len(text.encode()) > 255:
                where = f" from CNI_ARGS {origin!r}" if origin else ""
                raise InvalidConfig(f"value too long for option {name!r}{where}")
            opts[code] = text.encode()
    wanted: list[int] = []
    skip_default = False
    for request in conf.request:
        skip_default = skip_default or request.skip_default
        name = request.name
        if name and _code(name) not in wanted:
            wanted.append(_code(name))
    if not skip_default:
        wanted += [c for c in DEFAULT_REQUEST if c not in wanted]
    if wanted:
        opts[OPT_PARAM_REQUEST_LIST] = bytes(wanted)
    return opts


def _code(name: str) -> int:
    try:
        return parse_option_name(name)
    except ValueError as exc:
        raise InvalidConfig(f"Can not parse option {name!r}: {exc}") from None


class DhcpDaemon:
    """Leases by client ID; thread-safe; ``handle`` is the whole request interface."""

    def __init__(
        self,
        tuning: ClientTuning | None = None,
        store: LeaseStore | None = None,
        clock: Callable[[], float] = time.time,
        host_prefix: str = "",
    ) -> None:
        self.tuning = tuning or ClientTuning()
        self.host_prefix = host_prefix  # the reference's -hostprefix: where the node's / is
        self.store = store
        self.clock = clock
        self.leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._busy: dict[str, threading.Lock] = {}

    def handle(self, request: dict[str, Any], fd: int | None) -> dict[str, Any]:
        """One request → one reply dict; takes ownership of ``fd``."""
        try:
            method = request.get("method")
            if method == "allocate":
                return {"result": self.allocate(request, fd)}
            if fd is not None:
                os.close(fd)
                fd = None
            if method == "release":
                self.release(request)
                return {"result": {}}
            if method == "ping":
                return {"result": {"leases": len(self.leases)}}
            raise InternalError(f"unknown method {method!r}")
        except CNIError as err:
            return {"error": {"code": err.code, "msg": err.msg, "details": err.details}}
        except Exception as exc:  # a message for the plugin, never a dead connection
            log.exception("request failed")
            return {"error": {"code": INTERNAL, "msg": f"{type(exc).__name__}: {exc}"}}

    def _client_id(self, request: dict[str, Any]) -> str:
        config = request.get("config") or {}
        name = str(config.get("name", "")) if isinstance(config, dict) else ""
        return client_id(str(request.get("containerID", "")), name, str(request.get("ifName")))

    def _client_lock(self, cid: str) -> threading.Lock:
        with self._lock:
            return self._busy.setdefault(cid, threading.Lock())

    def allocate(self, request: dict[str, Any], fd: int | None) -> dict[str, Any]:
        config = request.get("config")
        if not isinstance(config, dict):
            raise InvalidConfig("error parsing netconf: not an object")
        try:
            ipam = section(config, "ipam")
            options = prepare_options(str(request.get("args", "")), ipam)
            priority = dhcp_config.load(ipam).priority
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        cid = self._client_id(request)
        with self._client_lock(cid):
            lease = self.leases.get(cid)
            if lease is not None:
                if fd is not None:
                    os.close(fd)
                lease.poke()
            else:
                lease = self._acquire(cid, request, fd, options)
        result = Result(cni_version="1.1.0", ips=[lease.ip_config()])
        try:
            result.routes = lease.routes(priority)
        except DhcpError as exc:
            raise InternalError(str(exc)) from None
        return result.to_dict("1.1.0")

    def _acquire(
        self, cid: str, request: dict[str, Any], fd: int | None, options: dict[int, bytes]
    ) -> Lease:
        path = str(request.get("netns", ""))
        if path.startswith("/"):
            path = self.host_prefix + path  # the plugin's path, seen from this mount namespace
        netns = NetNS(fd, path) if fd is not None else NetNS.open(path)
        lease = Lease(
            cid,
            netns,
            str(request.get("ifName", "")),
            options,
            self.tuning,
            clock=self.clock,
            on_change=self._saved,
        )
        log.info("%s: acquiring lease", cid)
        try:
            lease.acquire()
        except (DhcpError, OSError) as exc:
            netns.close()
            raise InternalError(f"{cid}: {exc}") from None
        log.info("%s: lease acquired: %s", cid, lease.ip_config().address)
        with self._lock:
            self.leases[cid] = lease
        lease.start()
        return lease

    def _saved(self, lease: Lease) -> None:
        if self.store is not None:
            self.store.save(lease.record())

    def release(self, request: dict[str, Any]) -> None:
        """Stop the lease and send DHCPRELEASE; an unknown lease is success."""
        cid = self._client_id(request)
        with self._client_lock(cid):
            with self._lock:
                lease = self.leases.pop(cid, None)
            if self.store is not None:
                self.store.remove(cid)
            if lease is not None:
                lease.stop(release=True)

    def restore(self) -> int:
        """Resume the stored leases whose namespace still exists and that have not expired."""
        if self.store is None:
            return 0
        resumed = 0
        for record in self.store.load_all():
            cid = str(record["clientID"])
            try:
                if float(record["times"][2]) <= self.clock():
                    raise ValueError("expired")
                netns = NetNS.open(str(record["netns"]))
            except (CNIError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
                log.info("%s: dropping stored lease: %s", cid, exc)
                self.store.remove(cid)
                continue
            options = {int(k): bytes.fromhex(v) for k, v in record.get("options", {}).items()}
            lease = Lease(
                cid,
                netns,
                str(record["ifName"]),
                options,
                self.tuning,
                clock=self.clock,
                on_change=self._saved,
            )
            lease.restore(record)
            with self._lock:
                self.leases[cid] = lease
            lease.start()
            resumed += 1
        return resumed

    def close(self) -> None:
        """Stop every maintenance thread without releasing (the store keeps the leases)."""
        with self._lock:
            leases, self.leases = list(self.leases.values()), {}
        for lease in leases:
            lease.stop(release=False)


class DhcpServer:
    """``daemon`` served on a unix socket: its own (directory created 0700, socket 0600,
    removed on close) or ``listening``, one systemd bound (left in place on close: systemd
    keeps listening on it and starts the next daemon, so removing it would strand them)."""

    def __init__(
        self, daemon: DhcpDaemon, socket_path: str, listening: socket.socket | None = None
    ) -> None:
        self.daemon = daemon
        self.path = socket_path
        self._closing = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.owned = listening is None
        if listening is not None:
            self.sock = listening
            return
        Path(socket_path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._remove_stale()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(socket_path)
        os.chmod(socket_path, 0o600)
        self.sock.listen(64)

    def _remove_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(f"{self.path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.path)
        except OSError:
            os.unlink(self.path)  # nobody listens: a leftover of a dead daemon
            return
        finally:
            probe.close()
        raise OSError(f"another daemon is serving {self.path}")

    def serve_forever(self) -> None:
        """Accept until :meth:`close`; each connection is served by its own thread."""
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([self.sock.fileno(), self._wake_r], [], [])
                if self._wake_r in ready:
                    return
                conn, _ = self.sock.accept()
            except (OSError, ValueError):  # ValueError: the socket was closed under select
                if self._closing.is_set():
                    return
                raise
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                request, fd = protocol.receive(conn)
            except (OSError, ValueError) as exc:
                protocol.reply(conn, {"error": {"code": INTERNAL, "msg": f"bad request: {exc}"}})
                return
            answer = self.daemon.handle(request, fd)
            with contextlib.suppress(OSError):  # the plugin went away
                protocol.reply(conn, answer)

    def close(self) -> None:
        """Stop accepting (wakes :meth:`serve_forever`; safe from a signal handler). A
        socket systemd passed is only closed here, never shut down: systemd shares it."""
        self._closing.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self.owned:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        if self.owned:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
