"""``pycni migrate --to-reference``: hand a node's live pods back to the Go reference plugins.

Moving a node from the reference (containernetworking/plugins v1.9.1) to pycni needs no
step: pycni's DEL, CHECK and GC read what the reference wrote (docs/migration.md). The way
back is not symmetric where pycni keeps an attachment in a layout of its own, which the
reference cannot read:

- portmap's nftables maps (``table inet pycni_portmap``): re-written in the layout the
  reference picks for the same config (its default is iptables, ``CNI-DN-<hash>``; with
  ``backend: nftables`` its ``cni_hostport`` rules);
- bridge's and ptp's ``ipMasq`` set elements (pycni's per-network sets in ``inet
  cni_plugins_masquerade``): re-written as the reference's per-pod ``CNI-<hash>`` chain (its
  default) or its per-pod rule in ``masq_checks`` (``ipMasqBackend: nftables``);
- firewall's per-attachment IP record (``dataDir``, for pycni's iptables GC): removed, the
  reference keeps none and would leave it behind;
- host-device's record of the link's node addresses and up state (``dataDir``, default
  /run/cni/pycni-host-device): removed, the reference keeps none (its DEL moves the link back
  by the name in its alias, which pycni writes too, without restoring addresses).

The attachments are those of the libcni cache (``results/`` under the cache dir: network,
container ID, ifname, the conflist, capability arguments and result the runtime gave), and
the node is the network namespace this runs in. Everything else (host-local files, the libcni
cache, the reference-layout iptables chains pycni writes, firewall rules, tuning and
bandwidth state) is already what the reference reads. Each attachment is converted by writing the
reference's form first and removing pycni's after (for ``ipMasq`` on nftables the other
way round: pycni's teardown also removes the reference's per-pod rule), so its traffic keeps
being forwarded. Running it twice changes nothing the second time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from pycni.net.errors import NetfilterError
from pycni.net.netfilter import iptables
from pycni.net.netfilter.ipmasq import nft_backend as masq_nft
from pycni.net.netfilter.iptables_seam import THREAD_IPTABLES
from pycni.net.netfilter.nft_seam import THREAD_NFTABLES
from pycni.net.netfilter.seam import THREAD
from pycni.plugins.meta.firewall.records import Records
from pycni.record import record, replace
from pycni.runtime import cache
from pycni.skel.base import Request
from pycni.spec.conf import conf_list_from_bytes
from pycni.spec.errors import CNIError, InvalidConfig
from pycni.spec.result import IPInterface
from pycni.spec.validate import container_id, interface_name, network_name


@record(frozen=True)
class Step:
    """What was (or, on a dry run, would be) done for one plugin of one attachment; ``error``
    when it could not be handed back (pycni's state then stays as it was)."""

    network: str
    container_id: str
    ifname: str
    plugin: str
    change: str
    error: str = ""

    def line(self) -> str:
        head = f"{self.network} {self.container_id} {self.ifname} {self.plugin}: "
        return head + (f"NOT handed back: {self.error}" if self.error else self.change)


def _entries(cache_dir: str) -> Iterator[tuple[str, Any]]:
    directory = os.path.join(cache_dir, "results")
    try:
        names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            yield path, cache.read_entry(path)
        except ValueError:
            continue  # not an attachment libcni could read either


def _plugin_requests(info: Any) -> Iterator[tuple[str, Any]]:
    """Each plugin of the cached conflist as the Request its DEL would get (libcni's
    injected name, cniVersion, prevResult and runtimeConfig)."""
    container_id(info.container_id)
    interface_name(info.ifname)
    conflist = conf_list_from_bytes(info.config or b"")
    network_name(conflist.name)
    caps = info.capability_args or {}
    for plugin in conflist.plugins:
        config = json.loads(plugin.raw)
        if not isinstance(config, dict):
            continue
        config.update(name=conflist.name, cniVersion=conflist.cni_version)
        if info.result is not None:
            config["prevResult"] = info.result
        runtime = {c: caps[c] for c, on in plugin.capabilities.items() if on and c in caps}
        if runtime:
            config["runtimeConfig"] = runtime
        stdin = json.dumps(config).encode()
        env = {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": info.container_id}
        yield (
            plugin.type,
            Request("DEL", info.container_id, info.netns, info.ifname, "", [], config, stdin, env),
        )


def _portmap(req: Any, dry_run: bool) -> str | None:
    """Re-write one attachment's portmap state in the reference's layout; None when pycni
    holds none of it in its own layout."""
    # here: portmap's and ipmasq's iptables_backend, portmap's and firewall's parse share names
    from pycni.plugins.meta.portmap import iptables_backend, nft_backend, reference_state
    from pycni.plugins.meta.portmap.config import NFTABLES, parse

    cfg = parse(req, need_prev=True)
    if cfg.backend != NFTABLES or not cfg.mappings or not cfg.container_ips:
        return None  # pycni's iptables backend writes the reference's chains already
    try:
        nft_backend.BACKEND.check(THREAD, cfg)
    except CNIError:
        return None
    explicit = req.config.get("backend") == NFTABLES
    to_nft = explicit or cfg.has_conditions or not iptables_backend.usable(THREAD.iptables, None)
    if to_nft and cfg.has_conditions:
        raise InvalidConfig(
            "conditionsV4/conditionsV6 on the nftables backend: the reference puts them in "
            "its shared hook chains, for every pod; hand this network back by hand",
        )
    target = f"{reference_state.REFERENCE_NFT_TABLE} rules" if to_nft else "iptables CNI-DN chain"
    if not dry_run:
        if to_nft:
            reference_state.install_nft(THREAD.nft, cfg)
        else:
            iptables_backend.add(THREAD.iptables, cfg)
        nft_backend.BACKEND.delete(THREAD, cfg)
    return f"nftables maps -> reference {target}"


def _ipmasq(req: Any, dry_run: bool) -> str | None:
    """Re-write one attachment's ``ipMasq`` set elements as the reference's per-pod chain or
    rule; None when pycni's sets hold none of its addresses."""
    # here: ipmasq's iptables_backend is not portmap's (above)
    from pycni.net.netfilter.ipmasq import TABLE, comment_for_instance, iptables_backend

    if req.config.get("ipMasq") is not True:
        return None
    prev = req.prev_result()
    if prev is None:
        return None
    ipns: list[IPInterface] = [ip.address for ip in prev.ips]
    comment = comment_for_instance(req.name, req.ifname, req.container_id)
    held = [
        ipn
        for ipn in ipns
        if THREAD_NFTABLES.element_comment(
            "inet", TABLE, masq_nft.set_name(req.name, ipn.network), ipn.ip
        )
        == comment
    ]
    if not held:
        return None

    # the reference's default: iptables wherever it can run (pkg/ip SetupIPMasqForNetworks)
    explicit = req.config.get("ipMasqBackend") == "nftables"
    to_nft = explicit or not iptables.available(4)
    if not dry_run:
        if to_nft:
            masq_nft.teardown(THREAD_NFTABLES, req.name, req.ifname, req.container_id, ipns)
            THREAD_NFTABLES.apply(
                masq_nft.nft_setup_script(ipns, req.name, req.ifname, req.container_id, [])
            )
        else:
            iptables_backend.setup(THREAD_IPTABLES, ipns, req.name, req.container_id)
            masq_nft.teardown(THREAD_NFTABLES, req.name, req.ifname, req.container_id, ipns)
    return "nftables set elements -> reference " + (
        "masq_checks rule" if to_nft else "iptables CNI chain"
    )


def _firewall(req: Any, dry_run: bool) -> str | None:
    """Drop the attachment's IP record (pycni's own bookkeeping for its iptables GC, which the
    reference neither reads nor removes); None when there is none."""
    from pycni.plugins.meta.firewall.plugin import parse  # here: portmap's parse is another

    conf = parse(req)
    records = Records(req.host.state(), conf.data_dir, req.name)
    if not records.load(req.container_id, req.ifname):
        return None
    if not dry_run:
        records.remove(req.container_id, req.ifname)
    return "pycni's IP record removed (the reference keeps none)"


def _host_device(req: Any, dry_run: bool) -> str | None:
    """Drop the attachment's record of its link's node state (pycni's own, which the
    reference neither reads nor removes); None when there is none."""
    from pycni.plugins.main.host_device import plugin as host_device

    operator_dir = os.environ.get(host_device.DATA_DIR_ENV, "")
    if operator_dir and host_device.DATA_DIR_ENV not in req.env:  # the runtime's plugins' too
        req = replace(req, env={**req.env, host_device.DATA_DIR_ENV: operator_dir})
    conf = host_device.load_conf(req)
    files = req.host.state()
    path = host_device.state_file(conf, req)
    try:
        files.read(path)
    except FileNotFoundError:
        return None
    if not dry_run:
        host_device.forget(files, path)
    return "pycni's record of the link's node addresses removed (the reference keeps none)"


def to_reference(cache_dir: str, *, dry_run: bool = False) -> list[Step]:
    """Hand every cached attachment back to the reference's layouts (see the module
    docstring); the steps taken, one per plugin that needed one."""
    steps: list[Step] = []
    for path, info in _entries(cache_dir):
        try:
            plugins = list(_plugin_requests(info))
        except (CNIError, ValueError) as exc:
            steps.append(
                Step(
                    str(info.network_name), info.container_id, info.ifname, "", "", f"{path}: {exc}"
                )
            )
            continue
        for plugin_type, req in plugins:
            where = (req.name, req.container_id, req.ifname, plugin_type)
            try:
                if plugin_type == "portmap":
                    change = _portmap(req, dry_run)
                elif plugin_type in ("bridge", "ptp"):
                    change = _ipmasq(req, dry_run)
                elif plugin_type == "firewall":
                    change = _firewall(req, dry_run)
                elif plugin_type == "host-device":
                    change = _host_device(req, dry_run)
                else:
                    change = None
            except (CNIError, NetfilterError, OSError, ValueError) as exc:
                steps.append(Step(*where, "", str(exc) or type(exc).__name__))
                continue
            if change is not None:
                steps.append(Step(*where, change))
    return steps
