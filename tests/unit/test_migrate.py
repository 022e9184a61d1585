"""``pycni migrate --to-reference`` on hostile or irrelevant cache entries: each bad one is a
step naming it (exit code 1), never a traceback, and nothing is asked of the kernel before a
cache entry and its configs are valid (these tests run in the machine's own namespace and
touch none of its state)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pycni.cli.main import main
from pycni.inspect import migrate

RESULT = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
    "ips": [{"address": "10.9.0.2/24", "interface": 0}],
}


def _entry(cache: Path, name: str, plugins: list[dict[str, Any]], **override: Any) -> Path:
    import base64

    conflist = {"cniVersion": "1.0.0", "name": override.pop("net", "n1"), "plugins": plugins}
    entry = {
        "kind": "cniCacheV1",
        "containerId": "c1",
        "config": base64.b64encode(json.dumps(conflist).encode()).decode(),
        "ifName": "eth0",
        "networkName": conflist["name"],
        "capabilityArgs": {"portMappings": [{"hostPort": "x", "containerPort": 80}]},
        "result": RESULT,
    }
    entry.update(override)
    path = cache / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry))
    return path


def test_no_cache_dir_is_nothing_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert migrate.to_reference(str(tmp_path / "absent")) == []
    assert main(["migrate", "--to-reference", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("nothing to hand back")


def test_the_direction_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["migrate"])
    assert exc.value.code == 2
    assert "--to-reference" in capsys.readouterr().err


def test_plugins_without_own_layouts_need_no_step(tmp_path: Path) -> None:
    _entry(tmp_path, "n1-c1-eth0", [{"type": "macvlan"}, {"type": "tuning"}])
    _entry(tmp_path, "n1-c2-eth0", [{"type": "bridge", "ipMasq": False}], containerId="c2")
    (tmp_path / "results" / "garbage").write_text("{not json")  # libcni skips it too
    (tmp_path / "results" / ".pycni-tmp-1").write_text("{}")
    assert migrate.to_reference(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"containerId": 'c1"; flush ruleset'}, "containerID"),
        ({"ifName": "eth0/../x"}, "interface name"),
        ({"net": "n 1"}, "network name"),
    ],
)
def test_a_hostile_entry_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: dict[str, str], named: str
) -> None:
    path = _entry(tmp_path, "bad", [{"type": "portmap"}], **override)
    steps = migrate.to_reference(str(tmp_path))
    assert len(steps) == 1 and steps[0].error
    assert str(path) in steps[0].error and named in steps[0].error
    assert main(["migrate", "--to-reference", "--cache-dir", str(tmp_path)]) == 1
    assert "NOT handed back" in capsys.readouterr().err


def test_a_hostile_portmap_config_is_refused_before_the_kernel(tmp_path: Path) -> None:
    _entry(tmp_path, "n1-c1-eth0", [{"type": "portmap", "capabilities": {"portMappings": True}}])
    (step,) = migrate.to_reference(str(tmp_path), dry_run=True)
    assert step.plugin == "portmap" and "hostPort" in step.error
    assert step.line().startswith("n1 c1 eth0 portmap: NOT handed back:")


def test_host_devices_record_is_removed_and_a_dry_run_keeps_it(tmp_path: Path) -> None:
    """pycni's record of a moved link's node addresses is its own: the reference neither reads
    nor removes it, so handing back drops it (once; a dry run only says so)."""
    data = tmp_path / "hd"
    data.mkdir()
    record = data / "c1-eth0.json"
    record.write_text('{"name": "hd0", "up": true, "addresses": ["10.1.0.1/24"]}')
    other = data / "c2-eth0.json"  # another attachment's: not this entry's to remove
    other.write_text("{}")
    plugins = [{"type": "host-device", "device": "hd0", "dataDir": str(data)}]
    _entry(tmp_path, "n1-c1-eth0", plugins)
    (dry,) = migrate.to_reference(str(tmp_path), dry_run=True)
    assert record.exists()
    assert dry.plugin == "host-device" and not dry.error and "record" in dry.change
    assert migrate.to_reference(str(tmp_path)) == [dry]
    assert not record.exists() and other.exists()
    assert migrate.to_reference(str(tmp_path)) == []
