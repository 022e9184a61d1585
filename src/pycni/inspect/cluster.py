"""The cluster agent's part of a node: its lease (subnet files), its routes, its VXLAN device.

The subnet files are the ones the conf dir's ``flannel`` networks read (``subnetFile``),
else flannel's default path when it exists. Routes are those marked with pycni's routing
protocol (157); VXLAN devices are listed with their remote VTEPs, whoever made them.
Only reads; ``None`` when this node shows no trace of an agent.
"""

from __future__ import annotations

import contextlib
import json
import os

from pycni.cluster import subnet as sn
from pycni.inspect.model import (
    ClusterAgentState,
    ClusterLease,
    Network,
    OwnedRoute,
    VxlanDevice,
)
from pycni.net import fdb, owned_routes
from pycni.net.netfilter import nft
from pycni.net.netlink.kernel import Kernel

DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
MASQ_TABLE = "pycni-cluster"


def subnet_files(networks: list[Network]) -> list[str]:
    """The subnet files named by ``flannel`` plugins in these networks (default path if none)."""
    found: list[str] = []
    for net in networks:
        if "flannel" not in net.plugins:
            continue
        with contextlib.suppress(OSError, ValueError):
            with open(net.file, "rb") as f:
                raw = json.loads(f.read())
            plugins = raw.get("plugins") if isinstance(raw, dict) else None
            for plugin in plugins if isinstance(plugins, list) else [raw]:
                if isinstance(plugin, dict) and plugin.get("type") == "flannel":
                    path = plugin.get("subnetFile") or DEFAULT_SUBNET_FILE
                    if isinstance(path, str) and path not in found:
                        found.append(path)
    if not found and os.path.exists(DEFAULT_SUBNET_FILE):
        found.append(DEFAULT_SUBNET_FILE)
    return found


def read_lease(path: str) -> ClusterLease:
    try:
        env = sn.read_subnet_env(path)
    except FileNotFoundError:
        return ClusterLease(path, error="missing (the agent has not written it yet)")
    except (OSError, sn.SubnetError) as exc:
        return ClusterLease(path, error=f"unreadable: {exc}")
    return ClusterLease(
        subnet_file=path,
        network=", ".join(str(network) for network, _subnet in env.pairs),
        subnet=", ".join(str(subnet) for _network, subnet in env.pairs),
        gateway=str(env.gateway),
        mtu=env.mtu,
        ipmasq=env.ipmasq,
    )


def _owned_routes(kernel: Kernel, names: dict[int, str]) -> list[OwnedRoute]:
    return [
        OwnedRoute(str(dst), str(r.gateway or ""), names.get(r.oif, ""), r.onlink)
        for dst, r in sorted(owned_routes.current(kernel).items())
    ] + [
        OwnedRoute(str(dst), str(r.gateway or ""), names.get(r.oif, ""), r.onlink)
        for dst, r in sorted(owned_routes.current(kernel, family=owned_routes.AF_INET6).items())
    ]


def _vxlan_devices(kernel: Kernel, addresses: dict[int, list[str]]) -> list[VxlanDevice]:
    out = []
    for found in kernel.links():
        if found.kind != "vxlan":
            continue
        index = found.index
        device = VxlanDevice(
            name=found.name,
            index=index,
            mac=found.mac,
            up=found.up,
            addresses=addresses.get(index, []),
        )
        data = found.vxlan
        if data is not None:
            device.vni = data.vni
            device.local = str(data.local) if data.local else None
            device.port = data.port or None
        device.peers = {
            mac: str(dst) for mac, dst in sorted(fdb.remote_entries(kernel, index).items())
        }
        out.append(device)
    return out


def _masquerade_table() -> bool:
    try:
        return nft.table_exists("ip", MASQ_TABLE)
    except Exception:  # no nftables here: nothing to report
        return False


def read_agent_state(
    kernel: Kernel, networks: list[Network], names: dict[int, str], addresses: dict[int, list[str]]
) -> ClusterAgentState | None:
    """The agent's state in the current namespace; None when there is no sign of one."""
    state = ClusterAgentState(
        leases=[read_lease(path) for path in subnet_files(networks)],
        routes=_owned_routes(kernel, names),
        vxlan_devices=_vxlan_devices(kernel, addresses),
    )
    if not (state.leases or state.routes or state.vxlan_devices):
        return None
    state.masquerade_table = _masquerade_table()
    return state
