"""The full-kernel lane: tests that need kernel modules this machine's kernel lacks.

A pytest plugin (tests/conftest.py loads it for every session): its cases are the files
tests/lanes.py puts in the ``fullkernel`` lane, tests/fullkernel/test_*.py and
tests/plugins/<plugin>/test_*_fullkernel.py. They need 8021q, ipvlan, dummy, vrf, wireguard,
ipip and bridge VLAN filtering. On a kernel that has them (or inside the guest) they run
directly. On a kernel without them, the first of them to run boots ONE guest for the whole
session: Debian's own kernel (scripts/setup-vm.sh puts it in /lib/modules/<version>/vmlinuz)
under qemu without KVM, via virtme-ng, with this machine's root shared read-only and /tmp, /var,
/etc, /run writable as overlays. The guest runs ``pytest`` on exactly the selected tests with
``PYCNI_FULLKERNEL_GUEST=1`` and writes each report into a shared directory; the host then
reports every case under its own node id, with the guest's failure text. Nothing passes by
skipping: a guest that does not boot, a case the guest did not report, or a case the guest
skipped is a host FAILURE saying why.

Self-contained on purpose (other worktrees copy it): ``python -m pytest tests/fullkernel/x.py``
(or a plugin's ``tests/plugins/vrf/test_vrf_fullkernel.py``) from any checkout with a venv
boots a guest and runs just those tests; every other case of the session runs on the host.

Environment:
- ``PYCNI_FULLKERNEL=auto|vm|direct``: auto (default) probes the running kernel; vm forces the
  guest; direct runs on this kernel (and fails where modules are missing).
- ``PYCNI_VM_KERNEL``: the kernel image (default: the newest /lib/modules/*/vmlinuz).
- ``PYCNI_VM_TIMEOUT``: seconds the whole guest run may take (default 1500).
- ``PYCNI_VM_KEEP=1``: keep the shared directory (console log, reports) after the run.
- ``PYCNI_*`` and ``HYPOTHESIS_PROFILE`` pass through to the guest (e.g. PYCNI_TEST_MODE=daemon).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import lanes, references

GUEST_ENV = "PYCNI_FULLKERNEL_GUEST"
REPORT_ENV = "PYCNI_FULLKERNEL_REPORT"
SELECT_ENV = "PYCNI_FULLKERNEL_SELECT"
MODULES = ("8021q", "ipvlan", "dummy", "vrf", "wireguard", "bridge")  # ipip: autoloaded
# One shell line that fails on a kernel missing any feature of this lane (an anonymous netns,
# gone when the shell exits).
PROBE = (
    "ip link add pk0 type dummy && ip link add pk1 link pk0 type vlan id 5"
    " && ip link add pk2 link pk0 type ipvlan mode l2 && ip link add pk3 type vrf table 4242"
    " && ip link add pk4 type wireguard && ip link add pk5 type ipip remote 192.0.2.1"
    " && ip link add pk6 type bridge vlan_filtering 1"
)
IN_GUEST = os.environ.get(GUEST_ENV) == "1"
_HOST_SKIP = pytest.StashKey[str]()


_LANE_OF_FILE: dict[str, bool] = {}


def _ours(item: pytest.Item) -> bool:
    """Whether the item is a case of this lane (asked for every item of the session)."""
    path = str(item.path)
    if path not in _LANE_OF_FILE:
        _LANE_OF_FILE[path] = lanes.lane_of(path) == "fullkernel"
    return _LANE_OF_FILE[path]


def _host_kernel_has_modules() -> bool:
    proc = subprocess.run(
        ["unshare", "--net", "sh", "-c", PROBE], capture_output=True, timeout=60, check=False
    )
    return proc.returncode == 0


def _mode() -> str:
    if IN_GUEST:
        return "direct"
    wanted = os.environ.get("PYCNI_FULLKERNEL", "auto")
    if wanted in ("vm", "direct"):
        return wanted
    return "direct" if _host_kernel_has_modules() else "vm"


# ---------------------------------------------------------------------------------------------
# In the guest: keep only the selected node ids, and write every report for the host.


def _reference_of(item: pytest.Item) -> str:
    """The Go reference a lane case compares with ("" when none): its ``go_reference`` or
    ``any_dir`` parameter, or v1.9.1 for a case that asks for ``upstream_reference``."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "go_reference" in params:
        return str(params["go_reference"])
    if str(params.get("any_dir", "")).startswith("go-"):
        return str(params["any_dir"])[3:]
    if "upstream_reference" in getattr(item, "fixturenames", ()):
        return "v1.9.1"
    return ""


