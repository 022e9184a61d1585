"""Chain semantics of CNIConfig with fake plugins that record their stdin and env."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime import (
    CNIConfig,
    GCArgs,
    GCAttachment,
    GCError,
    RawExec,
    RuntimeConf,
    conf_list_from_bytes,
    plugin_conf_from_bytes,
)
from pycni.spec.errors import CNIError
from tests.unit.test_runtime_support import FakePlugins, conflist

RT = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0", (("K8S_POD", "p1"),), {"portMappings": [1]})


@pytest.fixture
def fakes(tmp_path: Path) -> FakePlugins:
    return FakePlugins(tmp_path / "bin")


@pytest.fixture
def cni(fakes: FakePlugins, tmp_path: Path) -> CNIConfig:
    return CNIConfig(
        [str(fakes.dir)], cache_dir=str(tmp_path / "cache"), exec=RawExec(copy_stderr=False)
    )


def _stdin(call: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(call["stdin"])
    return data


def test_add_runs_in_order_and_passes_prev_result(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    fakes.add("b")
    conf = conf_list_from_bytes(
        conflist("net1", "1.0.0", {"type": "a"}, {"type": "b", "x": {"y": 1}})
    )
    result = cni.add_network_list(conf, RT)
    assert [i.name for i in result.interfaces] == ["a", "b"]
    calls = fakes.calls()
    assert [(c["plugin"], c["cmd"]) for c in calls] == [("a", "ADD"), ("b", "ADD")]
    first, second = _stdin(calls[0]), _stdin(calls[1])
    assert "prevResult" not in first
    assert first["name"] == "net1" and first["cniVersion"] == "1.0.0"
    assert second["prevResult"]["interfaces"] == [{"name": "a"}]
    assert second["x"] == {"y": 1}  # unknown keys pass through
    env = calls[0]["env"]
    assert env["CNI_COMMAND"] == "ADD"
    assert env["CNI_CONTAINERID"] == "ctr1"
    assert env["CNI_NETNS"] == "/var/run/netns/ctr1"
    assert env["CNI_IFNAME"] == "eth0"
    assert env["CNI_ARGS"] == "K8S_POD=p1"
    assert env["CNI_PATH"] == str(fakes.dir)


def test_add_prev_result_is_not_converted(fakes: FakePlugins, cni: CNIConfig) -> None:
    old = {"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.9.0.5/16"}]}
    fakes.add("a", ADD={"stdout": json.dumps(old)})
    fakes.add("b")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}, {"type": "b"}))
    cni.add_network_list(conf, RT)
    prev = _stdin(fakes.calls()[1])["prevResult"]
    assert prev["cniVersion"] == "0.3.1"
    assert prev["ips"][0]["version"] == "4"


def test_result_without_version_gets_config_version(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a", ADD={"stdout": json.dumps({"ips": [{"address": "10.0.0.2/8"}]})})
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    assert cni.add_network_list(conf, RT).cni_version == "1.0.0"


def test_runtime_config_only_for_enabled_capabilities(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    fakes.add("b")
    fakes.add("c")
    conf = conf_list_from_bytes(
        conflist(
            "net1",
            "1.0.0",
            {"type": "a", "capabilities": {"portMappings": True, "bandwidth": True}},
            {"type": "b", "capabilities": {"portMappings": False}},
            {"type": "c", "runtimeConfig": {"old": 1}},
        )
    )
    cni.add_network_list(conf, RT)
    a, b, c = (_stdin(x) for x in fakes.calls())
    assert a["runtimeConfig"] == {"portMappings": [1]}
    assert a["capabilities"] == {"portMappings": True, "bandwidth": True}  # not stripped
    assert "runtimeConfig" not in b
    assert c["runtimeConfig"] == {"old": 1}  # nothing to inject, left alone


def test_add_failure_wraps_error_and_writes_no_cache(
    fakes: FakePlugins, cni: CNIConfig, tmp_path: Path
) -> None:
    fakes.add("a")
    fakes.add(
        "b", ADD={"stdout": json.dumps({"code": 11, "msg": "busy", "details": "later"}), "exit": 1}
    )
    conf = conf_list_from_bytes(
        conflist("net1", "1.0.0", {"type": "a"}, {"type": "b", "name": "bee"})
    )
    with pytest.raises(CNIError) as info:
        cni.add_network_list(conf, RT)
    assert info.value.code == 11
    assert str(info.value) == 'plugin type="b" name="bee" failed (add): busy; later'
    assert not (tmp_path / "cache" / "results").exists()
    assert [c["cmd"] for c in fakes.calls()] == ["ADD", "ADD"]  # no rollback DEL


def test_add_validates_names(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    with pytest.raises(CNIError) as info:
        cni.add_network_list(conf, RuntimeConf("bad id!", "/x", "eth0"))
    assert info.value.code == 4
    assert "invalid characters in containerID" in str(info.value)
    with pytest.raises(CNIError) as info:
        cni.add_network_list(conf, RuntimeConf("c", "/x", "a-very-long-interface"))
    assert "interface name is too long" in str(info.value)
    assert fakes.calls() == []


def test_add_writes_libcni_cache(fakes: FakePlugins, cni: CNIConfig, tmp_path: Path) -> None:
    fakes.add("a")
    raw = conflist("net1", "1.0.0", {"type": "a"})
    cni.add_network_list(conf_list_from_bytes(raw), RT)
    path = tmp_path / "cache" / "results" / "net1-ctr1-eth0"
    data = json.loads(path.read_bytes())
    assert list(data) == [
        "kind",
        "containerId",
        "config",
        "ifName",
        "networkName",
        "netns",
        "cniArgs",
        "capabilityArgs",
        "result",
    ]
    assert data["kind"] == "cniCacheV1"
    assert base64.b64decode(data["config"]) == raw
    assert data["cniArgs"] == [["K8S_POD", "p1"]]
    assert data["capabilityArgs"] == {"portMappings": [1]}
    assert data["result"]["interfaces"] == [{"name": "a"}]
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert [a.container_id for a in cni.get_cached_attachments("ctr1")] == ["ctr1"]
    cached = cni.get_network_list_cached_config(
        conf_list_from_bytes(raw), RuntimeConf("ctr1", "", "eth0")
    )
    assert cached is not None
    assert cached[0] == raw and cached[1].args == (("K8S_POD", "p1"),)


def test_del_runs_reverse_with_cached_result_converted(
    fakes: FakePlugins, cni: CNIConfig, tmp_path: Path
) -> None:
    fakes.add("a")
    fakes.add("b")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}, {"type": "b"}))
    cni.add_network_list(conf, RT)
    fakes.clear()
    # the same network now declared at 0.4.0: the cached 1.0.0 result is converted
    older = conf_list_from_bytes(conflist("net1", "0.4.0", {"type": "a"}, {"type": "b"}))
    cni.del_network_list(older, RT)
    calls = fakes.calls()
    assert [(c["plugin"], c["cmd"]) for c in calls] == [("b", "DEL"), ("a", "DEL")]
    prev = _stdin(calls[0])["prevResult"]
    assert prev["cniVersion"] == "0.4.0"
    assert prev["ips"][0]["version"] == "4"
    assert not (tmp_path / "cache" / "results" / "net1-ctr1-eth0").exists()


def test_del_failure_keeps_cache_then_retry_succeeds(
    fakes: FakePlugins, cni: CNIConfig, tmp_path: Path
) -> None:
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    cni.add_network_list(conf, RT)
    fakes.add("a", DEL={"stdout": json.dumps({"code": 7, "msg": "nope"}), "exit": 1})
    with pytest.raises(CNIError) as info:
        cni.del_network_list(conf, RT)
    assert str(info.value) == 'plugin type="a" failed (delete): nope'
    assert info.value.code == 7
    cache_file = tmp_path / "cache" / "results" / "net1-ctr1-eth0"
    assert cache_file.exists()
    fakes.add("a")
    cni.del_network_list(conf, RT)
    cni.del_network_list(conf, RT)  # repeated DEL is fine
    assert not cache_file.exists()


@pytest.mark.parametrize("content", [b"", b"{garbage", b"\x00\x00"])
def test_del_tolerates_corrupt_cache(
    fakes: FakePlugins, cni: CNIConfig, tmp_path: Path, content: bytes
) -> None:
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    results = tmp_path / "cache" / "results"
    results.mkdir(parents=True)
    (results / "net1-ctr1-eth0").write_bytes(content)
    with pytest.raises(CNIError) as info:
        cni.check_network_list(conf, RT)
    assert str(info.value).startswith('failed to get network "net1" cached result: ')
    if content == b"":
        assert str(info.value).endswith(
            "decoding version from network config: unexpected end of JSON input"
        )
    cni.del_network_list(conf, RT)
    assert "prevResult" not in _stdin(fakes.calls()[-1])
    assert not (results / "net1-ctr1-eth0").exists()


INVALID_CACHES = [
    b"",  # 0 bytes: a crash while writing, under a writer that does not rename
    b"{garbage",
    b"\x00\x00",
    b"[]",
    b'{"kind":"cniCacheV1","result":{"cniVersion":"1.0.0","ips":"x"}}',
    b'{"kind":"cniCacheV1","result":{"cniVersion":"1.0.0","ips":[{"address":"bad"}]}}',
    b'{"kind":"cniCacheV1","result":{"cniVersion":"9.9.9"}}',  # cannot be converted
    b'{"cniVersion":"0.2.0","ip4":{"ip":"x"}}',  # a legacy bare result, invalid
]


@pytest.mark.parametrize("content", INVALID_CACHES)
@pytest.mark.parametrize("form", ["list", "single"])
def test_del_proceeds_without_an_invalid_cached_result(
    fakes: FakePlugins, cni: CNIConfig, tmp_path: Path, content: bytes, form: str
) -> None:
    """libcni main (2025, "Tolerate invalid cni cache for DelNetwork"): DelNetworkList and
    DelNetwork drop a cached result they cannot parse and run the DEL without prevResult;
    CHECK still reports it."""
    fakes.add("a")
    raw = conflist("net1", "1.0.0", {"type": "a"})
    results = tmp_path / "cache" / "results"
    results.mkdir(parents=True)
    (results / "net1-ctr1-eth0").write_bytes(content)
    if form == "list":
        conf = conf_list_from_bytes(raw)
        with pytest.raises(CNIError):
            cni.check_network_list(conf, RT)
        cni.del_network_list(conf, RT)
    else:
        plugin = plugin_conf_from_bytes(
            json.dumps({"cniVersion": "1.0.0", "name": "net1", "type": "a"}).encode()
        )
        with pytest.raises(CNIError):
            cni.check_network(plugin, RT)
        cni.del_network(plugin, RT)
    (call,) = [c for c in fakes.calls() if c["cmd"] == "DEL"]
    assert "prevResult" not in _stdin(call)
    assert not (results / "net1-ctr1-eth0").exists()


def test_del_of_an_unreadable_cache_runs_without_it(
    fakes: FakePlugins, cni: CNIConfig, tmp_path: Path
) -> None:
    """A cache path that cannot be read (here a directory) is no cache, as libcni's."""
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    (tmp_path / "cache" / "results" / "net1-ctr1-eth0").mkdir(parents=True)
    cni.del_network_list(conf, RT)
    assert "prevResult" not in _stdin(fakes.calls()[-1])


