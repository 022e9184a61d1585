"""`pycni cleanup` and `pycni gc` (node-wide): free what is proven leaked, nothing else.

What counts as a leak, and the evidence each needs, is :mod:`pycni.inspect.leaks`.  Cleanup:

1. DELs each leaked attachment (a cached result whose namespace is gone) through its chain,
   with the config it was added with (the cache holds it; else the conf dir's), so every
   plugin releases its own addresses, links and rules its own way;
2. inspects the node again and removes each leak still there directly: a reservation file
   (under the store's lock, only if it still holds the same owner), a host veth, a portmap
   owner's rules, a writer's temp file, a dnsname server without live pods;
3. reports what is left: the leaks it could not remove.

It frees nothing at all, and says why (``refused``), when its scan of the node's live network
namespaces is not complete (:mod:`pycni.net.nsscan`: /proc is not its PID namespace's, it
runs in a user namespace of its own, or some process or namespace could not be examined): a
namespace it cannot see may hold any address, and then a freed address would be handed to a
second pod.  A partial view is not that: under ``ip netns exec``, or in a container that is
the node (its own mount and PID namespaces), it sees the node's processes and every mount
namespace they are in, and frees what is proven leaked there.  Nothing a local user holds
(a mount namespace with no process in it is entered and read) makes the scan incomplete.

It never sends the GC verb to plugins: GC's ``cni.dev/valid-attachments`` must list every
attachment in use, which only the runtime that made them knows, and a list built from the
cache would condemn ADDs in progress and the pods of runtimes that keep no cache.  The
per-network `pycni gc NET NETNS` (cnitool's GC) and ``CNIConfig.gc_network_list`` do that
with the caller's list.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator, Sequence

from pycni.inspect import dnsname, nftmap
from pycni.inspect.collect import Paths, collect
from pycni.inspect.leaks import DEFAULT_GRACE_PERIOD, Leak, find_leaks
from pycni.inspect.model import NodeState, PortMapping
from pycni.net.netlink.client import rtnl
from pycni.net.nsscan import view_problems
from pycni.record import field, record
from pycni.runtime import cache
from pycni.runtime.api import CNIConfig
from pycni.runtime.confdir import list_network_confs
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import (
    NetworkConfigList,
    conf_list_from_bytes,
    conf_list_from_conf,
    plugin_conf_from_bytes,
)
from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError

DEL_TIMEOUT = 120.0  # seconds one chain DEL may take before its plugin is killed


@record
class CleanupReport:
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    remaining: list[Leak] = field(default_factory=list)
    planned: list[Leak] = field(default_factory=list)  # --dry-run: what would go, and why
    refused: list[str] = field(default_factory=list)  # why nothing was freed (scan incomplete)


def _configured(conf_dir: str, report: CleanupReport) -> dict[str, object]:
    confs: dict[str, object] = {}
    for path, conf in list_network_confs(conf_dir):
        if isinstance(conf, CNIError):
            report.errors.append(f"{path}: {conf.msg}")
        else:
            confs.setdefault(conf.name, conf)
    return confs


def _del_attachment(
    leak: Leak, configured: dict[str, object], cni_path: Sequence[str], cache_dir: str
) -> None:
    """DEL one dead attachment through its chain, as its ADD was configured."""
    info = cache.read_entry(leak.subject)
    conf: object | None = None
    if info.config:
        try:
            conf = conf_list_from_bytes(info.config)
        except CNIError:
            with contextlib.suppress(CNIError):
                conf = conf_list_from_conf(plugin_conf_from_bytes(info.config))
    if conf is None:
        conf = configured.get(info.network_name)
    if not isinstance(conf, NetworkConfigList):
        raise CNIError(
            INVALID_NETWORK_CONFIG, "neither the cache nor the conf dir has its configuration"
        )
    rt = RuntimeConf(
        container_id=info.container_id,
        netns=info.netns,
        ifname=info.ifname,
        args=tuple(info.cni_args or ()),
        capability_args=dict(info.capability_args or {}),
    )
    CNIConfig(list(cni_path), cache_dir=cache_dir, timeout=DEL_TIMEOUT).del_network_list(conf, rt)
    with contextlib.suppress(FileNotFoundError):  # an entry under another name than its ids
        os.unlink(leak.subject)


def _runtime_del(
    state: NodeState, leaks: list[Leak], cni_path: Sequence[str], report: CleanupReport
) -> None:
    configured = _configured(state.conf_dir, report)
    for leak in leaks:
        if leak.kind != "attachment":
            continue
        what = f"DEL {leak.network} {leak.container_id} {leak.ifname}"
        try:
            _del_attachment(leak, configured, cni_path, state.cache_dir)
        except (OSError, ValueError, CNIError) as err:
            report.errors.append(f"{what}: {err}")
            continue
        report.actions.append(f"{what}: {leak.reason}")


@contextlib.contextmanager
def _store_lock(directory: str) -> Iterator[None]:
    """host-local's lock file, so we never race an allocator on the same store."""
    fd = os.open(os.path.join(directory, "lock"), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _owner_lines(path: str) -> tuple[str, str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read(1 << 16).splitlines() or [""]
    return lines[0].strip(), (lines[1].strip() if len(lines) > 1 else "")


def _release(path: str, expected_cid: str, expected_ifname: str) -> None:
    """Remove a reservation file unless it was released and taken by another owner meanwhile."""
    with _store_lock(os.path.dirname(path)):
        if _owner_lines(path) != (expected_cid, expected_ifname):
            return
        os.unlink(path)


def _delete_link(name: str) -> None:
    with rtnl() as kernel:
        found = kernel.find_link(name)
        if found is not None:
            kernel.delete_link(found.index)


def _direct(
    state: NodeState, leaks: list[Leak], report: CleanupReport, *, drop_attachments: bool
) -> set[int]:
    """Remove each leak; the ids of the leaks that are gone now."""
    done: set[int] = set()
    done_owners: set[tuple[str, str, str]] = set()
    by_subject: dict[str, PortMapping] = {
        f"{m.family} {m.table} {m.chain} handle {m.handle}": m for m in state.port_mappings
    }
    for leak in leaks:
        action: Callable[[], None] | None = None
        if leak.kind == "reservation":
            path, cid, ifname = leak.subject, leak.container_id, leak.ifname

            def action(path: str = path, cid: str = cid, ifname: str = ifname) -> None:
                _release(path, cid, ifname)

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
                done.add(id(leak))  # removed with its owner's other rules
                continue
            done_owners.add(key)

            def action(mapping: PortMapping = mapping) -> None:
                nftmap.delete_mapping(mapping)

        elif leak.kind == "dnsmasq":

            def action(leak: Leak = leak) -> None:
                dnsname.remove(state, leak)
        elif leak.kind == "temp" or (leak.kind == "attachment" and drop_attachments):
            path = leak.subject

            def action(path: str = path) -> None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

        if action is None:
            continue
        try:
            action()
            report.actions.append(f"removed {leak.kind} {leak.subject}: {leak.reason}")
            done.add(id(leak))
        except Exception as exc:  # report every failure and go on with the rest
            report.errors.append(f"cannot remove {leak.kind} {leak.subject}: {exc}")
    return done


def _note_blind_spots(state: NodeState, report: CleanupReport) -> bool:
    """Say why evidence may be missing; False when the scan is not complete (free nothing)."""
    for problem in state.problems:
        if problem not in report.errors:
            report.errors.append(problem)
    if state.addresses_complete:
        return True
    # notes about unreadable cache files and opaque processes are warnings, not why the
    # scan is blind
    report.refused = [
        p for p in state.problems if not p.startswith("cache file ") and " is opaque (" not in p
    ] or ["not every network namespace could be examined"]
    return False


def clean(
    paths: Paths,
    cni_path: Sequence[str],
    *,
    use_runtime: bool = True,
    grace: float = DEFAULT_GRACE_PERIOD,
    dry_run: bool = False,
) -> CleanupReport:
    """Free what is proven leaked (see the module text); ``remaining`` is what it could not.

    The node is inspected once, and once more after DELs (a machine may have a thousand
    namespaces to look into).

    Nothing is freed when the scan is not complete: ``refused`` then says why.
    ``dry_run`` changes nothing: ``planned`` lists each leak with its reason.  Without
    ``use_runtime`` no plugin runs: a dead attachment's cache file is removed directly,
    after its reservation and rules.
    """
    report = CleanupReport()
    report.refused = view_problems()  # cheap, and refuses before looking into every namespace
    if report.refused:
        return report
    state = collect(paths)
    if not _note_blind_spots(state, report):
        return report
    leaks = find_leaks(state, grace=grace)
    if dry_run:
        report.planned = leaks
        report.remaining = leaks
        return report
    if use_runtime and any(leak.kind == "attachment" for leak in leaks):
        _runtime_del(state, leaks, cni_path, report)
        state = collect(paths)
        if not _note_blind_spots(state, report):
            return report
        leaks = find_leaks(state, grace=grace)
    ordered = sorted(leaks, key=lambda leak: leak.kind == "attachment")  # files last
    done = _direct(state, ordered, report, drop_attachments=not use_runtime)
    report.remaining = [leak for leak in leaks if id(leak) not in done]
    return report
