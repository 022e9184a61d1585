"""`pycni add/check/del/gc/status` against cnitool v1.3.0, the CLI's reference.

Both drivers run the same steps on the same conflist, pod namespace and plugins (pycni's, and
Go v1.9.1's), one after the other; every step's exit code, stdout and stderr and the libcni
cache files it leaves must be the same bytes. cnitool has no cache-dir option (it always uses
/var/lib/cni), so each driver runs in a private mount namespace whose /var/lib is a scratch
directory: the machine's own /var/lib/cni is never touched.

What is random between two runs of the same real chain is normalised, and only that: MAC
addresses and the host veth's name. The canned-plugin cases need no normalisation at all.
Skips when the v1.9.1 reference (../shared/upstream) is absent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Namespace
from tests.references import Reference

pytestmark = [pytest.mark.interop, pytest.mark.kernel]

PYCNI = Path(sys.executable).with_name("pycni")
VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
RUNNER = 'mount --bind "$0" /var/lib && cd "$1" && shift && exec nsenter --net="$@"'
_MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
_VETH = re.compile(r"veth[0-9a-f]{8}")

# A plugin whose ADD prints a fixed result and whose other verbs print nothing; a file named
# after the verb beside it holds an error object and an exit code instead.
CANNED = """#!/bin/sh
cat > /dev/null
here=$(dirname "$0")
if [ -f "$here/canned.$CNI_COMMAND.stderr" ]; then cat "$here/canned.$CNI_COMMAND.stderr" >&2; fi
if [ -f "$here/canned.$CNI_COMMAND.err" ]; then cat "$here/canned.$CNI_COMMAND.err"; exit 1; fi
if [ "$CNI_COMMAND" = ADD ]; then cat "$here/canned.result"; fi
if [ "$CNI_COMMAND" = VERSION ]; then
  printf '{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}'
fi
exit 0
"""


@dataclass(frozen=True)
class Outcome:
    """What one CLI call showed and left: exit code, output, and the cache files after it."""

    code: int
    stdout: str
    stderr: str
    cache: dict[str, str]


@dataclass
class Bench:
    """One comparison's world: a node, a pod, the conf dir, and a scratch /var/lib per driver."""

    node: Namespace
    pod: Namespace
    root: Path
    cni_path: str
    cnitool: Path

    @property
    def confdir(self) -> Path:
        return self.root / "net.d"

    def write(self, conf: dict[str, Any], name: str = "10-net.conflist") -> None:
        self.confdir.mkdir(exist_ok=True)
        for old in self.confdir.iterdir():
            old.unlink()
        (self.confdir / name).write_text(json.dumps(conf))

    def varlib(self, driver: str) -> Path:
        path = self.root / f"varlib-{driver}"
        (path / "cni").mkdir(parents=True, exist_ok=True)
        return path

    def call(self, driver: str, argv: list[str], env: dict[str, str] | None = None) -> Outcome:
        binary = str(self.cnitool if driver == "cnitool" else PYCNI)
        full = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "NETCONFPATH": str(self.confdir),
            "CNI_PATH": self.cni_path,
            "PYTHONPATH": os.pathsep.join(sys.path),
            **(env or {}),
        }
        full = {k: v for k, v in full.items() if v is not None}
        varlib = self.varlib(driver)
        cmd = ["unshare", "-m", "sh", "-c", RUNNER, str(varlib), str(self.root)]
        cmd += [self.node.path, "--", binary, *argv]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=60)
        return Outcome(proc.returncode, proc.stdout, proc.stderr, self.cache(driver))

    def cache(self, driver: str) -> dict[str, str]:
        base = self.varlib(driver) / "cni"
        return {
            str(path.relative_to(base)): path.read_text()
            for path in sorted(base.rglob("*"))
            if path.is_file()
        }

    def reset(self) -> None:
        """Between the two drivers: the same fresh IPAM state, so both get the same address."""
        shutil.rmtree(self.root / "ipam", ignore_errors=True)


def _normal(outcome: Outcome) -> Outcome:
    """Only what two runs of one real chain make different: MACs and host veth names, and the
    program name in a usage text (cnitool prints its own)."""

    def clean(text: str) -> str:
        text = _VETH.sub("vethXXXXXXXX", _MAC.sub("MAC", text))
        return text.replace("pycni: Add,", "cnitool: Add,").replace("  pycni ", "  cnitool ")

    cache = {name: clean(body) for name, body in outcome.cache.items()}
    return Outcome(outcome.code, clean(outcome.stdout), clean(outcome.stderr), cache)


