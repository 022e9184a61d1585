"""The plugin framework: env checks, stdin validation, version gating and error output."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pycni.skel import run as skel
from pycni.skel.base import Plugin, Request
from pycni.spec.errors import CNIError
from pycni.spec.result import IPConfig, Result


class Recorder(Plugin):
    about = "test plugin"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def add(self, req: Request) -> Result:
        self.calls.append("ADD")
        return Result(
            cni_version=req.cni_version,
            ips=[IPConfig(address=ipaddress.ip_interface("10.0.0.2/24"))],
        )

    def delete(self, req: Request) -> None:
        self.calls.append("DEL")

    def check(self, req: Request) -> None:
        self.calls.append("CHECK")

    def gc(self, req: Request) -> None:
        self.calls.append("GC")

    def status(self, req: Request) -> None:
        raise CNIError(50, "not ready")


class Crashing(Plugin):
    def add(self, req: Request) -> Result:
        raise KeyError("boom")


ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c1",
    "CNI_NETNS": "/proc/1/ns/net",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/opt/cni/bin",
}


def conf(version: str = "1.0.0", **extra: Any) -> bytes:
    data: dict[str, Any] = {"cniVersion": version, "name": "net1", "type": "t"}
    data.update(extra)
    return json.dumps(data).encode()


def run(env: dict[str, str], stdin: bytes, plugin: Plugin | None = None) -> skel.Outcome:
    return skel.run_plugin(plugin or Recorder(), env, stdin)


def error_of(outcome: skel.Outcome) -> dict[str, Any]:
    assert outcome.exit_code == 1
    data = json.loads(outcome.stdout)
    assert isinstance(data, dict)
    return data


def test_add_prints_result_in_config_version() -> None:
    out = run(ENV, conf("0.4.0"))
    assert out.exit_code == 0, out.stdout
    result = json.loads(out.stdout)
    assert result["cniVersion"] == "0.4.0"
    assert result["ips"][0]["version"] == "4"


def test_add_to_legacy_version_uses_ip4() -> None:
    out = run(ENV, conf("0.2.0"))
    assert json.loads(out.stdout)["ip4"]["ip"] == "10.0.0.2/24"


def test_version_reply_lists_every_version() -> None:
    out = run({"CNI_COMMAND": "VERSION"}, b'{"cniVersion":"0.4.0"}')
    reply = json.loads(out.stdout)
    assert out.exit_code == 0
    assert reply["cniVersion"] == "1.1.0"
    assert reply["supportedVersions"] == [
        "0.1.0",
        "0.2.0",
        "0.3.0",
        "0.3.1",
        "0.4.0",
        "1.0.0",
        "1.1.0",
    ]


def test_no_command_prints_about_to_stderr() -> None:
    out = run({}, b"")
    assert out.exit_code == 0 and out.stdout == b""
    assert b"CNI protocol versions supported: 0.1.0" in out.stderr


@pytest.mark.parametrize(
    ("command", "drop", "missing"),
    [
        ("ADD", ["CNI_NETNS", "CNI_PATH"], "CNI_NETNS,CNI_PATH"),
        ("DEL", ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"], "CNI_CONTAINERID,CNI_IFNAME"),
        ("CHECK", ["CNI_IFNAME"], "CNI_IFNAME"),
        ("GC", ["CNI_PATH", "CNI_CONTAINERID"], "CNI_PATH"),
    ],
)
def test_missing_env_is_code_4_and_lists_them(command: str, drop: list[str], missing: str) -> None:
    env = {k: v for k, v in ENV.items() if k not in drop} | {"CNI_COMMAND": command}
    plugin = Recorder()
    err = error_of(run(env, conf("1.1.0"), plugin))
    assert err["code"] == 4
    assert err["msg"] == f"required env variables [{missing}] missing"
    assert plugin.calls == []


@pytest.mark.parametrize("ifname", ["", "a" * 16, ".", "..", "a/b", "a:b", "a b"])
def test_bad_ifname_is_code_4(ifname: str) -> None:
    env = ENV | {"CNI_IFNAME": ifname}
    if ifname == "":
        assert error_of(run(env, conf()))["msg"].startswith("required env variables")
    else:
        assert error_of(run(env, conf()))["code"] == 4


def test_bad_container_id_is_code_4() -> None:
    err = error_of(run(ENV | {"CNI_CONTAINERID": "-bad"}, conf()))
    assert err["code"] == 4 and err["details"] == "-bad"


def test_malformed_json_is_code_6() -> None:
    assert error_of(run(ENV, b"{not json"))["code"] == 6


def test_missing_name_is_code_7() -> None:
    assert error_of(run(ENV, b'{"cniVersion":"1.0.0","type":"t"}'))["code"] == 7


def test_unsupported_version_is_code_1() -> None:
    err = error_of(run(ENV, conf("9.9.9")))
    assert err["code"] == 1
    assert err["msg"] == "incompatible CNI versions"
    assert 'config is "9.9.9"' in err["details"]


def test_check_on_031_is_code_1() -> None:
    plugin = Recorder()
    err = error_of(run(ENV | {"CNI_COMMAND": "CHECK"}, conf("0.3.1"), plugin))
    assert err == {"cniVersion": "0.3.1", "code": 1, "msg": "config version does not allow CHECK"}
    assert plugin.calls == []


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_gc_and_status_need_110(command: str) -> None:
    err = error_of(run(ENV | {"CNI_COMMAND": command}, conf("1.0.0")))
    assert err["code"] == 1 and command in err["msg"]


def test_status_error_keeps_its_code() -> None:
    assert error_of(run(ENV | {"CNI_COMMAND": "STATUS"}, conf("1.1.0")))["code"] == 50


def test_gc_runs_on_110() -> None:
    plugin = Recorder()
    out = run({"CNI_COMMAND": "GC", "CNI_PATH": "/x"}, conf("1.1.0"), plugin)
    assert out.exit_code == 0 and out.stdout == b"" and plugin.calls == ["GC"]


def test_unknown_command_is_code_4_after_stdin_checks() -> None:
    assert error_of(run(ENV | {"CNI_COMMAND": "FOO"}, b"{"))["code"] == 6
    err = error_of(run(ENV | {"CNI_COMMAND": "FOO"}, conf()))
    assert err["code"] == 4 and err["msg"] == "unknown CNI_COMMAND: FOO"


def test_unexpected_exception_is_999_without_traceback_on_stdout() -> None:
    out = run(ENV, conf(), Crashing())
    err = error_of(out)
    assert err["code"] == 999
    assert b"Traceback" not in out.stdout
    assert b"Traceback" in out.stderr


def test_own_netns_is_code_8_unless_overridden() -> None:
    env = ENV | {"CNI_NETNS": "/proc/thread-self/ns/net"}
    assert error_of(run(env, conf()))["code"] == 8
    assert run(env | {"CNI_NETNS_OVERRIDE": "true"}, conf()).exit_code == 0


def test_env_error_reports_the_configs_version() -> None:
    err = error_of(run({"CNI_COMMAND": "ADD"}, conf("0.4.0")))
    assert err["code"] == 4 and err["cniVersion"] == "0.4.0"
