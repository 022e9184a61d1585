"""The demo's networks, embedded: loopback, and bridge + host-local + portmap.

They only ever exist inside the demo's node namespace; the host-local store and the result
cache live in the demo's state directory.
"""

from __future__ import annotations

import json
from typing import Any

CNI_VERSION = "1.1.0"
NETWORK = "pycni-demo"
LOOPBACK_NETWORK = "pycni-demo-lo"
BRIDGE = "cni-demo0"
SUBNET = "10.88.0.0/24"
GATEWAY = "10.88.0.1"
UPLINK = "eth0"
UPLINK_ADDRESS = "192.168.250.1/24"
CLIENT_ADDRESS = "192.168.250.2/24"
HOST_PORT = 8080
CONTAINER_PORT = 80
POD_IFNAME = "eth0"


def loopback_conflist() -> dict[str, Any]:
    return {"cniVersion": CNI_VERSION, "name": LOOPBACK_NETWORK, "plugins": [{"type": "loopback"}]}


def bridge_conflist(data_dir: str) -> dict[str, Any]:
    return {
        "cniVersion": CNI_VERSION,
        "name": NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": data_dir,
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }


def as_bytes(conflist: dict[str, Any]) -> bytes:
    return json.dumps(conflist, indent=2).encode()


def port_mappings() -> list[dict[str, Any]]:
    """What the web pod asks for (the ``portMappings`` capability)."""
    return [{"hostPort": HOST_PORT, "containerPort": CONTAINER_PORT, "protocol": "tcp"}]
