"""dhcp pure logic: message round trip, route options, option config, the renewal schedule."""

from __future__ import annotations

import ipaddress

import pytest

from pycni.plugins.ipam.dhcp.client import udp_packet, udp_payload
from pycni.plugins.ipam.dhcp.daemon import client_id, prepare_options
from pycni.plugins.ipam.dhcp.lease import BOUND, REBINDING, RENEWING, Times, next_step
from pycni.plugins.ipam.dhcp.message import (
    ACK,
    OPT_LEASE_TIME,
    OPT_MESSAGE_TYPE,
    OPT_PARAM_REQUEST_LIST,
    OPT_RENEWAL_TIME,
    Message,
    classful_routes,
    classless_routes,
)
from pycni.spec.errors import CNIError

IPv4 = ipaddress.IPv4Address


def test_message_round_trip_and_long_options_split() -> None:
    msg = Message(op=2, xid=0xDEADBEEF, chaddr=b"\x02\0\0\0\0\x01", yiaddr=IPv4("10.0.0.5"))
    msg.options[OPT_MESSAGE_TYPE] = bytes((ACK,))
    msg.options[77] = b"x" * 300  # RFC 3396: encoded as two options, decoded as one
    back = Message.decode(msg.encode())
    assert (back.xid, back.yiaddr, back.chaddr, back.type) == (msg.xid, msg.yiaddr, msg.chaddr, ACK)
    assert back.options[77] == b"x" * 300


def test_udp_packet_checksums_and_parse() -> None:
    pkt = udp_packet(b"hello", IPv4("0.0.0.0"), IPv4("255.255.255.255"), 68, 67)
    assert udp_payload(pkt, 67) == b"hello"
    assert udp_payload(pkt, 68) is None


def test_route_options() -> None:
    raw = bytes([24, 10, 1, 2, 10, 0, 0, 1, 0, 0, 0, 0, 0])
    routes = classless_routes(raw)
    assert [(str(r.dst), str(r.gateway)) for r in routes] == [
        ("10.1.2.0/24", "10.0.0.1"),
        ("0.0.0.0/0", "0.0.0.0"),
    ]
    classful = classful_routes(IPv4("172.16.5.0").packed + IPv4("10.0.0.1").packed)
    assert str(classful[0].dst) == "172.16.0.0/16"


def test_option_config_and_client_id() -> None:
    opts = prepare_options(
        "K8S_POD_NAME=web;X=1",
        {"provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"}],
         "request": [{"option": "121"}]},
    )  # fmt: skip
    assert opts[12] == b"web"
    assert opts[OPT_PARAM_REQUEST_LIST] == bytes([121, 3, 1])
    skip = prepare_options("", {"request": [{"skipDefault": True}]})
    assert OPT_PARAM_REQUEST_LIST not in skip
    with pytest.raises(CNIError) as err:
        prepare_options("", {"provide": [{"option": "host-name", "value": "x" * 256}]})
    assert err.value.code == 7
    assert len(client_id("c" * 300, "n", "eth0")) == 254


def test_lease_times_default_and_from_options() -> None:
    ack = Message(op=2, xid=1, chaddr=b"")
    assert Times.from_ack(ack, 1000.0) == Times(1000 + 1800, 1000 + 3060, 1000 + 3600)
    ack.options[OPT_LEASE_TIME] = (120).to_bytes(4, "big")
    ack.options[OPT_RENEWAL_TIME] = (10).to_bytes(4, "big")
    assert Times.from_ack(ack, 0.0) == Times(10.0, 102.0, 120.0)


def test_schedule_renews_at_t1_rebinds_after_t2_and_expires() -> None:
    t = Times(renew=60.0, rebind=102.0, expire=120.0)
    assert next_step(BOUND, t, 10.0, False) == (BOUND, 50.0)  # sleep until T1
    assert next_step(BOUND, t, 60.0, False) == (RENEWING, 0.0)  # T1: renew now
    assert next_step(RENEWING, t, 70.0, True) == (RENEWING, 0.0)  # retry before T2
    assert next_step(RENEWING, t, 103.0, True) == (REBINDING, 0.0)  # past T2: rebind
    assert next_step(REBINDING, t, 110.0, True) == (REBINDING, 0.0)
    assert next_step(REBINDING, t, 121.0, True) == ("expired", 0.0)  # set the link down
    renewed = Times(renew=130.0, rebind=172.0, expire=190.0)
    assert next_step(RENEWING, renewed, 70.0, False) == (BOUND, 60.0)


