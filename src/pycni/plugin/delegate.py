"""IPAM (and other) delegation: run a plugin found in CNI_PATH with the caller's env.

A delegate that is a pycni entry point (it carries the entry-point marker) runs in this
process and thread instead of being exec'd: same semantics, no process start.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING

from pycni.fast.marker import is_entry_point
from pycni.runtime.exec import plugin_error
from pycni.runtime.find import find_in_path
from pycni.spec.errors import INTERNAL, CNIError

if TYPE_CHECKING:
    from pycni.plugin.base import Request
    from pycni.spec.result import Result

_marker_cache: dict[tuple[str, int, int], bool] = {}


def is_pycni_entry_point(path: str) -> bool:
    """True when the file carries the entry-point marker (cached by inode and mtime)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (path, st.st_ino, st.st_mtime_ns)
    cached = _marker_cache.get(key)
    if cached is None:
        cached = is_entry_point(path)
        _marker_cache[key] = cached
    return cached


def delegate(
    req: Request, plugin_type: str, command: str | None = None, stdin: bytes | None = None
) -> Result | None:
    """Run ``plugin_type`` with ``command`` (default: the caller's) and the caller's stdin.

    Returns the parsed result for ADD, None otherwise; a failure raises the delegate's CNIError.
    """
    command = command or req.command
    data = req.stdin if stdin is None else stdin
    path = find_in_path(plugin_type, req.path)
    env = dict(req.env)
    env["CNI_COMMAND"] = command
    if is_pycni_entry_point(path):
        from pycni.plugin import registry, skel

        if plugin_type in registry.PLUGIN_TYPES:
            outcome = skel.run(plugin_type, env, data, netns_fd=req.netns_fd)
            stdout, stderr, code = outcome.stdout, outcome.stderr, outcome.exit_code
        else:
            stdout, stderr, code = _exec(path, env, data)
    else:
        stdout, stderr, code = _exec(path, env, data)
    if stderr:
        req.stderr.write(stderr.decode(errors="replace"))
    if code != 0:
        raise plugin_error(f"exit status {code}", stdout, stderr)
    if command != "ADD":
        return None
    from pycni.spec.result import Result

    try:
        raw = json.loads(stdout)
    except ValueError as exc:
        raise CNIError(INTERNAL, f"{plugin_type} printed an unparsable result: {exc}") from None
    if not isinstance(raw, dict):
        raise CNIError(INTERNAL, f"{plugin_type} printed a result that is not an object")
    return Result.from_dict(raw, default_version=req.cni_version)


def _exec(path: str, env: dict[str, str], stdin: bytes) -> tuple[bytes, bytes, int]:
    try:
        proc = subprocess.run([path], input=stdin, env=env, capture_output=True, check=False)
    except OSError as exc:
        raise CNIError(INTERNAL, f"failed to exec {path}: {exc.strerror}") from None
    return proc.stdout, proc.stderr, proc.returncode
