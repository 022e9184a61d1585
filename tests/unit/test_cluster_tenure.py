"""Whose lease a key holds (``tenure``) and which of two leases keeps a VTEP MAC
(``validate.exclusive``): pure logic, with the etcd lease liveness answered by the test."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from pycni.cluster import validate
from pycni.cluster.etcd import KeyValue
from pycni.cluster.lease import LeaseInfo
from pycni.cluster.tenure import Tenures

KEY = "/p/subnets/10.244.1.0-24"
OWNER, OTHER = 0x1111, 0x2222


def kv(create: int, mod: int, lease: int) -> KeyValue:
    return KeyValue(KEY, b"", create, mod, lease)


def info(ip: str = "10.99.0.11", mac: str = "02:00:00:00:00:01") -> LeaseInfo:
    return LeaseInfo(ipaddress.IPv4Address(ip), "vxlan", {"VNI": 1, "VtepMAC": mac})


def tenures(live: set[int]) -> tuple[Tenures, list[int]]:
    asked: list[int] = []

    def alive(lease: int) -> bool:
        asked.append(lease)
        return lease in live

    return Tenures(alive), asked


def test_the_owners_renewal_path_may_change_where_it_is_routed() -> None:
    t, asked = tenures({OWNER})
    assert t.judge(kv(10, 10, OWNER), info()).info == info()
    moved = info("10.99.0.50", "02:00:00:00:00:99")
    verdict = t.judge(kv(10, 12, OWNER), moved)  # same create revision, same lease
    assert verdict.info == moved and verdict.refused is None
    assert asked == []  # nothing to ask etcd


def test_any_other_writer_is_refused_while_the_owners_lease_lives() -> None:
    t, _ = tenures({OWNER, OTHER})
    first = kv(10, 10, OWNER)
    t.judge(first, info())
    for version in (kv(10, 11, 0), kv(10, 12, OTHER), kv(13, 13, OTHER), kv(14, 14, 0)):
        verdict = t.judge(version, info("10.99.0.250"))
        assert verdict.info == info() and verdict.kv == first, version
        assert verdict.refused is not None and "1111" in verdict.refused
    # deleted, or garbage: still routed as before
    assert t.vanished(KEY).info == info()
    assert t.judge(kv(15, 15, 0), None).info == info()


def test_the_same_value_under_another_lease_changes_nothing() -> None:
    t, _ = tenures({OWNER, OTHER})
    t.judge(kv(10, 10, OWNER), info())
    verdict = t.judge(kv(10, 11, OTHER), info())  # a copy: routes the same way
    assert verdict.info == info() and verdict.refused is None
    # the copy's lease is no renewal path: a change through it is refused
    assert t.judge(kv(10, 12, OTHER), info("10.99.0.250")).refused is not None


def test_a_restarted_agent_takes_its_key_over_then_moves() -> None:
    live = {OWNER}
    t, _ = tenures(live)
    t.judge(kv(10, 10, OWNER), info())
    live.discard(OWNER)  # the old lease revoked by the takeover
    live.add(OTHER)
    t.new_pass()
    assert t.judge(kv(10, 11, OTHER), info()).refused is None
    moved = info(mac="02:00:00:00:00:77")
    assert t.judge(kv(10, 12, OTHER), moved).info == moved  # its renewal path now


def test_a_new_owner_after_the_lease_ended() -> None:
    live = {OWNER}
    t, _ = tenures(live)
    t.judge(kv(10, 10, OWNER), info())
    live.clear()
    t.new_pass()
    assert t.vanished(KEY).info is None  # expired: the key is gone, and so is its tenure
    assert KEY not in t.held
    newcomer = info("10.99.0.77")
    assert t.judge(kv(20, 20, OTHER), newcomer).info == newcomer


def test_liveness_is_asked_once_per_lease_per_pass() -> None:
    t, asked = tenures({OWNER})
    t.judge(kv(10, 10, OWNER), info())
    for mod in range(11, 15):
        t.judge(kv(10, mod, 0), info("10.99.0.250"))
    assert asked == [OWNER]
    t.new_pass()
    t.judge(kv(10, 20, 0), info("10.99.0.250"))
    assert asked == [OWNER, OWNER]


def test_a_lease_less_key_has_no_tenure_to_protect() -> None:
    t, asked = tenures(set())
    t.judge(kv(10, 10, 0), info())
    assert t.judge(kv(10, 11, 0), info("10.99.0.9")).info == info("10.99.0.9")
    assert 0 not in asked


@given(
    st.lists(
        st.tuples(
            st.booleans(),  # deleted and created again before this version
            st.sampled_from([0, OWNER, OTHER]),
            st.sampled_from(["10.99.0.11", "10.99.0.250"]),
        ),
        max_size=12,
    )
)
def test_while_the_owners_lease_lives_only_it_moves_the_route(
    versions: list[tuple[bool, int, str]],
) -> None:
    """Whatever sequence of writes follows, the route changes only with a version written
    through the owner's tenure: its etcd lease, and the create revision of the last version
    it wrote (the owner lives throughout)."""
    t, _ = tenures({OWNER, OTHER})
    routed, tenure = info(), 1
    t.judge(kv(1, 1, OWNER), routed)
    create = 1
    for mod, (recreated, lease, ip) in enumerate(versions, start=2):
        if recreated:
            create = mod
        verdict = t.judge(kv(create, mod, lease), info(ip))
        if lease == OWNER and (create == tenure or info(ip) == routed):
            routed, tenure = info(ip), create
        assert verdict.info == routed
        assert (verdict.refused is None) == (verdict.info == info(ip))


N = ipaddress.IPv4Network


def test_the_older_lease_keeps_a_vtep_mac() -> None:
    def claims(i: LeaseInfo) -> set[str]:
        return {f"VtepMAC {i.backend_data['VtepMAC']}"}

    remotes = {
        N("10.244.2.0/24"): info("10.99.0.12", "02:00:00:00:00:02"),
        N("10.244.3.0/24"): info("10.99.0.13", "02:00:00:00:00:02"),  # copies .2's MAC
        N("10.244.4.0/24"): info("10.99.0.14", "02:00:00:00:00:01"),  # this node's MAC
        N("10.244.5.0/24"): info("10.99.0.15", "02:00:00:00:00:05"),
    }
    created = {N("10.244.2.0/24"): 9, N("10.244.3.0/24"): 3, N("10.244.4.0/24"): 1}
    kept, refused = validate.exclusive(remotes, created, claims, {"VtepMAC 02:00:00:00:00:01"})
    assert set(kept) == {N("10.244.3.0/24"), N("10.244.5.0/24")}  # .3 is older than .2
    assert "older lease 10.244.3.0/24" in refused[N("10.244.2.0/24")]
    assert "this node's own" in refused[N("10.244.4.0/24")]
