"""The firewall plugin's nftables backend through skel on the fake host's FakeNftables: no root.

What each verb leaves in ``inet pycni_firewall`` (read back as the kernel answers, held to it by
tests/netfilter/nft_contract.py): the skeleton chains and the network's chain and sets, one
element per address commented with the attachment, the isolation chains of ingressPolicy, DEL
and GC by comment, CHECK seeing a missing element, and a failure injected at each step of ADD
leaving the ruleset as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pycni.net.netfilter import model
from pycni.net.netfilter.ipmasq import hash_for_instance
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD, call, failed, picture, recording_steps, with_prev

TABLE = "inet pycni_firewall"


def prev(*addresses: str) -> dict[str, Any]:
    ips = addresses or ("10.22.0.5/16", "fd22::5/64")
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": POD}],
        "ips": [{"address": a, "interface": 2} for a in ips],
    }


def conf(tmp_path: Path, result: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    config = {
        "cniVersion": "1.1.0",
        "name": "fwnet",
        "type": "firewall",
        "backend": "nftables",
        "dataDir": str(tmp_path),
        **extra,
    }
    return with_prev(config, result) if result is not None else config


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def ruleset(host: FakeHost) -> model.Ruleset:
    with host.node() as kernel:
        return model.parse(host.netfilter(kernel).nft.query(f"list table {TABLE}"))


def elements(host: FakeHost) -> list[tuple[str, str]]:
    """(address, the attachment hash of its comment) of every pod address element."""
    return sorted(
        (str(e.key), e.comment.split(",")[0]) for s in ruleset(host).sets for e in s.elements
    )


def attachment(cid: str) -> str:
    return hash_for_instance("fwnet", "eth0", cid)


def run(host: FakeHost, command: str, config: dict[str, Any], cid: str = "c1", **kw: Any) -> Any:
    return call(host, "firewall", command, config, extra_env={"CNI_CONTAINERID": cid}, **kw)


def test_add_check_del_check(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev()))[0] == 0
    found = ruleset(host)
    assert {"forward", "admin", "pods", "isolation_stage1", "isolation_stage2"} <= {
        c.name for c in found.chains
    }
    forward = next(c for c in found.chains if c.name == "forward")
    assert (forward.type, forward.hook, forward.policy) == ("filter", "forward", "accept")
    assert elements(host) == [("10.22.0.5", attachment("c1")), ("fd22::5", attachment("c1"))]
    assert run(host, "CHECK", conf(tmp_path, prev()))[0] == 0
    assert run(host, "DEL", conf(tmp_path, prev()))[0] == 0
    assert elements(host) == []
    code, reply = run(host, "CHECK", conf(tmp_path, prev()))
    assert code == 1 and "missing" in reply["msg"], reply
    assert run(host, "DEL", conf(tmp_path, prev()))[0] == 0  # again: nothing to remove


def test_del_and_gc_keep_the_other_attachments(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, "ADD", conf(tmp_path, prev()))[0] == 0
    assert run(host, "ADD", conf(tmp_path, prev("10.22.0.6/16")), cid="c2")[0] == 0
    assert run(host, "ADD", conf(tmp_path, prev("10.22.0.7/16")), cid="c3")[0] == 0
    assert run(host, "DEL", conf(tmp_path), cid="c3")[0] == 0  # no prevResult: by comment
    assert ("10.22.0.7", attachment("c3")) not in elements(host)
    gc = conf(tmp_path)
    gc["cni.dev/valid-attachments"] = [{"containerID": "c1", "ifname": "eth0"}]
    assert run(host, "GC", gc)[0] == 0
    assert elements(host) == [("10.22.0.5", attachment("c1")), ("fd22::5", attachment("c1"))]


def test_isolation_chains_of_the_bridge(tmp_path: Path) -> None:
    host = new_host()
    config = conf(tmp_path, prev(), ingressPolicy="isolated")
    assert run(host, "ADD", config)[0] == 0
    found = ruleset(host)
    iso = sorted(c.name for c in found.chains if c.name.startswith(("iso1-", "iso2-")))
    assert [n.split("-")[0] for n in iso] == ["iso1", "iso2"]
    stage1 = [r for r in found.rules if r.chain == "isolation_stage1"]
    assert [r.jumps_to(iso[0]) for r in stage1] == [True]
    assert len([r for r in found.rules if r.chain == iso[0]]) == 2  # isolated: two rules
    assert run(host, "ADD", config, cid="c2")[0] == 0  # a second pod: no second jump
    assert len([r for r in ruleset(host).rules if r.chain == "isolation_stage1"]) == 1


def test_an_admin_chain_nftables_cannot_name_is_refused(tmp_path: Path) -> None:
    host = new_host()
    message = failed(host, "firewall", "ADD", conf(tmp_path, prev(), iptablesAdminChainName="1x"))
    assert "iptablesAdminChainName" in message


@pytest.mark.parametrize("first", [True, False], ids=["fresh", "beside-another-pod"])
def test_a_failure_at_each_step_leaves_the_ruleset_as_it_was(tmp_path: Path, first: bool) -> None:
    host = new_host()
    if not first:
        assert run(host, "ADD", conf(tmp_path, prev("10.22.0.9/16")), cid="other")[0] == 0
    with recording_steps() as steps:
        assert run(host, "ADD", conf(tmp_path, prev()))[0] == 0
    assert steps == ["nftables"]
    assert run(host, "DEL", conf(tmp_path, prev()))[0] == 0
    before = picture(host)
    for step in steps:
        code, reply = run(host, "ADD", conf(tmp_path, prev()), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert picture(host) == before, step
