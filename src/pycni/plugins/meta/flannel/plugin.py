"""flannel: attach a pod to this node's cluster subnet by delegating to bridge + host-local.

Compatible with flannel's CNI config::

    {"type": "flannel", "subnetFile": "/run/flannel/subnet.env",
     "dataDir": "/var/lib/cni/flannel", "delegate": {...}, "ipam": {...}}

ADD reads the subnet file the node agent (``pycni agent``) writes, builds the delegate's
config (bridge by default, ``isGateway``, the node's MTU, ``ipMasq`` only when the agent
does not masquerade, host-local over the node subnet with a route to the cluster network),
saves it in ``dataDir/<containerID>`` and runs the delegate. DEL runs the delegate with the
saved config, so it works even when the subnet file changed or is gone.

Readiness (CNI 1.1 STATUS): the node is ready once the agent has its lease and has
programmed its routes, which it shows by writing the subnet file and keeping it fresh.
Until then STATUS answers 50 and ADD answers 11 ("try again later"), touching nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from pycni.cluster import subnet as sn
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.config import PLUGIN_TYPE
from pycni.spec.decode import FilePath, Raw, decode, lookup, option
from pycni.spec.errors import (
    DECODING_FAILURE,
    INVALID_NETWORK_CONFIG,
    LIMITED_CONNECTIVITY,
    PLUGIN_NOT_AVAILABLE,
    TRY_AGAIN_LATER,
    CNIError,
    InternalError,
    InvalidConfig,
)
from pycni.spec.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import StateFiles

DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
DEFAULT_DATA_DIR = "/var/lib/cni/flannel"


@record(frozen=True)
class FlannelConf:
    """flannel's own keys; ``delegate`` and ``ipam`` are handed on (their plugins check them)."""

    subnet_file: str = option("subnetFile", FilePath(), "")
    data_dir: str = option("dataDir", FilePath(), "")
    delegate: dict[str, Any] = option("delegate", Raw(), factory=dict)
    ipam: dict[str, Any] = option("ipam", Raw(), factory=dict)


@record(frozen=True)
class DelegateRef:
    type: str = option("type", PLUGIN_TYPE, "")


@record(frozen=True)
class IPAMRoutes:
    routes: list[Any] = option("routes", Raw((list,), "a list of route objects"), factory=list)


def _has(data: dict[str, Any], key: str) -> bool:
    return lookup(data, key)[0]


def load_subnet_env(path: str) -> sn.SubnetEnv:
    """The node's subnet, when the node is ready for pods: a missing or stale subnet file
    (no agent, or no lease yet) is 11, try again later; a broken one is a config error."""
    state = sn.readiness(path)
    if state.ready and state.env is not None:
        return state.env
    code = INVALID_NETWORK_CONFIG if state.problem == "unusable" else TRY_AGAIN_LATER
    raise CNIError(code, f"node not ready for pods: {state.reason}")


def delegate_ipam(req: Request, env: sn.SubnetEnv) -> dict[str, Any]:
    """The user's ``ipam`` with host-local over the node subnets (one range per family, IPv4
    first) and a route to each cluster network added."""
    ipam = dict(decode(FlannelConf, req.config).ipam)
    if not _has(ipam, "type"):
        ipam["type"] = "host-local"
    ipam["ranges"] = [[{"subnet": str(subnet)}] for _network, subnet in env.pairs]
    routes = decode(IPAMRoutes, ipam, "ipam").routes
    ipam["routes"] = [*routes, *({"dst": str(network)} for network, _subnet in env.pairs)]
    return ipam


