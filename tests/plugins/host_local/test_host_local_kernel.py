"""host-local exec'd through its installed entry point, side by side with the Go reference.

IPAM needs no namespace, but every call runs inside the node namespace (the plugin's host)
with a pod namespace as CNI_NETNS, as a runtime would. All state lives in tmp dirs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = [pytest.mark.kernel, pytest.mark.interop]

GO_VERSIONS = ("0.3.1", "0.4.0", "1.0.0")
NET = "hlnet"


def netconf(data_dir: Path, version: str, ipam: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": NET,
        "type": "bridge",
        "ipam": {"type": "host-local", "dataDir": str(data_dir), **ipam},
        **top,
    }


def store_files(data_dir: Path) -> dict[str, tuple[bytes, int]]:
    d = data_dir / NET
    if not d.exists():
        return {}
    return {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in d.iterdir()}


def normalise(run: harness.PluginRun) -> dict[str, Any]:
    """The comparable part of an answer: a result without Go 1.x's empty dns, or an error
    message (the codes differ on purpose, see docs/plugins/host-local.md)."""
    data: dict[str, Any] = json.loads(run.stdout) if run.stdout.strip() else {}
    if run.code != 0:
        return {"error": data.get("msg")}
    if data.get("dns") == {} and not data.get("cniVersion", "").startswith("0."):
        del data["dns"]
    return data


class Runner:
    """Exec one binary (ours or Go's) as a runtime would."""

    def __init__(self, node: harness.Namespace, pod: harness.Namespace) -> None:
        self.node, self.pod = node, pod

    def __call__(
        self,
        binary: Path,
        command: str,
        config: dict[str, Any],
        cid: str,
        ifname: str = "eth0",
        cni_args: str = "",
    ) -> harness.PluginRun:
        with self.node.entered():
            return harness.exec_plugin(
                binary,
                command,
                config,
                container_id=cid,
                netns=self.pod.path,
                ifname=ifname,
                cni_path=str(binary.parent),
                cni_args=cni_args,
            )


@pytest.fixture
def runner(node: harness.Namespace, pod_factory: Callable[[], harness.Namespace]) -> Runner:
    return Runner(node, pod_factory())


# Each scenario: the ipam section, extra top-level keys, and ADD steps (cid, ifname, CNI_ARGS).
SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any], list[tuple[str, str, str]]]] = {
    "v4": (
        {"ranges": [[{"subnet": "10.10.0.0/29"}]], "routes": [{"dst": "0.0.0.0/0"}]},
        {},
        [("a", "eth0", ""), ("b", "eth0", ""), ("a", "eth1", ""), ("a", "eth0", "")],
    ),
    "v6": (
        {"ranges": [[{"subnet": "2001:db8:1::/126"}]]},
        {},
        [("a", "eth0", ""), ("b", "eth0", ""), ("c", "eth0", "")],
    ),
    "dual-stack-multi-set": (
        {
            "ranges": [
                [{"subnet": "10.20.0.0/30"}, {"subnet": "10.20.1.0/30"}],
                [{"subnet": "fd20::/120", "rangeStart": "fd20::10", "rangeEnd": "fd20::12"}],
                [{"subnet": "10.21.0.0/24", "gateway": "10.21.0.254"}],
            ],
            "routes": [{"dst": "10.0.0.0/8", "gw": "10.20.0.1"}, {"dst": "fd00::/8"}],
        },
        {},
        [("a", "eth0", ""), ("b", "eth0", ""), ("c", "eth0", ""), ("d", "eth0", "")],
    ),
    "legacy-subnet-custom-gateway": (
        {
            "subnet": "10.30.0.0/24",
            "rangeStart": "10.30.0.250",
            "gateway": "10.30.0.254",
            "ranges": [[{"subnet": "10.31.0.0/24"}]],
        },
        {},
        [
            ("a", "eth0", ""),
            ("b", "eth0", ""),
            ("c", "eth0", ""),
            ("d", "eth0", ""),
            ("e", "eth0", ""),
        ],
    ),
    "requested-cni-args": (
        {"ranges": [[{"subnet": "10.40.0.0/24"}]]},
        {},
        [
            ("a", "eth0", "IP=10.40.0.77"),
            ("b", "eth0", "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.40.0.78/24"),
            ("c", "eth0", "IP=10.40.0.77"),
            ("d", "eth0", "IP=10.40.0.1"),
            ("e", "eth0", ""),
            ("f", "eth0", "IP=10.99.0.1"),
        ],
    ),
    "requested-args-and-runtime-config": (
        {"ranges": [[{"subnet": "10.50.0.0/24"}], [{"subnet": "fd50::/64"}]]},
        {
            "args": {"cni": {"ips": ["fd50::99"]}},
            "runtimeConfig": {"ips": ["10.50.0.99/24"]},
        },
        [("a", "eth0", ""), ("b", "eth0", "")],
    ),
    "ip-ranges": (
        {"ranges": [[{"subnet": "10.60.0.0/24"}]], "resolvConf": "RESOLV"},
        {"runtimeConfig": {"ipRanges": [[{"subnet": "10.61.0.0/28", "rangeStart": "10.61.0.5"}]]}},
        [("a", "eth0", ""), ("b", "eth0", "")],
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_same_results_and_files_as_go(
    scenario: str, runner: Runner, plugin_dir: Path, go_plugin_dir: Path, tmp_path: Path
) -> None:
    ipam, top, steps = SCENARIOS[scenario]
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 192.0.2.53\nsearch example.org\noptions ndots:2\n")
    if ipam.get("resolvConf") == "RESOLV":
        ipam = {**ipam, "resolvConf": str(resolv)}
    for version in GO_VERSIONS:
        dirs = {"go": tmp_path / f"go-{version}", "py": tmp_path / f"py-{version}"}
        binaries = {"go": go_plugin_dir / "host-local", "py": plugin_dir / "host-local"}
        for cid, ifname, args in steps:
            answers = {}
            for who in ("go", "py"):
                config = netconf(dirs[who], version, ipam, **top)
                answers[who] = normalise(runner(binaries[who], "ADD", config, cid, ifname, args))
            assert answers["py"] == answers["go"], (version, cid, ifname, args)
        go_files, py_files = store_files(dirs["go"]), store_files(dirs["py"])
        assert go_files.keys() == py_files.keys(), version
        assert go_files.keys() > {"lock"}
        for name, (content, mode) in py_files.items():
            assert content == go_files[name][0], name
            expected = 0o750 if name == "lock" else 0o600
            assert mode == expected & ~_umask(), name
        # DEL of every attachment by each binary leaves the same (empty) store
        for cid, ifname, _ in steps:
            for who in ("go", "py"):
                runner(
                    binaries[who], "DEL", netconf(dirs[who], version, ipam, **top), cid, ifname
                ).ok()
        assert {n for n in store_files(dirs["py"]) if n[0].isdigit() or ":" in n} == set()
        assert store_files(dirs["go"]).keys() == store_files(dirs["py"]).keys()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def reservations(data_dir: Path) -> dict[str, str]:
    d = data_dir / NET
    return {
        p.name: p.read_bytes().decode()
        for p in d.iterdir()
        if p.name != "lock" and not p.name.startswith("last_reserved_ip")
    }


def test_go_and_ours_alternate_on_one_store(
    runner: Runner, plugin_dir: Path, go_plugin_dir: Path, tmp_state: harness.State
) -> None:
    ours, go = plugin_dir / "host-local", go_plugin_dir / "host-local"
    config = netconf(
        tmp_state.data_dir,
        "1.0.0",
        {"ranges": [[{"subnet": "10.70.0.0/28"}], [{"subnet": "fd70::/64"}]]},
    )
    addresses: dict[str, list[str]] = {}
    for i in range(8):
        binary = go if i % 2 == 0 else ours
        run = runner(binary, "ADD", config, f"c{i}").ok()
        ips: Any = run.json["ips"]
        addresses[f"c{i}"] = [ip["address"] for ip in ips]
    flat = [a for v in addresses.values() for a in v]
    assert len(flat) == len(set(flat)) == 16
    # round-robin continues across binaries: the v4 addresses are consecutive
    assert [addresses[f"c{i}"][0] for i in range(8)] == [f"10.70.0.{n}/28" for n in range(2, 10)]
    # each binary releases the other's reservations; CHECK of either sees them
    runner(ours, "CHECK", {**config, "cniVersion": "0.4.0"}, "c0").ok()
    runner(go, "CHECK", {**config, "cniVersion": "0.4.0"}, "c1").ok()
    runner(ours, "DEL", config, "c0").ok()
    runner(go, "DEL", config, "c1").ok()
    assert runner(go, "CHECK", {**config, "cniVersion": "0.4.0"}, "c0").code != 0
    assert runner(ours, "CHECK", {**config, "cniVersion": "0.4.0"}, "c1").code != 0
    left = reservations(tmp_state.data_dir)
    assert len(left) == 12
    assert not any(v.startswith(("c0\r", "c1\r")) for v in left.values())
    # the next ADDs (one by each) continue after the last one and never collide
    a = runner(go, "ADD", config, "c8").ok().json["ips"][0]["address"]  # type: ignore[index]
    b = runner(ours, "ADD", config, "c9").ok().json["ips"][0]["address"]  # type: ignore[index]
    assert (a, b) == ("10.70.0.10/28", "10.70.0.11/28")
    # ours refuses a duplicate made by Go, with Go's text
    dup = runner(ours, "ADD", config, "c8")
    assert dup.code != 0 and "has been allocated to c8" in dup.json["msg"]  # type: ignore[operator]


def test_fifty_concurrent_adds_from_both_binaries(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    plugin_dir: Path,
    go_plugin_dir: Path,
    tmp_state: harness.State,
) -> None:
    pod = pod_factory()
    config = json.dumps(
        netconf(tmp_state.data_dir, "1.0.0", {"ranges": [[{"subnet": "10.80.0.0/24"}]]})
    ).encode()
    procs = []
    with node.entered():
        for i in range(50):
            binary = (go_plugin_dir if i % 2 else plugin_dir) / "host-local"
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "CNI_COMMAND": "ADD",
                "CNI_CONTAINERID": f"par{i}",
                "CNI_NETNS": pod.path,
                "CNI_IFNAME": "eth0",
                "CNI_PATH": str(binary.parent),
            }
            proc = subprocess.Popen(
                [str(binary)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
            procs.append(proc)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(config)
            proc.stdin.close()
        outputs = []
        for proc in procs:
            assert proc.stdout is not None
            out = proc.stdout.read()
            assert proc.wait(timeout=120) == 0, out
            outputs.append(json.loads(out)["ips"][0]["address"])
    assert len(set(outputs)) == 50
    files = reservations(tmp_state.data_dir)
    assert len(files) == 50
    assert sorted(files.values()) == sorted(f"par{i}\r\neth0" for i in range(50))
    assert {f"{name}/24" for name in files} == set(outputs)


def test_gc_releases_exactly_the_stale_reservations(
    runner: Runner, plugin_dir: Path, go_plugin_dir: Path, tmp_state: harness.State
) -> None:
    ours = plugin_dir / "host-local"
    config = netconf(
        tmp_state.data_dir,
        "1.1.0",
        {"ranges": [[{"subnet": "10.90.0.0/24"}], [{"subnet": "fd90::/64"}]]},
    )
    go_config = {**config, "cniVersion": "1.0.0"}
    for cid in ("keep", "stale"):
        runner(ours, "ADD", config, cid).ok()
    runner(go_plugin_dir / "host-local", "ADD", go_config, "gokeep", "net1").ok()
    runner(go_plugin_dir / "host-local", "ADD", go_config, "gostale").ok()
    runner(ours, "ADD", config, "keep", "eth1").ok()
    (tmp_state.data_dir / NET / "10.90.0.200").write_text("legacykeep")
    (tmp_state.data_dir / NET / "10.90.0.201").write_text("legacystale")
    assert len(reservations(tmp_state.data_dir)) == 12
    valid = [
        {"containerID": "keep", "ifname": "eth0"},
        {"containerID": "gokeep", "ifname": "net1"},
        {"containerID": "legacykeep", "ifname": "eth0"},
    ]
    runner(ours, "GC", {**config, "cni.dev/valid-attachments": valid}, "").ok()
    left = reservations(tmp_state.data_dir)
    assert sorted(left.values()) == sorted(
        ["keep\r\neth0"] * 2 + ["gokeep\r\nnet1"] * 2 + ["legacykeep"]
    )
    assert (tmp_state.data_dir / NET / "lock").exists()
    assert (tmp_state.data_dir / NET / "last_reserved_ip.0").exists()
    # a reservation released by GC is handed out again later (the store stays consistent)
    runner(ours, "DEL", config, "keep").ok()
    runner(ours, "GC", {**config, "cni.dev/valid-attachments": []}, "").ok()
    assert reservations(tmp_state.data_dir) == {}


def test_status(runner: Runner, plugin_dir: Path, tmp_state: harness.State) -> None:
    ours = plugin_dir / "host-local"
    config = netconf(
        tmp_state.data_dir,
        "1.1.0",
        {"ranges": [[{"subnet": "10.95.0.0/29"}], [{"subnet": "fd95::/64"}]]},
    )
    runner(ours, "STATUS", config, "").ok()
    for i in range(5):
        runner(ours, "STATUS", config, "").ok()
        runner(ours, "ADD", config, f"s{i}").ok()
    status = runner(ours, "STATUS", config, "")
    assert status.code == 1 and status.json["code"] == 50
    assert status.json["msg"] == "no IP addresses available in range set 0: 10.95.0.1-10.95.0.6"
    full = runner(ours, "ADD", config, "s9")
    assert full.code == 1 and full.json["code"] == 11
    runner(ours, "DEL", config, "s3").ok()
    runner(ours, "STATUS", config, "").ok()
    old = runner(ours, "STATUS", {**config, "cniVersion": "1.0.0"}, "")
    assert old.code == 1 and old.json["code"] == 1


def test_status_of_a_store_that_cannot_be_written(
    runner: Runner, plugin_dir: Path, tmp_path: Path
) -> None:
    """STATUS 50 when every ADD would fail to reserve: a file where the store's directory
    goes, or a read-only file system (a tmpfs mounted read-only on dataDir in a private
    mount namespace, which the plugin runs in); STATUS itself creates nothing."""
    ranges = {"ranges": [[{"subnet": "10.97.0.0/29"}]]}
    blocked = tmp_path / "blocked"
    blocked.write_text("not a directory")
    status = runner(plugin_dir / "host-local", "STATUS", netconf(blocked, "1.1.0", ranges), "")
    assert status.code == 1 and status.json["code"] == 50
    assert f"cannot be made: {blocked} is not a directory" in str(status.json["msg"])

    readonly = tmp_path / "ro"
    readonly.mkdir()
    wrapper = tmp_path / "host-local-on-ro"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec unshare --mount --propagation private sh -c "
        f"'mount -t tmpfs -o ro tmpfs {readonly} && exec {plugin_dir / 'host-local'}'\n"
    )
    wrapper.chmod(0o755)
    config = netconf(readonly, "1.1.0", ranges)
    status = runner(wrapper, "STATUS", config, "")
    assert status.code == 1 and status.json["code"] == 50, status.stdout + status.stderr
    assert f"cannot be written: {readonly} is read-only" in str(status.json["msg"])
    add = runner(wrapper, "ADD", config, "ro1")  # what STATUS foretold
    assert add.code == 1
    runner(plugin_dir / "host-local", "STATUS", config, "").ok()  # writable outside it
    assert list(readonly.iterdir()) == []


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_version_matrix(
    version: str, runner: Runner, plugin_dir: Path, tmp_state: harness.State
) -> None:
    ours = plugin_dir / "host-local"
    config = netconf(
        tmp_state.data_dir,
        version,
        {"ranges": [[{"subnet": "10.96.0.0/24"}], [{"subnet": "fd96::/64"}]]},
    )
    result = runner(ours, "ADD", config, "m1").ok().json
    assert result["cniVersion"] == version
    ips = result["ips"]
    assert isinstance(ips, list)
    assert [ip["address"] for ip in ips] == ["10.96.0.2/24", "fd96::2/64"]
    if version.startswith("0."):
        assert [ip["version"] for ip in ips] == ["4", "6"]
    else:
        assert all("version" not in ip for ip in ips)
    check = runner(ours, "CHECK", config, "m1")
    if version == "0.3.1":
        assert check.code == 1 and check.json["code"] == 1
    else:
        check.ok()
        missing = runner(ours, "CHECK", config, "m2")
        assert missing.code == 1
        assert missing.json[
            "msg"
        ] == "host-local: Failed to find address added by container m1".replace("m1", "m2")
    runner(ours, "DEL", config, "m1").ok()
    runner(ours, "DEL", config, "m1").ok()  # idempotent
    assert reservations(tmp_state.data_dir) == {}
    if version == "1.1.0":
        runner(ours, "STATUS", config, "").ok()
        runner(ours, "GC", {**config, "cni.dev/valid-attachments": []}, "").ok()


BAD_CONFIGS: list[tuple[dict[str, Any], dict[str, Any], str, str]] = [
    (
        {"ranges": [[{"subnet": "10.0.0.0/31"}]]},
        {},
        "",
        "invalid range set 0: Network 10.0.0.0/31 too small to allocate from",
    ),
    ({"ranges": [[{"subnet": "bogus"}]]}, {}, "", "invalid CIDR address: bogus"),
    (
        {"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.1.0.1"}]]},
        {},
        "",
        "invalid range set 0: RangeStart 10.1.0.1 not in network 10.0.0.0/24",
    ),
    (
        {"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.0/25"}]]},
        {},
        "",
        "range set 0 overlaps with 1",
    ),
    ({"ranges": []}, {}, "", "no IP ranges specified"),
    (
        {"ranges": [[{"subnet": "10.0.0.0/24"}]]},
        {},
        "IP=nope",
        'ARGS: error parsing value of pair "IP=nope": invalid IP address nope',
    ),
    (
        {"ranges": [[{"subnet": "10.0.0.0/24"}]]},
        {"runtimeConfig": {"ips": ["10.0.0.1"]}},
        "",
        "failed to allocate for range 0: requested ip 10.0.0.1 is subnet's gateway",
    ),
    (
        {"ranges": [[{"subnet": "10.0.0.0/24"}]]},
        {"runtimeConfig": {"ips": ["10.5.0.1"]}},
        "",
        "failed to allocate all requested IPs: 10.5.0.1",
    ),
]


