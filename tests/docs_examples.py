"""The command output the docs show, produced by running the commands.

A Markdown block marked on the line before its fence with ``<!-- docs-example: NAME -->`` shows
``$ COMMAND`` and its output; ``EXAMPLES[NAME]`` runs that command in a scenario of its own and
returns the same text. tests/integration/test_docs_examples.py compares them (after
``normalise``, which blanks what differs between runs: pids, a daemon's parent command) and
fails on any difference. Regenerate every marked block from a real run with:

    .venv/bin/python -m tests.docs_examples --write

The scenario is a node namespace ``pycni-docs-node`` with a pod namespace, pycni's entry points
and daemon in /tmp/pycni-docs, and a private copy of the runtimes' configs (``--runtime-root``):
podman's containers.conf as Debian ships it (plugins from /usr/lib/cni and the four dirs
before it) and containerd's CRI section pointing at /usr/lib/cni, both reading the scenario's
conf dir, so the example neither depends on nor touches /etc/cni/net.d.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = Path("/tmp/pycni-docs")
NODE, POD = "pycni-docs-node", "pycni-docs-pod"
PYCNI = str(Path(sys.executable).parent / "pycni")
SHOWN_PYCNI = "pycni"  # how the docs spell the command
_MARKER = re.compile(r"^<!--\s*docs-example:\s*([a-z0-9-]+)\s*-->\s*$")
GO_PLUGINS = ("bridge", "host-local", "portmap", "tuning", "loopback")  # no firewall


def _run(*argv: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=300, **kw)  # type: ignore[call-overload, no-any-return]


def _conflist() -> dict[str, object]:
    """podman's own default network, as `podman network create` writes it."""
    return {
        "cniVersion": "0.4.0",
        "name": "web",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni-docs0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "ranges": [[{"subnet": "10.89.0.0/24", "gateway": "10.89.0.1"}]],
                    "dataDir": str(ROOT / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"},
        ],
    }