def delegate_config(req: Request, env: sn.SubnetEnv) -> dict[str, Any]:
    """What the delegate gets as stdin on ADD (and, saved, on DEL)."""
    conf = dict(decode(FlannelConf, req.config).delegate)
    conf["name"] = req.name
    if not _has(conf, "type"):
        conf["type"] = "bridge"
    if not decode(DelegateRef, conf, "delegate").type:
        raise InvalidConfig('invalid config: delegate.type must be a plugin type, got ""')
    if not _has(conf, "ipMasq"):
        conf["ipMasq"] = not env.ipmasq  # the agent masquerades unless told not to
    if not _has(conf, "mtu"):
        conf["mtu"] = env.mtu
    if conf["type"] == "bridge" and not _has(conf, "isGateway"):
        conf["isGateway"] = True
    if req.cni_version:
        conf["cniVersion"] = req.cni_version
    conf["ipam"] = delegate_ipam(req, env)
    runtime_config = req.runtime_config
    if runtime_config:
        conf["runtimeConfig"] = runtime_config
    return conf


def _paths(req: Request) -> tuple[str, str]:
    conf = decode(FlannelConf, req.config)
    data_dir = conf.data_dir or DEFAULT_DATA_DIR
    subnet_file = conf.subnet_file or DEFAULT_SUBNET_FILE
    if not req.container_id or "/" in req.container_id or req.container_id in (".", ".."):
        raise InvalidConfig(f"unusable container ID {req.container_id!r}")
    return os.path.join(data_dir, req.container_id), subnet_file


def _save(files: StateFiles, path: str, data: bytes) -> None:
    files.write_atomic(path, data, mode=0o600, dir_mode=0o700, durable=False, prefix=".flannel.")


def _load_saved(files: StateFiles, path: str) -> dict[str, Any] | None:
    try:
        raw = files.read(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InternalError(f"failed to read saved delegate config {path}: {exc}") from None
    try:
        conf = json.loads(raw)
    except ValueError as exc:
        raise CNIError(DECODING_FAILURE, f"saved delegate config {path}: {exc}") from None
    if not isinstance(conf, dict) or not isinstance(conf.get("type"), str):
        raise CNIError(DECODING_FAILURE, f"saved delegate config {path} has no type")
    return conf


class Flannel(Plugin):
    about = "pycni flannel: node subnet from the cluster agent, delegated to bridge + host-local"

    def add(self, req: Request) -> Result:
        saved, subnet_file = _paths(req)
        env = load_subnet_env(subnet_file)
        conf = delegate_config(req, env)
        data = json.dumps(conf).encode()
        files = req.host.state()
        _save(files, saved, data)
        try:
            result = req.delegate(conf["type"], "ADD", data)
        except BaseException:
            with contextlib.suppress(OSError):
                files.remove(saved)
            raise
        if result is None:
            raise InternalError(f"delegate {conf['type']} returned no result")
        return result

    def delete(self, req: Request) -> None:
        saved, _subnet_file = _paths(req)
        conf = _load_saved(req.host.state(), saved)
        if conf is None:
            return  # never added, or already deleted: nothing to undo
        req.delegate(conf["type"], "DEL", json.dumps(conf).encode())
        with contextlib.suppress(FileNotFoundError):
            req.host.state().remove(saved)

    def status(self, req: Request) -> None:
        subnet_file = decode(FlannelConf, req.config).subnet_file or DEFAULT_SUBNET_FILE
        state = sn.readiness(subnet_file)
        if state.ready:
            return
        # stale: the agent ran (pods may be here) but has stopped keeping the node's lease
        # and routes, so they may lose other nodes; missing or unusable: no pod can be added
        code = LIMITED_CONNECTIVITY if state.problem == "stale" else PLUGIN_NOT_AVAILABLE
        raise CNIError(code, f"node not ready for pods: {state.reason}")

    def check(self, req: Request) -> None:
        saved, _subnet_file = _paths(req)
        conf = _load_saved(req.host.state(), saved)
        if conf is None:
            raise InternalError(f"no saved delegate config for {req.container_id}")
        found, prev = lookup(req.config, "prevResult")
        if found:
            conf["prevResult"] = prev
        req.delegate(conf["type"], "CHECK", json.dumps(conf).encode())


PLUGIN = Flannel()
