"""Leases on disk, one JSON file per client ID, so a restarted daemon keeps renewing them."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from pycni.fsutil import write_atomic

DEFAULT_LEASE_DIR = "/run/pycni/dhcp"


class LeaseStore:
    """A directory of lease records (0700, files 0600, written atomically and fsynced with
    the directory, so a lease the daemon renews for a live pod survives its crash)."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    def _file(self, client_id: str) -> Path:
        return self.dir / (hashlib.sha256(client_id.encode()).hexdigest()[:40] + ".json")

    def save(self, record: dict[str, Any]) -> None:
        target = self._file(str(record["clientID"]))
        write_atomic(target, json.dumps(record), mode=0o600, dir_mode=0o700, fsync=True)

    def remove(self, client_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._file(client_id).unlink()

    def load_all(self) -> list[dict[str, Any]]:
        """Every readable record; unreadable files are removed."""
        out: list[dict[str, Any]] = []
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.json")):
            try:
                record = json.loads(path.read_text())
                if isinstance(record, dict) and isinstance(record.get("clientID"), str):
                    out.append(record)
                    continue
            except (OSError, ValueError):
                pass
            path.unlink(missing_ok=True)
        return out
