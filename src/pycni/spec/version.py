"""Spec versions: parsing, comparison and the plugin-side reconcile rule (pkg/version)."""

from __future__ import annotations

from pycni.spec.errors import INCOMPATIBLE_CNI_VERSION, CNIError

__all__ = ["ALL", "CURRENT", "LEGACY", "Version", "at_least", "parse", "reconcile"]

CURRENT = "1.1.0"
ALL: tuple[str, ...] = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LEGACY: tuple[str, ...] = ("0.1.0", "0.2.0")


class Version:
    """A parsed ``major.minor.micro``; ``""`` means 0.1.0 and missing parts are 0."""

    __slots__ = ("major", "micro", "minor")

    def __init__(self, major: int, minor: int, micro: int) -> None:
        self.major, self.minor, self.micro = major, minor, micro

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.micro)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    # Spelled out rather than functools.total_ordering: functools (with collections) is
    # imported by nothing else a plugin or a CLI call loads.
    def __le__(self, other: Version) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Version) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Version) -> bool:
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.micro}"

    def __repr__(self) -> str:
        return f"Version({self})"


def parse(text: str) -> Version:
    """Parse a version string as Go's ``version.ParseVersion`` does."""
    if text == "":
        text = "0.1.0"
    parts = text.split(".")
    if len(parts) >= 4:
        raise ValueError(f'invalid version "{text}": too many parts')
    numbers: list[int] = []
    for part in parts:
        if not part.isdigit() or not part.isascii():
            raise ValueError(f'failed to convert version part "{part}" of "{text}"')
        numbers.append(int(part))
    while len(numbers) < 3:
        numbers.append(0)
    return Version(numbers[0], numbers[1], numbers[2])


def at_least(text: str, minimum: str) -> bool:
    """True when ``text`` parses and is >= ``minimum``; an unparsable version is False."""
    try:
        return parse(text) >= parse(minimum)
    except ValueError:
        return False


def reconcile(config_version: str, supported: tuple[str, ...] | list[str]) -> None:
    """The exact-string rule: the config's version must be in the plugin's list."""
    if config_version not in supported:
        listed = " ".join(f'"{v}"' for v in supported)
        raise CNIError(
            INCOMPATIBLE_CNI_VERSION,
            "incompatible CNI versions",
            f'config is "{config_version}", plugin supports [{listed}]',
        )
