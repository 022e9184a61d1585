"""net/netfilter/conntrack.py against the kernel's conntrack table: deleting by original destination
port removes exactly the entries of that protocol, family and port, in the calling thread's
namespace, through nfnetlink (no pyroute2, no conntrack binary)."""

from __future__ import annotations

import pytest

from pycni.net.netfilter.conntrack import delete_by_dst_port
from tests import harness

pytestmark = pytest.mark.kernel


def insert(ns: harness.Namespace, proto: str, src: str, dst: str, sport: int, dport: int) -> None:
    ns.run(
        "conntrack", "-I", "-p", proto, "-s", src, "-d", dst, "--sport", str(sport),
        "--dport", str(dport), "--timeout", "300",
        *(["--state", "ESTABLISHED"] if proto == "tcp" else []),
    )  # fmt: skip


def entries(ns: harness.Namespace) -> set[tuple[str, str, str]]:
    """(protocol, original source, original destination port) of every entry."""
    out = set()
    for line in ns.run("conntrack", "-L", check=False).stdout.splitlines():
        fields = line.split()
        if not fields:
            continue
        src = next(f for f in fields if f.startswith("src="))
        dport = next(f for f in fields if f.startswith("dport="))
        out.add((fields[0], src[4:], dport[6:]))
    return out


def test_delete_by_dst_port_removes_only_that_port_protocol_and_family(
    node: harness.Namespace, pod_factory: object
) -> None:
    insert(node, "udp", "10.1.0.1", "10.1.0.2", 1000, 8080)
    insert(node, "udp", "10.1.0.3", "10.1.0.2", 1001, 8080)
    insert(node, "udp", "10.1.0.1", "10.1.0.2", 1002, 8081)
    insert(node, "tcp", "10.1.0.1", "10.1.0.2", 1003, 8080)
    insert(node, "udp", "fd00::1", "fd00::2", 1004, 8080)
    pod = pod_factory()  # type: ignore[operator]
    insert(pod, "udp", "10.1.0.1", "10.1.0.2", 1000, 8080)  # another namespace: not touched
    with node.entered():
        assert delete_by_dst_port([8080, 9999], "udp", 4) == 2
    assert entries(node) == {
        ("udp", "10.1.0.1", "8081"),
        ("tcp", "10.1.0.1", "8080"),
        ("udp", "fd00::1", "8080"),
    }
    assert entries(pod) == {("udp", "10.1.0.1", "8080")}
    with node.entered():
        assert delete_by_dst_port([8080], "udp", 6) == 1
        assert delete_by_dst_port([8080], "udp", 6) == 0
        assert delete_by_dst_port([], "udp", 4) == 0
    assert entries(node) == {("udp", "10.1.0.1", "8081"), ("tcp", "10.1.0.1", "8080")}


def test_delete_by_address_removes_what_the_address_sent_or_answers(
    node: harness.Namespace,
) -> None:
    import ipaddress

    from pycni.net.netfilter.conntrack import delete_by_address

    pod, other = "10.2.0.5", "10.2.0.6"
    insert(node, "udp", pod, "192.0.2.9", 1000, 53)  # the pod's own flow
    node.run(  # a flow to a host port, DNATed to the pod: the pod is the reply's source
        "conntrack", "-I", "-p", "udp", "-s", "192.0.2.9", "-d", "192.0.2.1", "--sport",
        "2000", "--dport", "8081", "-r", pod, "-q", "192.0.2.9", "--reply-port-src", "81",
        "--reply-port-dst", "2000", "--timeout", "300",
    )  # fmt: skip
    insert(node, "udp", other, "192.0.2.9", 1001, 53)
    insert(node, "tcp", pod, "192.0.2.9", 1002, 80)  # UDP only
    insert(node, "udp", "fd00::5", "fd00::9", 1003, 53)
    with node.entered():
        assert delete_by_address(ipaddress.ip_address(pod).packed, "udp") == 2
        assert delete_by_address(ipaddress.ip_address(pod).packed, "udp") == 0
    assert entries(node) == {
        ("udp", other, "53"),
        ("tcp", pod, "80"),
        ("udp", "fd00::5", "53"),
    }
    with node.entered():
        assert delete_by_address(ipaddress.ip_address("fd00::5").packed, "udp") == 1
    assert ("udp", "fd00::5", "53") not in entries(node)