def _compare(bench: Bench, steps: list[tuple[list[str], dict[str, str]]]) -> list[Outcome]:
    """Run ``steps`` with cnitool, then with pycni, on the same pod; return cnitool's outcomes
    after asserting pycni's are the same."""
    seen: dict[str, list[Outcome]] = {}
    for driver in ("cnitool", "pycni"):
        bench.reset()
        seen[driver] = [_normal(bench.call(driver, argv, env)) for argv, env in steps]
    differ = [
        f"{argv} {env}:\n  cnitool v1.3.0: {want}\n  pycni:          {got}"
        for (argv, env), want, got in zip(steps, seen["cnitool"], seen["pycni"], strict=True)
        if got != want
    ]
    assert not differ, "cnitool v1.3.0 and pycni differ:\n" + "\n".join(differ)
    return seen["cnitool"]


def _chain(version: str, bench: Bench, loopback: bool = True) -> dict[str, Any]:
    plugins: list[dict[str, Any]] = [
        {
            "type": "bridge",
            "bridge": "clicnt0",
            "isGateway": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.78.0.0/24"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(bench.root / "ipam"),
            },
        },
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]
    if loopback:
        plugins.append({"type": "loopback"})
    return {"cniVersion": version, "name": "clicnt", "plugins": plugins}


@pytest.fixture(params=["pycni-plugins", "go-v1.9.1-plugins"])
def bench(
    request: pytest.FixtureRequest,
    upstream_reference: Reference,
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    tmp_path: Path,
) -> Iterator[Bench]:
    assert upstream_reference.cnitool is not None
    if request.param == "pycni-plugins":
        cni_path = str(request.getfixturevalue("plugin_dir"))
    else:
        cni_path = str(upstream_reference.plugin_dir)
    yield Bench(node, pod_factory(), tmp_path, cni_path, upstream_reference.cnitool)


CAPS = json.dumps({"portMappings": [{"hostPort": 18321, "containerPort": 80, "protocol": "tcp"}]})


# Every version with Go's plugins; with pycni's (slower to run) a 0.x and a 1.x one: the
# canned-result test covers each version's printing.
LIFECYCLES = [("go-v1.9.1-plugins", v) for v in VERSIONS]
LIFECYCLES += [("pycni-plugins", "0.4.0"), ("pycni-plugins", "1.1.0")]


@pytest.mark.parametrize(("bench", "version"), LIFECYCLES, indirect=["bench"])
def test_lifecycle_matches_cnitool(version: str, bench: Bench) -> None:
    """ADD (with CNI_ARGS, CAP_ARGS, CNI_IFNAME), CHECK, STATUS, DEL, DEL again; ADD then GC."""
    bench.write(_chain(version, bench))
    pod = bench.pod.path
    env = {"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web", "CAP_ARGS": CAPS, "CNI_IFNAME": "net1"}
    steps = [
        (["add", "clicnt", pod], env),
        (["check", "clicnt", pod], env),
        (["status", "clicnt", pod], {}),
        (["del", "clicnt", pod], env),
        (["del", "clicnt", pod], env),
        (["add", "clicnt", pod], {}),
        (["gc", "clicnt", pod], {}),
        (["del", "clicnt", pod], {}),
    ]
    seen = _compare(bench, steps)
    assert seen[0].code == 0 and json.loads(seen[0].stdout)["cniVersion"] == version
    assert list(seen[0].cache) == ["results/clicnt-" + _cid(pod) + "-net1"]
    cached = json.loads(seen[0].cache["results/clicnt-" + _cid(pod) + "-net1"])
    assert cached["capabilityArgs"] == json.loads(CAPS)
    assert seen[3].cache == {} and seen[6].cache == {}
    if version == "0.3.1":
        assert "does not support the CHECK command" in seen[1].stderr


def _cid(netns: str) -> str:
    from pycni.cli.cnitool import container_id_for

    return container_id_for(netns)