def test_del_reads_legacy_bare_result(fakes: FakePlugins, cni: CNIConfig, tmp_path: Path) -> None:
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    results = tmp_path / "cache" / "results"
    results.mkdir(parents=True)
    bare = {"cniVersion": "0.2.0", "ip4": {"ip": "10.3.0.4/24"}}
    (results / "net1-ctr1-eth0").write_text(json.dumps(bare))
    cni.del_network_list(conf, RT)
    prev = _stdin(fakes.calls()[0])["prevResult"]
    assert prev["cniVersion"] == "1.0.0"
    assert prev["ips"][0]["address"] == "10.3.0.4/24"


def test_del_below_040_sends_no_prev_result(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "0.3.1", {"type": "a"}))
    cni.add_network_list(conf, RT)
    cni.del_network_list(conf, RT)
    assert "prevResult" not in _stdin(fakes.calls()[-1])


def test_check_gating_and_disable(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    old = conf_list_from_bytes(conflist("net1", "0.3.1", {"type": "a"}))
    with pytest.raises(CNIError) as info:
        cni.check_network_list(old, RT)
    assert info.value.code == 1
    assert str(info.value) == 'configuration version "0.3.1" does not support the CHECK command'
    disabled = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}, disableCheck="true"))
    cni.check_network_list(disabled, RT)
    assert fakes.calls() == []