@pytest.mark.parametrize("case", range(len(BAD_CONFIGS)))
def test_bad_configs_give_code_7_and_leave_no_reservation(
    case: int, runner: Runner, plugin_dir: Path, go_plugin_dir: Path, tmp_state: harness.State
) -> None:
    ipam, top, args, message = BAD_CONFIGS[case]
    config = netconf(tmp_state.data_dir, "1.0.0", ipam, **top)
    run = runner(plugin_dir / "host-local", "ADD", config, "bad", cni_args=args)
    assert run.code == 1
    assert run.json["code"] == 7
    assert run.json["msg"] == message
    assert "Traceback" not in run.stdout
    d = tmp_state.data_dir / NET
    assert not d.exists() or reservations(tmp_state.data_dir) == {}
    go = runner(
        go_plugin_dir / "host-local",
        "ADD",
        config,
        "bad",
        cni_args=args,
    )
    assert go.code == 1 and go.json["msg"] == message


def test_add_timing_ours_vs_go(
    runner: Runner, plugin_dir: Path, go_plugin_dir: Path, tmp_state: harness.State
) -> None:
    """Not a benchmark gate: records ADD wall time per exec for the report (-s to see it)."""
    timings: dict[str, float] = {}
    for who, binary in (("go", go_plugin_dir / "host-local"), ("py", plugin_dir / "host-local")):
        config = netconf(
            tmp_state.data_dir / who, "1.0.0", {"ranges": [[{"subnet": "10.97.0.0/24"}]]}
        )
        samples = []
        for i in range(10):
            start = time.perf_counter()
            runner(binary, "ADD", config, f"t{i}").ok()
            samples.append(time.perf_counter() - start)
        timings[who] = sorted(samples)[len(samples) // 2] * 1000
    print(f"\nhost-local ADD median ms: go={timings['go']:.1f} pycni={timings['py']:.1f}")
    assert timings["py"] < 10_000  # a hang guard; speed is measured in bench/
