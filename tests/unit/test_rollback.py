"""Rollback: undos run newest first, and an undo that fails is reported and logged."""

from __future__ import annotations

import ipaddress
import json
import logging

import pytest

from pycni.skel import run as skel
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import CNIError, InvalidConfig
from pycni.spec.result import IPConfig, Result

ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c1",
    "CNI_NETNS": "/nonexistent/netns",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/nonexistent",
}


def _broken_undo() -> None:
    raise OSError("device busy")


def test_undos_run_newest_first_and_all_of_them() -> None:
    done: list[str] = []
    with pytest.raises(InvalidConfig), Rollback() as rb:
        rb.push("a", lambda: done.append("a"))
        rb.push("b", _broken_undo)
        rb.push("c", lambda: done.append("c"))
        raise InvalidConfig("late failure")
    assert done == ["c", "a"]
    assert rb.errors == ["undo b: device busy"]


def test_a_failed_undo_is_in_the_error_details_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, "pycni.rollback"),
        pytest.raises(CNIError) as info,
        Rollback() as rb,
    ):
        rb.push("veth", _broken_undo)
        raise CNIError(999, "netlink said no", "first")
    assert info.value.details == "first; rollback incomplete: undo veth: device busy"
    assert any("undo of step veth failed: device busy" in r.getMessage() for r in caplog.records)


def test_a_clean_rollback_adds_nothing() -> None:
    with pytest.raises(CNIError) as info, Rollback() as rb:
        rb.push("x", lambda: None)
        raise InvalidConfig("bad")
    assert info.value.details == "" and rb.report() == ""


def test_success_forgets_the_undos() -> None:
    done: list[str] = []
    with Rollback() as rb:
        rb.push("x", lambda: done.append("x"))
    rb.run()
    assert done == []


class FailsAfterAStep(Plugin):
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def add(self, req: Request) -> Result:
        with Rollback(req.env) as rb:
            rb.push("bridge", _broken_undo)
            raise self.exc
        return Result(ips=[IPConfig(address=ipaddress.ip_interface("10.0.0.2/24"))])


@pytest.mark.parametrize(
    ("exc", "code"), [(InvalidConfig("bad mtu"), 7), (RuntimeError("kernel said no"), 999)]
)
def test_skel_reports_what_the_rollback_left(exc: Exception, code: int) -> None:
    stdin = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "t"}).encode()
    out = skel.run_plugin(FailsAfterAStep(exc), ENV, stdin)
    body = json.loads(out.stdout)
    assert out.exit_code == 1 and body["code"] == code
    assert body["details"] == "rollback incomplete: undo bridge: device busy"
