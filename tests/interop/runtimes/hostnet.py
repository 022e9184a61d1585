"""The root network namespace around a real runtime test: snapshot, restore, reach.

podman and containerd put the host side of their containers in the machine's own namespace, and
the plugins they call leave shared state there on purpose (iptables chains, nft tables, the
host-local directory, ip_forward). ``RootSnapshot`` records what existed before a test module and
``restore`` removes exactly what appeared since, so the suite's leak check sees nothing.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CNI_STATE = Path("/var/lib/cni")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
# created by the runtimes themselves outside their configurable roots: runc's default state dir
# (podman) and containers/image's blob info cache (podman load)
RUNTIME_DIRS = (Path("/run/runc"), Path("/var/lib/containers"))
IPTABLES_TOOLS = ("iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy")
BUILTIN_CHAINS = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def _out(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def root_links() -> set[str]:
    return {str(item["ifname"]) for item in json.loads(_out("ip", "-j", "link", "show") or "[]")}


def nft_tables() -> set[str]:
    return {
        line.removeprefix("table ").strip()
        for line in _out("nft", "list", "tables").splitlines()
        if line.startswith("table ")
    }


def iptables_saved(tool: str) -> dict[str, list[str]]:
    """``<tool>-save`` split by table. Plain save only lists tables that exist: asking for one
    with ``-t`` would create it (iptables-nft makes an nft table for it)."""
    tables: dict[str, list[str]] = {}
    current: list[str] = []
    for line in _out(f"{tool}-save").splitlines():
        if line.startswith("*"):
            current = tables.setdefault(line[1:].strip(), [])
        elif not line.startswith("#"):
            current.append(line)
    return tables


def user_chains(lines: list[str]) -> set[str]:
    return {line[1:].split()[0] for line in lines if line.startswith(":")} - BUILTIN_CHAINS


def cni_files() -> set[Path]:
    if not CNI_STATE.exists():
        return set()
    return {p for p in CNI_STATE.rglob("*")}


@dataclass
class RootSnapshot:
    """What the root namespace and /var/lib/cni held before the runtime ran."""

    links: set[str]
    tables: set[str]
    chains: dict[str, dict[str, set[str]]]
    files: set[Path]
    cni_state_existed: bool
    ip_forward: str
    runtime_dirs: set[Path]
    removed: list[str] = field(default_factory=list)

    @classmethod
    def take(cls) -> RootSnapshot:
        return cls(
            links=root_links(),
            tables=nft_tables(),
            chains={
                tool: {table: user_chains(lines) for table, lines in iptables_saved(tool).items()}
                for tool in IPTABLES_TOOLS
            },
            files=cni_files(),
            cni_state_existed=CNI_STATE.exists(),
            ip_forward=IP_FORWARD.read_text().strip(),
            runtime_dirs={d for d in RUNTIME_DIRS if d.exists()},
        )

    def restore(self, link_prefixes: tuple[str, ...] = ("veth",)) -> list[str]:
        """Remove what appeared since ``take``; returns what was removed (for the report)."""
        for name in sorted(root_links() - self.links):
            if name.startswith(link_prefixes):
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
                self.removed.append(f"link {name}")
        for tool in IPTABLES_TOOLS:
            for table, lines in iptables_saved(tool).items():
                self._drop_chains(tool, table, lines, self.chains[tool].get(table, set()))
        for table in sorted(nft_tables() - self.tables):
            subprocess.run(["nft", "delete", "table", *table.split()], capture_output=True)
            self.removed.append(f"nft table {table}")
        for path in sorted(cni_files() - self.files, key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            self.removed.append(f"file {path}")
        if not self.cni_state_existed and CNI_STATE.exists() and not any(CNI_STATE.iterdir()):
            CNI_STATE.rmdir()
        IP_FORWARD.write_text(self.ip_forward)
        for directory in RUNTIME_DIRS:
            if directory not in self.runtime_dirs and directory.exists():
                shutil.rmtree(directory, ignore_errors=True)
                self.removed.append(f"dir {directory}")
        return self.removed

    def _drop_chains(self, tool: str, table: str, lines: list[str], before: set[str]) -> None:
        new = user_chains(lines) - before
        if not new:
            return
        for line in lines:
            if not line.startswith("-A "):
                continue
            words = shlex.split(line)
            target = _jump_target(words)
            if words[1] not in new and target in new:
                subprocess.run([tool, "-t", table, "-D", *words[1:]], capture_output=True)
        for chain in sorted(new):
            subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
        for chain in sorted(new):
            subprocess.run([tool, "-t", table, "-X", chain], capture_output=True)
            self.removed.append(f"{tool} {table} chain {chain}")


def _jump_target(words: list[str]) -> str | None:
    for flag in ("-j", "-g", "--jump", "--goto"):
        if flag in words:
            index = words.index(flag)
            if index + 1 < len(words):
                return words[index + 1]
    return None


def node_address() -> str:
    """The machine's own IPv4 address on its default-route interface (not loopback)."""
    route = json.loads(_out("ip", "-j", "-4", "route", "get", "192.0.2.200") or "[]")
    if route and route[0].get("prefsrc") and not route[0]["prefsrc"].startswith("127."):
        return str(route[0]["prefsrc"])
    for item in json.loads(_out("ip", "-j", "-4", "addr", "show", "scope", "global") or "[]"):
        for addr in item.get("addr_info", []):
            return str(addr["local"])
    raise AssertionError("this machine has no global IPv4 address")


def http_get(host: str, port: int, timeout: float = 3.0, attempts: int = 20) -> str:
    """GET / from host:port, retrying while the server in the container starts."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    last: Exception | None = None
    for _ in range(attempts):
        try:
            with opener.open(f"http://{host}:{port}/", timeout=timeout) as response:
                return str(response.read().decode())
        except OSError as exc:
            last = exc
            time.sleep(0.1)
    raise AssertionError(f"http://{host}:{port}/ did not answer: {last}")


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel picks it)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nothing listens on now. All are bound at once while the
    kernel picks them: picked one at a time, the same port can come back (about 1 in 150
    for 20 ports), and two containers cannot map one host port."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("0.0.0.0", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def firewall_state() -> str:
    """The root namespace's rules without counters or dates, to compare before and after."""
    rules = _out("nft", "-s", "list", "ruleset")
    saved = []
    for tool in ("iptables-nft-save", "iptables-legacy-save"):
        saved += [line.split(" [")[0] for line in _out(tool).splitlines() if line[:1] != "#"]
    return rules + "\n".join(saved)


def cached_results(network: str) -> list[str]:
    """The runtime's CNI result cache entries for ``network`` (libcni's default cache dir)."""
    d = CNI_STATE / "results"
    return sorted(p.name for p in d.glob(f"{network}-*")) if d.exists() else []


def bridge_ports(bridge: str) -> list[str]:
    out = _out("ip", "-o", "link", "show", "master", bridge)
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
