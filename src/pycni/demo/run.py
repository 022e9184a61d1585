"""Build, exercise and remove the demo node.

Layout: a node namespace (the plugins' host: bridge, NAT, port mappings) with an uplink veth
to a client namespace (a machine on the node's network), and three pod namespaces attached
by the runtime exactly as a container runtime would: ``CNIConfig.add_network_list`` exec'ing
the entry points installed in the state directory. All files (plugins, conflists, result
cache, host-local store, the web server's page and log) live in the state directory, whose
``demo.json`` lets ``down`` remove everything later.

Mode "daemon" (the default when a C compiler or Python entry points can forward) is the fast
path a real node has: the pods go through a warm daemon (the one on the default socket if it
answers, else one started for the run in the node's namespace and stopped by ``down``), and
one extra pod is attached and removed with in-process entry points to show what a node
without the daemon pays.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TextIO

from pycni.daemon import client, protocol
from pycni.demo import checks, network
from pycni.demo.checks import Check
from pycni.entrypoints import install
from pycni.fsutil import write_atomic
from pycni.inspect.daemon import LAUNCHER_ENV
from pycni.net.ns import NetNS
from pycni.playground import add_namespace, alive, cmdline, netns_path, remove_namespaces, run_ip
from pycni.record import asdict, field, record
from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from pycni.spec.errors import CNIError

KEEP_DIR = "/run/pycni-demo"
STATE_FILE = "demo.json"
POD_COUNT = 3
WEB_POD = 0


class DemoError(RuntimeError):
    """The demo could not be set up (the message says what to do)."""


@record
class DemoState:
    """Everything ``down`` needs, saved as JSON in the state directory."""

    root: str
    prefix: str
    mode: str = ""
    plugin_dir: str = ""
    server_pid: int | None = None
    daemon_pid: int | None = None  # a daemon started for this run (stopped by ``down``)
    socket: str = ""  # the daemon socket the entry points forward to
    pods: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # namespaces this demo made

    @property
    def node(self) -> str:
        return f"{self.prefix}node"

    @property
    def client(self) -> str:
        return f"{self.prefix}client"

    @property
    def namespaces(self) -> list[str]:
        return [*self.pods, self.client, self.node]

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def conf_dir(self) -> str:
        return self.path("net.d")

    @property
    def cache_dir(self) -> str:
        return self.path("cache")

    @property
    def data_dir(self) -> str:
        return self.path("networks")

    def save(self) -> None:
        body = json.dumps(asdict(self), indent=2)
        write_atomic(self.path(STATE_FILE), body, mode=0o644, fsync=False, make_dirs=False)

    @classmethod
    def load(cls, root: str) -> DemoState:
        with open(os.path.join(root, STATE_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return cls(**data)


@record
class PodInfo:
    name: str
    netns: str
    address: str = ""
    add_ms: float = 0.0
    error: str = ""


@record
class Comparison:
    """One pod attached (and removed) with in-process entry points, next to the daemon's."""

    add_ms: float = 0.0
    error: str = ""


@record
class Outcome:
    state: DemoState
    pods: list[PodInfo] = field(default_factory=list)
    matrix: dict[tuple[str, str], bool] = field(default_factory=dict)
    http: list[tuple[str, str, str]] = field(default_factory=list)  # (from, to, answer)
    checks: list[Check] = field(default_factory=list)
    del_ms: list[float] = field(default_factory=list)
    inprocess: Comparison | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _ip(*argv: str) -> None:
    run_ip(argv, DemoError)


