"""dnsname's firewall rule (plugins/meta/dnsname/firewall.py) through skel on a FakeHost.

The rule goes to the node's filter table, here its FakeIptables (held to the real tools by
tests/netfilter/iptables_contract.py): inserted first in INPUT when the network's first name
is published, once, removed (every copy, nothing else) when the last one goes by DEL or GC,
and a failure at each step of a first ADD leaving the table as it was. The network's files
are the fake host's FakeStateFiles and dnsmasq a program of its FakeProcesses, as in
tests/plugins/dnsname/test_logic.py (whose stand-in this module uses); only the netfilter part
is asserted here.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from pycni.net.netfilter.iptables_script import IptablesError
from pycni.skel.fake_host import FakeHost
from tests.iptables_logic import iptables_of, netfilter_picture
from tests.plugin_logic import POD, call, recording_steps, with_prev
from tests.plugins.dnsname.test_logic import Dnsmasq

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
    "ips": [{"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 1}],
}
RULE = "-A INPUT -i cni0 -p udp -m udp --dport 53 -j ACCEPT"
OTHER = "-A INPUT -i eth9 -j ACCEPT"  # the node's own rule: never touched


def new_host(rules: tuple[str, ...] = (OTHER,)) -> FakeHost:
    fake = FakeHost()
    Dnsmasq(fake)  # dnsmasq installed in the fake host's FakeProcesses
    fake.add_pod(POD)
    node = fake.kernel()
    node.add_bridge("cni0")
    cni0 = node.find_link("cni0")
    assert cni0 is not None
    node.set_link(cni0.index, up=True)
    node.add_address(cni0.index, ipaddress.ip_interface("10.88.0.1/16"))
    if rules:
        iptables_of(fake).restore("\n".join(["*filter", *rules, "COMMIT", ""]))
    return fake


def conf(ip: str = "10.88.0.5") -> dict[str, Any]:
    config = {"cniVersion": "1.0.0", "name": "podnet", "type": "dnsname", "domainName": "d.test"}
    return with_prev(config, {**PREV, "ips": [{"address": f"{ip}/16", "interface": 1}]})


def run(
    host: FakeHost,
    tmp_path: Path,
    command: str,
    config: dict[str, Any],
    name: str = "web",
    cid: str = "",
    fail_at: str = "",
) -> tuple[int, Any]:
    extra = {"CNI_ARGS": f"K8S_POD_NAME={name}", "XDG_RUNTIME_DIR": str(tmp_path)}
    if cid:
        extra["CNI_CONTAINERID"] = cid
    return call(host, "dnsname", command, config, fail_at=fail_at, extra_env=extra)


def input_rules(host: FakeHost) -> list[str]:
    return iptables_of(host).save("filter").rules_of("INPUT")


def test_the_first_name_inserts_the_rule_first_and_a_second_adds_none(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    assert input_rules(host) == [RULE, OTHER]
    assert run(host, tmp_path, "ADD", conf("10.88.0.6"), name="db", cid="c2")[0] == 0
    assert input_rules(host) == [RULE, OTHER]
    assert iptables_of(host, POD).picture() == {}  # the node's table, not the pod's


def test_the_last_names_del_removes_every_copy_and_nothing_else(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    assert run(host, tmp_path, "ADD", conf("10.88.0.6"), name="db", cid="c2")[0] == 0
    iptables_of(host).restore(f"*filter\n{RULE}\nCOMMIT\n")  # a copy someone else appended
    assert run(host, tmp_path, "DEL", conf(), cid="")[0] == 0
    assert input_rules(host) == [RULE, OTHER, RULE]  # a name is left: the rule stays
    assert run(host, tmp_path, "DEL", conf("10.88.0.6"), name="db", cid="c2")[0] == 0
    assert input_rules(host) == [OTHER]


def test_gc_of_every_name_removes_the_rule(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    gc = {**conf(), "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
    assert run(host, tmp_path, "GC", gc)[0] == 0
    assert input_rules(host) == [OTHER]


def test_a_failed_removal_is_only_logged(tmp_path: Path) -> None:
    host = new_host()
    assert run(host, tmp_path, "ADD", conf())[0] == 0
    iptables_of(host).failures = [IptablesError("iptables-restore failed (4): busy")]
    assert run(host, tmp_path, "DEL", conf())[0] == 0  # the reference never removes it
    assert input_rules(host) == [RULE, OTHER]


def test_a_refused_insert_fails_the_add_and_leaves_the_table(tmp_path: Path) -> None:
    host = new_host()
    before = netfilter_picture(host)
    iptables_of(host).failures = [IptablesError("iptables-restore failed (4): busy")]
    code, reply = run(host, tmp_path, "ADD", conf())
    assert code != 0 and "busy" in reply["msg"], reply
    assert netfilter_picture(host) == before


@pytest.mark.parametrize("rules", [(OTHER,), ()], ids=["beside-a-rule", "empty"])
def test_a_failure_at_each_step_of_a_first_add_leaves_the_table_as_it_was(
    tmp_path: Path, rules: tuple[str, ...]
) -> None:
    with recording_steps() as steps:
        assert run(new_host(rules), tmp_path / "probe", "ADD", conf())[0] == 0
    assert steps == ["conf", "firewall", "hosts", "record", "dnsmasq"]
    for step in steps:
        host = new_host(rules)
        before = netfilter_picture(host)
        code, reply = run(host, tmp_path / step, "ADD", conf(), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert netfilter_picture(host) == before, step
