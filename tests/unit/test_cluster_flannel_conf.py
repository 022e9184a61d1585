"""How the flannel meta plugin builds its delegate's config from the subnet file."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from pycni.cluster.subnet import SubnetEnv
from pycni.plugins.meta.flannel.plugin import delegate_config
from pycni.skel.base import Request
from pycni.spec.errors import CNIError

ENV = SubnetEnv(
    ipaddress.IPv4Network("10.244.0.0/16"), ipaddress.IPv4Network("10.244.3.0/24"), 1450, True
)


def request(config: dict[str, Any]) -> Request:
    base = {"cniVersion": "1.0.0", "name": "cluster", "type": "flannel"}
    return Request("ADD", "c1", "/run/netns/x", "eth0", "", [], {**base, **config}, b"", {})


def test_defaults_follow_flannel() -> None:
    conf = delegate_config(request({}), ENV)
    assert conf == {
        "name": "cluster",
        "type": "bridge",
        "ipMasq": False,
        "mtu": 1450,
        "isGateway": True,
        "cniVersion": "1.0.0",
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.244.3.0/24"}]],
            "routes": [{"dst": "10.244.0.0/16"}],
        },
    }


def test_user_delegate_and_ipam_keys_win_where_flannel_lets_them() -> None:
    conf = delegate_config(
        request(
            {
                "delegate": {"bridge": "cbr0", "isGateway": False, "mtu": 1300, "ipMasq": True},
                "ipam": {"dataDir": "/tmp/x", "routes": [{"dst": "0.0.0.0/0"}]},
                "runtimeConfig": {"portMappings": []},
            }
        ),
        SubnetEnv(ENV.network, ENV.subnet, 1450, False),
    )
    assert conf["bridge"] == "cbr0" and conf["isGateway"] is False
    assert conf["mtu"] == 1300 and conf["ipMasq"] is True
    assert conf["ipam"]["dataDir"] == "/tmp/x"
    assert conf["ipam"]["routes"] == [{"dst": "0.0.0.0/0"}, {"dst": "10.244.0.0/16"}]
    assert conf["runtimeConfig"] == {"portMappings": []}


def test_no_agent_masquerade_means_the_bridge_does_it() -> None:
    conf = delegate_config(request({}), SubnetEnv(ENV.network, ENV.subnet, 1500, False))
    assert conf["ipMasq"] is True


def test_bad_delegate_type_is_a_config_error() -> None:
    with pytest.raises(CNIError) as info:
        delegate_config(request({"delegate": {"type": 7}}), ENV)
    assert info.value.code == 7 and "delegate.type" in info.value.msg
