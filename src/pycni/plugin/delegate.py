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
from pycni.spec.errors import INTERNAL, INVALID_NETWORK_CONFIG, CNIError

if TYPE_CHECKING:
    from pycni.plugin.base import Request
    from pycni.spec.result import Result

_marker_cache: dict[tuple[str, int, int], bool] = {}


def find_in_path(plugin_type: str, paths: list[str]) -> str:
    """The first regular file named ``plugin_type`` in ``paths`` (libcni's FindInPath)."""
    if plugin_type == "":
        raise CNIError(INVALID_NETWORK_CONFIG, "no plugin name provided")
    if "/" in plugin_type:
        raise CNIError(INVALID_NETWORK_CONFIG, f"invalid plugin name: {plugin_type}")
    if not paths:
        raise CNIError(INVALID_NETWORK_CONFIG, "no paths provided")
    for directory in paths:
        candidate = os.path.join(directory, plugin_type)
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if (st.st_mode & 0o170000) == 0o100000:
            return candidate
    raise CNIError(INVALID_NETWORK_CONFIG, f'failed to find plugin "{plugin_type}" in path {paths}')


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
        raise _decode_failure(stdout, stderr, code)
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


def _decode_failure(stdout: bytes, stderr: bytes, code: int) -> CNIError:
    """libcni's rules for a plugin that exited non-zero."""
    text = stdout.strip()
    if text:
        try:
            data = json.loads(text)
        except ValueError as exc:
            return CNIError(
                INTERNAL,
                f'netplugin failed but error parsing its diagnostic message "{text.decode(errors="replace")}": {exc}',
            )
        if isinstance(data, dict):
            return CNIError.from_dict(data)
    if stderr.strip():
        return CNIError(
            INTERNAL, f'netplugin failed: "{stderr.decode(errors="replace")}": exit status {code}'
        )
    return CNIError(INTERNAL, f"netplugin failed with no error message: exit status {code}")