class Progress:
    """One line per step with the elapsed time, flushed as it happens."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        self.out.write(f"[{time.monotonic() - self.start:6.2f}s] {message}\n")
        self.out.flush()


def _daemon_answers() -> bool:
    try:
        client.ping(protocol.DEFAULT_SOCKET, timeout=1.0)
    except Exception:
        return False
    return True


def _install_plugins(state: DemoState, mode: str, plugin_dir: str | None) -> None:
    if plugin_dir:
        state.plugin_dir, state.mode = plugin_dir, "external"
        return

    if mode == "auto":
        mode = "daemon"
    state.plugin_dir = state.path("bin")
    if mode == "daemon":
        state.socket = protocol.DEFAULT_SOCKET
        if not _daemon_answers():
            state.socket = state.path("run", "pycni.sock")
            _start_daemon(state)
        install.install(state.plugin_dir, socket_path=state.socket, form="auto")
    else:
        install.install(state.plugin_dir, form="inprocess")
    state.mode = mode


def _start_daemon(state: DemoState) -> None:
    """A daemon for this run, in the node's network namespace (where a node's daemon runs)."""
    log = open(state.path("daemon.log"), "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        ["nsenter", f"--net={netns_path(state.node)}", "--", sys.executable, "-m",
         "pycni.cli.daemon_cmd", "--socket", state.socket, "--workers", "4"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, LAUNCHER_ENV: "by pycni demo (`pycni demo --down` stops it)"},
    )  # fmt: skip
    log.close()
    state.daemon_pid = proc.pid
    state.save()
    deadline = time.monotonic() + 60
    while True:
        try:
            client.ping(state.socket, timeout=2.0)
            return
        except (client.DaemonUnavailable, OSError, ValueError):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(state.path("daemon.log"), encoding="utf-8", errors="replace") as f:
                    raise DemoError(f"the daemon for this run did not start:\n{f.read()}") from None
            time.sleep(0.05)


def _stop_daemon(state: DemoState) -> bool:
    """SIGTERM the run's daemon (it finishes what is in flight); True when it was running."""
    pid = state.daemon_pid
    if pid is None or not state.socket or state.socket.encode() not in cmdline(pid):
        return False  # gone, or not ours any more
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(500):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            return True
        time.sleep(0.02)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    return True


def _create_namespaces(state: DemoState) -> None:
    taken = [n for n in state.namespaces if os.path.exists(netns_path(n))]
    if taken:
        raise DemoError(
            f"namespace {taken[0]} already exists: a kept demo is still up "
            "(remove it with `pycni demo --down`)"
        )
    for name in [state.node, state.client, *state.pods]:
        add_namespace(name, state.created, state.save, DemoError)
    _ip(
        "-n",
        state.node,
        "link",
        "add",
        network.UPLINK,
        "type",
        "veth",
        "peer",
        "name",
        network.UPLINK,
        "netns",
        state.client,
    )
    for ns, addr in ((state.node, network.UPLINK_ADDRESS), (state.client, network.CLIENT_ADDRESS)):
        _ip("-n", ns, "addr", "add", addr, "dev", network.UPLINK)
        _ip("-n", ns, "link", "set", network.UPLINK, "up")


def _write_confs(state: DemoState) -> tuple[bytes, bytes]:
    os.makedirs(state.conf_dir, exist_ok=True)
    lo = network.as_bytes(network.loopback_conflist())
    br = network.as_bytes(network.bridge_conflist(state.data_dir))
    with open(os.path.join(state.conf_dir, "10-pycni-demo.conflist"), "wb") as f:
        f.write(br)
    with open(os.path.join(state.conf_dir, "99-pycni-demo-lo.conflist"), "wb") as f:
        f.write(lo)
    return lo, br


def _runtime(state: DemoState) -> Any:
    return CNIConfig([state.plugin_dir], cache_dir=state.cache_dir, timeout=60)


def _rt(pod: str, ifname: str, mappings: list[dict[str, Any]] | None = None) -> Any:
    return RuntimeConf(
        container_id=pod,
        netns=netns_path(pod),
        ifname=ifname,
        capability_args={"portMappings": mappings} if mappings else {},
    )


def _attach(state: DemoState, lo: bytes, br: bytes, progress: Progress) -> list[PodInfo]:
    cni = _runtime(state)
    lo_conf, br_conf = conf_list_from_bytes(lo), conf_list_from_bytes(br)
    pods = []
    with NetNS.open(netns_path(state.node)) as node, node.entered():
        for i, pod in enumerate(state.pods):
            info = PodInfo(pod, netns_path(pod))
            mappings = network.port_mappings() if i == WEB_POD else None
            started = time.monotonic()
            try:
                cni.add_network_list(lo_conf, _rt(pod, "lo"))
                result = cni.add_network_list(br_conf, _rt(pod, network.POD_IFNAME, mappings))
                info.add_ms = (time.monotonic() - started) * 1000
                info.address = str(result.ips[0].address) if result.ips else ""
                progress(f"ADD {pod}: {info.address} ({info.add_ms:.0f} ms)")
            except CNIError as err:
                info.error = str(err)
                progress(f"ADD {pod} FAILED: {err}")
            pods.append(info)
    return pods


