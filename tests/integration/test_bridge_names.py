"""Names and comments shared with the reference (vectors from its own tests), and sysctl paths."""

from __future__ import annotations

import ipaddress

from pycni.net import thread_sysctl
from pycni.net.netfilter import ipmasq
from pycni.net.netfilter.ipmasq import nft_backend as masq_nft


def test_masquerade_comment_and_hash_vectors() -> None:
    assert ipmasq.comment_for_instance("unit-test", "eth0", "one") == (
        "6fd94d501e58f0aa-287fc69eff0574a2, net: unit-test, if: eth0, id: one"
    )
    assert ipmasq.hash_for_instance("alternate", "net1", "three") == (
        "82783ef24bdc7036-acb19d111858e348"
    )
    assert ipmasq.chain_name("test", "1234") == "CNI-2bbe0c48b91a7d1b8a6753a8"
    assert ipmasq.iptables_comment("net", "id") == 'name: "net" id: "id"'
    assert len(ipmasq.comment_for_instance("n" * 200, "eth0", "c")) == 128


def test_masquerade_script_layout() -> None:
    ipn = ipaddress.ip_interface("192.168.1.1/24")
    script = masq_nft.nft_setup_script([ipn], "unit-test", "eth0", "one", [7])
    lines = script.splitlines()
    assert lines[0].startswith('add table inet cni_plugins_masquerade { comment "Masquerading')
    assert "postrouting { type nat hook postrouting priority 100 ; }" in lines[2]
    assert "delete rule inet cni_plugins_masquerade masq_checks handle 7" in lines
    assert lines[-1] == (
        "add rule inet cni_plugins_masquerade masq_checks ip saddr == 192.168.1.1 "
        'ip daddr != 192.168.1.0/24 masquerade comment "6fd94d501e58f0aa-287fc69eff0574a2, '
        'net: unit-test, if: eth0, id: one"'
    )


def test_sysctl_dotted_and_slashed_names() -> None:
    assert thread_sysctl.path_of("net.ipv4.ip_forward") == "/proc/sys/net/ipv4/ip_forward"
    assert thread_sysctl.path_of("net/ipv4/conf/eth0.100/arp_notify") == (
        "/proc/sys/net/ipv4/conf/eth0.100/arp_notify"
    )
    assert thread_sysctl.path_of("net.ipv4.conf.eth0/100.arp_notify") == (
        "/proc/sys/net/ipv4/conf/eth0.100/arp_notify"
    )
