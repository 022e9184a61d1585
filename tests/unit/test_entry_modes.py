"""Every installed entry point says how it was installed (form, autostart, idle exit, socket),
and `pycni inspect` / `pycni doctor` read that back per plugin directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from pycni.doctor import node as doctor_node
from pycni.doctor.report import FAIL, WARN
from pycni.entrypoints import install
from pycni.inspect import daemon, render_text
from pycni.inspect.model import NodeState


@pytest.mark.parametrize("form", ["c", "python"])
def test_the_mode_line_round_trips(form: str, tmp_path: Path) -> None:
    sock = str(tmp_path / "run" / "x;y.sock")  # the socket goes last: any character survives
    install.install(tmp_path / "a", socket_path=sock, form=form, names=["loopback"],
                    autostart=True, idle_exit=42.5)  # fmt: skip
    install.install(tmp_path / "b", socket_path=sock, form=form, names=["loopback"])
    assert install.entry_config(tmp_path / "a" / "loopback") == {
        "form": form, "autostart": "yes", "idle-exit": "42.5", "socket": sock,
    }  # fmt: skip
    assert install.entry_config(tmp_path / "b" / "loopback") == {
        "form": form, "autostart": "no", "socket": sock,
    }  # fmt: skip
    found = doctor_node.read_entry_point(str(tmp_path / "a" / "loopback"))
    assert found is not None and (found.form, found.socket, found.autostart) == (form, sock, True)


def test_inprocess_and_foreign_files(tmp_path: Path) -> None:
    report = install.install(tmp_path, form="inprocess", names=["loopback"], autostart=True)
    assert not report.autostart  # in-process entry points never start a daemon
    assert install.entry_config(tmp_path / "loopback") == {
        "form": "inprocess", "autostart": "no", "socket": report.socket_path,
    }  # fmt: skip
    (tmp_path / "bridge").write_bytes(b"\x7fELF a Go plugin")
    assert install.entry_config(tmp_path / "bridge") is None


def test_inspect_lists_each_directory_s_mode(tmp_path: Path) -> None:
    sock = str(tmp_path / "d.sock")
    install.install(tmp_path / "auto", socket_path=sock, form="python",
                    names=["loopback", "bridge"], autostart=True, idle_exit=300)  # fmt: skip
    install.install(tmp_path / "slow", socket_path=sock, form="inprocess", names=["loopback"])
    (tmp_path / "go").mkdir()
    (tmp_path / "go" / "bridge").write_bytes(b"\x7fELF")
    dirs = [str(tmp_path / n) for n in ("auto", "slow", "go", "missing")]
    status = daemon.read_daemon(sock, timeout=1.0, plugin_dirs=dirs)
    assert not status.answers
    by_dir = {Path(e.directory).name: e for e in status.entry_points}
    assert by_dir["auto"].plugins == 2
    assert by_dir["auto"].modes == [
        "python form, forwards to this socket, autostarts a daemon (idle exit 300s)"
    ]
    assert by_dir["slow"].modes == ["inprocess form (never uses a daemon)"]
    assert (by_dir["go"].plugins, by_dir["missing"].modes) == (0, ["does not exist"])
    text = render_text.render(NodeState("n", "c", "k", "d", daemon=status), [])
    assert f"  {tmp_path / 'auto'}: 2 pycni entry points, python form, forwards" in text
    assert f"  {tmp_path / 'go'}: no pycni entry points" in text


def test_doctor_does_not_fail_a_missing_daemon_that_autostarts(tmp_path: Path) -> None:
    sock = str(tmp_path / "d.sock")
    install.install(tmp_path / "bin", socket_path=sock, form="python", names=["loopback"],
                    autostart=True)  # fmt: skip
    setting = doctor_node.Setting(str(tmp_path / "bin"), "flag")
    (check,) = doctor_node.check_daemon(sock, setting)
    assert check.status == WARN and "start one on their next call" in check.detail
    install.install(tmp_path / "bin", socket_path=sock, form="python", names=["loopback"])
    (check,) = doctor_node.check_daemon(sock, setting)
    assert check.status == FAIL


def test_plugins_install_autostarts_by_default(tmp_path: Path, capsys: object) -> None:
    from pycni.cli.main import main

    sock = str(tmp_path / "d.sock")
    base = ["plugins", "install", "--form", "python", "--socket", sock, "--only", "loopback"]
    assert main([*base, str(tmp_path / "a")]) == 0
    assert install.entry_config(tmp_path / "a" / "loopback") == {
        "form": "python", "autostart": "yes", "idle-exit": "300", "socket": sock,
    }  # fmt: skip
    assert main([*base, "--no-autostart", str(tmp_path / "b")]) == 0
    assert install.entry_config(tmp_path / "b" / "loopback") == {
        "form": "python", "autostart": "no", "socket": sock,
    }  # fmt: skip
    assert main([*base, "--idle-exit", "0", str(tmp_path / "c")]) == 0
    assert install.entry_config(tmp_path / "c" / "loopback")["idle-exit"] == "0"  # type: ignore[index]
    assert main([*base, "--idle-exit", "-1", str(tmp_path / "d")]) == 2
    assert not (tmp_path / "d").exists()
