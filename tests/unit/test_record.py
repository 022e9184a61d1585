"""pycni.record behaves as the dataclasses it replaced: the same methods over the same fields,
both before and after a class's ``__init__`` is compiled for being called often."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pycni import record as rec
from pycni.record import FrozenInstanceError, field, record


@record(frozen=True)
class Point:
    x: int
    label: str = ""
    tags: list[str] = field(default_factory=list)
    kind: ClassVar[str] = "point"


@dataclasses.dataclass(frozen=True)
class PointDC:
    x: int
    label: str = ""
    tags: list[str] = dataclasses.field(default_factory=list)


@record
class Counter:
    start: int
    step: int = 1
    total: int = field(init=False, default=0)
    secret: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        self.total = self.start + self.step


@record(frozen=True)
class Labelled(Point):
    colour: str = "red"


def fresh_point_class() -> type[Point]:
    """A new class each time, so its ``__init__`` starts generic (not yet compiled)."""

    @record(frozen=True)
    class P(Point):
        pass

    return P


Values = tuple[int, str, list[str]]
values = st.tuples(st.integers(), st.text(max_size=5), st.lists(st.text(max_size=3), max_size=3))


@given(values, values)
def test_methods_match_dataclasses(
    a: tuple[int, str, list[str]], b: tuple[int, str, list[str]]
) -> None:
    ours_a, ours_b = Point(*a), Point(*b)
    theirs_a, theirs_b = PointDC(*a), PointDC(*b)
    assert (ours_a == ours_b) == (theirs_a == theirs_b)
    assert repr(ours_a).replace("Point(", "") == repr(theirs_a).replace("PointDC(", "")
    assert rec.asdict(ours_a) == dataclasses.asdict(theirs_a)


def test_generic_and_compiled_init_agree() -> None:
    cls = fresh_point_class()
    generic = [cls(i, label=str(i)) for i in range(rec.COMPILE_AFTER)]
    assert cls.__init__.__code__.co_name == "__init__"
    compiled = [cls(i, label=str(i)) for i in range(rec.COMPILE_AFTER)]
    assert generic == compiled
    assert cls(1).tags is not cls(1).tags  # a fresh list per instance, both ways
    with pytest.raises(TypeError):
        cls()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        cls(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        cls(1, nope=2)  # type: ignore[call-arg]


def test_init_errors_name_the_argument() -> None:
    cls = fresh_point_class()
    with pytest.raises(TypeError, match="'x'"):
        cls()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        cls(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="'nope'"):
        cls(1, nope=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="positional"):
        cls(1, "a", [], 4)  # type: ignore[call-arg]


def test_frozen_refuses_assignment_and_hashes_by_value() -> None:
    p = Point(1, "a")
    with pytest.raises(FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.label  # type: ignore[misc]
    assert hash(Point(1, "a", None)) == hash(Point(1, "a", None))  # type: ignore[arg-type]
    assert Point.kind == "point"
    assert [f.name for f in rec.fields(Point)] == ["x", "label", "tags"]


def test_mutable_record_post_init_init_false_and_repr_false() -> None:
    c = Counter(2, 3)
    assert c.total == 5
    assert repr(c) == "Counter(start=2, step=3, total=5)"
    c.step = 4
    assert c != Counter(2, 3)
    assert Counter(2, 3) == Counter(2, 3)
    assert Counter.__hash__ is None
    with pytest.raises(ValueError, match="not an __init__ argument"):
        rec.replace(c, total=1)
    assert rec.replace(c, start=10).total == 14


def test_inheritance_replace_copy_and_pickle() -> None:
    lab = Labelled(1, "a", ["t"], colour="blue")
    assert [f.name for f in rec.fields(lab)] == ["x", "label", "tags", "colour"]
    assert rec.replace(lab, colour="green") == Labelled(1, "a", ["t"], "green")
    assert lab != Point(1, "a", ["t"])
    assert copy.deepcopy(lab) == lab
    assert pickle.loads(pickle.dumps(lab)) == lab
    assert Labelled.__match_args__ == ("x", "label", "tags", "colour")  # type: ignore[attr-defined]


def test_declaration_mistakes_are_refused() -> None:
    with pytest.raises(ValueError, match="mutable default"):

        @record
        class Bad:
            items: list[int] = []

    with pytest.raises(TypeError, match="non-default field"):

        @record
        class Order:
            a: int = 1
            b: int  # type: ignore[misc]

    with pytest.raises(ValueError):
        field(default=1, default_factory=int)
    with pytest.raises(TypeError):
        rec.fields(object())


def test_compare_false_leaves_a_field_out_of_eq_and_hash() -> None:
    @record(frozen=True)
    class Tagged:
        x: int
        note: str = field(default="", compare=False)

    @dataclasses.dataclass(frozen=True)
    class TaggedDC:
        x: int
        note: str = dataclasses.field(default="", compare=False)

    assert Tagged(1, "a") == Tagged(1, "b") and hash(Tagged(1, "a")) == hash(Tagged(1, "b"))
    assert TaggedDC(1, "a") == TaggedDC(1, "b")
    assert Tagged(1, "a") != Tagged(2, "a")
    assert rec.replace(Tagged(1, "a"), x=3).note == "a"