def test_check_sends_cached_result_and_returns_plugin_error(
    fakes: FakePlugins, cni: CNIConfig
) -> None:
    fakes.add("a")
    fakes.add("b", CHECK={"stdout": json.dumps({"code": 100, "msg": "route missing"}), "exit": 1})
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}, {"type": "b"}))
    cni.add_network_list(conf, RT)
    fakes.clear()
    with pytest.raises(CNIError) as info:
        cni.check_network_list(conf, RT)
    assert (info.value.code, str(info.value)) == (100, "route missing")  # unwrapped
    calls = fakes.calls()
    assert [c["cmd"] for c in calls] == ["CHECK", "CHECK"]
    assert _stdin(calls[0])["prevResult"]["interfaces"] == [{"name": "a"}, {"name": "b"}]


def test_gc_deletes_stale_then_gcs_plugins(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    fakes.add("b")
    conf = conf_list_from_bytes(conflist("net1", "1.1.0", {"type": "a"}, {"type": "b"}))
    other = conf_list_from_bytes(conflist("net2", "1.1.0", {"type": "a"}))
    for cid in ("keep", "stale"):
        cni.add_network_list(conf, RuntimeConf(cid, f"/ns/{cid}", "eth0"))
    cni.add_network_list(other, RuntimeConf("stale", "/ns/stale", "eth0"))
    fakes.clear()
    cni.gc_network_list(conf, GCArgs((GCAttachment("keep", "eth0"),)))
    calls = fakes.calls()
    assert [(c["plugin"], c["cmd"]) for c in calls] == [
        ("b", "DEL"),
        ("a", "DEL"),
        ("a", "GC"),
        ("b", "GC"),
    ]
    assert calls[0]["env"]["CNI_CONTAINERID"] == "stale"
    assert calls[0]["env"]["CNI_NETNS"] == "/ns/stale"
    gc_conf = _stdin(calls[2])
    expected = [{"containerID": "keep", "ifname": "eth0"}]
    assert gc_conf["cni.dev/valid-attachments"] == expected
    assert gc_conf["cni.dev/attachments"] == expected
    assert "prevResult" not in gc_conf and "runtimeConfig" not in gc_conf
    assert calls[2]["env"]["CNI_CONTAINERID"] == "" and calls[2]["env"]["CNI_IFNAME"] == ""
    remaining = sorted((a.network, a.container_id) for a in cni.get_cached_attachments())
    assert remaining == [("net1", "keep"), ("net2", "stale")]


def test_gc_continues_past_errors_and_reports_all(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a", GC={"stdout": json.dumps({"code": 5, "msg": "gc a broke"}), "exit": 1})
    fakes.add("b", GC={"stdout": json.dumps({"code": 6, "msg": "gc b broke"}), "exit": 1})
    conf = conf_list_from_bytes(conflist("net1", "1.1.0", {"type": "a"}, {"type": "b"}))
    with pytest.raises(GCError) as info:
        cni.gc_network_list(conf, None)
    assert len(info.value.errors) == 2
    assert str(info.value) == "failed to GC plugin a: gc a broke\nfailed to GC plugin b: gc b broke"
    assert "cni.dev/valid-attachments" not in _stdin(fakes.calls()[0])


def test_gc_none_deletes_everything_and_old_versions_skip_gc_verb(
    fakes: FakePlugins, cni: CNIConfig
) -> None:
    fakes.add("a")
    conf = conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"}))
    cni.add_network_list(conf, RT)
    fakes.clear()
    cni.gc_network_list(conf)
    assert [c["cmd"] for c in fakes.calls()] == ["DEL"]
    assert cni.get_cached_attachments() == []
    disabled = conf_list_from_bytes(conflist("net1", "1.1.0", {"type": "a"}, disableGC=True))
    fakes.clear()
    cni.gc_network_list(disabled)
    assert fakes.calls() == []


def test_status_codes(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a")
    fakes.add("b", STATUS={"stdout": json.dumps({"code": 50, "msg": "not ready"}), "exit": 1})
    fakes.add("c")
    conf = conf_list_from_bytes(
        conflist("net1", "1.1.0", {"type": "a"}, {"type": "b"}, {"type": "c"})
    )
    with pytest.raises(CNIError) as info:
        cni.get_status_network_list(conf)
    assert (info.value.code, info.value.msg) == (50, "not ready")
    calls = fakes.calls()
    assert [c["plugin"] for c in calls] == ["a", "b"]  # stops at the first error
    assert set(_stdin(calls[0])) == {"type", "name", "cniVersion"}
    fakes.clear()
    cni.get_status_network_list(conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "b"})))
    assert fakes.calls() == []  # below 1.1.0: nothing to ask


