"""``CNIConfig``: run network configurations against containers (libcni's api.go).

Every method is one self-contained call: nothing mutable is shared between calls except a
per-attachment lock, so one ``CNIConfig`` may be used from many threads.  Plugins are started
from the calling thread (see :mod:`pycni.runtime.exec`).
"""

from __future__ import annotations

import _thread
import os

from pycni.spec import validate
from pycni.spec import version as spec_version
from pycni.spec.conf import NetworkConfigList, PluginConfig, inject_conf
from pycni.spec.errors import INCOMPATIBLE_CNI_VERSION, CNIError, InternalError
from pycni.spec.result import Result

from . import cache
from .exec import (
    NO_CONTROL,
    CallControl,
    Exec,
    PluginInfo,
    RawExec,
    exec_plugin_with_result,
    exec_plugin_without_result,
    get_version_info,
    plugin_env,
)
from .trace import TraceContext
from .types import GCArgs, NetworkAttachment, RuntimeConf

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing, threading and contextlib: a one-shot `pycni add` need none of them
    import threading
    from collections.abc import Sequence
    from typing import Any

__all__ = ["CNIConfig", "GCError"]


class GCError(CNIError):
    """GC went on past failures; ``errors`` holds each one (``str`` joins them by newlines)."""

    def __init__(self, errors: Sequence[CNIError]) -> None:
        first = errors[0]
        super().__init__(first.code, "\n".join(str(e) for e in errors))
        self.errors = list(errors)


def _wrap(prefix: str, err: CNIError) -> CNIError:
    """Prefix a message and keep the code, like Go's ``%w`` keeps the wrapped types.Error."""
    wrapped = CNIError(err.code, f"{prefix}: {err.msg}", err.details)
    wrapped.__cause__ = err
    return wrapped


class _AttachmentLock:
    """One attachment's lock, shared by the calls on it while any holds or waits for it (a
    refcount instead of a WeakValueDictionary: weakref is an import a one-shot call skips)."""

    def __init__(self, owner: CNIConfig, key: str) -> None:
        self.owner, self.key = owner, key

    def __enter__(self) -> None:
        owner = self.owner
        with owner._locks_guard:
            entry = owner._locks.get(self.key)
            if entry is None:
                entry = owner._locks[self.key] = [_thread.allocate_lock(), 0]
            entry[1] += 1
        self.lock = entry[0]
        try:
            self.lock.acquire()
        except BaseException:
            self._release_entry()
            raise

    def __exit__(self, *exc: object) -> None:
        self.lock.release()
        self._release_entry()

    def _release_entry(self) -> None:
        owner = self.owner
        with owner._locks_guard:
            entry = owner._locks[self.key]
            entry[1] -= 1
            if entry[1] == 0:
                del owner._locks[self.key]


