"""perf(1) around chosen parts of a bench run: kernel call stacks of every CPU, our own work
and the kworkers' and softirqs' it causes, recorded only while a block runs."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path


class Perf:
    """A system-wide ``perf record -g -e cpu-clock`` (kworkers and softirqs included), started
    disabled and switched on only around the work to profile (perf's control fifo)."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.ctl = data.with_suffix(".ctl")
        self.ack = data.with_suffix(".ack")
        for fifo in (self.ctl, self.ack):
            fifo.unlink(missing_ok=True)
            os.mkfifo(fifo)
        control = f"--control=fifo:{self.ctl},{self.ack}"
        argv = ["perf", "record", "-q", "-a", "-g", "-e", "cpu-clock", "-D", "-1", control]
        self.proc = subprocess.Popen(
            [*argv, "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._ctl = open(self.ctl, "w")  # noqa: SIM115 - kept open for the record's life
        self._ack = open(self.ack)  # noqa: SIM115

    def _say(self, word: str) -> None:
        self._ctl.write(word + "\n")
        self._ctl.flush()
        self._ack.readline()

    def run(self, work: Callable[[], None]) -> None:
        self._say("enable")
        try:
            work()
        finally:
            self._say("disable")

    def stop(self) -> None:
        self._ctl.close()
        self._ack.close()
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        self.ctl.unlink(missing_ok=True)
        self.ack.unlink(missing_ok=True)


def report(data: Path, out: Path) -> None:
    """Our process's kernel symbols (self time), then every command's, into ``out``."""
    parts = []
    for extra in (["--pid", str(os.getpid())], []):
        done = subprocess.run(
            [
                "perf",
                "report",
                "--stdio",
                "-i",
                str(data),
                "--no-children",
                "-g",
                "none",
                "--sort",
                "comm,sym",
                "--percent-limit",
                "0.3",
                *extra,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        parts.append(done.stdout)
    out.write_text("\n".join(parts))


def kernel_time_by_syscall(data: Path, pid: int, calls: int) -> dict[str, float]:
    """µs of kernel time per call (``calls`` = how many ADDs or DELs the recording holds)
    that process ``pid`` spent, by the syscall that entered the kernel and its innermost
    function of note, from ``perf script``. Keys: "sys_NAME" (all of it), "sys_NAME >
    FUNCTION" for the kernel function where samples landed (self time), and for a netlink
    request "sys_NAME > HANDLER > ... (all)": its rtnetlink handler and the two calls below
    it, everything under them."""
    out = subprocess.run(
        ["perf", "script", "-i", str(data), "--pid", str(pid), "-F", "period,ip,sym"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    totals: dict[str, float] = {}
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        try:
            period = int(lines[0].split()[0])  # ns of cpu-clock this sample stands for
        except (ValueError, IndexError):
            continue
        frames = [line.split()[-1] for line in lines[1:] if line.split()]
        syscall = next((f for f in frames if f.startswith("__x64_sys_")), None)
        if syscall is None:
            continue
        name = syscall.removeprefix("__x64_")
        keys = [name, f"{name} > {frames[0]}"]
        if "netlink_rcv_skb" in frames:  # an rtnetlink request: which handler, which step
            below = frames[: frames.index("netlink_rcv_skb")]
            below = [f for f in below if f != "rtnetlink_rcv_msg"]
            if below:
                keys.append(f"{name} > {' > '.join(reversed(below[-3:]))} (all)")
        for key in keys:
            totals[key] = totals.get(key, 0.0) + period / 1000 / calls
    return totals


def growth_table(by_count: dict[int, dict[str, float]], top: int = 30) -> str:
    """Markdown: the syscalls and kernel functions whose µs per call grew the most between the
    first and the last count, with their values at each count."""
    counts = sorted(by_count)
    first, last = by_count[counts[0]], by_count[counts[-1]]
    keys = sorted(set(first) | set(last), key=lambda k: last.get(k, 0) - first.get(k, 0))
    head = "| kernel µs per call | " + " | ".join(f"{c} pods" for c in counts) + " |"
    lines = [head, "|---|" + "---|" * len(counts)]
    for key in reversed(keys[-top:]):
        cells = " | ".join(f"{by_count[c].get(key, 0):.0f}" for c in counts)
        lines.append(f"| {key} | {cells} |")
    return "\n".join(lines)
