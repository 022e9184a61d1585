"""The firewall plugin's iptables backend through skel on a FakeHost: no root, no namespace.

The node's filter tables are its FakeIptables (pycni.net.netfilter.fake_iptables, held to the
real tools by tests/netfilter/iptables_contract.py): ADD then CHECK, a failure injected at each
step leaving the tables (and the record directory) as they were, on a fresh node and beside
another pod's rules; DEL and GC, which also run the nftables backend's cleanup (on the same
host's FakeNftables).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pycni.skel.fake_host import FakeHost
from tests.iptables_logic import iptables_of, whole_picture
from tests.plugin_logic import POD, call, recording_steps, with_prev

FORWARD_JUMP = '-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD'
ADMIN_JUMP = (
    '-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN'
)


def prev(v4: str = "10.22.0.5", v6: str = "fd22::5") -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
        "ips": [
            {"address": f"{v4}/16", "interface": 1},
            {"address": f"{v6}/64", "interface": 1},
        ],
    }


def conf(tmp_path: Path, result: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    config = {
        "cniVersion": "1.1.0",
        "name": "fwnet",
        "type": "firewall",
        "backend": "iptables",
        "dataDir": str(tmp_path),
        **extra,
    }
    return with_prev(config, result) if result is not None else config


def files(host: FakeHost, tmp_path: Path) -> list[str]:
    """The files under ``tmp_path`` in the fake host's state files (the records)."""
    prefix = f"{tmp_path}/"
    return sorted(p[len(prefix) :] for p in host.files.files if p.startswith(prefix))


def run(
    host: FakeHost, command: str, config: dict[str, Any], cid: str = "", fail_at: str = ""
) -> tuple[int, Any]:
    extra = {"CNI_CONTAINERID": cid} if cid else {}
    return call(host, "firewall", command, config, fail_at=fail_at, extra_env=extra)


def new_host() -> FakeHost:
    fake = FakeHost()
    fake.add_pod(POD)
    return fake


def ip_rules(v4: str, v6: str) -> tuple[list[str], list[str]]:
    accept = "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    return (
        [f"-A CNI-FORWARD -d {v4}/32 {accept}", f"-A CNI-FORWARD -s {v4}/32 -j ACCEPT"],
        [f"-A CNI-FORWARD -d {v6}/128 {accept}", f"-A CNI-FORWARD -s {v6}/128 -j ACCEPT"],
    )


def test_add_writes_the_references_chains_per_family_and_check_finds_them(
    tmp_path: Path,
) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev()))[0] == 0
    ipt = iptables_of(host)
    v4, v6 = ip_rules("10.22.0.5", "fd22::5")
    for family, rules in ((4, v4), (6, v6)):
        saved = ipt.save("filter", family)
        assert {"CNI-FORWARD", "CNI-ADMIN"} <= saved.chains
        assert saved.rules_of("FORWARD") == [FORWARD_JUMP]
        assert saved.rules_of("CNI-FORWARD") == [ADMIN_JUMP, *rules]
    assert [script.count("\n") > 0 for script, _f, _v in ipt.restores] == [True, True]
    assert files(host, tmp_path)  # the attachment's record, for GC
    assert run(host, "CHECK", conf(tmp_path, prev()))[0] == 0
    iptables_of(host).restore(f"*filter\n-D {v4[1][3:]}\nCOMMIT\n", 4)  # someone removes one
    code, reply = run(host, "CHECK", conf(tmp_path, prev()))
    assert code == 1 and "not found" in reply["msg"], reply


def test_a_second_pod_adds_only_its_rules(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev()), cid="one")[0] == 0
    assert run(host, "ADD", conf(tmp_path, prev("10.22.0.6", "fd22::6")), cid="two")[0] == 0
    saved = iptables_of(host).save("filter", 4)
    assert saved.rules_of("FORWARD") == [FORWARD_JUMP]
    first, second = ip_rules("10.22.0.5", "fd22::5")[0], ip_rules("10.22.0.6", "fd22::6")[0]
    assert saved.rules_of("CNI-FORWARD") == [ADMIN_JUMP, *first, *second]


