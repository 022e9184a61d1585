"""CNI_ARGS parsing: the runtime's pair list and the plugin side's strict keyed form."""

from __future__ import annotations

from collections.abc import Iterable

from pycni.spec import jsoncodec
from pycni.spec.errors import InvalidConfig

__all__ = ["format_pairs", "load_args", "parse_pairs"]


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """cnitool's parsing of ``K=V;K2=V2``: one ``=`` per pair and non-empty sides."""
    pairs: list[tuple[str, str]] = []
    if text == "":
        return pairs
    for item in text.split(";"):
        kv = item.split("=")
        if len(kv) != 2 or kv[0] == "" or kv[1] == "":
            raise ValueError(f'invalid CNI_ARGS pair "{item}"')
        pairs.append((kv[0], kv[1]))
    return pairs


def format_pairs(pairs: Iterable[tuple[str, str]]) -> str:
    return ";".join(f"{k}={v}" for k, v in pairs)


def _truthy(value: str) -> bool:
    """Go's strconv.ParseBool subset used by types.UnmarshallableBool."""
    lowered = value.lower()
    if lowered in ("1", "true"):
        return True
    if lowered in ("0", "false"):
        return False
    raise InvalidConfig(f'boolean unmarshal error: invalid value "{value}"')


def load_args(text: str, known: Iterable[str]) -> dict[str, str]:
    """Plugin-side ``types.LoadArgs``: keys are matched case-sensitively against ``known``.

    ``IgnoreUnknown`` (1/true) is always understood; unknown keys are an error without it.
    """
    known_keys = set(known) | {"IgnoreUnknown"}
    values: dict[str, str] = {}
    unknown: list[str] = []
    if text == "":
        return values
    for item in text.split(";"):
        kv = item.split("=")
        if len(kv) != 2:
            raise InvalidConfig(f'ARGS: invalid pair "{item}"')
        key, value = kv
        if key in known_keys:
            values[key] = value
        else:
            unknown.append(item)
    ignore = _truthy(values["IgnoreUnknown"]) if "IgnoreUnknown" in values else False
    if unknown and not ignore:
        quoted = " ".join(jsoncodec.dumps(u) for u in unknown)
        raise InvalidConfig(f"ARGS: unknown args [{quoted}]")
    return values
