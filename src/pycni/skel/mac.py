"""Which MAC a request asks for: one reader, the precedence named by each plugin.

A MAC can be asked for in four places: the plugin config's ``mac``, CNI_ARGS ``MAC=``, the
config's ``args.cni.mac`` and ``runtimeConfig.mac``. The reference plugins read different
subsets in different orders (bridge never reads the config key; tuning lets ``args.cni.mac``
win even when it is empty, its Go field being a ``*string``), so each call site passes its own
order, highest precedence first, as a module constant named for the plugin. Every source in
the order is read (a malformed one is an error even when a higher one is set, as the reference
parses them all); the value is not validated here, each plugin checks it as its reference does.
Kept out of skel.config so plugins without a MAC do not import the CNI_ARGS parser.
"""

from __future__ import annotations

from pycni.record import record
from pycni.skel.base import Request
from pycni.skel.config import MacArg
from pycni.spec.args import load_args
from pycni.spec.decode import Str, decode, option

__all__ = [
    "ARGS",
    "ARGS_EVEN_EMPTY",
    "CNI_ARGS",
    "CONFIG",
    "RUNTIME_CONFIG",
    "MacSource",
    "requested_mac",
]


MacSource = str
"""One place a MAC request is read from: one of the five constants below (plain strings, not
records: they are compared and shown, nothing else, and bridge imports this on its cold path)."""

CONFIG: MacSource = "config mac"
CNI_ARGS: MacSource = "CNI_ARGS MAC"
ARGS: MacSource = "args.cni.mac"
ARGS_EVEN_EMPTY: MacSource = "args.cni.mac, even empty"  # a present "" still wins
RUNTIME_CONFIG: MacSource = "runtimeConfig.mac"


@record(frozen=True)
class _PresentMac:
    """``mac`` of ``args.cni`` with absent (None) told apart from empty."""

    mac: str | None = option("mac", Str(max_len=64))


def _read(req: Request, source: MacSource, config: str) -> str | None:
    """The source's value; None when it does not set a MAC."""
    if source == CONFIG:
        value: str | None = config
    elif source == CNI_ARGS:
        value = load_args(req.args, known=["MAC"]).get("MAC", "") if req.args else ""
    elif source == RUNTIME_CONFIG:
        value = decode(MacArg, req.runtime_config, "runtimeConfig").mac
    elif source == ARGS_EVEN_EMPTY:
        return decode(_PresentMac, req.cni_args, "args.cni").mac
    elif source == ARGS:
        value = decode(MacArg, req.cni_args, "args.cni").mac
    else:
        raise ValueError(f"unknown MAC source {source!r}")  # a plugin's MAC_ORDER is wrong
    return value or None


def requested_mac(req: Request, order: tuple[MacSource, ...], config: str = "") -> str:
    """The MAC of the first source in ``order`` that sets one, ``""`` if none does.

    ``config`` is the config's ``mac`` as the plugin decoded it (read when ``order`` names
    CONFIG). Sources are read lowest precedence first, so their errors come in that order.
    """
    found: str | None = None
    for source in reversed(order):
        value = _read(req, source, config)
        if value is not None:
            found = value
    return found or ""
