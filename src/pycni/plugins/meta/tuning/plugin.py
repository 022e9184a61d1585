"""tuning: change sysctls and link attributes of the pod's interface, and put them back on DEL.

ADD (needs prevResult): checks every sysctl key first, saves the current values of
everything it will change to the backup file, then writes sysctls and sets mac, promisc,
mtu, allmulti, txqlen and alias; a failure undoes the steps already done. DEL restores the
saved values and removes the file; it always succeeds. CHECK compares the live values with
the config. See docs/plugins/tuning.md.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable

from pycni.net import link_attrs
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.net.ns import NetNSNotFound
from pycni.net.sysctl import Sysctl
from pycni.plugins.meta.tuning import backup as backups
from pycni.plugins.meta.tuning.backup import Backup
from pycni.plugins.meta.tuning.conf import (
    TuningConf,
    backup_path,
    check_allowlist,
    duplicate_sysctl_keys,
    parse,
    read_allowlist,
    sysctl_path,
)
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import CNIError, InternalError, InvalidConfig
from pycni.spec.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import StateFiles

# errnos with which the kernel refuses a link attribute's value (not the link, not the call)
_REFUSED_VALUE = (errno.EINVAL, errno.ERANGE, errno.EADDRNOTAVAIL)


class Tuning(Plugin):
    about = "pycni tuning: sysctls and link attributes of a pod interface"

    def add(self, req: Request) -> Result:
        conf = self._load(req)
        paths = self._sysctl_paths(req, conf)
        prev = req.prev_result()
        if prev is None:
            raise InvalidConfig("Required prevResult missing")
        path = backup_path(conf.data_dir, req.container_id, req.ifname)
        files = req.host.state()
        with req.open_netns() as ns, req.host.pod(ns) as pod_kernel, Rollback(req.env) as rb:
            index = self._link_index(pod_kernel, req.ifname) if conf.changes_link() else 0
            sysctl = req.host.sysctl(pod_kernel)
            saved = self._snapshot(pod_kernel, sysctl, index, conf, paths)
            if not saved.is_empty():
                rb.step("backup")
                older = backups.load(files, path)
                backups.save(files, path, saved if older is None else saved.merged_over(older))
                if older is None:
                    rb.push("backup", lambda: backups.remove(files, path))
            for key, proc_path in paths.items():
                rb.step("sysctl")
                old = saved.sysctl[proc_path]
                _write_sysctl(sysctl, key, proc_path, conf.sysctl[key])
                rb.push("sysctl", functools.partial(sysctl.write, proc_path, old))
            self._apply_link(pod_kernel, index, conf, saved, rb)
        if conf.mac:
            for intf in prev.interfaces:
                if intf.name == req.ifname:
                    intf.mac = conf.mac
        return prev

    def delete(self, req: Request) -> None:
        conf = self._load(req)
        path = backup_path(conf.data_dir, req.container_id, req.ifname)
        files = req.host.state()
        if not req.netns:
            backups.remove(files, path)  # the pod is gone: nothing left to restore
            return
        try:
            with req.open_netns() as ns, req.host.pod(ns) as pod_kernel:
                errors = _restore(pod_kernel, req.host.sysctl(pod_kernel), req.ifname, files, path)
        except NetNSNotFound:
            backups.remove(files, path)
            return
        except CNIError as exc:
            req.log(f"tuning DEL: cannot enter the pod namespace: {exc}")
            return
        if errors:
            req.log("tuning DEL: " + "; ".join(errors))  # the reference also ignores these
        else:
            backups.remove(files, path)

    def check(self, req: Request) -> None:
        conf = self._load(req)
        paths = self._sysctl_paths(req, conf)
        if req.prev_result() is None:
            raise InvalidConfig("Required prevResult missing")
        with req.open_netns() as ns, req.host.pod(ns) as pod_kernel:
            sysctl = req.host.sysctl(pod_kernel)
            for key, proc_path in paths.items():
                try:
                    current = sysctl.read(proc_path)
                except OSError as exc:
                    raise InternalError(f"failed to read sysctl {key}: {exc.strerror}") from None
                if current.split() != conf.sysctl[key].split():
                    raise InternalError(
                        f"Error: Tuning configured value of /proc/sys/{proc_path} is "
                        f"{conf.sysctl[key]}, current value is {current}",
                    )
            try:
                index = index_of(pod_kernel, req.ifname)
            except LinkNotFound:
                raise InternalError(f"Cannot find container link {req.ifname}") from None
            _check_link(link_attrs.read(pod_kernel, index), conf, req.ifname)

    # -- steps ---------------------------------------------------------------------------------

    @staticmethod
    def _load(req: Request) -> TuningConf:
        dups = duplicate_sysctl_keys(req.stdin)
        if dups:
            raise InvalidConfig(f"duplicated sysctl keys are not allowed: {', '.join(dups)}")
        return parse(req)

    @staticmethod
    def _sysctl_paths(req: Request, conf: TuningConf) -> dict[str, str]:
        """Every key checked (allowlist, then the net. path rule) before anything changes."""
        check_allowlist(list(conf.sysctl), read_allowlist(dict(req.env)))
        return {key: sysctl_path(key, req.ifname) for key in conf.sysctl}

    @staticmethod
    def _link_index(pod_kernel: Kernel, ifname: str) -> int:
        try:
            return index_of(pod_kernel, ifname)
        except LinkNotFound:
            raise InternalError(f'failed to get "{ifname}": Link not found') from None

    @staticmethod
    def _snapshot(
        pod_kernel: Kernel, sysctl: Sysctl, index: int, conf: TuningConf, paths: dict[str, str]
    ) -> Backup:
        """The current values of everything the config will change."""
        saved = Backup()
        for key, proc_path in paths.items():
            try:
                saved.sysctl[proc_path] = sysctl.read(proc_path)
            except FileNotFoundError:
                raise InvalidConfig(f'sysctl "{key}" does not exist in the pod namespace') from None
            except OSError as exc:
                raise InternalError(f"failed to read sysctl {key}: {exc.strerror}") from None
        if not conf.changes_link():
            return saved
        now = link_attrs.read(pod_kernel, index)
        if conf.mac:
            saved.mac = now.mac
        if conf.promisc:
            saved.promisc = now.promisc
        if conf.mtu:
            saved.mtu = now.mtu
        if conf.allmulti is not None:
            saved.allmulti = now.allmulti
        if conf.txqlen is not None:
            saved.txqlen = now.txqlen
        if conf.alias is not None:
            saved.alias = now.alias
        return saved

    @staticmethod
    def _apply_link(
        pod_kernel: Kernel, index: int, conf: TuningConf, saved: Backup, rb: Rollback
    ) -> None:
        """mac, promisc, mtu, allmulti, txqlen, alias: each undone if a later one fails."""
        for name, value, apply, undo in _link_steps(pod_kernel, index, conf, saved):
            rb.step(name)
            try:
                apply()
            except (NetlinkError, ValueError) as exc:
                code = exc.code if isinstance(exc, NetlinkError) else 0
                if code in _REFUSED_VALUE:
                    # the link cannot take the config's value (e.g. an MTU above its maximum)
                    raise InvalidConfig(
                        f"invalid config: {name} {value!r} refused by the kernel for the "
                        f"interface: {os.strerror(code)}"
                    ) from None
                raise InternalError(f"failed to set {name} of the interface: {exc}") from None
            rb.push(name, undo)


Action = Callable[[], None]


def _link_steps(
    pod_kernel: Kernel, index: int, conf: TuningConf, saved: Backup
) -> list[tuple[str, object, Action, Action]]:
    """(name, new value, set it, put the saved value back) for each link change asked."""
    k, i = pod_kernel, index
    steps: list[tuple[str, object, Action, Action]] = []
    if conf.mac:
        mac, old_mac = conf.mac, saved.mac
        steps.append(
            (
                "mac",
                mac,
                lambda: link_attrs.set_mac(k, i, mac),
                lambda: link_attrs.set_mac(k, i, old_mac),
            )
        )
    if conf.promisc:
        old_promisc = bool(saved.promisc)
        steps.append(
            (
                "promisc",
                True,
                lambda: link_attrs.set_promisc(k, i, True),
                lambda: link_attrs.set_promisc(k, i, old_promisc),
            )
        )
    if conf.mtu:
        mtu, old_mtu = conf.mtu, saved.mtu
        steps.append(
            (
                "mtu",
                mtu,
                lambda: link_attrs.set_mtu(k, i, mtu),
                lambda: link_attrs.set_mtu(k, i, old_mtu),
            )
        )
    if conf.allmulti is not None:
        allmulti, old_allmulti = conf.allmulti, bool(saved.allmulti)
        steps.append(
            (
                "allmulti",
                allmulti,
                lambda: link_attrs.set_allmulti(k, i, allmulti),
                lambda: link_attrs.set_allmulti(k, i, old_allmulti),
            )
        )
    if conf.txqlen is not None:
        txqlen, old_txqlen = conf.txqlen, saved.txqlen or 0
        steps.append(
            (
                "txqlen",
                txqlen,
                lambda: link_attrs.set_txqlen(k, i, txqlen),
                lambda: link_attrs.set_txqlen(k, i, old_txqlen),
            )
        )
    if conf.alias is not None:
        alias, old_alias = conf.alias, saved.alias or ""
        steps.append(
            (
                "alias",
                alias,
                lambda: link_attrs.set_alias(k, i, alias),
                lambda: link_attrs.set_alias(k, i, old_alias),
            )
        )
    return steps


def _write_sysctl(sysctl: Sysctl, key: str, proc_path: str, value: str) -> None:
    try:
        sysctl.write(proc_path, value)
    except OSError as exc:
        raise InternalError(f'failed to set sysctl "{key}" to "{value}": {exc.strerror}') from None


def _restore(
    pod_kernel: Kernel, sysctl: Sysctl, ifname: str, files: StateFiles, path: str
) -> list[str]:
    """Put back what the backup file holds, in the reference's order; returns the failures."""
    saved = backups.load(files, path)
    if saved is None:
        return []
    errors: list[str] = []
    try:
        index = index_of(pod_kernel, ifname)
    except LinkNotFound:
        return []  # the interface is gone with everything set on it
    k, i = pod_kernel, index
    steps: list[tuple[str, Action]] = []
    if saved.mtu:
        mtu = saved.mtu
        steps.append(("MTU", lambda: link_attrs.set_mtu(k, i, mtu)))
    if saved.mac:
        mac = saved.mac
        steps.append(("MAC address", lambda: link_attrs.set_mac(k, i, mac)))
    if saved.promisc is not None:
        promisc = saved.promisc
        steps.append(("promiscuous mode", lambda: link_attrs.set_promisc(k, i, promisc)))
    if saved.allmulti is not None:
        allmulti = saved.allmulti
        steps.append(("all-multicast mode", lambda: link_attrs.set_allmulti(k, i, allmulti)))
    if saved.txqlen is not None:
        txqlen = saved.txqlen
        steps.append(("transmit queue length", lambda: link_attrs.set_txqlen(k, i, txqlen)))
    if saved.alias is not None:
        alias = saved.alias
        steps.append(("alias", lambda: link_attrs.set_alias(k, i, alias)))
    for what, restore in steps:
        try:
            restore()
        except (NetlinkError, ValueError) as exc:
            errors.append(f"failed to restore {what}: {exc}")
    for proc_path, value in saved.sysctl.items():
        try:
            sysctl.write(proc_path, value)
        except FileNotFoundError:
            pass  # e.g. a per-interface key of an interface that is gone
        except OSError as exc:
            errors.append(f"failed to restore sysctl {proc_path}: {exc.strerror}")
    return errors