def _reference_missing(item: pytest.Item) -> str:
    """Why the host skips a case before any guest boots ("" when it runs): its reference is
    not on this machine (v1.9.1 without ../shared/upstream) or PYCNI_REFERENCES leaves it out.
    The guest never skips a case for this, so the lane still never passes by skipping."""
    name = _reference_of(item)
    wanted = os.environ.get("PYCNI_REFERENCES", "").split(",")
    if name and wanted != [""] and name not in wanted:
        return f"PYCNI_REFERENCES={','.join(wanted)} leaves {name} out"
    if name and name not in references.available():
        return f"{name} reference not present (../shared/upstream or PYCNI_UPSTREAM)"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    select = os.environ.get(SELECT_ENV)
    if not IN_GUEST:
        for item in items:
            why = _reference_missing(item) if _ours(item) else ""
            if why:
                item.add_marker(pytest.mark.skip(reason=why))
                item.stash[_HOST_SKIP] = why
        return
    if not select:
        return
    wanted = set(Path(select).read_text().splitlines())
    dropped = [i for i in items if i.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i.nodeid in wanted]


_guest_reports: list[dict[str, object]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not IN_GUEST or REPORT_ENV not in os.environ:
        return
    config = _CONFIG[0]
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    _guest_reports.append(data)
    # Written after every report: a guest that dies halfway still tells what it ran.
    path = Path(os.environ[REPORT_ENV])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_guest_reports))
    tmp.replace(path)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if IN_GUEST and REPORT_ENV in os.environ and report.failed:
        errors = Path(os.environ[REPORT_ENV]).with_name("collect-errors.txt")
        with errors.open("a") as f:
            f.write(f"{report.nodeid}:\n{report.longreprtext}\n")


_CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG[:] = [config]


# ---------------------------------------------------------------------------------------------
# On the host: one guest for the session, its reports replayed under the same node ids.


@dataclass
class GuestRun:
    """What the one guest of this session did."""

    nodeids: list[str]
    reports: dict[str, list[pytest.TestReport]] = field(default_factory=dict)
    problem: str = ""  # why the guest did not report (boot failure, timeout...)
    console_tail: str = ""
    console_shown: bool = False
    seconds: float = 0.0
    guest_boot: float = 0.0  # guest uptime when the test script started
    guest_done: float = 0.0  # guest uptime when pytest had finished


_run: list[GuestRun] = []
_lane: dict[str, object] = {}


def _kernel() -> str:
    explicit = os.environ.get("PYCNI_VM_KERNEL")
    if explicit:
        return explicit
    found = sorted(
        p
        for p in glob.glob("/lib/modules/*/vmlinuz")
        if os.path.exists(p[: -len("vmlinuz")] + "modules.dep")
    )
    return found[-1] if found else ""


def _vng() -> str:
    beside = Path(sys.executable).parent / "vng"
    return str(beside) if beside.exists() else (shutil.which("vng") or "")


CACHED, CACHED_TAG = "/run/pycni-hostc", "pycnihost"
CACHED_OPTS = "trans=virtio,version=9p2000.L,cache=loose,msize=512000,ro,access=any"


