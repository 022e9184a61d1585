"""Test harness: private network namespaces for a "node" and its pods, and a leak check.

Every kernel-changing test runs its plugins inside a node namespace (the plugins' host
side, with its own forwarding and firewall state) and its pods in their own namespaces,
all named with this test run's prefix and removed afterwards.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pycni import playground
from pycni.net.ns import NetNS

RUN_PREFIX = f"pct{os.getpid() % 100000}-"
_counter = itertools.count(1)


@dataclass
class Namespace:
    """A named network namespace under /run/netns."""

    name: str

    @property
    def path(self) -> str:
        return playground.netns_path(self.name)

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 30,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside this namespace (nsenter, so /sys is not remounted)."""
        cmd = ["nsenter", f"--net={self.path}", "--", *argv]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            timeout=timeout,
            check=False,
            input=input.decode() if input is not None else None,
            text=True,
            env=env,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} in {self.name} failed ({proc.returncode}):\n"
                f"{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def json(self, *argv: str) -> object:
        """Run an ``ip -j …`` style command and parse its JSON output."""
        out = self.run(*argv).stdout
        return json.loads(out) if out.strip() else []

    def links(self) -> dict[str, dict[str, object]]:
        data = self.json("ip", "-j", "-d", "link", "show")
        assert isinstance(data, list)
        return {str(item["ifname"]): item for item in data}

    def addresses(self, ifname: str) -> list[str]:
        data = self.json("ip", "-j", "addr", "show", "dev", ifname)
        assert isinstance(data, list)
        return [
            f"{a['local']}/{a['prefixlen']}" for item in data for a in item.get("addr_info", [])
        ]

    def ping(self, address: str, count: int = 1, timeout: int = 3) -> bool:
        flag = "-6" if ":" in address else "-4"
        proc = self.run(
            "ping",
            flag,
            "-c",
            str(count),
            "-W",
            str(timeout),
            "-i",
            "0.2",
            address,
            check=False,
            timeout=timeout * count + 10,
        )
        return proc.returncode == 0

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Run the block on this thread inside the namespace; children exec'd inherit it."""
        with NetNS.open(self.path) as handle, handle.entered():
            yield

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def delete(self) -> None:
        playground.delete_netns(self.name)


def create_namespace(role: str) -> Namespace:
    ns = Namespace(f"{RUN_PREFIX}{role}{next(_counter)}")
    playground.create_netns(ns.name)
    return ns


def leftover_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(RUN_PREFIX)]


def global_state() -> set[str]:
    """What a leak would look like in the root namespace and the shared state dirs."""
    items: set[str] = set()
    try:
        for link in json.loads(
            subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout
            or "[]"
        ):
            if not re.fullmatch(
                r"ifb\d+", link["ifname"]
            ):  # the kernel's own, made on first ifb use
                items.add(f"link {link['ifname']}")
    except ValueError:
        pass
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    items.update(f"nft {line.strip()}" for line in tables.splitlines() if line.startswith("table"))
    for tool in ("iptables-legacy-save", "iptables-nft-save"):
        saved = subprocess.run([tool], capture_output=True, text=True).stdout
        items.update(
            f"{tool} {line.split()[0]}" for line in saved.splitlines() if line.startswith(":CNI-")
        )
    for root in ("/var/lib/cni", "/run/pycni", "/run/cni"):
        for base, _dirs, files in os.walk(root):
            items.update(f"file {os.path.join(base, f)}" for f in files)
    items.update(dnsname_state())
    return items


DNSNAME_DIRS = ("/run/containers/cni/dnsname", "/run/containers/cni/dnsname-pycni")


def dnsname_state() -> set[str]:
    """dnsname's per-network directories and every live dnsmasq run from a dnsname dir
    (``--conf-file=…/containers/cni/dnsname/<net>/dnsmasq.conf``, wherever the base dir is)."""
    items: set[str] = set()
    for root in DNSNAME_DIRS:
        if os.path.isdir(root):
            items.update(f"dnsname dir {os.path.join(root, d)}" for d in os.listdir(root))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "dnsmasq":
            conf = [a for a in argv if "/containers/cni/dnsname/" in a]
            if conf:
                items.add(f"dnsmasq pid {entry} {conf[0]}")
    return items


@dataclass
class State:
    """Per-test state directories (never /var/lib/cni or /etc/cni)."""

    root: Path
    cache_dir: Path
    data_dir: Path
    conf_dir: Path

    @classmethod
    def make(cls, root: Path) -> State:
        state = cls(root, root / "cache", root / "networks", root / "net.d")
        for d in (state.cache_dir, state.data_dir, state.conf_dir):
            d.mkdir(parents=True, exist_ok=True)
        return state

    def reservations(self, network: str) -> list[str]:
        """host-local reservation files (IP-named) for ``network``."""
        d = self.data_dir / network
        if not d.exists():
            return []
        return sorted(
            p.name for p in d.iterdir() if p.name != "lock" and not p.name.startswith("last_")
        )

    def cache_files(self) -> list[str]:
        d = self.cache_dir / "results"
        return sorted(p.name for p in d.iterdir()) if d.exists() else []


def write_python_entry_points(directory: Path, names: Sequence[str], python: str) -> None:
    """Plain in-process entry points (used until pycni.entrypoints.install is available)."""
    for name in names:
        path = directory / name
        path.write_text(
            f"#!{python}\n# pycni-entry-point:v1\n"
            f"from pycni.skel.main import main\nmain({name!r})\n"
        )
        path.chmod(0o755)


@dataclass
class PluginRun:
    """What one plugin exec returned."""

    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, object]:
        data = json.loads(self.stdout)
        assert isinstance(data, dict)
        return data

    def ok(self) -> PluginRun:
        assert self.code == 0, f"plugin failed ({self.code}): {self.stdout}\n{self.stderr}"
        return self


def exec_plugin(
    plugin: str | Path,
    command: str,
    config: dict[str, object] | bytes,
    *,
    container_id: str = "",
    netns: str = "",
    ifname: str = "eth0",
    cni_path: str = "",
    cni_args: str = "",
    extra_env: dict[str, str] | None = None,
    timeout: float = 60,
) -> PluginRun:
    """Exec one plugin the way a runtime does (call it inside ``node.entered()``)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": cni_path,
        "CNI_ARGS": cni_args,
    }
    env.update(extra_env or {})
    stdin = config if isinstance(config, bytes) else json.dumps(config).encode()
    proc = subprocess.run(
        [str(plugin)], input=stdin, env=env, capture_output=True, timeout=timeout, check=False
    )
    return PluginRun(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@contextmanager
def running_daemon(sock: str, log_level: str = "WARNING") -> Iterator[subprocess.Popen[bytes]]:
    """A pycni daemon of this interpreter listening on ``sock`` for the block; stopped after.
    Fails at once if it exits while starting."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", sock, "--log-level", log_level]
    )
    try:
        deadline = time.monotonic() + 60  # its imports take seconds on a loaded machine
        while not os.path.exists(sock):
            assert daemon.poll() is None, "the pycni daemon exited at start"
            assert time.monotonic() < deadline, "the pycni daemon did not start"
            time.sleep(0.05)
        yield daemon
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
