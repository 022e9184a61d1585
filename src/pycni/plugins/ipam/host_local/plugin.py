"""host-local: addresses from local ranges, one per range set, reserved as files on disk.

A drop-in for the reference binary (same config, same results, same store), plus GC and
STATUS. No netlink: this module only touches files, the node's state files it is handed
(``req.host.state()``).
"""

from __future__ import annotations

import os

from pycni.net import resolvconf
from pycni.plugins.ipam.host_local.allocator import Allocator, free_count
from pycni.plugins.ipam.host_local.config import IPAMConfig, load_cached
from pycni.plugins.ipam.host_local.store import Store, go_trim, is_reservation_name
from pycni.skel.base import Plugin, Request
from pycni.spec.errors import (
    INVALID_NETWORK_CONFIG,
    IO_FAILURE,
    PLUGIN_NOT_AVAILABLE,
    CNIError,
    InternalError,
)
from pycni.spec.result import DNS, IPConfig, Result

TYPE_CHECKING = False  # not typing's: the cold path of a plugin call imports no typing
if TYPE_CHECKING:
    pass


def _os_error(err: OSError) -> str:
    """Go-style wording of a failed file operation: ``open /x: no such file or directory``."""
    op = "open"
    reason = (err.strerror or str(err)).lower()
    return f"{op} {err.filename}: {reason}" if err.filename else reason


def open_store(req: Request, cfg: IPAMConfig, *, create: bool = True) -> Store:
    try:
        return Store(cfg.name, cfg.data_dir, create=create, files=req.host.state())
    except OSError as err:
        raise CNIError(
            IO_FAILURE, f"failed to open the host-local store: {_os_error(err)}"
        ) from None


class HostLocal(Plugin):
    about = "pycni host-local: IP addresses from local ranges, reservations kept on disk"

    def add(self, req: Request) -> Result:
        cfg = load_cached(req.config, req.args)
        dns = DNS()
        if cfg.resolv_conf:
            try:
                dns = resolvconf.parse_file(cfg.resolv_conf)
            except OSError as err:
                raise CNIError(IO_FAILURE, _os_error(err)) from None
        with open_store(req, cfg) as store:
            ips = self._allocate(req, cfg, store)
        return Result(cni_version="1.1.0", ips=ips, routes=list(cfg.routes), dns=dns)

    def _allocate(self, req: Request, cfg: IPAMConfig, store: Store) -> list[IPConfig]:
        pending = list(cfg.requested)
        used: list[Allocator] = []
        ips: list[IPConfig] = []

        def release_used() -> None:
            for allocator in used:
                try:
                    allocator.release(req.container_id, req.ifname)
                except OSError as err:
                    req.log(f"host-local: releasing after a failed ADD: {err}")

        for idx, range_set in enumerate(cfg.range_sets):
            allocator = Allocator(range_set, store, idx)
            requested = next((a for a in pending if range_set.contains(a)), None)
            if requested is not None:
                pending.remove(requested)
            try:
                ips.append(allocator.get(req.container_id, req.ifname, requested))
            except CNIError as err:
                release_used()
                raise CNIError(err.code, f"failed to allocate for range {idx}: {err.msg}") from None
            except OSError as err:
                release_used()
                raise CNIError(
                    IO_FAILURE, f"failed to allocate for range {idx}: {_os_error(err)}"
                ) from None
            except BaseException:
                release_used()
                raise
            used.append(allocator)
        if pending:
            release_used()
            missing = " ".join(str(a) for a in pending)
            raise CNIError(
                INVALID_NETWORK_CONFIG, f"failed to allocate all requested IPs: {missing}"
            )
        return ips

    def delete(self, req: Request) -> None:
        cfg = load_cached(req.config, req.args)
        errors: list[str] = []
        with open_store(req, cfg) as store:
            # As the reference: one release per range set. Release is not range-scoped, so
            # a later round only finds legacy id-only files left by an old version.
            for idx, range_set in enumerate(cfg.range_sets):
                try:
                    Allocator(range_set, store, idx).release(req.container_id, req.ifname)
                except OSError as err:
                    errors.append(_os_error(err))
        if errors:
            raise CNIError(IO_FAILURE, ";".join(errors))

    def check(self, req: Request) -> None:
        cfg = load_cached(req.config, req.args)
        with open_store(req, cfg) as store:
            found = store.find_by_id(req.container_id, req.ifname)
        if not found:
            raise InternalError(
                f"host-local: Failed to find address added by container {req.container_id}",
            )

    def gc(self, req: Request) -> None:
        """Release every reservation whose attachment is not in ``cni.dev/valid-attachments``
        and whose address no live network namespace on the node has.

        A missing or null list means no attachment is valid (the spec makes the key
        mandatory; libcni sends null for an empty list). Legacy files holding only a
        container ID are kept when that ID is valid on any interface.  Stricter than the
        reference: a reservation whose address is configured in some live namespace (a pod
        of another runtime sharing the network's store, a pod the list forgot) is kept, as
        freeing it would give a live pod's address to the next ADD.  The list is what the
        spec makes authoritative: what the scan (see pycni.net.nsscan) cannot see, or could
        not read, stops nothing (it is logged), as nothing a local user holds may switch GC
        off, and the reference succeeds wherever it runs.
        """
        cfg = load_cached(req.config, "")
        valid = req.valid_attachments() or []
        pairs = {(go_trim(cid), ifname) for cid, ifname in valid}
        ids = {go_trim(cid) for cid, _ifname in valid}
        if not req.host.state().is_dir(os.path.join(cfg.data_dir, cfg.name)):
            return
        with open_store(req, cfg) as store:
            with store.locked():
                stale = []
                for path, name, content in list(store.files()):
                    if not _is_address(name):
                        continue
                    cid, sep, ifname = content.partition("\r\n")
                    if not ((cid, ifname) in pairs if sep else content in ids):
                        stale.append((path, name, content))
            if not stale:
                return
            live = req.host.live_addresses()  # outside the lock: ADDs go on meanwhile
            for problem in live.problems:
                req.log(f"host-local GC: {problem}")
            with store.locked():
                for path, name, content in stale:
                    if _canonical(name) in live.addresses:
                        req.log(f"host-local GC: kept {name}: a live network namespace has it")
                        continue
                    if store.read_owner(path) != content:
                        continue  # released and reserved again meanwhile: not stale
                    try:
                        store.remove(path)
                    except FileNotFoundError:
                        pass
                    except OSError as err:
                        raise CNIError(IO_FAILURE, f"remove {path}: {err.strerror}") from None

    def status(self, req: Request) -> None:
        """Code 50 when every ADD would fail: the store cannot be written (a read-only file
        system, a file where its directory goes), or some range set has no address left."""
        cfg = load_cached(req.config, "")
        store = Store(cfg.name, cfg.data_dir, create=False, files=req.host.state())
        problem = store.unwritable()
        if problem:
            raise CNIError(PLUGIN_NOT_AVAILABLE, f"the host-local store {store.dir} {problem}")
        reserved = set(store.reserved_addresses())
        for idx, range_set in enumerate(cfg.range_sets):
            if free_count(range_set, reserved) <= 0:
                raise CNIError(
                    PLUGIN_NOT_AVAILABLE,
                    f"no IP addresses available in range set {idx}: {range_set}",
                )


def _canonical(name: str) -> str:
    from pycni.net.ipmath import parse_ip

    return str(parse_ip(name))


def _is_address(name: str) -> bool:
    if not is_reservation_name(name):
        return False
    from pycni.net.ipmath import parse_ip

    try:
        parse_ip(name)
    except ValueError:
        return False
    return True


PLUGIN = HostLocal()
