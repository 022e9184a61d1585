"""Installing entry points: every form carries the marker, settings are baked in, atomically."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from pycni.entrypoints import build, install
from pycni.skel.entry_point import ENTRY_MARKER, is_entry_point


def test_c_string_escapes_everything_risky() -> None:
    assert build.c_string('a"b\\c?d\né') == '"a\\"b\\\\c\\?d\\012\\303\\251"'


def test_python_form_has_marker_shebang_and_settings(tmp_path: Path) -> None:
    report = install.install(
        tmp_path, socket_path="/tmp/x.sock", form="python", names=["loopback", "bridge"]
    )
    assert report.form == "python"
    assert report.names == ["loopback", "bridge"]
    text = (tmp_path / "bridge").read_text()
    assert text.startswith(f"#!{install.interpreter()} -IS\n")
    assert "SOCKET_PATH = '/tmp/x.sock'" in text
    assert "MODE = 'daemon'" in text
    assert os.stat(tmp_path / "bridge").st_mode & stat.S_IXUSR
    assert is_entry_point(tmp_path / "loopback")
    compile(text, "bridge", "exec")  # the substituted script is valid Python


def test_inprocess_form_never_tries_the_daemon(tmp_path: Path) -> None:
    report = install.install(tmp_path, form="inprocess", names=["loopback"])
    assert report.form == "inprocess"
    assert "MODE = 'inprocess'" in (tmp_path / "loopback").read_text()


def test_c_form_is_one_hard_linked_binary_with_the_marker(tmp_path: Path) -> None:
    report = install.install(tmp_path, socket_path="/tmp/y.sock", form="c", names=["a", "b", "c"])
    assert report.form == "c"
    inodes = {os.stat(p).st_ino for p in report.paths}
    assert len(inodes) == 1
    data = (tmp_path / "a").read_bytes()
    assert ENTRY_MARKER in data
    assert not list(tmp_path.glob(".*"))  # no temp files left behind


def test_reinstall_replaces_files(tmp_path: Path) -> None:
    install.install(tmp_path, form="python", names=["loopback"])
    install.install(tmp_path, form="c", names=["loopback"])
    assert (tmp_path / "loopback").read_bytes()[:4] == b"\x7fELF"


def test_c_source_compiles_without_warnings(tmp_path: Path) -> None:
    settings = build.ForwarderSettings("/run/x.sock", "/usr/bin/python3", "pass\n")
    (tmp_path / "pycni_forwarder_config.h").write_text(build.config_header(settings))
    (tmp_path / "forwarder.c").write_text(build.source())
    proc = subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-std=c11", "-I", str(tmp_path),
         "-c", "-o", str(tmp_path / "f.o"), str(tmp_path / "forwarder.c")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_unknown_form_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown entry-point form"):
        install.install(tmp_path, form="rust")


def test_marker_check_on_other_files(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"#!/bin/sh\nexit 0\n")
    assert not is_entry_point(tmp_path / "plain")
    assert not is_entry_point(tmp_path / "missing")


def test_cli_offers_the_installer_forms() -> None:
    from pycni.cli import plugins_cmd

    assert plugins_cmd.FORMS == install.FORMS


def test_install_writes_missing_pyc_files(tmp_path: Path) -> None:
    """Every in-process call would compile a module whose .pyc is missing: install writes it."""
    import importlib.util

    import pycni.spec.validate

    cached = Path(importlib.util.cache_from_source(pycni.spec.validate.__file__))
    cached.unlink(missing_ok=True)
    report = install.install(tmp_path, form="inprocess", names=["loopback"])
    assert cached.exists()
    assert not report.notes


def test_inprocess_script_is_short_and_skips_site(tmp_path: Path) -> None:
    """A script is compiled on every run: the in-process form holds a few lines, its paths
    resolved at install time (no ``site``), and runs the plugin named by its file name."""
    install.install(tmp_path, form="inprocess", names=["loopback"])
    text = (tmp_path / "loopback").read_text()
    assert len(text.splitlines()) < 20
    assert "import site" not in text
    proc = subprocess.run(
        [str(tmp_path / "loopback")], env={"CNI_COMMAND": "VERSION"}, capture_output=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert b'"supportedVersions"' in proc.stdout


def test_search_paths_resolve_pth_files_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Directories named by .pth files are added at install time; a .pth that runs code other
    than setuptools' distutils shim keeps ``site.addsitedir`` in the entry point."""
    site_dir = tmp_path / "site-packages"
    (site_dir / "extra").mkdir(parents=True)
    (site_dir / "a.pth").write_text("# comment\nextra\nmissing-dir\n")
    (site_dir / "distutils-precedence.pth").write_text(
        "import os; var = 'X'; enabled = 1; enabled and __import__('_distutils_hack').add_shim();\n"
    )
    monkeypatch.setattr(install, "site_dirs", lambda: [str(site_dir)])
    paths, needs_site = install.search_paths()
    assert paths == [*install.import_paths(), str(site_dir), str(site_dir / "extra")]
    assert not needs_site
    assert "import site" not in install.fallback_code()
    (site_dir / "b.pth").write_text("import some_finder; some_finder.install()\n")
    assert install.search_paths()[1]
    code = install.fallback_code()
    assert "site.addsitedir" in code
    compile(code, "fallback", "exec")