class Scenario:
    """The node, its pod attached through pycni's daemon, and the runtimes' private configs."""

    def __init__(self) -> None:
        self.daemon: subprocess.Popen[bytes] | None = None
        self.env = {
            **os.environ,
            "CNI_PATH": str(ROOT / "bin"),
            "NETCONFPATH": str(ROOT / "net.d"),
            "PYCNI_CACHE_DIR": str(ROOT / "cache"),
        }
        for key in ("CAP_ARGS", "CNI_ARGS", "CNI_IFNAME", "CONTAINERS_CONF"):
            self.env.pop(key, None)

    def up(self) -> None:
        from pycni.entrypoints import install
        from pycni.playground import create_netns

        self.down()
        for sub in ("net.d", "root/etc/containers", "root/etc/containerd", "go"):
            (ROOT / sub).mkdir(parents=True)
        create_netns(NODE)
        create_netns(POD)
        sock = str(ROOT / "pycni.sock")
        install.install(ROOT / "bin", form="auto", socket_path=sock, autostart=False)
        self.daemon = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{NODE}", PYCNI, "daemon", "--socket", sock,
             "--workers", "4", "--log-level", "ERROR"],
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while _run(PYCNI, "daemon", "--ping", "--socket", sock, check=False).returncode != 0:
            assert self.daemon.poll() is None and time.monotonic() < deadline, "no daemon"
            time.sleep(0.1)
        (ROOT / "net.d" / "87-web.conflist").write_text(json.dumps(_conflist(), indent=2))
        shipped = Path("/usr/share/containers/containers.conf").read_text()
        mine = f'[network]\nnetwork_config_dir = "{ROOT / "net.d"}"\n'
        text, count = re.subn(r"^\[network\]\n", lambda _m: mine, shipped, count=1, flags=re.M)
        (ROOT / "root/etc/containers/containers.conf").write_text(text if count else text + mine)
        self.containerd_bin("/usr/lib/cni")
        self.pycni("add", "web", f"/run/netns/{POD}")

    def containerd_bin(self, bin_dir: str) -> None:
        (ROOT / "root/etc/containerd/config.toml").write_text(
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n'
            f'  bin_dir = "{bin_dir}"\n  conf_dir = "{ROOT / "net.d"}"\n'
        )

    def pycni(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run("nsenter", f"--net=/run/netns/{NODE}", PYCNI, *argv, env=self.env, check=check)

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(60)
        self.daemon = None

    def down(self) -> None:
        from pycni.playground import delete_netns

        if (ROOT / "cache").exists():  # through the daemon, or in-process once it is stopped
            self.pycni("del", "web", f"/run/netns/{POD}", check=False)
        self.stop_daemon()
        for name in (POD, NODE):
            delete_netns(name)
        shutil.rmtree(ROOT, ignore_errors=True)


def _doctor(scenario: Scenario, *extra: str) -> str:
    args = ["doctor", "--runtime-root", str(ROOT / "root"), "--cache-dir", str(ROOT / "cache"),
            "--data-dir", str(ROOT / "ipam"), *extra]  # fmt: skip
    out = scenario.pycni(*args, check=False)
    shown = " ".join(shlex.quote(a) for a in args)
    head = (
        f"$ CNI_PATH={ROOT}/bin NETCONFPATH={ROOT}/net.d \\\n"
        f"    nsenter --net=/run/netns/{NODE} {SHOWN_PYCNI} {shown}"
    )
    return f"{head}\n{out.stdout}(exit status {out.returncode})\n"


def doctor_healthy(scenario: Scenario) -> str:
    return _doctor(scenario)


def doctor_broken(scenario: Scenario) -> str:
    """The daemon stopped, containerd's bin_dir without `firewall`, a leaked reservation."""
    scenario.stop_daemon()
    for name in GO_PLUGINS:
        (ROOT / "go" / name).symlink_to(f"/usr/lib/cni/{name}")
    scenario.containerd_bin(str(ROOT / "go"))
    ghost = ROOT / "ipam" / "web" / "10.89.0.77"
    ghost.write_text("ghost-container\r\neth0")
    an_hour_ago = time.time() - 3600
    os.utime(ghost, (an_hour_ago, an_hour_ago))
    try:
        return _doctor(scenario)
    finally:
        ghost.unlink()


# In the order they run: a later example may change the scenario (doctor_broken stops the
# daemon).
EXAMPLES: dict[str, Callable[[Scenario], str]] = {
    "doctor-healthy": doctor_healthy,
    "doctor-broken": doctor_broken,
}


@contextmanager
def scenario() -> Iterator[Scenario]:
    s = Scenario()
    try:
        s.up()
        yield s
    finally:
        s.down()


def produce() -> dict[str, str]:
    with scenario() as s:
        return {name: fn(s) for name, fn in EXAMPLES.items()}


def normalise(text: str) -> str:
    """Blank what differs between runs of the same scenario."""
    text = re.sub(r"\bpid \d+", "pid N", text)
    text = re.sub(r"started by hand, parent: .*? \(pid N\)", "started by hand (…)", text)
    text = re.sub(r"pycni-doctor-\d+", "pycni-doctor-N", text)
    text = re.sub(r"\b\d+ live network namespaces", "N live network namespaces", text)
    text = re.sub(r"reserved \d+s ago", "reserved Ns ago", text)
    return text


def marked_blocks(path: Path) -> dict[str, tuple[int, int, str]]:
    """NAME → (first line, end line (the closing fence), text) of each marked block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: dict[str, tuple[int, int, str]] = {}
    for i, line in enumerate(lines):
        found = _MARKER.match(line.strip())
        if not found:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"{path}:{i + 1}: a docs-example marker must precede a fence")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        out[found.group(1)] = (i + 2, end, "\n".join(lines[i + 2 : end]) + "\n")
    return out


def mismatches(produced: dict[str, str], paths: list[Path]) -> list[str]:
    """What differs between the marked blocks of ``paths`` and ``produced`` (empty: none),
    plus markers naming no example and examples no doc shows."""
    import difflib

    out, shown = [], set()
    for path in paths:
        for name, (start, _end, text) in marked_blocks(path).items():
            shown.add(name)
            if name not in produced:
                out.append(f"{path.name}:{start}: no example named {name!r} in EXAMPLES")
                continue
            want, got = normalise(text), normalise(produced[name])
            if want != got:
                diff = difflib.unified_diff(
                    want.splitlines(), got.splitlines(), "docs", "run", lineterm="", n=1
                )
                out.append(f"{path.name}:{start}: {name} differs:\n" + "\n".join(diff))
    out += [f"example {name!r} is shown in no doc" for name in produced if name not in shown]
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def write(produced: dict[str, str]) -> list[str]:
    """Replace every marked block with the produced text; the files changed."""
    changed = []
    for path in doc_files():
        blocks = marked_blocks(path)
        if not blocks:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for _name, (start, end, _text) in sorted(blocks.items(), key=lambda b: -b[1][0]):
            lines[start:end] = produced[_name].rstrip("\n").splitlines()
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        changed.append(str(path.relative_to(REPO)))
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.docs_examples --write")
    sys.path.insert(0, str(REPO / "src"))
    for changed in write(produce()):
        print(f"rewrote {changed}")