def test_errors_match_cnitool(bench: Bench) -> None:
    """Each error the way cnitool words it, with its exit code, and nothing cached."""
    bench.write(_chain("1.0.0", bench, loopback=False))
    pod = bench.pod.path
    steps: list[tuple[list[str], dict[str, str]]] = [
        ([], {}),
        (["add"], {}),
        (["add", "clicnt"], {}),
        (["gc", "clicnt"], {}),
        (["frob", "clicnt", pod], {}),
        (["frob", "nonet", pod], {}),
        (["add", "nonet", pod], {}),
        (["add", "clicnt", pod], {"NETCONFPATH": str(bench.root / "absent")}),
        (["add", "clicnt", "/run/netns/pycni-no-such-netns"], {}),
        (["add", "clicnt", "relative-netns"], {}),
        (["add", "clicnt", pod], {"CNI_ARGS": "K8S_POD_NAME"}),
        (["add", "clicnt", pod], {"CNI_ARGS": 'A=1;B="2'}),
        (["add", "clicnt", pod], {"CAP_ARGS": "[1]"}),
        (["add", "clicnt", pod], {"CAP_ARGS": '"x"'}),
        (["add", "clicnt", pod], {"CAP_ARGS": "{bad"}),
        (["add", "clicnt", pod], {"CAP_ARGS": '{"a":1,}'}),
        (["add", "clicnt", pod], {"CAP_ARGS": "{} x"}),
        (["del", "clicnt", pod], {"CNI_IFNAME": ""}),
        (["add", "clicnt", pod], {"CNI_ARGS": "UNKNOWN_KEY=1"}),
        (["del", "clicnt", pod], {"CNI_ARGS": "UNKNOWN_KEY=1"}),
        (["check", "clicnt", pod], {}),
        (["del", "clicnt", pod], {}),
    ]
    seen = _compare(bench, steps)
    assert seen[0].code == 1 and seen[0].stderr.startswith("cnitool: Add, check, remove")
    assert seen[4].code == 0 and seen[4].stdout == seen[4].stderr == ""
    assert seen[6].stderr.startswith('no net configuration with name "nonet"')
    assert "failed to Statfs" in seen[8].stderr and seen[8].code == 1
    assert all(step.cache == {} for step in seen)


def test_missing_plugin_matches_cnitool(bench: Bench) -> None:
    """First in the chain: libcni does not roll a failed ADD back, so a missing plugin after
    the bridge would leave the pod's veth behind (for cnitool and pycni alike)."""
    conf = _chain("1.1.0", bench, loopback=False)
    conf["plugins"].insert(0, {"type": "pycni-no-such-plugin"})
    bench.write(conf)
    pod = bench.pod.path
    steps = [
        (["add", "clicnt", pod], {}),
        (["status", "clicnt", pod], {}),
        (["gc", "clicnt", pod], {}),
        (["del", "clicnt", pod], {}),
    ]
    seen = _compare(bench, steps)
    assert 'failed to find plugin "pycni-no-such-plugin"' in seen[0].stderr


CANNED_RESULT = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "eth0", "mac": "02:00:00:00:00:01", "mtu": 1400, "sandbox": "/x", "pciID": "p"},
        {"name": "host0", "socketPath": "/s"},
    ],
    "ips": [{"interface": 0, "address": "10.1.0.2/24", "gateway": "10.1.0.1"}],
    "routes": [
        {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1300, "advmss": 1200, "priority": 5},
        {"dst": "10.9.0.0/16", "table": 100, "scope": 253},
    ],
    "dns": {"nameservers": ["10.1.0.1"], "domain": "a.b", "search": ["b"], "options": ["x"]},
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dns", [True, False])
@pytest.mark.parametrize("result_version", ["config's", "1.1.0"])
def test_canned_result_printed_and_cached_like_cnitool(
    version: str,
    dns: bool,
    result_version: str,
    upstream_reference: Reference,
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    tmp_path: Path,
) -> None:
    """A rich 1.1.0 result converted to each config version: the same bytes, no normalising."""
    assert upstream_reference.cnitool is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "canned").write_text(CANNED)
    (bin_dir / "canned").chmod(0o755)
    result = dict(CANNED_RESULT) if dns else {k: v for k, v in CANNED_RESULT.items() if k != "dns"}
    result["cniVersion"] = version if result_version == "config's" else result_version
    (bin_dir / "canned.result").write_text(json.dumps(result))
    bench = Bench(node, pod_factory(), tmp_path, str(bin_dir), upstream_reference.cnitool)
    bench.write({"cniVersion": version, "name": "canned", "plugins": [{"type": "canned"}]})
    pod = bench.pod.path
    steps = [(["add", "canned", pod], {}), (["check", "canned", pod], {})]
    steps += [(["del", "canned", pod], {})]
    seen = _compare(bench, steps)
    assert seen[0].code == 0 and json.loads(seen[0].stdout)["cniVersion"] == result["cniVersion"]


