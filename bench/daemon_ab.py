#!/usr/bin/env python3
"""A/B of two pycni trees through the C entry points and the daemon, interleaved (issue #37).

On a loaded shared machine a wall time moves with the load, so a change to the daemon's path
is judged here by two numbers per chain call, measured for both trees in the same run, call
after call: the exec's wall time (median over ``--n`` pods) and the CPU time of the daemon's
threads during the call (schedstat of every task of the daemon process: what the daemon
itself spends, which the load does not inflate). Each tree gets its own daemon (started with
that tree's ``src`` first on the path), its own entry points (installed by that tree's
installer, so its own forwarder), its own node namespace with ``--pods`` pods on its bridge.

    .venv/bin/python bench/daemon_ab.py --tree base=/work/wt/main-copy --tree new=. [--n 60]

``--phases LABEL`` starts that tree's daemon with pycni.daemon.phases installed, as
bench/breakdown.py does: ``--tree plain=. --tree phases=. --phases phases`` measures what the
breakdown's instrumentation adds to a chain call.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from breakdown import Chain  # noqa: E402
from run import Impl  # noqa: E402

from pycni.playground import create_netns, delete_netns  # noqa: E402

PREFIX = f"pab{os.getpid() % 10000}-"


def daemon_cpu_ns(pid: int) -> int:
    """CPU time of all the daemon's threads so far (ns, schedstat)."""
    total = 0
    base = f"/proc/{pid}/task"
    for task in os.listdir(base):
        with contextlib.suppress(OSError, ValueError):
            total += int(Path(f"{base}/{task}/schedstat").read_text().split()[0])
    return total


class Tree:
    def __init__(
        self,
        label: str,
        root: Path,
        work: Path,
        launcher: tuple[str, ...] = ("-m", "pycni.cli.main"),
        phases: bool = False,
    ) -> None:
        self.label = label
        self.root = root.resolve()
        self.dir = work / label
        self.dir.mkdir()
        self.socket = str(self.dir / "pycni.sock")
        env = {**os.environ, "PYTHONPATH": str(self.root / "src")}
        code = (
            "import sys; from pycni.entrypoints import install as i; "
            "print(i.install(sys.argv[1], form='auto', socket_path=sys.argv[2]).form)"
        )
        plugins = self.dir / "plugins"
        out = subprocess.run(
            [sys.executable, "-c", code, str(plugins), self.socket],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        self.form = out.stdout.strip()
        if phases:
            launcher = (
                "-c",
                "import sys; from pycni.daemon import phases; phases.install(sys.argv[1]); "
                "from pycni.cli.main import main; sys.exit(main(sys.argv[2:]))",
                str(self.dir / "phases.jsonl"),
            )
        argv = [sys.executable, *launcher, "daemon", "--socket", self.socket]
        self.proc = subprocess.Popen([*argv, "--log-level", "WARNING"], env=env)
        self.impl = Impl(label, plugins)
        self.chain = Chain(self.impl)
        self.cpu: dict[str, list[float]] = {"ADD": [], "DEL": []}
        # per verb: the daemon's own share of each exec (accept to reply sent, less the
        # plugin's run), summed over the chain
        self.overhead: dict[str, list[float]] = {"ADD": [], "DEL": []}

    def wait_ready(self) -> None:
        from pycni.daemon import client

        deadline = time.monotonic() + 60
        while True:
            try:
                client.stats(self.socket)
                return
            except (OSError, client.DaemonUnavailable):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.02)

    def run(self, verb: str, cid: str, path: str, record: bool = True) -> None:
        before = daemon_cpu_ns(self.proc.pid)
        self.chain.run(verb, cid, path, record=record)
        if record:
            self.cpu[verb].append((daemon_cpu_ns(self.proc.pid) - before) / 1e6)
            self.overhead[verb].append(self._overhead(verb, cid))

    def _overhead(self, verb: str, cid: str) -> float:
        from pycni.daemon import client

        recs = client.stats(self.socket)["recent"]
        return sum(
            r.get("total", 0.0) - r.get("run", 0.0)
            for r in recs
            if r.get("container_id") == cid and r.get("command") == verb
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", action="append", required=True, help="LABEL=PATH (twice)")
    parser.add_argument("--phases", action="append", default=[], help="LABEL: instrumented")
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--pods", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pycni-ab-"))
    trees: list[Tree] = []
    names: list[str] = []
    counter = 0
    load = os.getloadavg()

    def new_pod() -> tuple[str, str]:
        nonlocal counter
        counter += 1
        name = f"{PREFIX}p{counter}"
        names.append(name)
        return f"ab{counter}", create_netns(name)

    try:
        for spec in args.tree:
            label, _, path = spec.partition("=")
            trees.append(Tree(label, Path(path), work, phases=label in args.phases))
        for tree in trees:
            tree.wait_ready()
            counter += 1
            tree.impl.node = f"{PREFIX}n{counter}"
            names.append(tree.impl.node)
            create_netns(tree.impl.node)
            tree.impl.data_dir = tree.dir / "ipam"
            tree.impl.data_dir.mkdir()
        for k in range(args.pods + 2):
            for tree in trees:
                cid, path = new_pod()
                tree.run("ADD", cid, path, record=False)
                if k >= args.pods:
                    tree.run("DEL", cid, path, record=False)
        for k in range(args.n):
            order = trees if k % 2 == 0 else trees[::-1]
            for tree in order:
                cid, path = new_pod()
                tree.run("ADD", cid, path)
                tree.run("DEL", cid, path)
    finally:
        for tree in trees:
            tree.stop()
        for name in names:
            delete_netns(name)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.n} pods per tree, {args.pods} resident, load {load[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f}; forms {', '.join(t.form for t in trees)}"
    )
    print(
        "| tree | ADD wall p50 | ADD daemon CPU p50 | ADD daemon share p50 | DEL wall p50 "
        "| DEL daemon CPU p50 | DEL daemon share p50 |"
    )
    print("|---|---|---|---|---|---|---|")
    for tree in trees:
        w = tree.chain.walls
        print(
            f"| {tree.label} | {statistics.median(w['ADD']):.2f} | "
            f"{statistics.median(tree.cpu['ADD']):.2f} | "
            f"{statistics.median(tree.overhead['ADD']):.2f} | {statistics.median(w['DEL']):.2f} | "
            f"{statistics.median(tree.cpu['DEL']):.2f} | "
            f"{statistics.median(tree.overhead['DEL']):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
