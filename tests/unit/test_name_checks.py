"""The character-set checks that replaced regular expressions accept exactly what the
reference's patterns accept (Go's ``$``: no trailing newline)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from pycni.spec.validate import is_mac, is_name

NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
NAME_WITH_COLON = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
MAC_SAME_SEPARATOR = re.compile(r"[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(\1[0-9a-fA-F]{2}){4}")
MAC_ANY_SEPARATOR = re.compile(r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}")

name_text = st.text(alphabet=st.sampled_from("aZ09_.-:/ \n\té"), max_size=12)
mac_text = st.text(alphabet=st.sampled_from("0aF:-g\n"), min_size=15, max_size=18) | st.builds(
    lambda parts, seps: "".join(p + s for p, s in zip(parts, [*seps, ""], strict=True)),
    st.lists(st.sampled_from(["00", "aB", "fF", "0g"]), min_size=6, max_size=6),
    st.lists(st.sampled_from([":", "-"]), min_size=5, max_size=5),
)


@given(name_text)
def test_is_name_matches_the_pattern(value: str) -> None:
    assert is_name(value) == (NAME.fullmatch(value) is not None)
    assert is_name(value, extra=":") == (NAME_WITH_COLON.fullmatch(value) is not None)


@given(mac_text)
def test_is_mac_matches_the_patterns(value: str) -> None:
    assert is_mac(value) == (MAC_SAME_SEPARATOR.fullmatch(value) is not None)
    assert is_mac(value, mixed_separators=True) == (MAC_ANY_SEPARATOR.fullmatch(value) is not None)


def test_a_trailing_newline_is_refused() -> None:
    assert not is_name("net\n")
    assert not is_mac("02:aa:bb:cc:dd:ee\n")
    assert is_mac("02:aa:bb:cc:dd:ee")
    assert not is_mac("02:aa-bb:cc:dd:ee")
    assert is_mac("02:aa-bb:cc:dd:ee", mixed_separators=True)
