"""What a plugin sees (Request) and what it implements (Plugin)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pycni.net.ns import NetNS
from pycni.plugin.config import lookup, section
from pycni.spec import version
from pycni.spec.errors import CNIError

if TYPE_CHECKING:
    from pycni.spec.result import Result


@dataclass
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
        if self.netns_fd is not None:
            return NetNS.from_fd(self.netns_fd, self.netns)
        return NetNS.open(self.netns)

    @property
    def runtime_config(self) -> dict[str, Any]:
        return section(self.config, "runtimeConfig")

    @property
    def cni_args(self) -> dict[str, Any]:
        """``args.cni`` from the config (the CONVENTIONS.md form of per-call arguments)."""
        return section(section(self.config, "args"), "cni")

    def prev_result(self) -> Result | None:
        """``prevResult`` parsed with the config's version, as skel's ParsePrevResult."""
        found, raw = lookup(self.config, "prevResult")
        if not found or raw is None:
            return None
        from pycni.spec.result import Result

        if not isinstance(raw, dict):
            raise CNIError(6, "could not parse prevResult: not a JSON object")
        return Result.from_dict(raw, default_version=self.cni_version)

    def valid_attachments(self) -> list[tuple[str, str]] | None:
        """GC's ``cni.dev/valid-attachments`` as (containerID, ifname); None when absent."""
        raw = self.config.get("cni.dev/valid-attachments")
        if raw is None:
            raw = self.config.get("cni.dev/attachments")
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise CNIError(7, "cni.dev/valid-attachments must be a list")
        out = []
        for item in raw:
            if not isinstance(item, dict):
                raise CNIError(7, "cni.dev/valid-attachments entries must be objects")
            out.append((str(item.get("containerID", "")), str(item.get("ifname", ""))))
        return out


class Plugin:
    """Base class of every plugin; a verb left unimplemented is a successful no-op (skel)."""

    about: str = ""
    supported_versions: tuple[str, ...] = version.ALL

    def add(self, req: Request) -> Result:
        raise CNIError(4, "unknown CNI_COMMAND: ADD")

    def delete(self, req: Request) -> None:
        return None

    def check(self, req: Request) -> None:
        return None

    def gc(self, req: Request) -> None:
        return None

    def status(self, req: Request) -> None:
        return None