def _detach(state: DemoState) -> tuple[list[float], list[str]]:
    """DEL every pod through the runtime (reverse order of ADD); returns timings, errors."""
    lo_path = os.path.join(state.conf_dir, "99-pycni-demo-lo.conflist")
    br_path = os.path.join(state.conf_dir, "10-pycni-demo.conflist")
    if not (os.path.exists(lo_path) and os.path.exists(br_path) and state.plugin_dir):
        return [], []
    with open(lo_path, "rb") as f:
        lo_conf = conf_list_from_bytes(f.read())
    with open(br_path, "rb") as f:
        br_conf = conf_list_from_bytes(f.read())
    cni = _runtime(state)
    timings: list[float] = []
    errors: list[str] = []
    if state.node not in state.created or not os.path.exists(netns_path(state.node)):
        return timings, errors
    with NetNS.open(netns_path(state.node)) as node, node.entered():
        for i, pod in enumerate(state.pods):
            mappings = network.port_mappings() if i == WEB_POD else None
            started = time.monotonic()
            try:
                cni.del_network_list(br_conf, _rt(pod, network.POD_IFNAME, mappings))
                cni.del_network_list(lo_conf, _rt(pod, "lo"))
            except CNIError as err:
                errors.append(f"DEL {pod}: {err}")
            timings.append((time.monotonic() - started) * 1000)
    return timings, errors


def _compare_inprocess(state: DemoState, lo: bytes, br: bytes, progress: Progress) -> Comparison:
    """ADD (then DEL) one more pod with entry points that never use a daemon: the slow path."""
    bindir = state.path("bin-inprocess")
    install.install(bindir, form="inprocess")
    cni = CNIConfig([bindir], cache_dir=state.cache_dir, timeout=60)
    lo_conf, br_conf = conf_list_from_bytes(lo), conf_list_from_bytes(br)
    pod = f"{state.prefix}inproc"
    add_namespace(pod, state.created, state.save, DemoError)
    found = Comparison()
    try:
        with NetNS.open(netns_path(state.node)) as node, node.entered():
            started = time.monotonic()
            try:
                cni.add_network_list(lo_conf, _rt(pod, "lo"))
                cni.add_network_list(br_conf, _rt(pod, network.POD_IFNAME))
                found.add_ms = (time.monotonic() - started) * 1000
                progress(f"ADD {pod} in-process, for comparison ({found.add_ms:.0f} ms)")
            except CNIError as err:
                found.error = str(err)
            with contextlib.suppress(CNIError):
                cni.del_network_list(br_conf, _rt(pod, network.POD_IFNAME))
                cni.del_network_list(lo_conf, _rt(pod, "lo"))
    finally:
        remove_namespaces([pod], DemoError)
        state.created.remove(pod)
        state.save()
    return found


