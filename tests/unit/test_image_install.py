"""install-cni / uninstall (pycni.image.install_cni) on scratch host dirs: idempotent, by
rename, never replacing an operator's file unless told, bad config refused before anything
changes, uninstall leaving the dirs as they were. The real image runs them in
tests/integration/test_image_node.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pycni.image import install_cni
from pycni.image.layout import Paths, release_of
from pycni.skel.entry_point import ENTRY_MARKER

ENTRY = b"\x7fELF fake forwarder " + ENTRY_MARKER + b" pycni-entry-config:form=c;autostart=no"
CONF = {"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel"}]}


def snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every path under ``root``: inode and content (or link target)."""
    out: dict[str, tuple[int, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            out[str(path.relative_to(root))] = (st.st_ino, os.readlink(path))
        elif path.is_file():
            out[str(path.relative_to(root))] = (st.st_ino, path.read_bytes())
        else:
            out[str(path.relative_to(root))] = (st.st_ino, "dir")
    return out


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    image = tmp_path / "image/opt/pycni/current"
    (image / "cni-bin").mkdir(parents=True)
    (image / "venv/bin").mkdir(parents=True)
    (image / "venv/bin/pycni").write_text("#!/bin/sh\n")
    (image / "RELEASE").write_text("pycni 9.9\nabc123\n")
    for name in ("bridge", "flannel", "host-local", "portmap"):
        (image / "cni-bin" / name).write_bytes(ENTRY)
    host = tmp_path / "host"
    (host / "opt/cni/bin").mkdir(parents=True)
    (host / "etc/cni/net.d").mkdir(parents=True)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg/cni-conf.json").write_text(json.dumps(CONF))
    return Paths(
        {
            "CNI_BIN_DIR": str(host / "opt/cni/bin"),
            "CNI_NET_DIR": str(host / "etc/cni/net.d"),
            "PYCNI_HOST_OPT": str(host / "opt/pycni"),
            "PYCNI_HOST_RUN": str(host / "run"),
            "PYCNI_HOST_VAR_LIB_CNI": str(host / "var/lib/cni"),
            "CNI_CONF_SOURCE": str(tmp_path / "cfg/cni-conf.json"),
            "PYCNI_IMAGE_RUNTIME": str(image),
        }
    )


def test_install_lays_everything_down_and_a_second_run_changes_nothing(paths: Paths) -> None:
    host = Path(paths.cni_bin).parents[2]
    log = install_cni.install(paths)
    assert f"{paths.cni_bin}/bridge installed" in log
    assert Path(paths.cni_bin, "flannel").read_bytes() == ENTRY
    assert os.access(Path(paths.cni_bin, "flannel"), os.X_OK)
    assert json.loads(Path(paths.cni_net, "10-pycni.conflist").read_text()) == CONF
    current = Path(paths.opt, "current")
    assert os.readlink(current) == "releases/9.9-abc123"
    assert release_of(str(current)) == "9.9-abc123"
    before = snapshot(host)
    assert install_cni.install(paths) == []
    assert snapshot(host) == before  # same inodes: nothing rewritten
    leftovers = [p for p in before if Path(p).name.startswith(".")]
    assert leftovers == [], "temp files left behind"


def test_an_operators_plugin_is_kept_unless_replaced(paths: Paths) -> None:
    theirs = Path(paths.cni_bin, "bridge")
    theirs.write_bytes(b"\x7fELF the Go bridge")
    other = Path(paths.cni_bin, "macvlan")
    other.write_bytes(b"\x7fELF the Go macvlan")
    conf = Path(paths.cni_net, "99-operator.conflist")
    conf.write_text("{}")
    log = install_cni.install(paths)
    assert theirs.read_bytes() == b"\x7fELF the Go bridge"
    assert any("bridge: not pycni's, left as it is" in line for line in log)
    install_cni.install(paths, frozenset({"bridge"}))
    assert theirs.read_bytes() == ENTRY
    install_cni.uninstall(paths)
    assert theirs.read_bytes() == b"\x7fELF the Go bridge"  # put back
    assert other.read_bytes() == b"\x7fELF the Go macvlan" and conf.read_text() == "{}"
    assert sorted(os.listdir(paths.cni_bin)) == ["bridge", "macvlan"]
    assert os.listdir(paths.cni_net) == ["99-operator.conflist"]


@pytest.mark.parametrize(
    "text, what",
    [
        ("not json", "not JSON"),
        ('{"name": "x"}', "non-empty 'plugins'"),
        ('{"plugins": [{"type": "bridge"}]}', "string 'name'"),
        ('{"name": "x", "plugins": [{"typo": "bridge"}]}', "needs a 'type'"),
    ],
)
def test_a_bad_conflist_changes_nothing(paths: Paths, text: str, what: str) -> None:
    Path(paths.conf_source).write_text(text)
    host = Path(paths.cni_bin).parents[2]
    before = snapshot(host)
    with pytest.raises(install_cni.InstallError, match=what):
        install_cni.install(paths)
    assert snapshot(host) == before


def test_a_conf_name_that_is_a_path_is_refused(paths: Paths) -> None:
    paths.conf_name = "../../evil.conflist"
    with pytest.raises(install_cni.InstallError, match="CNI_CONF_NAME"):
        install_cni.install(paths)


def test_an_edited_conflist_is_not_removed_by_uninstall(paths: Paths) -> None:
    install_cni.install(paths)
    Path(paths.cni_net, "10-pycni.conflist").write_text('{"edited": true}')
    install_cni.uninstall(paths)
    assert Path(paths.cni_net, "10-pycni.conflist").read_text() == '{"edited": true}'


def test_uninstall_leaves_the_host_dirs_as_they_were(paths: Paths) -> None:
    host = Path(paths.cni_bin).parents[2]
    before = sorted(str(p.relative_to(host)) for p in host.rglob("*"))
    install_cni.install(paths)
    data = Path(paths.var_lib_cni, "networks/cbr0")
    data.mkdir(parents=True)
    (data / "lock").write_text("")
    (data / "last_reserved_ip.0").write_text("10.244.1.2")
    flannel = Path(paths.run, "flannel")
    flannel.mkdir(parents=True)
    (flannel / "subnet.env").write_text("FLANNEL_SUBNET=10.244.1.1/24\n")
    daemon_run = Path(paths.run, "pycni")
    daemon_run.mkdir()
    (daemon_run / "pycni.sock").write_text("")
    (daemon_run / "host-local-dirs").write_text("/var/lib/cni/networks\n")
    install_cni.uninstall(paths)
    after = sorted(str(p.relative_to(host)) for p in host.rglob("*"))
    assert [p for p in after if p not in before] == ["run", "var", "var/lib", "var/lib/cni",
                                                     "var/lib/cni/networks"]  # fmt: skip
    assert install_cni.uninstall(paths) == []


def test_uninstall_keeps_a_data_dir_with_reservations(paths: Paths) -> None:
    install_cni.install(paths)
    data = Path(paths.var_lib_cni, "networks/cbr0")
    data.mkdir(parents=True)
    (data / "10.244.1.5").write_text("pod")
    install_cni.uninstall(paths)
    assert (data / "10.244.1.5").exists()
