"""Where the runtimes look for plugins and networks, read from their own config files (a
private root, never the machine's /etc), and doctor judging a network by its readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pycni.doctor import node
from pycni.inspect import runtimes


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # the config files decide
    return tmp_path / "root"


def test_containers_conf_layers_and_drop_ins(root: Path) -> None:
    _write(root / "usr/share/containers/containers.conf", '[network]\ncni_plugin_dirs = ["/a"]\n')
    _write(root / "etc/containers/containers.conf", '[network]\nnetwork_config_dir = "/n/"\n')
    _write(
        root / "etc/containers/containers.conf.d/10-x.conf",
        '[network]\ncni_plugin_dirs = ["/b", "/c"]\n',
    )
    view = runtimes.podman(str(root))
    assert view is not None
    assert (view.plugin_dirs, view.conf_dir) == (("/b", "/c"), "/n")
    assert "10-x.conf" in view.source


def test_podman_defaults_and_netavark(root: Path) -> None:
    (root / "etc/containers").mkdir(parents=True)
    view = runtimes.podman(str(root))
    assert view is not None and view.plugin_dirs == runtimes.PODMAN_PLUGIN_DIRS
    assert view.conf_dir == "/etc/cni/net.d" and view.source == "containers.conf defaults"
    _write(root / "etc/containers/containers.conf", '[network]\nnetwork_backend = "netavark"\n')
    assert runtimes.podman(str(root)) is None


def test_containerd_v2_v3_defaults_and_broken(root: Path) -> None:
    assert runtimes.containerd(str(root)) is None  # neither program nor config
    config = root / "etc/containerd/config.toml"
    _write(
        config,
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\nbin_dir = "/x"\nconf_dir = "/y"\n',
    )
    view = runtimes.containerd(str(root))
    assert view is not None and (view.plugin_dirs, view.conf_dir) == (("/x",), "/y")
    _write(
        config,
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.cni]\nbin_dirs = ['/p', '/q']\n",
    )
    view = runtimes.containerd(str(root))
    assert view is not None and (view.plugin_dirs, view.conf_dir) == (
        ("/p", "/q"),
        "/etc/cni/net.d",
    )
    _write(config, "version = 2\n")
    view = runtimes.containerd(str(root))
    assert view is not None and view.plugin_dirs == ("/opt/cni/bin",)
    _write(config, "[[[ not toml")
    view = runtimes.containerd(str(root))
    assert view is not None and "not valid TOML" in view.problem


def test_crio(root: Path) -> None:
    _write(root / "etc/crio/crio.conf", '[crio.network]\nplugin_dirs = ["/usr/libexec/cni/"]\n')
    _write(root / "etc/crio/crio.conf.d/01.conf", '[crio.network]\nnetwork_dir = "/z"\n')
    view = runtimes.crio(str(root))
    assert view is not None and (view.plugin_dirs, view.conf_dir) == (("/usr/libexec/cni",), "/z")


def _plugin(directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        '#!/bin/sh\necho \'{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}\'\n'
    )
    path.chmod(0o755)


def test_a_missing_plugin_fails_only_where_a_reader_would_fail(tmp_path: Path) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    body = {"cniVersion": "0.4.0", "name": "n1", "plugins": [{"type": "a"}, {"type": "b"}]}
    (conf / "10-n1.conflist").write_text(json.dumps(body))
    full, partial = tmp_path / "full", tmp_path / "partial"
    for name in ("a", "b"):
        _plugin(full, name)
    _plugin(partial, "a")
    default_dirs = node.Setting("/opt/cni/bin-missing", "default")
    default_conf = node.Setting(str(conf), "default")
    good = runtimes.RuntimeView("podman", (str(full),), str(conf), "test")
    checks = node.check_conf_dir(default_conf, default_dirs, [good])
    assert [c.status for c in checks] == ["ok", "ok"], checks
    assert "found by podman in " + str(full) in checks[1].detail
    assert node.check_plugin_dirs(default_dirs, [good]) == []  # the runtimes' lines say it all
    bad = runtimes.RuntimeView("containerd", (str(partial),), str(conf), "test")
    checks = node.check_conf_dir(default_conf, default_dirs, [good, bad])
    assert [c.status for c in checks] == ["ok", "fail"]
    assert "containerd would fail" in checks[1].detail and '"b"' in checks[1].detail
    elsewhere = runtimes.RuntimeView("containerd", (str(partial),), str(tmp_path / "other"), "t")
    checks = node.check_conf_dir(default_conf, default_dirs, [good, elsewhere])
    assert [c.name for c in checks if c.status == "fail"] == [f"conf dir {tmp_path / 'other'}"]
    assert "does not exist" in checks[-1].detail


def test_runtime_lines_never_say_not_readable_for_a_missing_dir(tmp_path: Path) -> None:
    view = runtimes.RuntimeView("podman", (str(tmp_path / "gone"),), "/etc/cni/net.d", "t")
    (line,) = node.check_runtimes([view])
    assert line.status == "warn" and "none exists" in line.detail
    assert "not readable" not in line.detail
