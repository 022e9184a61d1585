"""`pycni doctor`'s report: one line per check, a raising check becomes a fail line and the
others still run, and installed entry points are told apart by form and daemon socket."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pycni.cli.main import build_parser
from pycni.doctor import node, report
from pycni.doctor.report import Check


def _boom() -> Iterable[Check]:
    raise OSError("no such thing")


def test_a_check_that_raises_is_a_fail_line_and_the_rest_still_run() -> None:
    checks = report.run_all(
        [
            ("first", lambda: [Check("first", report.OK, "fine")]),
            ("broken", _boom),
            ("last", lambda: [Check("last", report.WARN, "meh", "do this")]),
        ]
    )
    assert [(c.name, c.status) for c in checks] == [
        ("first", "ok"),
        ("broken", "fail"),
        ("last", "warn"),
    ]
    assert "OSError: no such thing" in checks[1].detail
    text = report.as_text(checks)
    lines = text.splitlines()
    assert lines[0].split() == ["ok", "first", "fine"]
    assert lines[1].startswith("fail  broken")
    assert lines[2].endswith("meh → do this")
    assert lines[-1] == "1 ok, 1 warn, 1 fail"


def test_terminal_escapes_from_names_are_not_printed() -> None:
    text = report.as_text([Check("network \x1b]0;pwned\x07", report.FAIL, "bad\x1b[2J")])
    assert "\x1b" not in text and "\x07" not in text
    assert "network ?]0;pwned?" in text


def test_entry_points_are_read_by_form_and_socket(tmp_path: Path) -> None:
    from pycni.entrypoints import install

    install.install(tmp_path / "py", form="python", socket_path="/run/x/d.sock", names=["bridge"])
    install.install(tmp_path / "inproc", form="inprocess", names=["bridge"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "bridge").write_bytes(b"\x7fELF not ours")
    found = node.read_entry_point(str(tmp_path / "py" / "bridge"))
    assert found is not None and (found.form, found.socket) == ("python", "/run/x/d.sock")
    found = node.read_entry_point(str(tmp_path / "inproc" / "bridge"))
    assert found is not None and (found.form, found.socket) == ("inprocess", "")
    assert node.read_entry_point(str(tmp_path / "other" / "bridge")) is None
    assert node.read_entry_point(str(tmp_path / "nothing")) is None


def test_missing_plugin_dir_and_conf_dir_are_failures_with_a_fix(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    (plugins,) = node.check_plugin_dirs(node.Setting(missing, "flag"))
    assert plugins.status == "fail" and "pycni plugins install" in plugins.fix
    (conf,) = node.check_conf_dir(node.Setting(missing, "$NETCONFPATH"), node.Setting(missing, "x"))
    assert conf.status == "fail" and "($NETCONFPATH)" in conf.detail


def test_a_config_that_does_not_parse_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "10-bad.conflist").write_text(json.dumps({"cniVersion": "1.1.0"}))
    checks = node.check_conf_dir(node.Setting(str(tmp_path), "flag"), node.Setting("", "x"))
    assert [c.status for c in checks] == ["ok", "fail"]
    assert checks[1].name == "conf 10-bad.conflist"


def test_doctor_is_registered_with_its_flags() -> None:
    args = build_parser().parse_args(
        ["doctor", "--plugin-dir", "/p", "--conf-dir", "/c", "--socket", "/s", "--json"]
    )
    assert (args.cni_path, args.conf_dir, args.socket, args.json) == ("/p", "/c", "/s", True)
