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


TTL = 60.0


class Clock:
    """The tenures' clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tenures(live: set[int], clock: Clock | None = None) -> tuple[Tenures, list[int]]:
    asked: list[int] = []

    def alive(lease: int) -> bool:
        asked.append(lease)
        return lease in live

    return Tenures(alive, TTL, clock or Clock()), asked


def established(live: set[int]) -> tuple[Tenures, list[int], Clock]:
    """Tenures whose OWNER key (create revision 10) has been seen for a TTL."""
    clock = Clock()
    t, asked = tenures(live, clock)
    t.judge(kv(10, 10, OWNER), info())
    clock.now += TTL
    return t, asked, clock


def test_the_owners_renewal_path_may_change_where_it_is_routed() -> None:
    t, asked = tenures({OWNER})
    assert t.judge(kv(10, 10, OWNER), info()).info == info()
    moved = info("10.99.0.50", "02:00:00:00:00:99")
    verdict = t.judge(kv(10, 12, OWNER), moved)  # same create revision, same lease
    assert verdict.info == moved and verdict.refused is None
    assert asked == []  # nothing to ask etcd


def test_any_other_writer_is_refused_while_the_owners_lease_lives() -> None:
    t, _, _ = established({OWNER, OTHER})
    first = kv(10, 10, OWNER)
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
    through the owner's etcd lease (the owner lives throughout)."""
    t, _ = tenures({OWNER, OTHER})
    routed = info()
    t.judge(kv(1, 1, OWNER), routed)
    create = 1
    for mod, (recreated, lease, ip) in enumerate(versions, start=2):
        if recreated:
            create = mod
        verdict = t.judge(kv(create, mod, lease), info(ip))
        if lease == OWNER:  # the owner's lease: whatever the create revision
            routed = info(ip)
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


# --- issue 32 item 1: a deletion cannot leave a writer's tenure behind ----------------------

WRITER, AGAIN = 0x3333, 0x4444  # the writer's own lease; the owner's lease after re-leasing
WRITERS = info("10.99.0.66", "02:00:00:00:00:66")


def test_a_writers_short_lived_key_is_nobodys_once_deleted() -> None:
    """Revoke the owner's lease, put its key under the writer's lease, delete it 1.5 s
    later: the owner re-leases its subnet and is routed at once, never the writer."""
    live = {OWNER, WRITER}
    t, _, clock = established(live)
    live.discard(OWNER)  # revoked: etcd deletes the owner's key
    t.new_pass()
    assert t.judge(kv(20, 20, WRITER), WRITERS).info == WRITERS  # looks like a new node
    clock.now += 1.5
    t.new_pass()
    assert t.vanished(KEY).info is None  # deleted: the tenure ends with it
    live.add(AGAIN)
    verdict = t.judge(kv(30, 30, AGAIN), info())
    assert verdict.info == info() and verdict.refused is None


def test_a_put_over_someone_elses_key_ends_when_the_key_goes() -> None:
    """An agent that first sees the key after a writer's put under its own lease (the key
    was created by the owner's) routes by it; deleted, that tenure is gone at once."""
    clock = Clock()
    t, _ = tenures({OWNER, WRITER, AGAIN}, clock)
    assert t.judge(kv(10, 15, WRITER), WRITERS).info == WRITERS
    clock.now += 10 * TTL
    assert t.vanished(KEY).info is None
    assert t.judge(kv(40, 40, AGAIN), info()).info == info()


def test_a_deleted_key_is_held_for_at_most_two_thirds_of_a_ttl() -> None:
    """The live owner's key deleted by hand: routed as before (a writer's key in its place
    refused) until the owner writes it back, and never for a TTL."""
    t, _, clock = established({OWNER, WRITER})
    assert t.vanished(KEY).info == info()
    refused = t.judge(kv(20, 20, WRITER), WRITERS)
    assert refused.info == info() and refused.refused is not None
    clock.now += TTL * 0.6
    t.new_pass()
    assert t.judge(kv(20, 20, WRITER), WRITERS).info == info()
    # the owner writes it back under its lease: a new create revision, its tenure again
    back = t.judge(kv(21, 21, OWNER), info())
    assert back.info == info() and back.refused is None and t.held[KEY].gone is None
    # deleted again and never written back: after 2/3 TTL the route goes with the key
    assert t.vanished(KEY).info == info()
    clock.now += TTL * 0.7
    t.new_pass()
    assert t.vanished(KEY).info is None and KEY not in t.held
    assert t.judge(kv(22, 22, WRITER), WRITERS).info == WRITERS  # a new holder, at once


def test_a_new_nodes_key_has_no_grace_in_its_first_ttl() -> None:
    clock = Clock()
    t, _ = tenures({OWNER, WRITER}, clock)
    t.judge(kv(10, 10, OWNER), info())
    clock.now += TTL / 2
    assert t.vanished(KEY).info is None


def test_the_owners_key_taken_over_by_a_restart_keeps_its_grace() -> None:
    """A restarted agent deletes its old key and creates it under its new lease (same
    value): the tenure moves to the new lease, keeps its age, and holds the next deletion."""
    live = {OWNER, AGAIN}
    t, _, _clock = established(live)
    assert t.vanished(KEY).info == info()  # the restart's delete
    assert t.judge(kv(30, 30, AGAIN), info()).refused is None  # its create
    assert t.held[KEY].lease == AGAIN and t.held[KEY].created
    live.discard(OWNER)  # the old lease revoked
    t.new_pass()
    assert t.vanished(KEY).info == info()  # the grace holds for the new lease
    assert t.judge(kv(31, 31, WRITER), WRITERS).refused is not None


def test_the_agent_is_told_when_a_deleted_keys_hold_ends() -> None:
    t, _, clock = established({OWNER})
    assert t.next_expiry() is None
    deleted_at = clock.now
    t.vanished(KEY)
    assert t.next_expiry() == deleted_at + TTL * 2 / 3
    # the owner's value back without a lease (a copy): the key names the address again
    assert t.judge(kv(20, 20, 0), info()).info == info()
    assert t.next_expiry() is None