def _cached_dirs(rootdir: Path) -> list[str]:
    """The trees Python reads on every start: the checkout, the venv, the base interpreter."""
    found: list[str] = []
    for d in sorted(
        {str(rootdir), os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    ):
        if d != "/" and not any(d.startswith(f"{p}/") for p in found):
            found.append(d)
    return found


def _guest_script(shared: Path, rootdir: Path, files: list[str]) -> str:
    env = {
        k: v for k, v in os.environ.items() if k.startswith("PYCNI_") or k == "HYPOTHESIS_PROFILE"
    }
    env.pop("PYCNI_FULLKERNEL", None)
    env.update(
        {
            GUEST_ENV: "1",
            REPORT_ENV: str(shared / "reports.json"),
            SELECT_ENV: str(shared / "select.txt"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    binds = "".join(
        f"mount --bind {CACHED}{shlex.quote(d)} {shlex.quote(d)}\n" for d in _cached_dirs(rootdir)
    )
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfE",
        "--color=no",
        *files,
    ]
    return (
        "#!/bin/sh\n"
        f"cut -d' ' -f1 /proc/uptime > {shared}/booted\n"
        # No fallback tunnel devices (tunl0, gre0...) in any namespace once ipip & co load:
        # every new netns would get one, and tests compare a pod's links with {"lo"}.
        "sysctl -qw net.core.fb_tunnels_only_for_init_net=2\n"
        f"modprobe -a {' '.join(MODULES)} || echo 'guest: modprobe failed'\n"
        # The root is 9p without a cache: every stat of Python's imports goes to the host
        # (python -c pass took 7.5 s on a loaded machine). A second, read-only export of / with
        # cache=loose, bound over the checkout and the interpreter, serves repeats from the
        # guest's page cache (2-3x faster); without it the run just stays slow.
        f"mkdir -p {CACHED} && mount -t 9p -o {CACHED_OPTS} {CACHED_TAG} {CACHED} && {{\n"
        f"{binds}}} || echo 'guest: no cached host mount'\n"
        f"cd {shlex.quote(str(rootdir))}\n"
        f"{exports}"
        f"{shlex.join(argv)}\n"
        f"echo $? > {shared}/rc\n"
        f"cut -d' ' -f1 /proc/uptime > {shared}/done\n"
    )


def _boot_guest(config: pytest.Config, items: list[pytest.Item]) -> GuestRun:
    run = GuestRun([i.nodeid for i in items])
    kernel, vng = _kernel(), _vng()
    if not kernel or not os.path.exists(kernel):
        run.problem = (
            "no guest kernel (/lib/modules/*/vmlinuz): run `make setup-test` (scripts/setup-vm.sh)"
        )
        return run
    if not vng:
        run.problem = "virtme-ng (vng) is not installed in this venv: run `make setup-test`"
        return run
    if not shutil.which("qemu-system-x86_64"):
        run.problem = "qemu-system-x86_64 is missing: run `make setup-test` (scripts/setup-vm.sh)"
        return run
    shared = Path(tempfile.mkdtemp(prefix="pycni-vm-", dir="/tmp"))
    (shared / "select.txt").write_text("".join(f"{n}\n" for n in run.nodeids))
    files = sorted({n.split("::", 1)[0] for n in run.nodeids})
    script = shared / "run.sh"
    script.write_text(_guest_script(shared, config.rootpath, files))
    script.chmod(0o755)
    timeout = float(os.environ.get("PYCNI_VM_TIMEOUT", "1500"))
    argv = [
        vng, "--run", kernel, "--disable-kvm", "--cpus", "2", "--memory", "2G",
        "--verbose", "--rwdir", str(shared), "--cwd", str(config.rootpath),
        "--exec", str(script),
        f"--qemu-opts=-fsdev local,id={CACHED_TAG},path=/,security_model=none,readonly=on,"
        f"multidevs=remap -device virtio-9p-pci,fsdev={CACHED_TAG},mount_tag={CACHED_TAG}",
    ]  # fmt: skip
    env = dict(os.environ, PATH=f"{Path(vng).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    console = shared / "console.log"
    start = time.monotonic()
    with console.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            run.problem = f"the guest did not finish within {timeout:.0f} s (PYCNI_VM_TIMEOUT)"
    run.seconds = time.monotonic() - start
    text = console.read_text(errors="replace")
    run.console_tail = "\n".join(text.splitlines()[-60:])
    if not run.problem:
        if not (shared / "booted").exists():
            run.problem = f"the guest did not boot (vng exited {proc.returncode})"
        elif not (shared / "rc").exists():
            run.problem = "the guest's pytest did not finish (crashed or the guest died)"
    run.guest_boot, run.guest_done = (_uptime(shared / n) for n in ("booted", "done"))
    errors = shared / "collect-errors.txt"
    if errors.exists():
        run.problem = (run.problem + "\n" if run.problem else "") + errors.read_text()
    reports = shared / "reports.json"
    if reports.exists():
        for data in json.loads(reports.read_text()):
            rep = config.hook.pytest_report_from_serializable(config=config, data=data)
            run.reports.setdefault(rep.nodeid, []).append(rep)
    if os.environ.get("PYCNI_VM_KEEP") == "1":
        run.problem += f"\n(guest files kept in {shared})" if run.problem else ""
        sys.stderr.write(f"\nfull-kernel lane: guest files kept in {shared}\n")
    else:
        shutil.rmtree(shared, ignore_errors=True)
    return run


def _uptime(path: Path) -> float:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return 0.0


def _failed(item: pytest.Item, when: str, text: str) -> pytest.TestReport:
    return pytest.TestReport(
        item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed", text, when, [], 0.0
    )


def _host_reports(item: pytest.Item, run: GuestRun) -> list[pytest.TestReport]:
    got = run.reports.get(item.nodeid, [])
    out: list[pytest.TestReport] = []
    for rep in got:
        if rep.skipped and not hasattr(rep, "wasxfail"):
            reason = (
                rep.longrepr[2] if isinstance(rep.longrepr, (tuple, list)) else str(rep.longrepr)
            )
            rep = _failed(item, rep.when, f"the full-kernel lane never passes by skipping; "
                          f"the guest skipped this test: {reason}")  # fmt: skip
        out.append(rep)
    whens = {r.when for r in got}
    if "setup" not in whens or ("teardown" not in whens):
        why = run.problem or "the guest did not report this test"
        if run.console_shown:
            tail = "(the guest console's tail is in the lane's first failure above)"
        else:
            tail = f"--- guest console (tail) ---\n{run.console_tail}"
            run.console_shown = True
        out.append(
            _failed(
                item, "call" if "setup" in whens else "setup", f"full-kernel lane: {why}\n{tail}"
            )
        )
    return out


def pytest_collection_finish(session: pytest.Session) -> None:
    if IN_GUEST:
        return
    ours = [i for i in session.items if _ours(i) and _HOST_SKIP not in i.stash]
    if ours:
        _lane["items"] = ours


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if IN_GUEST or not _ours(item) or _HOST_SKIP in item.stash:
        return None  # a host skip (its reference is absent) runs as pytest runs any skip
    if "mode" not in _lane:
        _lane["mode"] = _mode()
    if _lane["mode"] == "direct":
        return None
    if not _run:
        items = _lane.get("items") or [item]
        assert isinstance(items, list)
        _run.append(_boot_guest(item.config, items))
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for rep in _host_reports(item, _run[0]):
        ihook.pytest_runtest_logreport(report=rep)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    # Keep pytest's fixture stack consistent for a host test that follows in the same session.
    state = getattr(item.session, "_setupstate", None)
    if state is not None and (nextitem is None or not _ours(nextitem)):
        state.teardown_exact(nextitem)
    return True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _run:
        run = _run[0]
        terminalreporter.write_line(
            f"full-kernel lane: one guest ran {len(run.nodeids)} test(s) in {run.seconds:.1f} s"
            f" (guest: booted at {run.guest_boot:.1f} s, pytest done at {run.guest_done:.1f} s)"
            + (f" — {run.problem.splitlines()[0]}" if run.problem else "")
        )
    elif _lane.get("mode") == "direct" and not IN_GUEST:
        terminalreporter.write_line("full-kernel lane: this kernel has the modules; ran directly")
