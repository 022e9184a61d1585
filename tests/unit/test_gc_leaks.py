"""How GC decides (pycni.inspect.leaks): only evidence that an attachment is gone, and age."""

from __future__ import annotations

from pathlib import Path

import pytest

from pycni.inspect.leaks import find_leaks
from pycni.inspect.model import Attachment, NodeState, PodLink, PortMapping, Reservation, Veth
from pycni.inspect.nftmap import owner_chain

NOW = 1_000_000.0
GRACE = 600.0
OLD = NOW - GRACE - 1
YOUNG = NOW - 5


def _state(tmp_path: Path, **kw: object) -> NodeState:
    state = NodeState(
        netns="node",
        conf_dir=str(tmp_path / "conf"),
        cache_dir=str(tmp_path / "cache"),
        data_dir=str(tmp_path / "data"),
        addresses_complete=True,
        peers_complete=True,
        live_namespaces=3,
    )
    for key, value in kw.items():
        setattr(state, key, value)
    return state


def _att(cid: str, *, alive: bool, at: float = OLD, netns: str | None = None) -> Attachment:
    return Attachment(
        network="net",
        container_id=cid,
        ifname="eth0",
        netns=f"/run/netns/{cid}" if netns is None else netns,
        netns_exists=alive,
        cache_file=f"/cache/results/net-{cid}-eth0",
        cached_at=at,
    )


def _res(ip: str, cid: str, ifname: str = "eth0", at: float = OLD) -> Reservation:
    return Reservation("net", ip, cid, ifname, f"/data/net/{ip}", at)


def _kinds(leaks: list[object]) -> list[tuple[str, str]]:
    return [(leak.kind, leak.subject) for leak in leaks]  # type: ignore[attr-defined]


def test_a_reservation_without_cache_whose_address_is_live_is_kept(tmp_path: Path) -> None:
    state = _state(
        tmp_path,
        reservations=[_res("10.0.0.2", "no-cache-runtime")],
        live_addresses={"10.0.0.2": ["pid 4242"]},
    )
    assert find_leaks(state, grace=GRACE, now=NOW) == []


def test_a_reservation_without_cache_and_unused_address_goes_only_when_old(
    tmp_path: Path,
) -> None:
    young = _state(tmp_path, reservations=[_res("10.0.0.2", "adding", at=YOUNG)])
    assert find_leaks(young, grace=GRACE, now=NOW) == []  # an ADD in progress
    old = _state(tmp_path, reservations=[_res("10.0.0.2", "crashed")])
    (leak,) = find_leaks(old, grace=GRACE, now=NOW)
    assert (leak.kind, leak.subject, leak.container_id) == (
        "reservation",
        "/data/net/10.0.0.2",
        "crashed",
    )
    assert "no cached attachment" in leak.reason and "3 live network namespaces" in leak.reason


def test_an_incomplete_namespace_scan_frees_no_unowned_reservation(tmp_path: Path) -> None:
    state = _state(tmp_path, reservations=[_res("10.0.0.2", "crashed")], addresses_complete=False)
    assert find_leaks(state, grace=GRACE, now=NOW) == []


def test_cached_attachment_with_live_namespace_keeps_its_reservation_even_if_unused(
    tmp_path: Path,
) -> None:
    state = _state(
        tmp_path,
        attachments=[_att("pod", alive=True)],
        reservations=[_res("10.0.0.2", "pod")],
    )
    assert find_leaks(state, grace=GRACE, now=NOW) == []


def test_cached_attachment_without_netns_is_never_proven_gone(tmp_path: Path) -> None:
    state = _state(
        tmp_path,
        attachments=[_att("pod", alive=False, netns="")],
        reservations=[_res("10.0.0.2", "pod")],
        live_addresses={"10.0.0.2": ["x"]},
    )
    assert find_leaks(state, grace=GRACE, now=NOW) == []


def test_dead_namespace_frees_attachment_and_reservation_after_the_grace_period(
    tmp_path: Path,
) -> None:
    young = _state(
        tmp_path,
        attachments=[_att("pod", alive=False, at=YOUNG)],
        reservations=[_res("10.0.0.2", "pod")],
        live_addresses={"10.0.0.2": ["elsewhere"]},
    )
    assert find_leaks(young, grace=GRACE, now=NOW) == []
    old = _state(
        tmp_path,
        attachments=[_att("pod", alive=False)],
        reservations=[_res("10.0.0.2", "pod")],
        live_addresses={"10.0.0.9": ["another pod"]},
    )
    leaks = find_leaks(old, grace=GRACE, now=NOW)
    assert _kinds(leaks) == [
        ("attachment", "/cache/results/net-pod-eth0"),
        ("reservation", "/data/net/10.0.0.2"),
    ]
    assert "namespace /run/netns/pod is gone" in leaks[0].reason


