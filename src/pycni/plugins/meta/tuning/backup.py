"""The file where ADD keeps the values it replaced, so DEL can put them back.

Same place and shape as the reference (``<dataDir>/<containerID>_<ifname>.json`` with keys
``mac``, ``promisc``, ``mtu``, ``allmulti``, ``txQLen``), so either implementation can restore
what the other changed. pycni adds ``alias`` and ``sysctl`` (old values by /proc/sys path);
the reference ignores keys it does not know. The file goes through the StateFiles the plugin
is handed (``req.host.state()``).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from pycni.record import field, fields, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import StateFiles


def _saved(default: Any, kind: type, key: str = "") -> Any:
    """A saved link value: its JSON type and, when not the attribute's name, its JSON key.
    The default means "not changed by ADD" and is left out of the file."""
    return field(default=default, metadata={"kind": kind, "key": key})


@record
class Backup:
    """The old values, fields in the reference's order (sysctl last, pycni's own)."""

    mac: str = _saved("", str)
    promisc: bool | None = _saved(None, bool)
    mtu: int = _saved(0, int)
    allmulti: bool | None = _saved(None, bool)
    txqlen: int | None = _saved(None, int, "txQLen")
    alias: str | None = _saved(None, str)
    sysctl: dict[str, str] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return self == Backup()

    def to_json(self) -> str:
        """Go's ``json.MarshalIndent(v, "", " ")`` layout, fields in the reference's order."""
        out: dict[str, Any] = {}
        for f in _LINK_FIELDS:
            value = getattr(self, f.name)
            if value != f.default:
                out[f.metadata["key"] or f.name] = value
        if self.sysctl:
            out["sysctl"] = self.sysctl
        return json.dumps(out, indent=1)

    @classmethod
    def from_dict(cls, data: Any) -> Backup:
        """Tolerant decoding: a value of the wrong type is ignored, like an absent one."""
        if not isinstance(data, dict):
            return cls()
        values: dict[str, Any] = {}
        for f in _LINK_FIELDS:
            value = data.get(f.metadata["key"] or f.name)
            kind = f.metadata["kind"]
            if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
                values[f.name] = value
        sysctl = data.get("sysctl")
        if isinstance(sysctl, dict):
            values["sysctl"] = {k: v for k, v in sysctl.items() if isinstance(v, str)}
        return cls(**values)

    def merged_over(self, older: Backup) -> Backup:
        """Values already saved by an earlier ADD win: they are the true originals."""
        values = {
            f.name: getattr(older if getattr(older, f.name) != f.default else self, f.name)
            for f in _LINK_FIELDS
        }
        return Backup(**values, sysctl={**self.sysctl, **older.sysctl})


_LINK_FIELDS = tuple(f for f in fields(Backup) if "kind" in f.metadata)


def load(files: StateFiles, path: str) -> Backup | None:
    """The saved values, or None when there is no file (nothing to restore)."""
    try:
        raw = files.read(path)
    except FileNotFoundError:
        return None
    try:
        return Backup.from_dict(json.loads(raw.decode("utf-8")))
    except ValueError:  # UnicodeDecodeError too
        return Backup()


def save(files: StateFiles, path: str, backup: Backup) -> None:
    """Write atomically (temp file + rename), mode 0600."""
    files.write_atomic(path, backup.to_json().encode(), mode=0o600, dir_mode=0o700, durable=False)


def remove(files: StateFiles, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        files.remove(path)