def test_isolation_chains_for_an_isolated_bridge(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev(), ingressPolicy="isolated"))[0] == 0
    saved = iptables_of(host).save("filter", 4)
    assert {"CNI-ISOLATION-STAGE-1", "CNI-ISOLATION-STAGE-2"} <= saved.chains
    stage1 = saved.rules_of("CNI-ISOLATION-STAGE-1")
    assert any("-i cni0 ! -o cni0" in r and r.endswith("-j CNI-ISOLATION-STAGE-2") for r in stage1)
    assert any("-i cni0 -o cni0" in r and r.endswith("-j DROP") for r in stage1)
    assert saved.rules_of("CNI-ISOLATION-STAGE-2")[0].startswith("-A CNI-ISOLATION-STAGE-2 -o cni0")


def test_a_failure_at_each_step_of_a_first_add_leaves_nothing(tmp_path: Path) -> None:
    with recording_steps() as steps:
        assert run(new_host(), "ADD", conf(tmp_path / "probe", prev()))[0] == 0
    assert steps == ["iptables4", "iptables6", "record"]
    for step in steps:
        host = new_host()
        data = tmp_path / step
        before = whole_picture(host)
        code, reply = run(
            host, "ADD", conf(data, prev(), ingressPolicy="same-bridge"), fail_at=step
        )
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert whole_picture(host) == before, step  # chains, jumps and rules of both families
        assert files(host, data) == [], step


def test_a_failure_at_each_step_beside_another_pod_keeps_that_pods_rules(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev("10.22.0.9", "fd22::9")), cid="other")[0] == 0
    before, before_files = whole_picture(host), files(host, tmp_path)
    for step in ("iptables4", "iptables6", "record"):
        code, reply = run(host, "ADD", conf(tmp_path, prev()), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert whole_picture(host) == before, step
        assert files(host, tmp_path) == before_files, step


def test_a_refused_restore_is_a_cni_error_and_changes_nothing(tmp_path: Path) -> None:
    host = new_host()
    ipt = iptables_of(host)
    ipt.variants = set()  # the tools are missing here
    before = whole_picture(host)
    code, reply = run(host, "ADD", conf(tmp_path, prev()))
    assert code == 1 and "not installed" in reply["msg"], reply
    assert whole_picture(host) == before


def test_del_removes_the_pods_rules_and_keeps_the_chains(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev()))[0] == 0
    assert run(host, "DEL", conf(tmp_path, prev()))[0] == 0
    for family in (4, 6):
        saved = iptables_of(host).save("filter", family)
        assert saved.rules_of("CNI-FORWARD") == [ADMIN_JUMP]  # chains and jumps stay
        assert saved.rules_of("FORWARD") == [FORWARD_JUMP]
    code, reply = run(host, "CHECK", conf(tmp_path, prev()))
    assert code == 1 and "not found" in reply["msg"], reply
    assert run(host, "DEL", conf(tmp_path, prev()))[0] == 0  # again: nothing to remove
    assert files(host, tmp_path) == []


def test_gc_removes_only_the_rules_of_attachments_no_longer_valid(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev()), cid="keep")[0] == 0
    assert run(host, "ADD", conf(tmp_path, prev("10.22.0.6", "fd22::6")), cid="gone")[0] == 0
    gc = conf(tmp_path)
    gc["cni.dev/valid-attachments"] = [{"containerID": "keep", "ifname": "eth0"}]
    assert run(host, "GC", gc)[0] == 0
    v4, v6 = ip_rules("10.22.0.5", "fd22::5")
    assert iptables_of(host).save("filter", 4).rules_of("CNI-FORWARD") == [ADMIN_JUMP, *v4]
    assert iptables_of(host).save("filter", 6).rules_of("CNI-FORWARD") == [ADMIN_JUMP, *v6]
    assert run(host, "CHECK", conf(tmp_path, prev()), cid="keep")[0] == 0


@pytest.mark.parametrize("variant", ["legacy", "nft"])
def test_the_systems_variant_holds_the_rules(tmp_path: Path, variant: str) -> None:
    """firewall writes with the system's iptables (variant None): the fake's default."""
    host = new_host()
    iptables_of(host).default = variant
    assert run(host, "ADD", conf(tmp_path, prev()))[0] == 0
    assert [key.split()[0] for key in iptables_of(host).picture()] == [variant, variant]