@pytest.mark.parametrize("verb", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
def test_plugin_error_codes_match_cnitool(
    verb: str,
    upstream_reference: Reference,
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    tmp_path: Path,
) -> None:
    """A plugin's error object (code, msg, details) as cnitool prints it, for each verb."""
    assert upstream_reference.cnitool is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "canned").write_text(CANNED)
    (bin_dir / "canned").chmod(0o755)
    (bin_dir / "canned.result").write_text(json.dumps(CANNED_RESULT))
    error = {"cniVersion": "1.1.0", "code": 11, "msg": "try later", "details": "busy: x"}
    (bin_dir / f"canned.{verb}.err").write_text(json.dumps(error))
    bench = Bench(node, pod_factory(), tmp_path, str(bin_dir), upstream_reference.cnitool)
    conf = {"cniVersion": "1.1.0", "name": "canned", "plugins": [{"type": "canned"}]}
    bench.write(conf)
    pod = bench.pod.path
    steps = [
        (["add", "canned", pod], {}),
        (["check", "canned", pod], {}),
        (["status", "canned", pod], {}),
        (["gc", "canned", pod], {}),
        (["del", "canned", pod], {}),
    ]
    seen = _compare(bench, steps)
    failing = {"ADD": 0, "CHECK": 1, "STATUS": 2, "GC": 3, "DEL": 4}[verb]
    assert seen[failing].code == 1 and "try later; busy: x" in seen[failing].stderr


JSON_TEXTS = [
    "{bad", '{"a":1,}', "{} x", "[1,]", "[1 2]", '{"a" 1}', "tru", "trux", "nul", '"a\\q"',
    '"\\u12g4"', "-x", "1.e", "1e+", "01", '"a\x01"', '{"a":1 "b"}', "'x'", "[", "\u00e9",
    '{"a":NaN}', "[1]", '"x"', "true", "7", "null", "{}", '{"a":[1,{"b":nul}]}', "\t{\n",
    '{"a":"\\ud800"}', "1e400", "{\u00a0}", "[-]", '{"a":1}}', '"\\u12', '"\\u12"', "1e+x",
    "-", '"\\x', "\udcff", '"a\udcffb', "\u200b", "[\U0001f600]", '"\x7f"', " ", "",
    '"\t"', "[1,2", '{"a":', "fals", "nulx", "-01", "1.5e3x", ".5", "+1", '{"a\\"', "[\\]",
]  # fmt: skip


@pytest.mark.parametrize("text", JSON_TEXTS)
def test_cap_args_json_errors_match_cnitool(
    text: str, upstream_reference: Reference, tmp_path: Path
) -> None:
    """CAP_ARGS is read before any plugin runs: Go's encoding/json message for each bad text
    (and acceptance of each good one that is an object or null), byte for byte."""
    assert upstream_reference.cnitool is not None
    confdir = tmp_path / "net.d"
    confdir.mkdir()
    conf = {"cniVersion": "1.0.0", "name": "j", "plugins": [{"type": "pycni-absent"}]}
    (confdir / "10-j.conflist").write_text(json.dumps(conf))
    env = {"PATH": os.environ["PATH"], "NETCONFPATH": str(confdir), "CAP_ARGS": text}
    env |= {"PYTHONPATH": os.pathsep.join(sys.path), "PYCNI_CACHE_DIR": str(tmp_path / "c")}
    seen = []
    for binary in (upstream_reference.cnitool, PYCNI):
        proc = subprocess.run(
            [str(binary), "frob", "j", "/run/netns/x"], env=env, capture_output=True, timeout=60
        )
        seen.append((proc.returncode, proc.stdout, proc.stderr))
    assert seen[1] == seen[0]


@pytest.mark.parametrize(
    "stdout",
    [
        '{"interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.2/24"}]}',  # no cniVersion
        "not json",
        '{"cniVersion":"9.9.9"}',
        '{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.300/24"}]}',
        '{"cniVersion":"1.0.0","ips":[{"address":"2001:DB8::1/64","gateway":"::FFFF:10.0.0.1"}]}',
        '{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.2/24","gateway":"10.1.0"}]}',
        '{"cniVersion":"0.4.0","routes":[{"dst":"10.0.0.0/33"}]}',
    ],
)
def test_odd_plugin_output_matches_cnitool(
    stdout: str,
    upstream_reference: Reference,
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    tmp_path: Path,
) -> None:
    """What a plugin prints that libcni must decode, re-encode or refuse (and its stderr on
    success, which both pass through)."""
    assert upstream_reference.cnitool is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "canned").write_text(CANNED)
    (bin_dir / "canned").chmod(0o755)
    (bin_dir / "canned.result").write_text(stdout)
    (bin_dir / "canned.ADD.stderr").write_text("a note\n")
    bench = Bench(node, pod_factory(), tmp_path, str(bin_dir), upstream_reference.cnitool)
    bench.write({"cniVersion": "1.0.0", "name": "canned", "plugins": [{"type": "canned"}]})
    pod = bench.pod.path
    seen = _compare(bench, [(["add", "canned", pod], {}), (["del", "canned", pod], {})])
    assert seen[0].stderr.startswith("a note\n")
