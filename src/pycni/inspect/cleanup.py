"""`pycni cleanup`: garbage-collect every network, then remove what the plugins left behind.

First the runtime's own GC runs for every network of the conf dir, with the valid attachments
being the cached ones whose namespace still exists: stale attachments get a DEL through their
chain (releasing addresses, veths and port mappings the plugin's way) and 1.1.0 plugins get GC.
Cached attachments of networks no longer configured are DELeted with their cached config.
Then the node is inspected again and any leak still there is removed directly: reservation
files (under the store's lock), host veths, portmap rules, dnsname servers without live pods.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from pycni.inspect import nftmap
from pycni.inspect.collect import Paths, collect
from pycni.inspect.leaks import Leak, find_leaks
from pycni.inspect.model import NodeState, PortMapping
from pycni.net.netlink import rtnl
from pycni.spec.errors import CNIError


@dataclass
class CleanupReport:
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    remaining: list[Leak] = field(default_factory=list)


def _runtime_gc(state: NodeState, cni_path: Sequence[str], report: CleanupReport) -> None:
    from pycni.runtime.api import CNIConfig
    from pycni.runtime.confdir import list_network_confs
    from pycni.runtime.types import GCArgs, GCAttachment, RuntimeConf
    from pycni.spec.conf import conf_list_from_bytes

    cni = CNIConfig(list(cni_path), cache_dir=state.cache_dir)
    configured: set[str] = set()
    for path, conf in list_network_confs(state.conf_dir):
        if isinstance(conf, CNIError):
            report.errors.append(f"{path}: {conf.msg}")
            continue
        configured.add(conf.name)
        mine = [a for a in state.attachments if a.network == conf.name]
        valid = tuple(GCAttachment(a.container_id, a.ifname) for a in mine if a.netns_exists)
        stale = [a for a in mine if not a.netns_exists]
        try:
            cni.gc_network_list(conf, GCArgs(valid))
        except CNIError as err:
            report.errors.append(f"gc {conf.name}: {err.msg}")
        report.actions += [
            f"gc {conf.name}: DEL {a.container_id} {a.ifname}"
            for a in stale
            if not os.path.exists(a.cache_file)
        ]
    for att in state.attachments:
        if att.network in configured or att.netns_exists:
            continue
        try:
            with open(att.cache_file, "rb") as f:
                encoded = json.loads(f.read()).get("config", "")
            conf = conf_list_from_bytes(base64.b64decode(encoded))
            rt = RuntimeConf(container_id=att.container_id, netns=att.netns, ifname=att.ifname)
            cni.del_network_list(conf, rt)
            report.actions.append(f"DEL {att.network} {att.container_id} {att.ifname}")
        except (OSError, ValueError, CNIError) as err:
            report.errors.append(f"DEL {att.network} {att.container_id}: {err}")


@contextlib.contextmanager
def _store_lock(directory: str) -> Iterator[None]:
    """host-local's lock file, so we never race an allocator on the same store."""
    fd = os.open(os.path.join(directory, "lock"), os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _release(path: str, expected_cid: str) -> None:
    with _store_lock(os.path.dirname(path)):
        with open(path, encoding="utf-8", errors="replace") as f:
            if (f.read().splitlines() or [""])[0].strip() != expected_cid:
                return  # reused meanwhile: not ours to remove
        os.unlink(path)


def _delete_link(name: str) -> None:
    with rtnl() as ipr:
        found = ipr.link_lookup(ifname=name)
        if found:
            ipr.link("del", index=found[0])


def _direct(state: NodeState, leaks: list[Leak], report: CleanupReport) -> None:
    done_owners: set[tuple[str, str, str]] = set()
    by_subject: dict[str, PortMapping] = {
        f"{m.family} {m.table} {m.chain} handle {m.handle}": m for m in state.port_mappings
    }
    for leak in leaks:
        action: Callable[[], None] | None = None
        if leak.kind == "reservation":
            path, cid = leak.subject, leak.container_id

            def action(path: str = path, cid: str = cid) -> None:
                _release(path, cid)

        elif leak.kind == "veth":
            name = leak.subject

            def action(name: str = name) -> None:
                _delete_link(name)

        elif leak.kind == "mapping":
            mapping = by_subject.get(leak.subject)
            if mapping is None:
                continue
            key = (mapping.family, mapping.table, mapping.owner or leak.subject)
            if key in done_owners:
                continue
            done_owners.add(key)

            def action(mapping: PortMapping = mapping) -> None:
                nftmap.delete_mapping(mapping)

        elif leak.kind == "dnsmasq":

            def action(leak: Leak = leak) -> None:
                from pycni.inspect import dnsname

                dnsname.remove(state, leak)

        if action is None:
            continue
        try:
            action()
            report.actions.append(f"removed {leak.kind} {leak.subject}")
        except Exception as exc:  # report every failure and go on with the rest
            report.errors.append(f"cannot remove {leak.kind} {leak.subject}: {exc}")


def clean(paths: Paths, cni_path: Sequence[str], *, use_runtime: bool = True) -> CleanupReport:
    """GC through the runtime, then remove remaining leaks; ``remaining`` is what is left."""
    report = CleanupReport()
    state = collect(paths)
    if use_runtime and find_leaks(state):
        _runtime_gc(state, cni_path, report)
        state = collect(paths)
    _direct(state, find_leaks(state), report)
    report.remaining = find_leaks(collect(paths))
    return report