@pytest.mark.parametrize("where", ["cached result", "reservation"])
def test_a_vanished_path_is_no_evidence_while_the_address_is_configured_somewhere(
    tmp_path: Path, where: str
) -> None:
    """`ip netns del` with a process inside, a namespace held by an fd only: path gone,
    namespace alive. Neither the attachment nor its reservation goes."""
    att = _att("pod", alive=False)
    if where == "cached result":
        att.ips = ["10.0.0.7/24"]
    state = _state(
        tmp_path,
        attachments=[att],
        reservations=[_res("10.0.0.2", "pod")] if where == "reservation" else [],
        live_addresses={"10.0.0.7" if where == "cached result" else "10.0.0.2": ["pid 4242"]},
    )
    assert find_leaks(state, grace=GRACE, now=NOW) == []


def test_a_vanished_path_is_no_evidence_while_its_host_veth_has_a_pod_end(
    tmp_path: Path,
) -> None:
    att = _att("pod", alive=False)
    att.host_interfaces = ["veth1"]
    state = _state(tmp_path, attachments=[att], veths=[_veth(None, nsid=3)], peers_complete=False)
    assert find_leaks(state, grace=GRACE, now=NOW) == []
    gone = _state(tmp_path, attachments=[att], veths=[], peers_complete=False)
    assert _kinds(find_leaks(gone, grace=GRACE, now=NOW)) == [
        ("attachment", "/cache/results/net-pod-eth0")
    ]


def test_an_incomplete_scan_makes_nothing_a_leak(tmp_path: Path) -> None:
    state = _state(
        tmp_path,
        attachments=[_att("pod", alive=False)],
        reservations=[_res("10.0.0.2", "pod"), _res("10.0.0.3", "", "")],
        addresses_complete=False,
    )
    assert find_leaks(state, grace=GRACE, now=NOW) == []


def test_legacy_id_only_reservation_follows_any_attachment_of_the_container(
    tmp_path: Path,
) -> None:
    live = _state(
        tmp_path,
        attachments=[_att("pod", alive=True)],
        reservations=[_res("10.0.0.2", "pod", ifname="")],
    )
    assert find_leaks(live, grace=GRACE, now=NOW) == []
    dead = _state(
        tmp_path,
        attachments=[_att("pod", alive=False)],
        reservations=[_res("10.0.0.2", "pod", ifname="")],
    )
    assert ("reservation", "/data/net/10.0.0.2") in _kinds(find_leaks(dead, grace=GRACE, now=NOW))


def test_an_empty_reservation_file_goes_after_the_grace_period(tmp_path: Path) -> None:
    state = _state(
        tmp_path,
        reservations=[
            _res("10.0.0.2", "", ""),
            _res("10.0.0.3", "", "", at=YOUNG),
            _res("10.0.0.4", "", ""),  # configured in a live namespace: kept
        ],
        live_addresses={"10.0.0.4": ["x"]},
    )
    (leak,) = find_leaks(state, grace=GRACE, now=NOW)
    assert leak.subject == "/data/net/10.0.0.2" and "empty" in leak.reason


def _veth(peer: PodLink | None, nsid: int | None = 3) -> Veth:
    return Veth(name="veth1", index=9, master="cni0", peer_index=2, peer_netnsid=nsid, peer=peer)


def test_a_veth_goes_only_when_its_pod_end_is_in_no_live_namespace(tmp_path: Path) -> None:
    from pycni.inspect.model import Network

    nets = [Network(name="net", file="f", bridge="cni0")]
    found = PodLink("pid 77", "/proc/77/ns/net", "eth0", 2)
    assert find_leaks(_state(tmp_path, networks=nets, veths=[_veth(found)]), now=NOW) == []
    both_here = _state(tmp_path, networks=nets, veths=[_veth(None, nsid=None)])
    assert find_leaks(both_here, now=NOW) == []
    hidden = _state(tmp_path, networks=nets, veths=[_veth(None)], peers_complete=False)
    assert find_leaks(hidden, now=NOW) == []  # an opaque process might hold it
    (leak,) = find_leaks(_state(tmp_path, networks=nets, veths=[_veth(None)]), now=NOW)
    assert leak.kind == "veth" and "no live namespace" in leak.reason
    foreign = _state(tmp_path, networks=nets, veths=[Veth(name="v", index=1, master="docker0")])
    assert find_leaks(foreign, now=NOW) == []


