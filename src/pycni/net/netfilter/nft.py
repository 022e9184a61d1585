"""nftables through libnftables, in-process: one transaction per ``apply`` call.

Commands built from configs use :func:`apply_json` (libnftables' JSON command form): every
value is a JSON string or number, never parsed as rule text, so no value can end a string or a
statement. :func:`apply` (nft's text syntax) remains for fixed scripts.

A libnftables context binds its netlink socket to the namespace of the thread that
created it, so contexts are cached per network namespace (keyed by the namespace inode)
and each is used under its own lock. Without the Python binding we fall back to
``nft -f -``, which is slower (a process per call) but equivalent.
"""

from __future__ import annotations

import _thread  # _thread.LockType is _thread.allocate_lock; threading costs an import
import os
from collections import OrderedDict

from pycni.net import tools
from pycni.net.netfilter.nft_records import NftError as NftError  # what nft.* raises
from pycni.net.ns import THREAD_NETNS
from pycni.spec import jsoncodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_MAX_CONTEXTS = 16
_contexts: OrderedDict[tuple[int, int], tuple[Any, _thread.LockType]] = OrderedDict()
_contexts_lock = _thread.allocate_lock()

_binding: Any = None  # the Debian/PyPI binding of libnftables, imported on first use
_binding_tried = False


def _load_binding() -> Any:
    """The binding, or None without one. Imported here, not above: it imports json and
    threading, and most plugin calls never reach libnftables."""
    global _binding, _binding_tried
    if not _binding_tried:
        try:
            import nftables
        except (ImportError, OSError):  # pragma: no cover - depends on the machine
            nftables = None
        _binding, _binding_tried = nftables, True
    return _binding


def _current_ns_key() -> tuple[int, int]:
    st = os.stat(THREAD_NETNS)
    return (st.st_dev, st.st_ino)


def _context() -> tuple[Any, _thread.LockType] | None:
    binding = _load_binding()
    if binding is None:
        return None
    key = _current_ns_key()
    with _contexts_lock:
        entry = _contexts.get(key)
        if entry is None:
            ctx = binding.Nftables()
            ctx.set_json_output(True)
            ctx.set_handle_output(True)
            entry = (ctx, _thread.allocate_lock())
            _contexts[key] = entry
            while len(_contexts) > _MAX_CONTEXTS:
                _contexts.popitem(last=False)
        else:
            _contexts.move_to_end(key)
        return entry


def _run(script: str) -> str:
    entry = _context()
    if entry is not None:
        ctx, lock = entry
        with lock:
            rc, out, err = ctx.cmd(script)
        if rc != 0:
            raise NftError(err.strip() or f"nft failed with {rc}")
        return str(out)
    nft = tools.which("nft")
    if nft is None:
        raise NftError("nft is not installed")
    import subprocess  # only without libnftables: not loaded by every importer of this module

    proc = subprocess.run(
        [nft, "-j", "-a", "-f", "-"], input=script, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise NftError(proc.stderr.strip() or f"nft failed with {proc.returncode}")
    return proc.stdout


def apply(script: str) -> None:
    """Run ``script`` (nft's text syntax, several lines) as one atomic transaction."""
    _run(script)


def apply_json(commands: list[dict[str, Any]]) -> None:
    """Run libnftables JSON commands (``{"add": {"rule": …}}``, …) as one transaction."""
    if commands:
        _run(jsoncodec.dumps({"nftables": commands}))


def query(command: str) -> list[dict[str, Any]]:
    """Run a ``list …`` command and return the ``nftables`` array of its JSON output."""
    out = _run(command)
    if not out.strip():
        return []
    data = jsoncodec.loads(out)
    items = data.get("nftables", [])
    return [item for item in items if "metainfo" not in item]


def table_exists(family: str, name: str) -> bool:
    try:
        query(f"list table {family} {name}")
    except NftError:
        return False
    return True


def available() -> bool:
    """nftables can be used here (binding or binary, and the kernel answers)."""
    try:
        query("list tables")
    except (NftError, OSError):
        return False
    return True


def run_document(document: str) -> str:
    """Run one transaction given as nft text or as a libnftables JSON document (libnftables
    reads JSON first when JSON output is on, as it is here); returns nft's JSON output."""
    return _run(document)