# --- `dhcp daemon` command line (Go flag syntax) and socket activation ---------------------


def test_daemon_flags_parse_as_go_flag_does() -> None:
    from pycni.plugins.ipam.dhcp.flags import DaemonOptions, parse

    assert parse([]) == DaemonOptions()
    got = parse(
        ["-socketpath", "/run/x.sock", "--pidfile=/run/d.pid", "-hostprefix=/host",
         "-broadcast", "-timeout", "1m30s", "--resendmax=500ms", "-resendtimeout", "1h",
         "-leasedir="]
    )  # fmt: skip
    assert got == DaemonOptions(
        socket_path="/run/x.sock",
        pidfile="/run/d.pid",
        host_prefix="/host",
        broadcast=True,
        timeout=90.0,
        resend_max=0.5,
        resend_timeout=3600.0,
        lease_dir="",
    )
    assert parse(["-broadcast=false"]).broadcast is False
    assert parse(["-broadcast=T"]).broadcast is True
    assert parse(["-socketpath", ""]).socket_path == "/run/cni/dhcp.sock"  # "" is the default
    # the first non-flag, or "--", ends the flags; what follows is ignored, as by the reference
    assert parse(["-timeout=2s", "extra", "-bogus"]).timeout == 2.0
    assert parse(["--", "-bogus"]) == DaemonOptions()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-bogus"], "flag provided but not defined: -bogus"),
        (["-timeout", "5"], 'invalid value "5" for flag -timeout: parse error'),
        (["-timeout=1x"], 'invalid value "1x" for flag -timeout: parse error'),
        (["-resendmax", "-1s"], 'invalid value "-1s" for flag -resendmax: negative duration'),
        (["-broadcast=maybe"], 'invalid boolean value "maybe" for -broadcast: parse error'),
        (["-socketpath"], "flag needs an argument: -socketpath"),
        (["---x"], "bad flag syntax: ---x"),
        (["-=x"], "bad flag syntax: -=x"),
    ],
)
def test_daemon_flags_refused_with_the_reference_message(args: list[str], message: str) -> None:
    from pycni.plugins.ipam.dhcp.flags import FlagError, parse

    with pytest.raises(FlagError) as err:
        parse(args)
    assert str(err.value) == message


def test_daemon_help_and_go_durations() -> None:
    from pycni.plugins.ipam.dhcp.flags import HelpRequested, parse, parse_duration

    for word in ("-h", "--help"):
        with pytest.raises(HelpRequested):
            parse([word])
    assert parse_duration("0") == 0.0
    assert parse_duration("1h2m3.5s") == pytest.approx(3723.5)
    assert parse_duration("1.5ms") == pytest.approx(0.0015)
    assert parse_duration("2us") == pytest.approx(2e-6)
    assert parse_duration("+3s") == 3.0
    for bad in ("", "5", "s", "1.s.", "3d", ".s", "1e3s", "99999999999h"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_socket_activation_variables_are_checked_and_removed() -> None:
    from pycni.plugins.ipam.dhcp.activation import ActivationError, listener

    other = {"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "cni-dhcp.socket"}
    env = dict(other)
    assert listener(env, pid=4242) is None  # another process's: not ours, left alone
    assert env == other
    env = {"LISTEN_PID": "4242", "LISTEN_FDS": "0"}
    assert listener(env, pid=4242) is None and env == {}
    env = {"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b"}
    with pytest.raises(ActivationError, match=r"Too many \(2\) FDs"):
        listener(env, pid=4242)
    assert env == {}  # removed either way: children must not take them for theirs
    with pytest.raises(ActivationError, match="not a number"):
        listener({"LISTEN_PID": "4242", "LISTEN_FDS": "one"}, pid=4242)