def _check_link(now: link_attrs.LinkAttrs, conf: TuningConf, ifname: str) -> None:
    if conf.mac and conf.mac != now.mac:
        raise InternalError(
            f"Error: Tuning configured Ethernet of {ifname} is {conf.mac}, "
            f"current value is {now.mac}"
        )
    if conf.promisc != now.promisc:
        raise InternalError(
            f"Error: Tuning link {ifname} configured promisc is {str(conf.promisc).lower()}, "
            f"current value is {int(now.promisc)}"
        )
    if conf.mtu and conf.mtu != now.mtu:
        raise InternalError(
            f"Error: Tuning configured MTU of {ifname} is {conf.mtu}, current value is {now.mtu}"
        )
    if conf.allmulti is not None and conf.allmulti != now.allmulti:
        raise InternalError(
            f"Error: Tuning configured all-multicast mode of {ifname} is "
            f"{str(conf.allmulti).lower()}, current value is {str(now.allmulti).lower()}"
        )
    if conf.txqlen is not None and conf.txqlen != now.txqlen:
        raise InternalError(
            f"Error: Tuning configured transmit queue length of {ifname} is {conf.txqlen}, "
            f"current value is {now.txqlen}"
        )
    if conf.alias is not None and conf.alias != now.alias:
        raise InternalError(
            f"Error: Tuning configured alias of {ifname} is {conf.alias!r}, "
            f"current value is {now.alias!r}"
        )


PLUGIN = Tuning()
