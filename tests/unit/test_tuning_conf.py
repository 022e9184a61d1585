"""tuning's pure rules: sysctl keys, MAC forms, duplicate keys, sources, the backup file shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pycni.plugins.meta.tuning.backup import Backup
from pycni.plugins.meta.tuning.conf import (
    check_allowlist,
    duplicate_sysctl_keys,
    normalize_mac,
    parse,
    sysctl_path,
)
from pycni.skel.base import Request
from pycni.spec.errors import CNIError


@pytest.mark.parametrize(
    ("key", "ifname", "path"),
    [
        ("net.ipv4.conf.IFNAME.rp_filter", "eth0", "net/ipv4/conf/eth0/rp_filter"),
        ("net.ipv4.conf.IFNAME.rp_filter", "eth0.100", "net/ipv4/conf/eth0.100/rp_filter"),
        ("net/ipv4/conf/eth0.100/rp_filter", "eth0", "net/ipv4/conf/eth0.100/rp_filter"),
        ("net.core.somaxconn", "eth0", "net/core/somaxconn"),
        ("net.ipv6.conf.IFNAME.IFNAME", "e1", "net/ipv6/conf/e1/IFNAME"),
    ],
)
def test_sysctl_path_accepts_net_keys(key: str, ifname: str, path: str) -> None:
    assert sysctl_path(key, ifname) == path


@pytest.mark.parametrize(
    "key",
    [
        "",
        "net",
        "kernel.hostname",
        "net/../kernel/hostname",
        "net..ipv4.ip_forward",
        "net/ipv4/./ip_forward",
        "/net/ipv4/ip_forward",
        "net.ipv4.",
        "net/ipv4/ip_forward\x00",
        "netfilter.x",
    ],
)
def test_sysctl_path_refuses_everything_else(key: str) -> None:
    with pytest.raises(CNIError) as err:
        sysctl_path(key, "eth0")
    assert err.value.code == 7


def test_sysctl_path_refuses_ifname_escape() -> None:
    with pytest.raises(CNIError):
        sysctl_path("net.ipv4.conf.IFNAME.x", "..")


def test_mac_forms() -> None:
    assert normalize_mac("C2:B0:57:49:47:F1") == "c2:b0:57:49:47:f1"
    assert normalize_mac("c2-b0-57-49-47-f1") == "c2:b0:57:49:47:f1"
    assert normalize_mac("c2b0.5749.47f1") == "c2:b0:57:49:47:f1"
    for bad in ("c2:b0:57:49:47", "zz:b0:57:49:47:f1", "c2:b0:57:49:47:f1:00:11"):
        with pytest.raises(CNIError):
            normalize_mac(bad)


def test_duplicate_sysctl_keys_found_only_in_sysctl() -> None:
    raw = b'{"name":"n","SysCtl":{"a":"1","b":"2","a":"3"},"other":{"x":1,"x":2}}'
    assert duplicate_sysctl_keys(raw) == ["a"]
    assert duplicate_sysctl_keys(b'{"sysctl":{"a":"1"}}') == []


def request(config: dict[str, Any], args: str = "") -> Request:
    return Request(
        command="ADD",
        container_id="c",
        netns="/x",
        ifname="eth0",
        args=args,
        path=[],
        config=config,
        stdin=json.dumps(config).encode(),
        env={},
    )


def test_sources_and_precedence() -> None:
    conf = parse(
        request(
            {
                "name": "n",
                "mac": "c2:00:00:00:00:01",
                "MTU": 1400,
                "allmulti": False,
                "runtimeConfig": {"mac": "c2:00:00:00:00:03"},
                "args": {"cni": {"sysctl": {"net.a": "1"}, "promisc": True, "txQLen": 10}},
            },
            args="MAC=c2:00:00:00:00:02",
        )
    )
    assert conf.mac == "c2:00:00:00:00:03"
    assert conf.mtu == 1400 and conf.promisc and conf.allmulti is False and conf.txqlen == 10
    assert conf.sysctl == {"net.a": "1"}  # no config map: no panic, unlike the reference
    assert conf.data_dir == "/run/cni/tuning"


def test_wrong_types_are_config_errors() -> None:
    for bad in ({"mtu": "1400"}, {"sysctl": {"net.a": 1}}, {"promisc": "yes"}, {"mtu": -1}):
        with pytest.raises(CNIError) as err:
            parse(request({"name": "n", **bad}))
        assert err.value.code == 7


def test_allowlist_is_searched_like_go_regexp() -> None:
    check_allowlist(["net.ipv4.conf.eth0.rp_filter"], [r"^net\.ipv4\.conf\.[^.]+\.rp_filter$"])
    check_allowlist(["anything"], None)
    with pytest.raises(CNIError):
        check_allowlist(["net.core.somaxconn"], [r"^net\.ipv4\."])


def test_backup_shape_matches_reference_marshal_indent() -> None:
    b = Backup(mac="aa:bb:cc:dd:ee:ff", promisc=False, mtu=1500, allmulti=True)
    assert b.to_json() == (
        '{\n "mac": "aa:bb:cc:dd:ee:ff",\n "promisc": false,\n "mtu": 1500,\n "allmulti": true\n}'
    )
    assert Backup.from_dict(json.loads(b.to_json())) == b
    assert Backup.from_dict({"mtu": "x", "promisc": 1}) == Backup()


def test_backup_merge_keeps_first_originals() -> None:
    first = Backup(mac="aa:aa:aa:aa:aa:aa", sysctl={"net/a": "0"})
    second = Backup(mac="bb:bb:bb:bb:bb:bb", mtu=1400, sysctl={"net/a": "1", "net/b": "5"})
    merged = second.merged_over(first)
    assert merged.mac == "aa:aa:aa:aa:aa:aa" and merged.mtu == 1400
    assert merged.sysctl == {"net/a": "0", "net/b": "5"}
