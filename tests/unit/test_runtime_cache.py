"""The result cache file, byte for byte, and reading it back as libcni does."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pycni.runtime import RuntimeConf
from pycni.runtime import cache as c
from pycni.spec.errors import CNIError
from pycni.spec.result import Result

RESULT = Result.from_dict(
    {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": "/ns"}],
        "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0}],
    }
)
CONFIG = b'{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]}\n'


def test_encoded_bytes_match_go() -> None:
    rt = RuntimeConf("cid", "/run/netns/x", "eth0", (("A", "1"),), {"z": 1, "a": "<"})
    data = c.encode_cache(RESULT, CONFIG, "net", rt)
    b64 = base64.b64encode(CONFIG).decode()
    assert (
        data
        == (
            '{"kind":"cniCacheV1","containerId":"cid","config":"' + b64 + '","ifName":"eth0",'
            '"networkName":"net","netns":"/run/netns/x","cniArgs":[["A","1"]],'
            '"capabilityArgs":{"a":"\\u003c","z":1},"result":{"cniVersion":"1.0.0",'
            '"interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"address":"10.0.0.5/24",'
            '"gateway":"10.0.0.1","interface":0}]}}'
        ).encode()
    )


def test_empty_fields_are_omitted() -> None:
    data = json.loads(c.encode_cache(RESULT, CONFIG, "net", RuntimeConf("cid", "", "eth0")))
    assert list(data) == ["kind", "containerId", "config", "ifName", "networkName", "result"]


def test_cache_path_needs_all_parts(tmp_path: Path) -> None:
    with pytest.raises(CNIError) as info:
        c.cache_file_path(str(tmp_path), "net", RuntimeConf("", "", "eth0"))
    assert str(info.value) == (
        'cache file path requires network name ("net"), container ID (""), '
        'and interface name ("eth0")'
    )


def test_write_is_atomic_and_private(tmp_path: Path) -> None:
    rt = RuntimeConf("cid", "", "eth0")
    c.write_cache(str(tmp_path), RESULT, CONFIG, "net", rt)
    c.write_cache(str(tmp_path), RESULT, CONFIG, "net", rt)
    results = tmp_path / "results"
    assert sorted(p.name for p in results.iterdir()) == ["net-cid-eth0"]  # no temp files left
    assert (results / "net-cid-eth0").stat().st_mode & 0o777 == 0o600
    read = c.read_cached_result(str(tmp_path), "net", "0.4.0", rt)
    assert read is not None and read.cni_version == "0.4.0"
    assert str(read.ips[0].address) == "10.0.0.5/24"


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    rt = RuntimeConf("cid", "", "eth0")
    assert c.read_cached_result(str(tmp_path), "net", "1.0.0", rt) is None
    assert c.read_cached_config(str(tmp_path), "net", rt) is None
    assert c.list_attachments(str(tmp_path)) == []


def test_conversion_failure_message(tmp_path: Path) -> None:
    rt = RuntimeConf("cid", "", "eth0")
    (tmp_path / "results").mkdir()
    bare = {"cniVersion": "1.0.0", "interfaces": [{"name": "x"}]}
    (tmp_path / "results" / "net-cid-eth0").write_text(json.dumps(bare))
    with pytest.raises(CNIError) as info:
        c.read_cached_result(str(tmp_path), "net", "0.2.0", rt)
    assert str(info.value) == (
        'failed to convert cached result to config version "0.2.0": '
        "cannot convert: no valid IP addresses"
    )


def test_cached_config_and_wrong_kind(tmp_path: Path) -> None:
    rt = RuntimeConf("cid", "/ns", "eth0", (("X", "y"),), {"k": True})
    c.write_cache(str(tmp_path), RESULT, CONFIG, "net", rt)
    found = c.read_cached_config(str(tmp_path), "net", RuntimeConf("cid", "/other", "eth0"))
    assert found is not None
    config, new_rt = found
    assert config == CONFIG
    assert new_rt.args == (("X", "y"),) and new_rt.capability_args == {"k": True}
    assert new_rt.netns == "/other"
    (tmp_path / "results" / "net-cid-eth0").write_text('{"kind":"other"}')
    with pytest.raises(CNIError, match='read cached network "net" config has wrong kind: other'):
        c.read_cached_config(str(tmp_path), "net", rt)
    (tmp_path / "results" / "net-cid-eth0").write_text("{")
    with pytest.raises(CNIError, match='failed to unmarshal cached network "net" config'):
        c.read_cached_config(str(tmp_path), "net", rt)


def test_list_attachments_filters(tmp_path: Path) -> None:
    for cid, ifname, net in [("c1", "eth0", "a"), ("c1", "eth1", "b"), ("c2", "eth0", "a")]:
        c.write_cache(str(tmp_path), RESULT, CONFIG, net, RuntimeConf(cid, f"/ns/{cid}", ifname))
    results = tmp_path / "results"
    (results / "a-c1-legacy").write_text(json.dumps(RESULT.to_dict()))  # not V1: skipped
    (results / "a-c1-broken").write_text("{")
    (results / ".pycni-tmp-123").write_bytes(
        c.encode_cache(RESULT, CONFIG, "z", RuntimeConf("c1", "", "e"))
    )
    no_if = json.loads(c.encode_cache(RESULT, CONFIG, "a", RuntimeConf("c1", "", "x")))
    no_if["ifName"] = ""
    (results / "a-c1-x").write_text(json.dumps(no_if))
    all_ = [(a.network, a.container_id, a.ifname) for a in c.list_attachments(str(tmp_path))]
    assert all_ == [("a", "c1", "eth0"), ("a", "c2", "eth0"), ("b", "c1", "eth1")]
    one = c.list_attachments(str(tmp_path), "c1")
    assert [(a.network, a.ifname, a.netns, a.config) for a in one] == [
        ("a", "eth0", "/ns/c1", CONFIG),
        ("b", "eth1", "/ns/c1", CONFIG),
    ]


def test_reads_a_file_written_by_go_libcni(tmp_path: Path) -> None:
    """A cache file as Go's libcni writes it (struct order, base64 config, raw result map)."""
    go_written = (
        '{"kind":"cniCacheV1","containerId":"cnitool-1234","config":"'
        + base64.b64encode(CONFIG).decode()
        + '","ifName":"eth0","networkName":"net","netns":"/var/run/netns/t",'
        '"result":{"cniVersion":"0.4.0","dns":{},"interfaces":[{"mac":"aa:bb:cc:dd:ee:ff",'
        '"name":"cni0"}],"ips":[{"address":"10.22.0.3/16","gateway":"10.22.0.1",'
        '"interface":0,"version":"4"}]}}'
    )
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "net-cnitool-1234-eth0").write_text(go_written)
    rt = RuntimeConf("cnitool-1234", "", "eth0")
    result = c.read_cached_result(str(tmp_path), "net", "1.0.0", rt)
    assert result is not None
    assert result.to_dict()["ips"] == [
        {"address": "10.22.0.3/16", "gateway": "10.22.0.1", "interface": 0}
    ]
    [att] = c.list_attachments(str(tmp_path))
    assert (att.container_id, att.network, att.netns) == ("cnitool-1234", "net", "/var/run/netns/t")
