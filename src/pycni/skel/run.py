"""The plugin framework (skel): env + stdin -> validated Request -> verb handler -> output.

``run`` never raises and never touches the process's stdout: it returns what a plugin
process would print and its exit code, so the same code serves an exec'd plugin, the
daemon and in-process IPAM delegation.
"""

from __future__ import annotations

from collections.abc import Mapping

from pycni.net import ns as netns
from pycni.net import tools
from pycni.net.errors import to_cni
from pycni.record import record
from pycni.skel import registry
from pycni.skel.base import Plugin, Request
from pycni.skel.host import REAL_HOST
from pycni.spec import jsoncodec, validate, version
from pycni.spec.decode import shown
from pycni.spec.errors import (
    CNIError,
    DecodingFailure,
    IncompatibleVersion,
    InvalidConfig,
    InvalidEnv,
    InvalidNetNS,
)
from pycni.spec.gojson import shape_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.skel.host import Host

__all__ = ["MAX_STDIN", "Outcome", "run", "run_plugin"]

VERBS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
ENV_ORDER = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH")
REQUIRED: dict[str, frozenset[str]] = {
    "CNI_CONTAINERID": frozenset({"ADD", "CHECK", "DEL"}),
    "CNI_NETNS": frozenset({"ADD", "CHECK"}),
    "CNI_IFNAME": frozenset({"ADD", "CHECK", "DEL"}),
    "CNI_PATH": frozenset({"ADD", "CHECK", "DEL", "GC", "STATUS"}),
}
MIN_VERSION = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}
MAX_STDIN = 16 * 1024 * 1024  # bytes of config; real configs are a few KiB
MAX_DEPTH = 64  # JSON nesting; real configs nest fewer than 10 levels
MAX_ENV_VALUE = 1024 * 1024
MAX_CONTAINER_ID = 200
MAX_NETWORK_NAME = 255


@record
class Outcome:
    stdout: bytes
    stderr: bytes
    exit_code: int


def run(
    plugin_type: str,
    env: Mapping[str, str],
    stdin: bytes,
    *,
    netns_fd: int | None = None,
    host: Host = REAL_HOST,
) -> Outcome:
    """Run one plugin call on this thread, in this thread's network namespace (``host``: the
    machine it works on; tests pass pycni.skel.fake_host.FakeHost)."""
    try:
        plugin = registry.load(plugin_type)
    except CNIError as err:
        return _failure(err, _peek_version(stdin), None, [])
    return run_plugin(plugin, env, stdin, netns_fd=netns_fd, host=host)


def run_plugin(
    plugin: Plugin,
    env: Mapping[str, str],
    stdin: bytes,
    *,
    netns_fd: int | None = None,
    host: Host = REAL_HOST,
) -> Outcome:
    err_lines: list[str] = []
    config_version: str | None = None
    req: Request | None = None
    try:
        command = env.get("CNI_COMMAND", "")
        if command == "" and plugin.about:
            about = f"{plugin.about}\nCNI protocol versions supported: "
            about += ", ".join(plugin.supported_versions) + "\n"
            return Outcome(b"", about.encode(), 0)
        _check_env(command, env)
        if command == "VERSION":
            reply = {
                "cniVersion": version.CURRENT,
                "supportedVersions": list(plugin.supported_versions),
            }
            return Outcome((jsoncodec.dumps(reply) + "\n").encode(), b"", 0)
        config = _parse_config(stdin)
        if command not in VERBS:
            raise InvalidEnv(f"unknown CNI_COMMAND: {command}")
        raw_version = config.get("cniVersion")
        config_version = raw_version if isinstance(raw_version, str) and raw_version else None
        config_version = _check_version(command, config, plugin)
        req = Request(
            command=command,
            container_id=env.get("CNI_CONTAINERID", ""),
            netns=env.get("CNI_NETNS", ""),
            ifname=env.get("CNI_IFNAME", ""),
            args=env.get("CNI_ARGS", ""),
            path=[p for p in env.get("CNI_PATH", "").split(":") if p],
            config=config,
            stdin=stdin,
            env=env,
            netns_fd=netns_fd,
            host=host,
        )
        with tools.search_path(env.get("PATH")):
            stdout = _dispatch(plugin, req, config_version)
        if command in ("ADD", "DEL"):
            _check_not_own_netns(req)
        return Outcome(stdout, _text_bytes(req.stderr.getvalue()), 0)
    except CNIError as err:
        return _failure(err, config_version or _peek_version(stdin), req, err_lines)
    except RecursionError:  # a structure nested too deep for some walk over it
        return _failure(
            DecodingFailure("error unmarshall network config: nested too deeply"),
            config_version,
            req,
            err_lines,
        )
    except Exception as exc:  # a NetError (net/errors.py), a bug: a CNI error, no traceback
        import traceback  # only here: a plugin call that goes well never loads it

        err_lines.append(traceback.format_exc())  # to the log (stderr), never to stdout
        return _failure(to_cni(exc), config_version or _peek_version(stdin), req, err_lines)


def _text_bytes(text: str) -> bytes:
    """Log text as bytes; a lone surrogate (from a hostile value) cannot make this raise."""
    return text.encode("utf-8", errors="backslashreplace")


