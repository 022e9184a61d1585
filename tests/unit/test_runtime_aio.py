"""The asyncio wrapper and concurrent use of one CNIConfig from many threads."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pycni.runtime import AsyncCNIConfig, CNIConfig, RawExec, RuntimeConf, conf_list_from_bytes
from tests.unit.test_runtime_support import FakePlugins, conflist


def _cni(tmp_path: Path) -> tuple[FakePlugins, CNIConfig]:
    fakes = FakePlugins(tmp_path / "bin")
    cni = CNIConfig(
        [str(fakes.dir)], cache_dir=str(tmp_path / "cache"), exec=RawExec(copy_stderr=False)
    )
    return fakes, cni


def test_async_add_and_del(tmp_path: Path) -> None:
    fakes, cni = _cni(tmp_path)
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net", "1.0.0", {"type": "a"}))
    rt = RuntimeConf("c1", "/ns", "eth0")

    async def scenario() -> list[str]:
        acni = AsyncCNIConfig(cni)
        result = await acni.add_network_list(conf, rt)
        cached = await acni.get_network_list_cached_result(conf, rt)
        assert cached is not None and cached.to_dict() == result.to_dict()
        await acni.del_network_list(conf, rt)
        return [i.name for i in result.interfaces]

    assert asyncio.run(scenario()) == ["a"]
    assert [c["cmd"] for c in fakes.calls()] == ["ADD", "DEL"]


def test_async_cancel_kills_the_plugin(tmp_path: Path) -> None:
    fakes, cni = _cni(tmp_path)
    fakes.add("slow", ADD={"sleep": 30})
    conf = conf_list_from_bytes(conflist("net", "1.0.0", {"type": "slow"}))

    async def scenario() -> float:
        acni = AsyncCNIConfig(cni)
        task = asyncio.create_task(acni.add_network_list(conf, RuntimeConf("c1", "/ns", "eth0")))
        await asyncio.sleep(0.5)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - start

    assert asyncio.run(scenario()) < 5
    assert cni.get_cached_attachments() == []


def test_many_threads_share_one_config(tmp_path: Path) -> None:
    fakes, cni = _cni(tmp_path)
    fakes.add("a")
    fakes.add("b")
    conf = conf_list_from_bytes(conflist("net", "1.0.0", {"type": "a"}, {"type": "b"}))

    def lifecycle(index: int) -> str:
        rt = RuntimeConf(f"c{index}", f"/ns/{index}", "eth0")
        result = cni.add_network_list(conf, rt)
        return ",".join(i.name for i in result.interfaces)

    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lifecycle, range(16)))
    assert outputs == ["a,b"] * 16
    assert sorted(a.container_id for a in cni.get_cached_attachments()) == sorted(
        f"c{i}" for i in range(16)
    )
