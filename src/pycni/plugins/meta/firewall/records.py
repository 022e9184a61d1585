"""Which IPs each attachment of a network got, one file per attachment under the plugin's data
directory: iptables rules are per IP and GC has no prevResult to go by, and a DEL without
prevResult finds them here. Through the StateFiles the plugin is handed (``req.host.state()``)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os

from pycni.plugins.meta.firewall.backend import IPAddress
from pycni.spec import validate
from pycni.spec.errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import StateFiles


class Records:
    """Which IPs each attachment got (iptables only): GC has no prevResult to go by."""

    def __init__(self, files: StateFiles, data_dir: str, network: str) -> None:
        self.files = files
        self.directory = os.path.join(data_dir, network)

    def _path(self, cid: str, ifname: str) -> str:
        """The record's file; IDs from a GC request or a record's contents are checked like
        CNI_CONTAINERID and CNI_IFNAME, so no value can name a file elsewhere."""
        try:
            validate.container_id(cid)
            validate.interface_name(ifname)
        except CNIError:
            raise ValueError(f"not an attachment: {cid!r} {ifname!r}") from None
        return os.path.join(self.directory, f"{cid}_{ifname}")

    def save(self, cid: str, ifname: str, ips: list[IPAddress]) -> None:
        body = json.dumps({"containerID": cid, "ifname": ifname, "ips": [str(ip) for ip in ips]})
        self.files.write_atomic(
            self._path(cid, ifname), body.encode(), mode=0o600, dir_mode=0o700, durable=False
        )

    def load(self, cid: str, ifname: str) -> dict[int, list[IPAddress]]:
        try:
            data = json.loads(self.files.read(self._path(cid, ifname)))
        except (OSError, ValueError):
            return {}
        out: dict[int, list[IPAddress]] = {}
        for text in data.get("ips", []) if isinstance(data, dict) else []:
            with contextlib.suppress(ValueError):
                ip = ipaddress.ip_address(text)
                out.setdefault(ip.version, []).append(ip)
        return out

    def remove(self, cid: str, ifname: str) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            self.files.remove(self._path(cid, ifname))
        with contextlib.suppress(OSError):
            self.files.remove_dir(self.directory)  # only when empty

    def stale(self, valid: list[tuple[str, str]]) -> list[tuple[str, str]]:
        try:
            names = self.files.list_dir(self.directory)
        except FileNotFoundError:
            return []
        keep = {f"{cid}_{ifname}" for cid, ifname in valid}
        out = []
        for name in names:
            if name.startswith(".") or name in keep:
                continue
            try:
                data = json.loads(self.files.read(os.path.join(self.directory, name)))
                out.append((str(data["containerID"]), str(data["ifname"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out
