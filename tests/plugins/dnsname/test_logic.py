"""dnsname's verbs (plugins/meta/dnsname/plugin.py) on the fake host: no root, no netns.

The node's bridge and its addresses are the fake host's node Kernel; the network's files are
the fake host's FakeStateFiles (under an XDG_RUNTIME_DIR that exists only there), and dnsmasq
is a program installed in its FakeProcesses: run, it leaves a process with its argv and
writes the pid file its config names, as the real one does (starting the real one binds port
53 on a bridge that exists only in the fake; tests/plugins/dnsname/test_dnsname_kernel.py runs
it). The DNS accept rule goes to the node's filter table, the fake host's FakeIptables.
"""

from __future__ import annotations

import ipaddress
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.process.fake_processes import FakeProcesses
from pycni.process.processes import Finished
from pycni.skel.fake_host import FakeHost
from tests.iptables_logic import iptables_of
from tests.plugin_logic import POD, call, kernels, picture, recording_steps, with_prev

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
    "ips": [{"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 1}],
    "dns": {"nameservers": ["9.9.9.9"]},
}
RULE = "-A INPUT -i cni0 -p udp -m udp --dport 53 -j ACCEPT"


def _network(argv: list[str]) -> str:
    """The network a dnsmasq command line serves: its conf file's directory."""
    conf = next(a for a in argv if a.startswith("--conf-file="))
    return Path(conf.removeprefix("--conf-file=")).parent.name


class Dnsmasq:
    """dnsmasq on the fake host: ``calls`` (start, reload on SIGHUP, stop on SIGKILL) by
    network, in order, read from what the plugin did to the FakeProcesses."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.procs = host.children
        self.procs.install("dnsmasq", self._run)

    def _run(self, procs: FakeProcesses, argv: list[str]) -> Finished:
        assert argv[1:3] == ["-u", "root"], argv
        conf = Path(next(a for a in argv if a.startswith("--conf-file="))[12:])
        text = self.host.files.read(str(conf)).decode()
        pid_file = next(x[9:] for x in text.splitlines() if x.startswith("pid-file="))
        pid = procs.spawn(argv)
        self.host.files.write(pid_file, f"{pid}\n".encode())  # as dnsmasq daemonized
        return Finished(0, "")

    @property
    def calls(self) -> list[tuple[str, str]]:
        names = {signal.SIGHUP: "reload", signal.SIGKILL: "stop"}
        return [
            ("start" if what == "run" else names[signum], _network(argv))
            for what, argv, signum in self.procs.history
        ]

    @property
    def running(self) -> list[int]:
        return [pid for pid in self.procs.procs if self.procs.alive(pid)]

    def kill_all(self) -> None:
        """Every dnsmasq dies (as by the OOM killer), leaving its pid file."""
        for pid in self.running:
            self.procs.kill(pid)


class InputChain:
    """The node's filter INPUT chain, as the fake host's FakeIptables holds it."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host

    @property
    def rules(self) -> list[str]:
        return iptables_of(self.host).save("filter").rules_of("INPUT")


@pytest.fixture
def daemon(host: FakeHost) -> Dnsmasq:
    return Dnsmasq(host)


@pytest.fixture
def chain(host: FakeHost) -> InputChain:
    return InputChain(host)


@pytest.fixture
def host() -> Iterator[FakeHost]:
    fake = FakeHost()
    fake.add_pod(POD)
    node = fake.kernel()
    node.add_bridge("cni0")
    cni0 = node.find_link("cni0")
    assert cni0 is not None
    node.set_link(cni0.index, up=True)
    for address in ("10.88.0.1/16", "fd88::1/64", "fe80::1/64"):
        node.add_address(cni0.index, ipaddress.ip_interface(address))
    yield fake


def conf(**extra: Any) -> dict[str, Any]:
    return with_prev(
        {
            "cniVersion": "1.0.0",
            "name": "podnet",
            "type": "dnsname",
            "domainName": "dns.podman",
            **extra,
        },
        PREV,
    )


def run(
    host: FakeHost,
    tmp_path: Path,
    command: str,
    config: dict[str, Any],
    name: str = "web",
    cid: str = "",
    fail_at: str = "",
    ifname: str = "eth0",
) -> tuple[int, Any]:
    extra = {"CNI_ARGS": f"K8S_POD_NAME={name}" if name else "", "XDG_RUNTIME_DIR": str(tmp_path)}
    if cid:
        extra["CNI_CONTAINERID"] = cid
    return call(host, "dnsname", command, config, ifname=ifname, fail_at=fail_at, extra_env=extra)


def net_dir(tmp_path: Path) -> Path:
    return tmp_path / "containers" / "cni" / "dnsname" / "podnet"


def tree(host: FakeHost, tmp_path: Path) -> dict[str, str]:
    """Every file under the runtime directory with its content and mode (directories as
    '/'), in the fake host's files."""
    prefix = f"{tmp_path}/"
    out = {p[len(prefix) :]: "/" for p in host.files.dirs if p.startswith(prefix)}
    for path, (data, mode) in host.files.tree(str(tmp_path)).items():
        out[path[len(prefix) :]] = f"{mode:o} {data.decode()}"
    return dict(sorted(out.items()))


def read(host: FakeHost, path: Path) -> str:
    return host.files.read(str(path)).decode()


def exists(host: FakeHost, path: Path) -> bool:
    return str(path) in host.files.files or str(path) in host.files.dirs


def names(host: FakeHost, directory: Path) -> list[str]:
    return sorted(host.files.list_dir(str(directory)))


def hosts_names(host: FakeHost, tmp_path: Path) -> list[tuple[str, ...]]:
    text = read(host, net_dir(tmp_path) / "addnhosts")
    return [tuple(line.split()) for line in text.splitlines()]


def test_add_publishes_the_name_starts_dnsmasq_and_opens_dns_on_the_bridge(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    before = picture(host)
    code, result = run(host, tmp_path, "ADD", conf())
    assert code == 0, result
    # the bridge's global addresses first (not its link-local one), then prevResult's
    assert result["dns"]["nameservers"] == ["10.88.0.1", "fd88::1", "9.9.9.9"]
    assert result["dns"]["search"] == ["dns.podman"]
    assert hosts_names(host, tmp_path) == [("10.88.0.5", "web")]
    conf_text = read(host, net_dir(tmp_path) / "dnsmasq.conf")
    assert "interface=cni0\n" in conf_text and "domain=dns.podman\n" in conf_text
    assert daemon.calls == [("start", "podnet")]
    conf_file = f"--conf-file={net_dir(tmp_path)}/dnsmasq.conf"
    assert host.children.runs == [["/usr/sbin/dnsmasq", "-u", "root", conf_file]]
    assert chain.rules == [RULE]
    assert kernels(picture(host)) == kernels(before)  # nothing on the node's links, routes
    code, reply = run(host, tmp_path, "CHECK", conf())
    assert code == 0, reply


def test_a_second_container_reloads_and_adds_no_second_rule(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    db = {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]}
    code, reply = run(host, tmp_path, "ADD", with_prev(conf(), db), name="db", cid="c2")
    assert code == 0, reply
    assert hosts_names(host, tmp_path) == [("10.88.0.5", "web"), ("10.88.0.6", "db")]
    assert daemon.calls == [("start", "podnet"), ("reload", "podnet")]
    assert chain.rules == [RULE]
    # a repeated ADD of an attachment replaces its own lines
    assert run(host, tmp_path, "ADD", conf(), name="www")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.6", "db"), ("10.88.0.5", "www")]


def test_check_sees_a_stopped_dnsmasq_and_a_missing_name(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    host.files.write(str(net_dir(tmp_path) / "addnhosts"), b"")
    code, reply = run(host, tmp_path, "CHECK", conf())
    assert (code, reply["msg"]) == (1, "dnsname: web is not published for 10.88.0.5")
    daemon.kill_all()
    code, reply = run(host, tmp_path, "CHECK", conf())
    assert (code, reply["msg"]) == (1, "dnsmasq instance not running")


def test_del_of_the_last_name_stops_dnsmasq_removes_the_rule_and_the_files(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    db = {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]}
    assert run(host, tmp_path, "ADD", with_prev(conf(), db), name="db", cid="c2")[0] == 0
    assert run(host, tmp_path, "DEL", conf(), name="db", cid="c2")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.5", "web")]
    assert daemon.calls[-1] == ("reload", "podnet") and chain.rules == [RULE]
    assert run(host, tmp_path, "DEL", conf())[0] == 0
    assert daemon.calls[-1] == ("stop", "podnet") and not daemon.running
    assert chain.rules == []
    assert not exists(host, net_dir(tmp_path))
    after = tree(host, tmp_path)
    assert run(host, tmp_path, "DEL", conf())[0] == 0  # again: nothing left to do
    assert tree(host, tmp_path) == after and chain.rules == []


def test_gc_drops_the_names_of_attachments_no_longer_valid(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    db = {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]}
    assert run(host, tmp_path, "ADD", with_prev(conf(), db), name="db", cid="c2")[0] == 0
    gc: dict[str, Any] = {"cniVersion": "1.1.0", "name": "podnet", "type": "dnsname"}
    gc["cni.dev/valid-attachments"] = [{"containerID": "c2", "ifname": "eth0"}]
    assert run(host, tmp_path, "GC", gc, name="")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.6", "db")]
    gc["cni.dev/valid-attachments"] = []
    assert run(host, tmp_path, "GC", gc, name="")[0] == 0
    assert not exists(host, net_dir(tmp_path)) and chain.rules == [] and not daemon.running


def test_a_missing_bridge_fails_before_any_file_is_written(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    node = host.kernel()
    cni0 = node.find_link("cni0")
    assert cni0 is not None
    node.delete_link(cni0.index)
    code, reply = run(host, tmp_path, "ADD", conf())
    assert (code, reply["msg"]) == (1, "dnsname: no such network interface cni0")
    assert tree(host, tmp_path) == {} and chain.rules == [] and daemon.calls == []


def test_a_failure_at_each_step_of_a_first_add_leaves_nothing(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    with recording_steps() as steps:
        assert run(host, tmp_path, "ADD", conf())[0] == 0
    assert steps == ["conf", "firewall", "hosts", "record", "dnsmasq"]
    assert run(host, tmp_path, "DEL", conf())[0] == 0
    before = tree(host, tmp_path)
    for step in steps:
        code, reply = run(host, tmp_path, "ADD", conf(), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert tree(host, tmp_path) == before, step
        assert chain.rules == [] and not daemon.running, step


def test_a_failure_at_each_step_of_a_later_add_keeps_the_first_containers_name(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    before = tree(host, tmp_path)
    db = with_prev(conf(), {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]})
    for step in ("hosts", "record", "dnsmasq"):  # the network's conf exists: no conf/firewall
        code, reply = run(host, tmp_path, "ADD", db, name="db", cid="c2", fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert tree(host, tmp_path) == before, step
        assert chain.rules == [RULE] and daemon.running, step


def records_dir(tmp_path: Path) -> Path:
    return tmp_path / "containers" / "cni" / "dnsname-pycni" / "podnet"


def test_attachments_whose_old_record_names_collide_stay_apart(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    """(a-x, eth0) and (a, x-eth0) were both recorded as a-x-eth0: the second ADD took the
    first one's record for its own and removed its name; a DEL removed the other's record."""
    db = {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]}
    assert run(host, tmp_path, "ADD", conf(), name="web", cid="a-x")[0] == 0
    assert (
        run(host, tmp_path, "ADD", with_prev(conf(), db), name="db", cid="a", ifname="x-eth0")[0]
        == 0
    )
    assert hosts_names(host, tmp_path) == [("10.88.0.5", "web"), ("10.88.0.6", "db")]
    assert names(host, records_dir(tmp_path)) == ["a-x:eth0", "a:x-eth0"]
    # DEL without a name in CNI_ARGS: what it removes comes from its own record only
    assert run(host, tmp_path, "DEL", conf(), name="", cid="a", ifname="x-eth0")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.5", "web")]
    assert run(host, tmp_path, "CHECK", conf(), name="", cid="a-x")[0] == 0
    assert run(host, tmp_path, "DEL", conf(), name="", cid="a-x")[0] == 0
    assert not exists(host, net_dir(tmp_path)) and chain.rules == [] and not daemon.running


def test_record_names_escape_what_would_make_them_ambiguous() -> None:
    from pycni.plugins.meta.dnsname.files import record_name

    pairs = [("a", "b:c"), ("a:b", "c"), ("a%3Ab", "c"), ("a", "b%3Ac"), ("a/b", "c"), ("a-x", "y")]
    names = [record_name(cid, ifname) for cid, ifname in pairs]
    assert len(set(names)) == len(pairs), names
    assert all("/" not in name and name.count(":") == 1 for name in names)


def test_records_an_older_pycni_wrote_are_still_found_and_removed(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    """A node upgraded in place: records named <containerID>-<ifname> by the old naming."""
    db = {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]}
    gone = {**PREV, "ips": [{"address": "10.88.0.7/16", "interface": 1}]}
    for cid, name, prev in (("c1", "web", PREV), ("c2", "db", db), ("c3", "old", gone)):
        assert run(host, tmp_path, "ADD", with_prev(conf(), prev), name=name, cid=cid)[0] == 0
        old = records_dir(tmp_path)
        host.files.rename(str(old / f"{cid}:eth0"), str(old / f"{cid}-eth0"))
    # DEL with no prevResult and no name: the old record says what c1 published
    assert run(host, tmp_path, "DEL", conf(), name="", cid="c1")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.6", "db"), ("10.88.0.7", "old")]
    assert not exists(host, records_dir(tmp_path) / "c1-eth0")
    # a repeated ADD of c2 replaces its lines and its old record by a new one
    assert run(host, tmp_path, "ADD", with_prev(conf(), db), name="db", cid="c2")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.7", "old"), ("10.88.0.6", "db")]
    assert names(host, records_dir(tmp_path)) == ["c2:eth0", "c3-eth0"]
    # GC: c3 is gone (its old record and name go), c2 stays
    gc: dict[str, Any] = {"cniVersion": "1.1.0", "name": "podnet", "type": "dnsname"}
    gc["cni.dev/valid-attachments"] = [{"containerID": "c2", "ifname": "eth0"}]
    assert run(host, tmp_path, "GC", gc, name="")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.6", "db")]
    assert names(host, records_dir(tmp_path)) == ["c2:eth0"]
    # an old record that publishes another name than the call's is not taken for its own
    old = records_dir(tmp_path)
    host.files.rename(str(old / "c2:eth0"), str(old / "c2-eth0"))
    assert run(host, tmp_path, "DEL", conf(), name="other", cid="c2")[0] == 0
    assert hosts_names(host, tmp_path) == [("10.88.0.6", "db")]
    assert run(host, tmp_path, "DEL", conf(), name="", cid="c2")[0] == 0
    assert not exists(host, net_dir(tmp_path)) and not exists(host, records_dir(tmp_path))


def test_a_stale_pid_file_naming_another_process_is_never_signalled(
    host: FakeHost, tmp_path: Path, daemon: Dnsmasq, chain: InputChain
) -> None:
    """dnsmasq died and its pid went to an unrelated process: ADD starts a new dnsmasq and
    DEL stops only that one (the reference would SIGHUP and SIGKILL whatever the file names)."""
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    daemon.kill_all()
    other = host.children.spawn(["/usr/bin/sleep", "1000"])
    host.files.write(str(net_dir(tmp_path) / "pidfile"), f"{other}\n".encode())
    db = {**PREV, "ips": [{"address": "10.88.0.6/16", "interface": 1}]}
    assert run(host, tmp_path, "ADD", with_prev(conf(), db), name="db", cid="c2")[0] == 0
    assert daemon.calls == [("start", "podnet"), ("start", "podnet")]
    assert run(host, tmp_path, "DEL", conf(), name="db", cid="c2")[0] == 0
    assert run(host, tmp_path, "DEL", conf())[0] == 0
    assert all(pid != other for pid, _sig in host.children.signals)
    assert host.children.alive(other) and daemon.running == [other]
