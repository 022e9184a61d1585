"""Loading networks from a config directory: order, fallbacks, sibling folders, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime import NoConfigsFoundError, NotFoundError, load_network_conf
from pycni.runtime.confdir import conf_files, conf_list_from_file
from pycni.spec.conf import ConfError


def _write(path: Path, data: dict[str, Any] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _list(name: str, *types: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": [{"type": t} for t in types], **extra}


def test_conf_files_exact_extension_sorted_non_recursive(tmp_path: Path) -> None:
    for name in ["b.conflist", "a.conflist", "c.CONFLIST", "d.conflist.bak"]:
        _write(tmp_path / name, "{}")
    (tmp_path / "dir.conflist").mkdir()
    found = conf_files(str(tmp_path), (".conflist",))
    assert found == [str(tmp_path / "a.conflist"), str(tmp_path / "b.conflist")]
    assert conf_files(str(tmp_path / "missing"), (".conf",)) is None


def test_first_matching_conflist_in_lexical_order(tmp_path: Path) -> None:
    _write(tmp_path / "20-b.conflist", _list("net", "second"))
    _write(tmp_path / "10-a.conflist", _list("net", "first"))
    _write(tmp_path / "05-other.conflist", _list("other", "x"))
    conf = load_network_conf(str(tmp_path), "net")
    assert [p.type for p in conf.plugins] == ["first"]


def test_any_broken_conflist_aborts(tmp_path: Path) -> None:
    _write(tmp_path / "10-broken.conflist", "{not json")
    _write(tmp_path / "20-good.conflist", _list("net", "a"))
    with pytest.raises(ConfError, match="error parsing configuration list") as info:
        load_network_conf(str(tmp_path), "net")
    assert str(info.value).endswith(f"(in {tmp_path / '10-broken.conflist'})")  # names itself


def test_pycni_looks_past_a_broken_file(tmp_path: Path) -> None:
    """libcni's search stops at a broken file; pycni's own commands skip it and say so."""
    from pycni.runtime.confdir import find_network_conf

    _write(tmp_path / "10-broken.conflist", "{not json")
    _write(tmp_path / "15-broken.conf", "{")
    _write(tmp_path / "20-good.conflist", _list("net", "a"))
    conf, broken = find_network_conf(str(tmp_path), "net")
    assert [p.type for p in conf.plugins] == ["a"]
    assert [b.path for b in broken] == [str(tmp_path / "10-broken.conflist")]  # .conf: later
    with pytest.raises(ConfError) as info:
        find_network_conf(str(tmp_path), "nosuch")
    assert str(info.value) == (
        f'no net configuration with name "nosuch" in {tmp_path}; '
        "unreadable there: 10-broken.conflist, 15-broken.conf"
    )
    (tmp_path / "10-broken.conflist").unlink()
    (tmp_path / "15-broken.conf").unlink()
    assert find_network_conf(str(tmp_path), "net")[1] == []


def test_single_conf_fallback_wrapped(tmp_path: Path) -> None:
    _write(tmp_path / "a.conflist", _list("other", "x"))
    _write(tmp_path / "b.json", {"cniVersion": "0.3.1", "name": "net", "type": "bridge"})
    conf = load_network_conf(str(tmp_path), "net")
    assert conf.cni_version == "0.3.1"
    assert [p.type for p in conf.plugins] == ["bridge"]
    assert json.loads(conf.raw)["plugins"][0]["type"] == "bridge"


def test_not_found_errors(tmp_path: Path) -> None:
    with pytest.raises(NoConfigsFoundError) as info:
        load_network_conf(str(tmp_path), "net")
    assert str(info.value) == f"no net configurations found in {tmp_path}"
    _write(tmp_path / "a.conflist", _list("other", "x"))
    with pytest.raises(NotFoundError) as info2:
        load_network_conf(str(tmp_path), "net")
    assert str(info2.value) == f'no net configuration with name "net" in {tmp_path}'
    _write(tmp_path / "b.conf", {"name": "third", "type": "x"})
    with pytest.raises(NotFoundError):
        load_network_conf(str(tmp_path), "net")


def test_sibling_folder_plugins_are_appended(tmp_path: Path) -> None:
    path = _write(tmp_path / "net.conflist", _list("net", "inline"))
    _write(tmp_path / "net" / "20-b.conf", {"type": "second"})
    _write(tmp_path / "net" / "10-a.conf", {"type": "first"})
    _write(tmp_path / "net" / "30-c.json", {"type": "ignored"})
    conf = conf_list_from_file(str(path))
    assert [p.type for p in conf.plugins] == ["inline", "first", "second"]
    inline_only = _write(
        tmp_path / "net2.conflist", _list("net", "inline", loadOnlyInlinedPlugins=True)
    )
    assert [p.type for p in conf_list_from_file(str(inline_only)).plugins] == ["inline"]


def test_plugins_only_from_sibling_folder(tmp_path: Path) -> None:
    path = _write(tmp_path / "net.conflist", {"cniVersion": "1.1.0", "name": "net"})
    with pytest.raises(ConfError, match=r"^no plugin configs found$"):
        conf_list_from_file(str(path))
    _write(tmp_path / "net" / "a.conf", {"type": "only"})
    assert [p.type for p in conf_list_from_file(str(path)).plugins] == ["only"]
    _write(tmp_path / "net" / "b.conf", {"name": "no type"})
    with pytest.raises(ConfError, match="missing 'type'"):
        conf_list_from_file(str(path))
