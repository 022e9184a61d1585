"""The ``pycni`` CLI: cnitool-compatible verbs, environment, output and errors."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pycni.cli import cnitool
from pycni.cli.main import COMMAND_MODULES, COMMAND_OWNERS, build_parser, main, modules_for
from pycni.skel import cold_path
from tests.unit.test_runtime_support import FakePlugins, conflist


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    fakes = FakePlugins(tmp_path / "bin")
    fakes.add("a")
    fakes.add("b")
    confdir = tmp_path / "net.d"
    confdir.mkdir()
    (confdir / "10-net.conflist").write_bytes(
        conflist(
            "net", "1.1.0", {"type": "a", "capabilities": {"portMappings": True}}, {"type": "b"}
        )
    )
    for name in ("CNI_ARGS", "CAP_ARGS", "CNI_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETCONFPATH", str(confdir))
    monkeypatch.setenv("CNI_PATH", str(fakes.dir))
    cache = tmp_path / "cache"
    return {"fakes": fakes, "cache": cache, "confdir": confdir, "tmp": tmp_path}


def _cli(env: dict[str, Any], *argv: str) -> int:
    return main([argv[0], "--cache-dir", str(env["cache"]), *argv[1:]])


def test_container_id_matches_cnitool() -> None:
    digest = hashlib.sha512(b"/var/run/netns/x").digest()[:10]
    assert cnitool.container_id_for("/var/run/netns/x") == "cnitool-" + digest.hex()
    assert len(cnitool.container_id_for("/a")) == len("cnitool-") + 20


def test_add_prints_result_and_uses_env(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CNI_ARGS", "A=1;B=2")
    monkeypatch.setenv("CAP_ARGS", json.dumps({"portMappings": [{"hostPort": 80}]}))
    monkeypatch.chdir(env["tmp"])
    assert _cli(env, "add", "net", "ns/pod1") == 0
    out = capsys.readouterr().out
    assert not out.endswith("\n")
    assert out.startswith('{\n    "cniVersion": "1.1.0",\n    "interfaces": [')
    assert json.loads(out)["interfaces"] == [{"name": "a"}, {"name": "b"}]
    calls = env["fakes"].calls()
    abs_ns = str(env["tmp"] / "ns" / "pod1")
    assert calls[0]["env"]["CNI_NETNS"] == abs_ns
    assert calls[0]["env"]["CNI_CONTAINERID"] == cnitool.container_id_for(abs_ns)
    assert calls[0]["env"]["CNI_ARGS"] == "A=1;B=2"
    assert calls[0]["env"]["CNI_IFNAME"] == "eth0"
    assert json.loads(calls[0]["stdin"])["runtimeConfig"] == {"portMappings": [{"hostPort": 80}]}
    cache_name = f"net-{cnitool.container_id_for(abs_ns)}-eth0"
    assert (env["cache"] / "results" / cache_name).exists()


def test_check_del_print_nothing(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(env, "add", "net", "/ns/p") == 0
    capsys.readouterr()
    assert _cli(env, "check", "net", "/ns/p") == 0
    assert _cli(env, "del", "net", "/ns/p") == 0
    assert _cli(env, "status", "net", "/ns/p") == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    verbs = [c["cmd"] for c in env["fakes"].calls()]
    assert verbs == ["ADD", "ADD", "CHECK", "CHECK", "DEL", "DEL", "STATUS", "STATUS"]
    assert not list((env["cache"] / "results").iterdir())


def test_ifname_flag_then_env(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CNI_IFNAME", "net5")
    assert _cli(env, "del", "net", "/ns/p") == 0
    assert _cli(env, "del", "net", "/ns/p", "-i", "net7") == 0
    assert [c["env"]["CNI_IFNAME"] for c in env["fakes"].calls()] == ["net5"] * 2 + ["net7"] * 2


def test_gc_deletes_all_cached_attachments(env: dict[str, Any]) -> None:
    assert _cli(env, "add", "net", "/ns/p1") == 0
    assert _cli(env, "add", "net", "/ns/p2") == 0
    env["fakes"].clear()
    assert _cli(env, "gc", "net", "/ns/any") == 0
    calls = env["fakes"].calls()
    assert [c["cmd"] for c in calls] == ["DEL", "DEL", "DEL", "DEL", "GC", "GC"]
    assert "cni.dev/valid-attachments" not in json.loads(calls[-1]["stdin"])
    assert not list((env["cache"] / "results").iterdir())


@pytest.mark.parametrize("extra", [["--dry-run"], ["--grace-period", "0"]])
def test_node_wide_gc_options_are_refused_with_a_network(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    assert _cli(env, "gc", "net", "/ns/any", *extra) == 2
    assert "apply to `pycni gc` alone" in capsys.readouterr().err
    assert env["fakes"].calls() == []


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_grace_period_must_be_a_number_of_seconds(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        _cli(env, "gc", "--grace-period", value)
    assert exc.value.code == 2
    assert "--grace-period" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        ({"CNI_ARGS": "A=1;B"}, ["add", "net", "/ns/p"], 'pycni: invalid CNI_ARGS pair "B"\n'),
        ({"CAP_ARGS": "[1"}, ["add", "net", "/ns/p"], "pycni: unexpected end of JSON input\n"),
        ({}, ["add", "nope", "/ns/p"], 'pycni: no net configuration with name "nope" in '),
        (
            {"CNI_PATH": ""},
            ["add", "net", "/ns/p"],
            'pycni: plugin type="a" failed (add): no paths provided (CNI_PATH is empty',
        ),
        ({"CNI_IFNAME": ""}, ["add", "net", "/ns/p"], "interface name is empty"),
    ],
)
def test_errors_go_to_stderr_with_exit_1(
    env: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setup: dict[str, str],
    argv: list[str],
    message: str,
) -> None:
    for key, value in setup.items():
        monkeypatch.setenv(key, value)
    assert _cli(env, *argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_plugin_error_is_reported(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    env["fakes"].add("b", ADD={"stdout": json.dumps({"code": 11, "msg": "later"}), "exit": 1})
    assert _cli(env, "add", "net", "/ns/p") == 1
    assert capsys.readouterr().err == 'pycni: plugin type="b" failed (add): later\n'


def test_status_error_code_message(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    env["fakes"].add(
        "a", STATUS={"stdout": json.dumps({"code": 50, "msg": "not ready"}), "exit": 1}
    )
    assert _cli(env, "status", "net", "/ns/p") == 1
    assert capsys.readouterr().err == "pycni: not ready\n"


def test_list_validate_version(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    (env["confdir"] / "20-broken.conflist").write_text("{")
    (env["confdir"] / "30-old.conf").write_text(
        json.dumps({"cniVersion": "0.3.1", "name": "old", "type": "a"})
    )
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"net\t1.1.0\ta,b\t{env['confdir'] / '10-net.conflist'}"
    assert out[1].startswith("20-broken.conflist: error: error parsing configuration list")
    assert out[2].startswith("old\t0.3.1\ta\t")
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["plugins"] == ["a", "b"]
    assert main(["validate", "net"]) == 0
    assert "capabilities: portMappings" in capsys.readouterr().out
    env["fakes"].add("b", versions=["0.4.0"])
    assert main(["validate", "net"]) == 1
    assert (
        'plugins[1].type: plugin b does not support config version "1.1.0"'
        in capsys.readouterr().out
    )
    assert main(["version"]) == 0
    assert "1.1.0" in capsys.readouterr().out
    assert main(["version", "--plugin", "b"]) == 0
    assert json.loads(capsys.readouterr().out)["supportedVersions"] == ["0.4.0"]


def test_no_command_prints_cnitools_usage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bare `pycni`, as bare cnitool: its usage text (naming the program), exit 1."""
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/pycni"])
    assert main([]) == 1
    assert capsys.readouterr().err == cnitool.USAGE.format("pycni")
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "usage: pycni" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["add"], ["add", "net"], ["gc", "net"], ["frob"]])
def test_too_few_arguments_print_cnitools_usage(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert cnitool.exact(argv, "cnitool") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("cnitool: Add, check, remove, gc or status network")
    assert captured.err.endswith("  cnitool status <net> <netns>\n")
    assert env["fakes"].calls() == []


def test_unknown_verb_reads_the_config_then_does_nothing(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """cnitool loads the network before it looks at the verb: an unknown one exits 0."""
    assert main(["frob", "net", "/ns/p"]) == 0
    assert main(["frob", "nope", "/ns/p"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith('no net configuration with name "nope" in ')
    assert env["fakes"].calls() == []


def test_extra_arguments_are_ignored_as_cnitool_does(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYCNI_CACHE_DIR", str(env["cache"]))
    assert main(["del", "net", "/ns/p", "extra", "more"]) == 0
    assert [c["cmd"] for c in env["fakes"].calls()] == ["DEL", "DEL"]


def test_options_and_other_commands_go_to_argparse() -> None:
    assert cnitool.exact(["add", "net", "/ns/p", "-i", "eth1"], "pycni") is None
    assert cnitool.exact(["gc"], "pycni") is None
    assert cnitool.exact(["list", "a", "b"], "pycni", COMMAND_OWNERS) is None


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_command_modules_import_cheaply(module: str) -> None:
    """Registering a command must not import the runtime, results or pyroute2 (lazy imports)."""
    code = (
        f"import sys, argparse, {module} as m; "
        "m.register(argparse.ArgumentParser().add_subparsers()); "
        "heavy = ('pycni.runtime', 'pycni.spec.result', 'pyroute2'); "
        "print(sorted({n.split('.')[0] if n.startswith('pyroute2') else n "
        "for n in sys.modules if n.startswith(heavy)}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.stdout.strip() == "[]", f"{module} imports heavy modules at start-up"


def test_command_owner_table_matches_the_modules() -> None:
    """`pycni add` builds only cnitool's parser: the table must name every command's module."""
    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        parser = build_parser((module,))
        sub = next(a for a in parser._actions if a.dest == "command")
        for name in sub.choices:  # type: ignore[union-attr]
            registered[name] = module
    assert registered == COMMAND_OWNERS
    assert modules_for(["add", "x", "y"], COMMAND_MODULES) == ("pycni.cli.cnitool",)
    assert modules_for(["--help"], COMMAND_MODULES) == COMMAND_MODULES
    assert modules_for([], COMMAND_MODULES) == COMMAND_MODULES


def test_add_imports_no_other_command() -> None:
    """What `pycni add` loads before it runs: no other command module, nothing of the daemon."""
    code = (
        "import sys; from pycni.cli import main as m; "
        "m.build_parser(m.modules_for(['add', 'n', '/x'], m.COMMAND_MODULES)); "
        "print(sorted(n for n in sys.modules if n.startswith(('pycni.cli.', 'pycni.plugins', "
        "'pycni.daemon', 'pyroute2', 'logging'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    # inspect_cmd: gc's options (import-free itself); nothing else.
    assert out.stdout.strip() == "['pycni.cli.cnitool', 'pycni.cli.inspect_cmd', 'pycni.cli.main']"


def test_cnitool_verbs_load_no_heavy_stdlib(env: dict[str, Any]) -> None:
    """What a `pycni add`/`del` imports is its start-up time (docs/cli.md, "Start-up"): none
    of argparse, subprocess, typing, logging, re, functools' users beyond ipaddress, weakref,
    contextlib, json, threading, or pyroute2."""
    code = (
        "import sys; from pycni.cli.main import main; "
        "sys.argv = ['pycni']; "
        "rc = [main(['add', 'net', '/ns/p']), main(['del', 'net', '/ns/p'])]; "
        "heavy = ('argparse', 'subprocess', 'typing', 'logging', 're', 'weakref', 'contextlib', "
        "'json', 'threading', 'pyroute2', 'selectors', 'enum', 'signal'); "
        "print(rc, sorted(n for n in sys.modules if n.split('.')[0] in heavy)); "
        "print(' '.join(sorted(n for n in sys.modules if n.split('.')[0] == 'pycni')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd=env["tmp"],
    )
    verdict, ours = out.stdout.rsplit("\n", 2)[-3:-1]
    assert verdict.endswith("}[0, 0] []"), out.stdout + out.stderr
    named = cold_path.CLI
    assert set(ours.split()) == named, (
        f"`pycni add`/`del` import {sorted(set(ours.split()) - named)} beyond the named list "
        f"and no longer {sorted(named - set(ours.split()))}: pycni.skel.cold_path.CLI would "
        f"read:\n{ours}"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "net", "/run/netns/x"],
        ["del", "net", "/run/netns/x"],
        ["inspect"],
        ["doctor"],
        ["cleanup"],
        ["gc"],
        ["demo"],
    ],
)
def test_commands_that_need_root_say_so_up_front(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 65534)
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no partial report
    assert captured.err.startswith(f"pycni {argv[0]} needs root: ")
    assert captured.err.endswith("Run it as root (e.g. with sudo).\n")


def test_commands_that_need_no_root_run_without(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 65534)
    monkeypatch.setenv("NETCONFPATH", str(tmp_path))
    assert main(["version"]) == 0
    assert main(["list"]) == 0
    assert "needs root" not in capsys.readouterr().err


def test_a_broken_file_breaks_only_itself(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    broken = env["confdir"] / "05-broken.conflist"
    broken.write_text('{"cniVersion": "1.0.0", "name": "br')
    assert _cli(env, "add", "net", "/ns/p") == 0
    err = capsys.readouterr().err
    assert err.startswith(f"pycni: warning: skipped {broken}: error parsing configuration list")
    assert _cli(env, "add", "nosuch", "/ns/p") == 1
    assert "unreadable there: 05-broken.conflist" in capsys.readouterr().err


def test_empty_cni_path_is_named(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CNI_PATH")
    assert _cli(env, "add", "net", "/ns/p") == 1
    err = capsys.readouterr().err
    assert "no paths provided" in err
    assert err.endswith("(CNI_PATH is empty: set it to the directories holding the plugins)\n")


def test_add_ends_its_line_on_a_terminal_only(env: dict[str, Any]) -> None:
    """cnitool's bytes through a pipe; on a terminal the result's line is ended."""
    import pty

    script = (
        "import sys; from pycni.cli.main import main; "
        f"sys.exit(main(['add', '--cache-dir', {str(env['cache'])!r}, 'net', '/ns/tty']))"
    )
    piped = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert piped.stdout.endswith(b"}")
    leader, follower = pty.openpty()
    subprocess.run([sys.executable, "-c", script], stdout=follower, check=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert b"".join(chunks).endswith(b"}\r\n")


def test_cnitools_form_prints_cnitools_bytes(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without options the verbs are cnitool's: the bare message, no prefix or hint."""
    monkeypatch.setenv("PYCNI_CACHE_DIR", str(env["cache"]))
    assert main(["add", "nope", "/ns/p"]) == 1
    assert capsys.readouterr().err.startswith('no net configuration with name "nope" in ')
    monkeypatch.setenv("CNI_PATH", "")
    assert main(["add", "net", "/ns/p"]) == 1
    assert capsys.readouterr().err == 'plugin type="a" failed (add): no paths provided\n'
