"""Per-container lanes: order, bounds per container and in total, dropping waiting calls."""

from __future__ import annotations

from pycni.daemon.lanes import Admission, Lanes
from pycni.daemon.peer import CAP_NET_ADMIN, CAP_SYS_ADMIN, missing_caps


def test_one_call_per_container_runs_the_rest_wait_in_order() -> None:
    lanes: Lanes[str] = Lanes(max_per_container=3, max_total=10)
    assert lanes.admit("a", "a1") is Admission.RUN
    assert lanes.admit("a", "a2") is Admission.WAIT
    assert lanes.admit("b", "b1") is Admission.RUN
    assert lanes.admit("a", "a3") is Admission.WAIT
    assert lanes.admit(None, "v") is Admission.RUN  # no container (VERSION): never waits
    assert lanes.waiting() == 2 and lanes.total == 5
    assert lanes.finish("a") == "a2"
    assert lanes.finish("a") == "a3"
    assert lanes.finish("a") is None
    assert lanes.admit("a", "a4") is Admission.RUN  # the lane was emptied and removed
    assert lanes.total == 3


def test_bounds_per_container_and_in_total() -> None:
    lanes: Lanes[str] = Lanes(max_per_container=2, max_total=3)
    assert lanes.admit("a", "a1") is Admission.RUN
    assert lanes.admit("a", "a2") is Admission.WAIT
    assert lanes.admit("a", "a3") is Admission.CONTAINER_FULL
    assert lanes.admit("b", "b1") is Admission.RUN
    assert lanes.admit("c", "c1") is Admission.TOTAL_FULL
    assert lanes.admit(None, "v") is Admission.TOTAL_FULL
    assert lanes.total == 3  # refused calls are not counted


def test_dropping_a_waiting_call_frees_its_place() -> None:
    lanes: Lanes[str] = Lanes(max_per_container=2, max_total=10)
    lanes.admit("a", "a1")
    lanes.admit("a", "a2")
    assert lanes.drop("a", "a2") is True
    assert lanes.drop("a", "a2") is False  # only once
    assert lanes.drop("a", "a1") is False  # the running call is not waiting
    assert lanes.admit("a", "a3") is Admission.WAIT
    assert lanes.finish("a") == "a3"
    assert lanes.total == 1


def test_missing_capabilities_are_named() -> None:
    both = 1 << CAP_NET_ADMIN | 1 << CAP_SYS_ADMIN
    assert missing_caps(both | 1) == []
    assert missing_caps(1 << CAP_SYS_ADMIN) == ["CAP_NET_ADMIN"]
    assert missing_caps(0) == ["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]