def _failure(
    err: CNIError, config_version: str | None, req: Request | None, extra: list[str]
) -> Outcome:
    stderr = (req.stderr.getvalue() if req else "") + "".join(extra)
    try:
        body = jsoncodec.dumps(err.to_dict(config_version or version.CURRENT), indent=4)
    except (TypeError, ValueError, RecursionError):
        body = jsoncodec.dumps(CNIError(err.code, type(err).__name__).to_dict(version.CURRENT))
    return Outcome(body.encode(), _text_bytes(stderr), 1)


def _peek_version(stdin: bytes) -> str | None:
    """The config's cniVersion for an error reported before the config was parsed."""
    if len(stdin) > MAX_STDIN:
        return None
    try:
        data = jsoncodec.loads(stdin)
    except Exception:  # it runs in the error path: whatever the codec raises, answer anyway
        return None
    value = data.get("cniVersion") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value and len(value) <= 32 else None


def _check_env(command: str, env: Mapping[str, str]) -> None:
    for name in (*ENV_ORDER, "CNI_NETNS_OVERRIDE"):
        value = env.get(name, "")
        if not isinstance(value, str):
            raise InvalidEnv(f"{name} must be a string")
        bad = "\x00" in value or len(value) > MAX_ENV_VALUE
        if not bad:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                bad = True
        if bad:
            raise InvalidEnv(
                f"{name} must be UTF-8 text without NUL of at most {MAX_ENV_VALUE} bytes",
                shown(value),
            )
    missing = [
        name
        for name in ENV_ORDER
        if env.get(name, "") == "" and (name == "CNI_COMMAND" or command in REQUIRED.get(name, ()))
    ]
    if missing:
        raise InvalidEnv(f"required env variables [{','.join(missing)}] missing")
    cid = env.get("CNI_CONTAINERID", "")
    if cid and command in REQUIRED["CNI_CONTAINERID"]:
        validate.container_id(cid)
    if len(cid) > MAX_CONTAINER_ID:
        # plugins name files after it (<id>_<ifname>.json must fit NAME_MAX = 255)
        raise InvalidEnv(f"CNI_CONTAINERID must be at most {MAX_CONTAINER_ID} characters")
    ifname = env.get("CNI_IFNAME", "")
    if ifname and command in REQUIRED["CNI_IFNAME"]:
        validate.interface_name(ifname)


def _parse_config(stdin: bytes) -> dict[str, object]:
    if len(stdin) > MAX_STDIN:
        raise DecodingFailure(
            f"error unmarshall network config: larger than {MAX_STDIN} bytes ({len(stdin)})"
        )
    try:
        config = jsoncodec.loads(stdin)
    except RecursionError:
        raise DecodingFailure("error unmarshall network config: nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise DecodingFailure(
            f"error unmarshall network config: invalid UTF-8 at byte {exc.start}"
        ) from None
    except ValueError as exc:
        if jsoncodec.syntax_error(exc):
            raise DecodingFailure(f"error unmarshall network config: {exc}") from None
        # the scanner's int(): a number literal with thousands of digits
        raise DecodingFailure("error unmarshall network config: a number is too long") from None
    if not isinstance(config, dict):
        raise DecodingFailure("error unmarshall network config: not a JSON object")
    problem = shape_problem(config, MAX_DEPTH, stdin)
    if problem:
        raise DecodingFailure(f"error unmarshall network config: {problem}")
    name = config.get("name")
    if not isinstance(name, str) or name == "":
        raise InvalidConfig("missing network name")
    validate.network_name(name)
    if len(name) > MAX_NETWORK_NAME:
        # host-local keeps a directory per network: a longer name cannot be a file name
        raise InvalidConfig(f"invalid config: name must be at most {MAX_NETWORK_NAME} characters")
    return config


def _check_version(command: str, config: dict[str, object], plugin: Plugin) -> str:
    raw = config.get("cniVersion", "")
    if not isinstance(raw, str):
        raise DecodingFailure("decoding version from network config: cniVersion must be a string")
    config_version = raw or "0.1.0"
    minimum = MIN_VERSION.get(command)
    if minimum is not None:
        try:
            parsed = version.parse(config_version)
        except ValueError as exc:
            raise DecodingFailure(str(exc)) from None
        if parsed < version.parse(minimum):
            raise IncompatibleVersion(f"config version does not allow {command}")
        if not any(version.parse(v) >= parsed for v in plugin.supported_versions):
            raise IncompatibleVersion(f"plugin version does not allow {command}")
    else:
        try:
            version.parse(config_version)
        except ValueError as exc:
            raise DecodingFailure(f"decoding version from network config: {exc}") from None
    version.reconcile(config_version, plugin.supported_versions)
    return config_version


def _dispatch(plugin: Plugin, req: Request, config_version: str) -> bytes:
    if req.command == "ADD":
        result = plugin.add(req)
        return result.to_json(config_version).encode()
    if req.command == "DEL":
        plugin.delete(req)
    elif req.command == "CHECK":
        plugin.check(req)
    elif req.command == "GC":
        plugin.gc(req)
    elif req.command == "STATUS":
        plugin.status(req)
    return b""


def _check_not_own_netns(req: Request) -> None:
    override = req.env.get("CNI_NETNS_OVERRIDE", "").lower()
    if override in ("1", "true") or not req.netns:
        return
    if req.netns_fd is not None:
        import os

        here = os.stat(netns.THREAD_NETNS)
        there = os.fstat(req.netns_fd)
        same = (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
    else:
        same = netns.same_as_current(req.netns)
    if same:
        raise InvalidNetNS("plugin's netns and netns from CNI_NETNS should not be the same")