def test_validate_and_version_info(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.add("a", versions=["0.4.0", "1.0.0"])
    fakes.add("b")
    conf = conf_list_from_bytes(
        conflist(
            "net1",
            "1.1.0",
            {"type": "a", "capabilities": {"x": True}},
            {"type": "b", "capabilities": {"y": True, "z": False}},
            {"type": "missing"},
        )
    )
    with pytest.raises(CNIError) as info:
        cni.validate_network_list(conf)
    text = str(info.value)
    assert text.startswith('[plugin a does not support config version "1.1.0" ')
    assert 'failed to find plugin "missing"' in text
    ok = conf_list_from_bytes(
        conflist(
            "net1",
            "1.0.0",
            {"type": "a", "capabilities": {"x": True}},
            {"type": "b", "capabilities": {"y": True, "z": False}},
        )
    )
    assert cni.validate_network_list(ok) == ["x", "y"]
    info_a = cni.get_version_info("a")
    assert info_a.supported_versions == ("0.4.0", "1.0.0")
    version_call = [c for c in fakes.calls() if c["cmd"] == "VERSION"][-1]
    assert version_call["env"]["CNI_NETNS"] == "dummy"
    assert json.loads(version_call["stdin"]) == {"cniVersion": "1.1.0"}


def test_version_info_old_plugin(fakes: FakePlugins, cni: CNIConfig) -> None:
    fakes.script("old", 'echo \'{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}\'; exit 1\n')
    assert cni.get_version_info("old").supported_versions == ("0.1.0",)


def test_single_plugin_forms(fakes: FakePlugins, cni: CNIConfig, tmp_path: Path) -> None:
    from pycni.runtime import plugin_conf_from_bytes

    fakes.add("a")
    plugin = plugin_conf_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "solo", "type": "a"}).encode()
    )
    result = cni.add_network(plugin, RT)
    assert [i.name for i in result.interfaces] == ["a"]
    assert (tmp_path / "cache" / "results" / "solo-ctr1-eth0").exists()
    cni.check_network(plugin, RT)
    cni.del_network(plugin, RT)
    assert [c["cmd"] for c in fakes.calls()] == ["ADD", "CHECK", "DEL"]
    assert not (tmp_path / "cache" / "results" / "solo-ctr1-eth0").exists()


