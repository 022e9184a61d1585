"""CHECK's route lookups: filtered by the kernel by table and link, same answers as a full dump."""

from __future__ import annotations

import ipaddress

import pytest

from pycni.net import route
from pycni.net.netlink.client import rtnl
from pycni.spec.result import Route
from tests.harness import Namespace

pytestmark = pytest.mark.kernel


def test_routes_by_table_and_link(node: Namespace) -> None:
    node.run("ip", "link", "add", "rf0", "type", "veth", "peer", "name", "rf1")
    for name in ("rf0", "rf1"):
        node.run("ip", "link", "set", name, "up")
    node.run("ip", "addr", "add", "10.5.0.2/24", "dev", "rf0")
    node.run("ip", "addr", "add", "10.6.0.2/24", "dev", "rf1")
    node.run("ip", "addr", "add", "fd00:5::2/64", "dev", "rf0", "nodad")
    node.run("ip", "route", "add", "10.9.0.0/16", "via", "10.5.0.1", "table", "100")
    with node.entered(), rtnl() as ipr:
        found = ipr.find_link("rf0")
        assert found is not None
        rf0 = found.index
        ours = route._routes(ipr, 4, oif=rf0)
        assert [r.dst for r in ours] == [ipaddress.ip_network("10.5.0.0/24")]
        full = [r for r in ipr.routes(2) if r.table == route.MAIN_TABLE]
        assert len(route._routes(ipr, 4)) == len(full) == 2
        assert route.prefix_route_exists(ipr, rf0, ipaddress.ip_interface("10.5.0.2/24"))
        assert route.prefix_route_exists(ipr, rf0, ipaddress.ip_interface("fd00:5::2/64"))
        assert not route.prefix_route_exists(ipr, rf0, ipaddress.ip_interface("10.6.0.2/24"))
        route.validate_routes(
            ipr,
            "rf0",
            [
                Route(
                    dst=ipaddress.ip_network("10.9.0.0/16"),
                    gw=ipaddress.ip_address("10.5.0.1"),
                    table=100,
                )
            ],
        )
        with pytest.raises(route.RouteError, match="Failed to match route"):  # no table 200
            route.validate_routes(
                ipr, "rf0", [Route(dst=ipaddress.ip_network("10.9.0.0/16"), table=200)]
            )