def _mapping(owner: str, target: str = "10.0.0.2") -> PortMapping:
    return PortMapping("inet", "pycni_portmap", "c", 5, "tcp", 8080, target, 80, owner=owner)


@pytest.mark.parametrize("owner_is_chain", [False, True])
def test_mappings_follow_their_owner_else_their_target(
    tmp_path: Path, owner_is_chain: bool
) -> None:
    def owner(cid: str) -> str:
        return owner_chain("net", cid, "eth0") if owner_is_chain else cid

    live = _state(
        tmp_path, attachments=[_att("a", alive=True)], port_mappings=[_mapping(owner("a"))]
    )
    assert find_leaks(live, grace=GRACE, now=NOW) == []  # even though 10.0.0.2 is nowhere
    dead = _state(
        tmp_path,
        attachments=[_att("d", alive=False)],
        port_mappings=[_mapping(owner("d"))],
        live_addresses={"10.0.0.2": ["x"]},
    )
    assert [leak.kind for leak in find_leaks(dead, grace=GRACE, now=NOW)] == [
        "attachment",
        "mapping",
    ]
    unowned_live = _state(
        tmp_path, port_mappings=[_mapping("nobody")], live_addresses={"10.0.0.2": ["x"]}
    )
    assert find_leaks(unowned_live, grace=GRACE, now=NOW) == []
    unowned_dead = _state(tmp_path, port_mappings=[_mapping("nobody")])
    (leak,) = find_leaks(unowned_dead, grace=GRACE, now=NOW)
    assert leak.kind == "mapping" and "no live network namespace has 10.0.0.2" in leak.reason


def test_writers_temp_files_go_after_the_grace_period(tmp_path: Path) -> None:
    import os

    results = tmp_path / "cache" / "results"
    store = tmp_path / "data" / "net"
    results.mkdir(parents=True)
    store.mkdir(parents=True)
    old = [results / ".pycni-tmp-abc", store / "last_reserved_ip.tmp-xyz"]
    young = [results / ".pycni-tmp-new"]
    kept = [results / "net-c-eth0", store / "last_reserved_ip.0", store / "lock"]
    for path in old + young + kept:
        path.write_bytes(b"x")
    for path in old:
        os.utime(path, (OLD, OLD))
    for path in young:
        os.utime(path, (YOUNG, YOUNG))
    state = _state(tmp_path, store_dirs=[str(store)])
    leaks = find_leaks(state, grace=GRACE, now=NOW)
    assert sorted(leak.subject for leak in leaks) == sorted(str(p) for p in old)
    assert all(leak.kind == "temp" for leak in leaks)


def test_nsfs_mount_points_are_read_from_mountinfo() -> None:
    from pycni.net.nsscan import nsfs_mount_points

    text = (
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "610 29 0:4 net:[4026532290] /run/netns/pod1 rw shared:5 - nsfs nsfs rw\n"
        "611 29 0:4 net:[4026532291] /run/netns/with\\040space rw - nsfs nsfs rw\n"
        "612 29 0:4 mnt:[4026532292] /run/mntns/x rw - nsfs nsfs rw\n"
    )
    assert nsfs_mount_points(text) == ["/run/netns/pod1", "/run/netns/with space"]


def test_proc_net_addresses_reads_fib_trie_and_if_inet6(tmp_path: Path) -> None:
    from pycni.net.nsscan import proc_net_addresses

    (tmp_path / "fib_trie").write_text(
        "Main:\n"
        "  +-- 0.0.0.0/0 3 0 5\n"
        "     |-- 10.93.0.0\n"
        "        /24 link UNICAST\n"
        "     |-- 10.93.0.7\n"
        "        /32 host LOCAL\n"
        "Local:\n"
        "     |-- 10.93.0.7\n"
        "        /32 host LOCAL\n"
    )
    (tmp_path / "if_inet6").write_text("fd000000000000000000000000000002 02 40 00 80     eth0\n")
    assert proc_net_addresses(str(tmp_path)) == ["10.93.0.7", "fd00::2"]


def test_an_opaque_init_is_one_plain_note_not_a_problem() -> None:
    """A process even root may not look into (this VM's init) is nothing a user can act on:
    one note saying what it means, never a line under Problems."""
    from pycni.net.nsscan import opaque_note

    assert opaque_note({}) is None
    one = opaque_note({"pid 1": ["10.0.0.1"]})
    assert one is not None and one.startswith("pid 1 hides its namespaces even from root")
    assert one.endswith("nothing to do")
    two = opaque_note({"pid 57": [], "pid 1": []})
    assert two is not None and two.startswith("pid 1, pid 57 hide their namespaces")