def test_parent_env_is_inherited(
    fakes: FakePlugins, cni: CNIConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes.add("a")
    monkeypatch.setenv("FAKE_MARK", "inherited")
    monkeypatch.setenv("CNI_IFNAME", "should-be-overridden")
    cni.del_network_list(conf_list_from_bytes(conflist("net1", "1.0.0", {"type": "a"})), RT)
    env = fakes.calls()[0]["env"]
    assert env["FAKE_MARK"] == "inherited"
    assert env["CNI_IFNAME"] == "eth0"
    assert os.environ["CNI_IFNAME"] == "should-be-overridden"


def test_validate_network_single_plugin(fakes: FakePlugins, cni: CNIConfig) -> None:
    from pycni.runtime import plugin_conf_from_bytes

    fakes.add("a", versions=["0.4.0", "1.0.0"])
    ok = plugin_conf_from_bytes(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "n",
                "type": "a",
                "capabilities": {"x": True, "w": False},
            }
        ).encode()
    )
    assert cni.validate_network(ok) == ["x"]
    too_new = plugin_conf_from_bytes(
        json.dumps({"cniVersion": "1.1.0", "name": "n", "type": "a"}).encode()
    )
    with pytest.raises(CNIError) as info:
        cni.validate_network(too_new)
    assert info.value.code == 1
    assert 'plugin a does not support config version "1.1.0"' in info.value.msg
    missing = plugin_conf_from_bytes(
        json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "nowhere"}).encode()
    )
    with pytest.raises(CNIError, match='failed to find plugin "nowhere"'):
        cni.validate_network(missing)