class CNIConfig:
    """The runtime entry point: ``CNIConfig(["/opt/cni/bin"]).add_network_list(conf, rt)``.

    ``timeout`` (seconds) bounds each call (the whole chain); a plugin still running at the
    deadline is killed with its process group.  Every call also takes ``timeout=`` and
    ``cancel=`` (a ``threading.Event``) to override or abort it.
    """

    def __init__(
        self,
        paths: Sequence[str],
        cache_dir: str = cache.DEFAULT_CACHE_DIR,
        exec: Exec | None = None,
        timeout: float | None = None,
    ) -> None:
        self.paths = tuple(p for p in paths)
        self.cache_dir = cache_dir or cache.DEFAULT_CACHE_DIR
        self.exec: Exec = exec if exec is not None else RawExec()
        self.timeout = timeout
        # (lock, number of calls holding or waiting for it), dropped when that reaches 0
        self._locks: dict[str, list[Any]] = {}
        self._locks_guard = _thread.allocate_lock()

    # --- helpers ----------------------------------------------------------------------------

    def _control(
        self,
        timeout: float | None,
        cancel: threading.Event | None,
        trace: TraceContext | None = None,
    ) -> CallControl:
        effective = self.timeout if timeout is None else timeout
        if effective is None and cancel is None and trace is None:
            return NO_CONTROL
        return CallControl.start(effective, cancel, trace)

    def _attachment_lock(self, net_name: str, rt: RuntimeConf) -> _AttachmentLock:
        """Serialise calls on one (network, container, ifname) inside this process: hold the
        returned lock (``with``) while the call runs."""
        return _AttachmentLock(self, f"{net_name}\0{rt.container_id}\0{rt.ifname}")

    def _env(self, command: str, rt: RuntimeConf) -> dict[str, str]:
        return plugin_env(
            command,
            container_id=rt.container_id,
            netns=rt.netns,
            args=rt.args,
            ifname=rt.ifname,
            path=os.pathsep.join(self.paths),
        )

    @staticmethod
    def _build_config(
        name: str,
        cni_version: str,
        plugin: PluginConfig,
        prev_result: Result | None,
        rt: RuntimeConf | None,
    ) -> PluginConfig:
        """libcni ``buildOneConfig``: name, version, prevResult, then runtimeConfig."""
        inject: dict[str, Any] = {"name": name, "cniVersion": cni_version}
        if prev_result is not None:
            inject["prevResult"] = prev_result.to_dict()
        conf = inject_conf(plugin, inject)
        if rt is None:
            return conf
        runtime_config = {
            cap: rt.capability_args[cap]
            for cap, enabled in plugin.capabilities.items()
            if enabled and cap in rt.capability_args
        }
        if runtime_config:
            conf = inject_conf(conf, {"runtimeConfig": runtime_config})
        return conf

    def _add(
        self,
        name: str,
        cni_version: str,
        plugin: PluginConfig,
        prev_result: Result | None,
        rt: RuntimeConf,
        control: CallControl,
    ) -> Result:
        path = self.exec.find_in_path(plugin.type, self.paths)
        validate.container_id(rt.container_id)
        validate.network_name(name)
        validate.interface_name(rt.ifname)
        conf = self._build_config(name, cni_version, plugin, prev_result, rt)
        return exec_plugin_with_result(self.exec, path, conf.raw, self._env("ADD", rt), control)

    def _run_without_result(
        self,
        command: str,
        name: str,
        cni_version: str,
        plugin: PluginConfig,
        prev_result: Result | None,
        rt: RuntimeConf,
        control: CallControl,
    ) -> None:
        path = self.exec.find_in_path(plugin.type, self.paths)
        conf = self._build_config(name, cni_version, plugin, prev_result, rt)
        exec_plugin_without_result(self.exec, path, conf.raw, self._env(command, rt), control)

    def _write_cache(self, name: str, raw: bytes, result: Result, rt: RuntimeConf) -> None:
        """Cache ADD's final result; a failure fails the ADD (the caller must DEL)."""
        try:
            cache.write_cache(self.cache_dir, result, raw, name, rt)
        except (OSError, CNIError) as err:
            text = err.msg if isinstance(err, CNIError) else str(err)
            raise InternalError(f'failed to set network "{name}" cached result: {text}') from err

    def _read_cache(self, name: str, cni_version: str, rt: RuntimeConf) -> Result | None:
        """The cached ADD result for CHECK/DEL; an unreadable cache fails the call."""
        try:
            return cache.read_cached_result(self.cache_dir, name, cni_version, rt)
        except CNIError as err:
            raise _wrap(f'failed to get network "{name}" cached result', err) from err

    # --- network lists ------------------------------------------------------------------------

    def add_network_list(
        self,
        conf: NetworkConfigList,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        trace: TraceContext | None = None,
    ) -> Result:
        """Run ADD through the chain in order and cache the final result.

        Each plugin gets the previous plugin's result as ``prevResult`` in the version that
        plugin printed.  On failure nothing is cached and no rollback DEL is run: the caller
        must DEL, as the spec requires.
        """
        control = self._control(timeout, cancel, trace)
        with self._attachment_lock(conf.name, rt):
            result: Result | None = None
            for plugin in conf.plugins:
                try:
                    result = self._add(conf.name, conf.cni_version, plugin, result, rt, control)
                except CNIError as err:
                    raise _wrap(f"plugin {plugin.description()} failed (add)", err) from err
            if result is None:
                raise InternalError(f'network "{conf.name}" has no plugins')
            self._write_cache(conf.name, conf.raw, result, rt)
            return result

    def check_network_list(
        self,
        conf: NetworkConfigList,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        """Run CHECK in order with the cached ADD result (config version >= 0.4.0)."""
        try:
            supported = spec_version.parse(conf.cni_version) >= spec_version.parse("0.4.0")
        except ValueError as err:
            raise CNIError(INCOMPATIBLE_CNI_VERSION, str(err)) from None
        if not supported:
            raise CNIError(
                INCOMPATIBLE_CNI_VERSION,
                f'configuration version "{conf.cni_version}" does not support the CHECK command',
            )
        if conf.disable_check:
            return
        control = self._control(timeout, cancel, trace)
        with self._attachment_lock(conf.name, rt):
            cached = self._read_cache(conf.name, conf.cni_version, rt)
            for plugin in conf.plugins:
                self._run_without_result(
                    "CHECK", conf.name, conf.cni_version, plugin, cached, rt, control
                )

    def del_network_list(
        self,
        conf: NetworkConfigList,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        """Run DEL through the chain in reverse with the cached result as ``prevResult``.

        An unreadable cache is dropped and DEL goes on without it; on a plugin failure the
        cache is kept so the DEL can be retried; on success it is removed.
        """
        control = self._control(timeout, cancel, trace)
        with self._attachment_lock(conf.name, rt):
            self._del_list(conf, rt, control)

    def _del_list(self, conf: NetworkConfigList, rt: RuntimeConf, control: CallControl) -> None:
        try:
            with_cache = spec_version.parse(conf.cni_version) >= spec_version.parse("0.4.0")
        except ValueError as err:
            raise CNIError(INCOMPATIBLE_CNI_VERSION, str(err)) from None
        cached: Result | None = None
        if with_cache:
            cached = self._cached_for_del(conf.name, conf.cni_version, rt)
        for plugin in reversed(conf.plugins):
            try:
                self._run_without_result(
                    "DEL", conf.name, conf.cni_version, plugin, cached, rt, control
                )
            except CNIError as err:
                raise _wrap(f"plugin {plugin.description()} failed (delete)", err) from err
        cache.delete_cache(self.cache_dir, conf.name, rt)

    def gc_network_list(
        self,
        conf: NetworkConfigList,
        args: GCArgs | None = None,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        """DEL every cached attachment of this network not in ``args``, then GC each plugin.

        ``args=None`` means no attachment is valid (cnitool's ``gc``).  Errors do not stop
        the sweep; they are all raised together at the end as a :class:`GCError`.
        """
        if conf.disable_gc:
            return
        control = self._control(timeout, cancel, trace)
        try:
            attachments = cache.list_attachments(self.cache_dir)
        except OSError:
            return
        valid = None
        if args is not None:
            valid = {(a.container_id, a.ifname) for a in args.valid_attachments}
        errors: list[CNIError] = []
        for att in attachments:
            if att.network != conf.name:
                continue
            if valid is not None and (att.container_id, att.ifname) in valid:
                continue
            rt = RuntimeConf(
                container_id=att.container_id,
                netns=att.netns,
                ifname=att.ifname,
                args=att.cni_args,
                capability_args=att.capability_args,
            )
            try:
                with self._attachment_lock(conf.name, rt):
                    self._del_list(conf, rt, control)
            except CNIError as err:
                errors.append(
                    _wrap(f"failed to delete stale attachment {rt.container_id} {rt.ifname}", err)
                )
        if spec_version.at_least(conf.cni_version, "1.1.0"):
            inject: dict[str, Any] = {"name": conf.name, "cniVersion": conf.cni_version}
            if args is not None:
                listed = [a.to_dict() for a in args.valid_attachments]
                inject["cni.dev/valid-attachments"] = listed
                inject["cni.dev/attachments"] = listed
            for plugin in conf.plugins:
                try:
                    plugin_conf = inject_conf(plugin, inject)
                except CNIError as err:
                    errors.append(
                        _wrap(f"failed to generate configuration to GC plugin {plugin.type}", err)
                    )
                    continue
                try:
                    path = self.exec.find_in_path(plugin.type, self.paths)
                    exec_plugin_without_result(
                        self.exec, path, plugin_conf.raw, self._env("GC", RuntimeConf()), control
                    )
                except CNIError as err:
                    errors.append(_wrap(f"failed to GC plugin {plugin.type}", err))
        if errors:
            raise GCError(errors)

    def get_status_network_list(
        self,
        conf: NetworkConfigList,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        """STATUS each plugin in order (config >= 1.1.0); the first error is raised as is."""
        if not spec_version.at_least(conf.cni_version, "1.1.0"):
            return
        control = self._control(timeout, cancel, trace)
        inject = {"name": conf.name, "cniVersion": conf.cni_version}
        for plugin in conf.plugins:
            try:
                plugin_conf = inject_conf(plugin, inject)
            except CNIError as err:
                raise _wrap(
                    f"failed to generate configuration to get plugin STATUS {plugin.type}", err
                ) from err
            path = self.exec.find_in_path(plugin.type, self.paths)
            exec_plugin_without_result(
                self.exec, path, plugin_conf.raw, self._env("STATUS", RuntimeConf()), control
            )

    # --- single plugin configs ----------------------------------------------------------------

    def add_network(
        self,
        plugin: PluginConfig,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        trace: TraceContext | None = None,
    ) -> Result:
        """ADD one plugin config (the deprecated single-plugin form) and cache its result."""
        control = self._control(timeout, None, trace)
        name, cni_version = plugin.name, plugin.cni_version
        with self._attachment_lock(name, rt):
            result = self._add(name, cni_version, plugin, None, rt, control)
            self._write_cache(name, plugin.raw, result, rt)
            return result

    def check_network(
        self,
        plugin: PluginConfig,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        name, cni_version = plugin.name, plugin.cni_version
        if not spec_version.at_least(cni_version, "0.4.0"):
            raise CNIError(
                INCOMPATIBLE_CNI_VERSION,
                f'configuration version "{cni_version}" does not support the CHECK command',
            )
        control = self._control(timeout, None, trace)
        with self._attachment_lock(name, rt):
            cached = self._read_cache(name, cni_version, rt)
            self._run_without_result("CHECK", name, cni_version, plugin, cached, rt, control)

    def del_network(
        self,
        plugin: PluginConfig,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        name, cni_version = plugin.name, plugin.cni_version
        control = self._control(timeout, None, trace)
        with self._attachment_lock(name, rt):
            cached: Result | None = None
            if spec_version.at_least(cni_version, "0.4.0"):
                cached = self._cached_for_del(name, cni_version, rt)
            self._run_without_result("DEL", name, cni_version, plugin, cached, rt, control)
            cache.delete_cache(self.cache_dir, name, rt)

    def _cached_for_del(self, name: str, cni_version: str, rt: RuntimeConf) -> Result | None:
        """The cached result for a DEL, as libcni (since "Tolerate invalid cni cache for
        DelNetwork", 2025): one that cannot be decoded or converted is removed and the DEL
        goes on without a prevResult, so a corrupt cache never blocks a teardown."""
        try:
            return cache.read_cached_result(self.cache_dir, name, cni_version, rt)
        except CNIError:
            cache.delete_cache(self.cache_dir, name, rt)
            return None

    # --- cache and plugin queries -------------------------------------------------------------

    def get_network_list_cached_result(
        self, conf: NetworkConfigList, rt: RuntimeConf
    ) -> Result | None:
        return cache.read_cached_result(self.cache_dir, conf.name, conf.cni_version, rt)

    def get_network_list_cached_config(
        self, conf: NetworkConfigList, rt: RuntimeConf
    ) -> tuple[bytes, RuntimeConf] | None:
        return cache.read_cached_config(self.cache_dir, conf.name, rt)

    def get_cached_attachments(self, container_id: str = "") -> list[NetworkAttachment]:
        return cache.list_attachments(self.cache_dir, container_id)

    def get_version_info(self, plugin_type: str, *, timeout: float | None = None) -> PluginInfo:
        path = self.exec.find_in_path(plugin_type, self.paths)
        return get_version_info(self.exec, path, self._control(timeout, None))

    def validate_network_list(
        self, conf: NetworkConfigList, *, timeout: float | None = None
    ) -> list[str]:
        """Check every plugin exists and supports the config version; return the capabilities.

        All problems are collected and raised together as ``[e1 e2]``.
        """
        errors = [err for _index, err in self.plugin_problems(conf, timeout=timeout)]
        if errors:
            raise CNIError(errors[0].code, "[" + " ".join(str(e) for e in errors) + "]")
        caps: set[str] = set()
        for plugin in conf.plugins:
            caps.update(cap for cap, enabled in plugin.capabilities.items() if enabled)
        return sorted(caps)

    def plugin_problems(
        self, conf: NetworkConfigList, *, timeout: float | None = None
    ) -> list[tuple[int, CNIError]]:
        """(index, error) for each plugin of ``conf`` that is missing from the plugin path
        or does not speak the config's version (what validate_network_list joins)."""
        control = self._control(timeout, None)
        problems: list[tuple[int, CNIError]] = []
        for index, plugin in enumerate(conf.plugins):
            try:
                self._validate_plugin(plugin.type, conf.cni_version, control)
            except CNIError as err:
                problems.append((index, err))
        return problems

    def validate_network(self, plugin: PluginConfig, *, timeout: float | None = None) -> list[str]:
        self._validate_plugin(plugin.type, plugin.cni_version, self._control(timeout, None))
        return sorted(cap for cap, enabled in plugin.capabilities.items() if enabled)

    def _validate_plugin(self, plugin_type: str, expected: str, control: CallControl) -> None:
        path = self.exec.find_in_path(plugin_type, self.paths)
        expected = expected or "0.1.0"
        info = get_version_info(self.exec, path, control)
        if expected not in info.supported_versions:
            raise CNIError(
                INCOMPATIBLE_CNI_VERSION,
                f'plugin {plugin_type} does not support config version "{expected}"',
            )