def _start_server(state: DemoState, pod: str) -> int:
    www = state.path("www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "index.html"), "w", encoding="utf-8") as f:
        f.write(f"hello from {pod}, networked by pycni\n")
    log = open(state.path("http.log"), "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            "nsenter",
            f"--net={netns_path(pod)}",
            "--",
            sys.executable,
            "-m",
            "http.server",
            str(network.CONTAINER_PORT),
            "--bind",
            "0.0.0.0",
            "--directory",
            www,
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    return proc.pid


def _stop_server(pid: int | None) -> None:
    if pid is None:
        return
    if b"http.server" not in cmdline(pid):
        return  # gone, or not ours any more
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    for _ in range(50):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            return
        time.sleep(0.02)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _run_checks(outcome: Outcome, progress: Progress) -> None:
    state = outcome.state
    attached = [p for p in outcome.pods if p.address]
    outcome.checks += [
        Check(f"ADD {p.name}", not p.error, p.error or p.address) for p in outcome.pods
    ]
    if not attached:
        return
    sources = {p.name: p.netns for p in attached}
    targets = {p.name: p.address.split("/")[0] for p in attached}
    targets["gateway"] = network.GATEWAY
    progress("pinging between pods and to the gateway")
    outcome.matrix = checks.ping_matrix(sources, targets)
    outcome.checks += [
        Check(f"ping {src} -> {dst}", ok) for (src, dst), ok in outcome.matrix.items()
    ]
    web = outcome.pods[WEB_POD]
    if not web.address:
        return
    listening = checks.wait_listening(web.netns, "127.0.0.1", network.CONTAINER_PORT)
    outcome.checks.append(Check(f"web server listening in {web.name}", listening))
    node_ip = network.UPLINK_ADDRESS.split("/")[0]
    port = network.HOST_PORT
    progress(f"HTTP through host port {port}")
    for who, ns, host in (
        ("node", state.node, "127.0.0.1"),
        ("node", state.node, node_ip),
        ("client", state.client, node_ip),
    ):
        try:
            answer = checks.http_get(netns_path(ns), host, port)
            ok = " 200 " in answer
        except OSError as exc:
            answer, ok = f"failed: {exc}", False
        outcome.http.append((who, f"{host}:{port}", answer))
        outcome.checks.append(Check(f"HTTP {who} -> {host}:{port}", ok, answer))


def up(
    state: DemoState, out: TextIO, *, mode: str = "auto", plugin_dir: str | None = None
) -> Outcome:
    """Create the node, its client and pods; attach, serve, check. Leaves it running."""
    progress = Progress(out)
    os.makedirs(state.root, mode=0o700, exist_ok=True)
    state.pods = [f"{state.prefix}pod{i + 1}" for i in range(POD_COUNT)]
    state.save()
    _create_namespaces(state)
    progress(f"namespaces: node {state.node}, client {state.client}, {len(state.pods)} pods")
    _install_plugins(state, mode, plugin_dir)
    state.save()
    progress(f"plugins in {state.plugin_dir} (mode: {state.mode})")
    if state.daemon_pid is not None:
        progress(f"daemon started for this run: pid {state.daemon_pid} on {state.socket}")
    lo, br = _write_confs(state)
    outcome = Outcome(state)
    outcome.pods = _attach(state, lo, br, progress)
    if outcome.pods[WEB_POD].address:
        state.server_pid = _start_server(state, outcome.pods[WEB_POD].name)
        state.save()
        progress(f"web server started in {outcome.pods[WEB_POD].name}")
    _run_checks(outcome, progress)
    if state.mode == "daemon":
        outcome.inprocess = _compare_inprocess(state, lo, br, progress)
    return outcome


def down(state: DemoState, progress: Callable[[str], None] | None = None) -> list[str]:
    """Remove everything ``up`` made (tolerates a half-made demo); returns the problems."""
    say = progress or (lambda _m: None)
    problems: list[str] = []
    _stop_server(state.server_pid)
    try:
        timings, errors = _detach(state)
    except Exception as exc:  # a broken runtime must not stop the namespaces from going
        timings, errors = [], [f"DEL failed: {exc}"]
    problems += errors
    if timings:
        say("DEL " + ", ".join(f"{ms:.0f} ms" for ms in timings))
    if _stop_daemon(state):
        say("daemon stopped")
    problems += remove_namespaces(state.created, DemoError)
    say("namespaces removed")
    shutil.rmtree(state.root, ignore_errors=True)
    return problems


def new_state(keep: bool, state_dir: str | None, prefix: str) -> DemoState:
    if state_dir:
        root = state_dir
    elif keep:
        root = KEEP_DIR
    else:
        root = tempfile.mkdtemp(prefix="pycni-demo-")
    if keep and os.path.exists(os.path.join(root, STATE_FILE)):
        raise DemoError(f"a kept demo is still up in {root}: remove it with `pycni demo --down`")
    return DemoState(root=root, prefix=prefix)
