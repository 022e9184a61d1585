"""Fake plugins for the runtime tests: small stdlib-only scripts that record what they got.

Each fake appends ``{"plugin", "cmd", "stdin", "env"}`` to a JSON-lines log and then behaves
as told per verb: print fixed stdout, print stderr, exit with a code, sleep, or (default for
ADD) pass ``prevResult`` through with one more interface named after the plugin.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

_TEMPLATE = """#!{python} -IS
import json, os, sys, time
NAME = {name!r}
LOG = {log!r}
BEHAVIOUR = json.loads({behaviour!r})
stdin = sys.stdin.read()
cmd = os.environ.get("CNI_COMMAND", "")
env = {{k: v for k, v in os.environ.items() if k.startswith("CNI_") or k == "FAKE_MARK"}}
with open(LOG, "a") as f:
    f.write(json.dumps({{"plugin": NAME, "cmd": cmd, "stdin": stdin, "env": env}}) + "\\n")
b = BEHAVIOUR.get(cmd, BEHAVIOUR.get("*", {{}}))
if b.get("sleep"):
    time.sleep(b["sleep"])
if "stderr" in b:
    sys.stderr.write(b["stderr"])
if "stdout" in b:
    sys.stdout.write(b["stdout"])
elif cmd == "ADD":
    conf = json.loads(stdin)
    res = conf.get("prevResult") or {{
        "cniVersion": conf.get("cniVersion", ""),
        "ips": [{{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}}],
    }}
    if conf.get("cniVersion", "") not in ("", "0.1.0", "0.2.0"):
        res.setdefault("interfaces", []).append({{"name": NAME}})
    sys.stdout.write(json.dumps(res))
elif cmd == "VERSION":
    sys.stdout.write(json.dumps({{"cniVersion": "1.1.0", "supportedVersions": BEHAVIOUR.get(
        "versions", ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])}}))
sys.exit(b.get("exit", 0))
"""


class FakePlugins:
    """A directory of fake plugins sharing one call log."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = directory / "calls.jsonl"

    def add(self, name: str, **behaviour: Any) -> Path:
        """``behaviour`` maps a verb (or ``"*"``) to ``{stdout, stderr, exit, sleep}``."""
        path = self.dir / name
        path.write_text(
            _TEMPLATE.format(
                python=sys.executable, name=name, log=str(self.log), behaviour=json.dumps(behaviour)
            )
        )
        os.chmod(path, 0o755)
        return path

    def script(self, name: str, body: str) -> Path:
        """A raw /bin/sh plugin."""
        path = self.dir / name
        path.write_text("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
        return path

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def clear(self) -> None:
        if self.log.exists():
            self.log.unlink()


def conflist(name: str, version: str, *plugins: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps(
        {"cniVersion": version, "name": name, "plugins": list(plugins), **extra}
    ).encode()
