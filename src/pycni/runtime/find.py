"""Finding a plugin binary in the CNI search path (invoke ``FindInPath``)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError, InternalError

__all__ = ["find_in_path"]


def find_in_path(plugin: str, paths: Sequence[str]) -> str:
    """Return the first regular file named ``plugin`` in ``paths``.

    Symlinks are followed; the exec bit is not checked (running the file reports that).
    """
    if plugin == "":
        raise CNIError(INVALID_NETWORK_CONFIG, "no plugin name provided")
    if os.sep in plugin or (os.altsep and os.altsep in plugin) or "\\" in plugin:
        raise CNIError(INVALID_NETWORK_CONFIG, f"invalid plugin name: {plugin}")
    if not paths:
        raise InternalError("no paths provided")
    for directory in paths:
        candidate = os.path.join(directory, plugin)
        try:
            if stat.S_ISREG(os.stat(candidate).st_mode):
                return candidate
        except OSError:
            continue
    listed = " ".join(paths)
    raise InternalError(f'failed to find plugin "{plugin}" in path [{listed}]')
