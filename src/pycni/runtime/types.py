"""The runtime's request and bookkeeping types (libcni's RuntimeConf, GCArgs, NetworkAttachment)."""

from __future__ import annotations

from pycni.record import field, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["GCArgs", "GCAttachment", "NetworkAttachment", "RuntimeConf"]


@record(frozen=True)
class RuntimeConf:
    """What identifies one attachment and what the runtime passes along with it.

    ``args`` become ``CNI_ARGS`` (``k=v;k=v``); ``capability_args`` feed ``runtimeConfig`` for
    the capabilities a plugin enables.
    """

    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = ()
    capability_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple((str(k), str(v)) for k, v in self.args))


@record(frozen=True)
class GCAttachment:
    """One attachment the runtime still uses (``cni.dev/valid-attachments`` entry)."""

    container_id: str
    ifname: str

    def to_dict(self) -> dict[str, str]:
        return {"containerID": self.container_id, "ifname": self.ifname}


@record(frozen=True)
class GCArgs:
    valid_attachments: tuple[GCAttachment, ...] = ()


@record(frozen=True)
class NetworkAttachment:
    """A cached attachment, as read back from the result cache."""

    container_id: str
    network: str
    ifname: str
    config: bytes
    netns: str = ""
    cni_args: tuple[tuple[str, str], ...] = ()
    capability_args: dict[str, Any] = field(default_factory=dict)
