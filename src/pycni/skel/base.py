"""What a plugin sees (Request) and what it implements (Plugin)."""

from __future__ import annotations

import io
from collections.abc import Mapping

from pycni.net.ns import NetNS
from pycni.record import field, record
from pycni.skel.host import REAL_HOST
from pycni.spec import version
from pycni.spec.decode import IfName, Str, check_text, fail, lookup, section, shown
from pycni.spec.errors import DecodingFailure, InvalidConfig, InvalidEnv

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pycni.skel.host import Host
    from pycni.spec.result import Result

__all__ = ["Plugin", "Request"]


@record
class Request:
    """One parsed plugin invocation: the CNI_* variables and the config from stdin."""

    command: str
    container_id: str
    netns: str
    ifname: str
    args: str
    path: list[str]
    config: dict[str, Any]
    stdin: bytes
    env: Mapping[str, str]
    netns_fd: int | None = None
    stderr: io.StringIO = field(default_factory=io.StringIO)
    host: Host = REAL_HOST  # the machine the plugin works on (pycni.skel.host)

    @property
    def cni_version(self) -> str:
        value = self.config.get("cniVersion", "")
        return value if isinstance(value, str) else ""

    @property
    def name(self) -> str:
        return str(self.config.get("name", ""))

    def log(self, message: str) -> None:
        """A diagnostic line for stderr (never stdout)."""
        self.stderr.write(message.rstrip("\n") + "\n")

    def open_netns(self) -> NetNS:
        """The container namespace: the fd we were handed, else CNI_NETNS by path."""
        return self.host.open_netns(self.netns, self.netns_fd)

    def delegate(
        self, plugin_type: str, command: str | None = None, stdin: bytes | None = None
    ) -> Result | None:
        """Run ``plugin_type`` (IPAM) with ``command`` (default: this request's) and this
        request's environment and stdin (or ``stdin``): ADD's Result, None otherwise."""
        return self.host.delegate(self, plugin_type, command, stdin)

    @property
    def runtime_config(self) -> dict[str, Any]:
        """``runtimeConfig`` (``{}`` when absent); not an object is code 7 naming it."""
        return section(self.config, "runtimeConfig")

    @property
    def cni_args(self) -> dict[str, Any]:
        """``args.cni`` from the config (the CONVENTIONS.md form of per-call arguments)."""
        return section(section(self.config, "args"), "cni", "args")

    def prev_result(self) -> Result | None:
        """``prevResult`` parsed with the config's version, as skel's ParsePrevResult.

        Beyond the result model's own checks (code 6), every string in it must be text a
        plugin can hand on (UTF-8, no NUL, bounded), and interface names and MACs must be
        free of control characters: code 7 naming the field otherwise.
        """
        found, raw = lookup(self.config, "prevResult")
        if not found or raw is None:
            return None
        from pycni.spec.result import Result

        if not isinstance(raw, dict):
            raise DecodingFailure("could not parse prevResult: not a JSON object")
        _check_strings(raw, "prevResult")
        result = Result.from_dict(raw, default_version=self.cni_version)
        for i, intf in enumerate(result.interfaces):
            where = f"prevResult.interfaces[{i}]"
            _PRINTABLE.decode(intf.name, f"{where}.name")
            _PRINTABLE.decode(intf.mac, f"{where}.mac")
        return result

    def valid_attachments(self) -> list[tuple[str, str]] | None:
        """GC's ``cni.dev/valid-attachments`` as (containerID, ifname); None when absent."""
        key = "cni.dev/valid-attachments"
        raw = self.config.get(key)
        if raw is None:
            key = "cni.dev/attachments"
            raw = self.config.get(key)
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise fail(key, "a list of {containerID, ifname} objects", raw)
        out = []
        for i, item in enumerate(raw):
            where = f"{key}[{i}]"
            if not isinstance(item, dict):
                raise fail(where, "an object with containerID and ifname", item)
            cid = _ATTACHMENT_ID.decode(item.get("containerID", ""), f"{where}.containerID")
            ifname = _ATTACHMENT_IFNAME.decode(item.get("ifname", ""), f"{where}.ifname")
            out.append((cid, ifname))
        return out


_PRINTABLE = Str(max_len=256, no_control=True, what="a string")
_ATTACHMENT_ID = Str(max_len=1024, no_control=True, what="a container ID")
_ATTACHMENT_IFNAME = IfName()


def _check_strings(value: Any, path: str) -> None:
    """Every key and string in a decoded JSON tree obeys the decoder's text rules."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            check_text(item, where)
        elif isinstance(item, dict):
            for key, child in item.items():
                check_text(key, f"{where} key {shown(key)}")
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 2**64:
            raise InvalidConfig(f"invalid config: {where} must be a number below 2^64")


class Plugin:
    """Base class of every plugin; a verb left unimplemented is a successful no-op (skel)."""

    about: str = ""
    supported_versions: tuple[str, ...] = version.ALL

    def add(self, req: Request) -> Result:
        raise InvalidEnv("unknown CNI_COMMAND: ADD")

    def delete(self, req: Request) -> None:
        return None

    def check(self, req: Request) -> None:
        return None

    def gc(self, req: Request) -> None:
        return None

    def status(self, req: Request) -> None:
        return None

    def command_line(self, args: list[str]) -> int | None:
        """A command line of the plugin's own on its entry point (the reference's ``dhcp
        daemon``): runs it and returns the exit code; None when ``args`` are not one, and then
        the process is a CNI call (arguments are ignored there, as by skel)."""
        return None
