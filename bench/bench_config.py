"""What config decoding costs per call: bridge's and host-local's loaders on a full config.

Pure CPU, no kernel: `python bench/bench_config.py`. Prints the best of 60 rounds of 200 calls
(the best round is the least disturbed by other load on the machine).
"""

from __future__ import annotations

import json
import timeit
from typing import Any

from pycni.plugins.ipam.host_local import config as host_local
from pycni.plugins.main.bridge import plugin as bridge
from pycni.skel.base import Request

CONFIG: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "name": "n",
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": True,
    "ipMasq": True,
    "mtu": 1500,
    "vlanTrunk": [{"minID": 10, "maxID": 20}],
    "dns": {"nameservers": ["10.0.0.1"]},
    "ipam": {
        "type": "host-local",
        "dataDir": "/tmp/x",
        "ranges": [[{"subnet": "10.1.0.0/16", "gateway": "10.1.0.1"}], [{"subnet": "fd00::/64"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
    },
    "runtimeConfig": {"mac": "02:00:00:00:00:01", "ips": ["10.1.0.9"]},
}


def main() -> None:
    req = Request("ADD", "c1", "/x", "eth0", "", [], CONFIG, json.dumps(CONFIG).encode(), {})
    for name, call in (
        ("bridge.load_conf", lambda: bridge.load_conf(req)),
        ("host_local.load", lambda: host_local.load(req.config, req.args)),
    ):
        best = min(timeit.repeat(call, number=200, repeat=60)) / 200
        print(f"{name:18} {best * 1e6:7.1f} us/call")


if __name__ == "__main__":
    main()
