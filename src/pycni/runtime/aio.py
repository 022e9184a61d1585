"""asyncio access to the runtime: each call runs in a worker thread and can be cancelled.

Cancelling the awaiting task sets the call's cancel event, which kills the running plugin
(and its process group) and ends the worker thread promptly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from pycni.spec.conf import NetworkConfigList
from pycni.spec.result import Result

from .api import CNIConfig
from .exec import PluginInfo
from .trace import TraceContext
from .types import GCArgs, NetworkAttachment, RuntimeConf

__all__ = ["AsyncCNIConfig"]

T = TypeVar("T")


class AsyncCNIConfig:
    """``await AsyncCNIConfig(CNIConfig(paths)).add_network_list(conf, rt)``."""

    def __init__(self, config: CNIConfig, executor: Executor | None = None) -> None:
        self.config = config
        self.executor = executor

    async def _run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        call = functools.partial(func, *args, cancel=cancel, **kwargs)
        future = loop.run_in_executor(self.executor, call)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()
            with contextlib.suppress(BaseException):
                await future
            raise

    async def _plain(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(func, *args, **kwargs))

    async def add_network_list(
        self,
        conf: NetworkConfigList,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        trace: TraceContext | None = None,
    ) -> Result:
        return await self._run(self.config.add_network_list, conf, rt, timeout=timeout, trace=trace)

    async def check_network_list(
        self,
        conf: NetworkConfigList,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        await self._run(self.config.check_network_list, conf, rt, timeout=timeout, trace=trace)

    async def del_network_list(
        self,
        conf: NetworkConfigList,
        rt: RuntimeConf,
        *,
        timeout: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        await self._run(self.config.del_network_list, conf, rt, timeout=timeout, trace=trace)

    async def gc_network_list(
        self, conf: NetworkConfigList, args: GCArgs | None = None, *, timeout: float | None = None
    ) -> None:
        await self._run(self.config.gc_network_list, conf, args, timeout=timeout)

    async def get_status_network_list(
        self, conf: NetworkConfigList, *, timeout: float | None = None
    ) -> None:
        await self._run(self.config.get_status_network_list, conf, timeout=timeout)

    async def get_version_info(self, plugin_type: str) -> PluginInfo:
        return await self._plain(self.config.get_version_info, plugin_type)

    async def validate_network_list(self, conf: NetworkConfigList) -> list[str]:
        return await self._plain(self.config.validate_network_list, conf)

    async def get_network_list_cached_result(
        self, conf: NetworkConfigList, rt: RuntimeConf
    ) -> Result | None:
        return await self._plain(self.config.get_network_list_cached_result, conf, rt)

    async def get_cached_attachments(self, container_id: str = "") -> list[NetworkAttachment]:
        return await self._plain(self.config.get_cached_attachments, container_id)
