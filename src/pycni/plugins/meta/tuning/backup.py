"""The file where ADD keeps the values it replaced, so DEL can put them back.

Same place and shape as the reference (``<dataDir>/<containerID>_<ifname>.json`` with keys
``mac``, ``promisc``, ``mtu``, ``allmulti``, ``txQLen``), so either implementation can restore
what the other changed. pycni adds ``alias`` and ``sysctl`` (old values by /proc/sys path);
the reference ignores keys it does not know.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from pycni.fsutil import write_atomic


@dataclass
class Backup:
    mac: str = ""
    promisc: bool | None = None
    mtu: int = 0
    allmulti: bool | None = None
    txqlen: int | None = None
    alias: str | None = None
    sysctl: dict[str, str] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return self == Backup()

    def to_json(self) -> str:
        """Go's ``json.MarshalIndent(v, "", " ")`` layout, fields in the reference's order."""
        out: dict[str, Any] = {}
        if self.mac:
            out["mac"] = self.mac
        if self.promisc is not None:
            out["promisc"] = self.promisc
        if self.mtu:
            out["mtu"] = self.mtu
        if self.allmulti is not None:
            out["allmulti"] = self.allmulti
        if self.txqlen is not None:
            out["txQLen"] = self.txqlen
        if self.alias is not None:
            out["alias"] = self.alias
        if self.sysctl:
            out["sysctl"] = self.sysctl
        return json.dumps(out, indent=1)

    @classmethod
    def from_dict(cls, data: Any) -> Backup:
        """Tolerant decoding: a value of the wrong type is ignored, like an absent one."""
        if not isinstance(data, dict):
            return cls()

        def get(key: str, kind: type) -> Any:
            value = data.get(key)
            if isinstance(value, bool) and kind is int:
                return None
            return value if isinstance(value, kind) else None

        sysctl = data.get("sysctl")
        return cls(
            mac=get("mac", str) or "",
            promisc=get("promisc", bool),
            mtu=get("mtu", int) or 0,
            allmulti=get("allmulti", bool),
            txqlen=get("txQLen", int),
            alias=get("alias", str),
            sysctl={k: v for k, v in sysctl.items() if isinstance(v, str)}
            if isinstance(sysctl, dict)
            else {},
        )

    def merged_over(self, older: Backup) -> Backup:
        """Values already saved by an earlier ADD win: they are the true originals."""
        return Backup(
            mac=older.mac or self.mac,
            promisc=older.promisc if older.promisc is not None else self.promisc,
            mtu=older.mtu or self.mtu,
            allmulti=older.allmulti if older.allmulti is not None else self.allmulti,
            txqlen=older.txqlen if older.txqlen is not None else self.txqlen,
            alias=older.alias if older.alias is not None else self.alias,
            sysctl={**self.sysctl, **older.sysctl},
        )


def load(path: str) -> Backup | None:
    """The saved values, or None when there is no file (nothing to restore)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    try:
        return Backup.from_dict(json.loads(text))
    except ValueError:
        return Backup()


def save(path: str, backup: Backup) -> None:
    """Write atomically (temp file + rename), mode 0600."""
    write_atomic(path, backup.to_json(), mode=0o600, dir_mode=0o700, fsync=False)


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
