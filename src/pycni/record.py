"""Record classes: what ``dataclasses.dataclass`` gives pycni, at a fraction of its start-up cost.

Why not ``dataclasses``: a plugin run in-process is a one-shot interpreter, and the stdlib
decorator compiles six methods from source per class after importing ``inspect`` (with
``ast``, ``dis`` and ``tokenize``), and the bridge's ADD declares over thirty records. ``record``
builds the same methods from closures over the field list instead (what each costs:
docs/benchmarks.md, "Record classes"); mypy checks it as a dataclass (``dataclass_transform``).
A long-lived process (the daemon) creates some records many times per call: after
``COMPILE_AFTER`` calls of a class's generic ``__init__`` it compiles one of the usual shape, so
only its warm-up pays the generic version.

Supported, as in ``dataclasses``: defaults, ``field(default_factory=, init=, repr=, metadata=,
compare=)``, ``frozen``, ``eq``, ``__post_init__``, inheritance from records, ``ClassVar``
annotations (not fields), ``fields``, ``replace`` and ``asdict``. Not supported (pycni does not
use them): ordering, ``slots``, ``kw_only``, ``InitVar``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a few ms to import: only the type checker reads this
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar, dataclass_transform, overload

    T = TypeVar("T")
else:

    def dataclass_transform(**_kwargs: object) -> Callable[[T], T]:
        return lambda decorated: decorated

    def overload(function: T) -> T:
        return function


__all__ = [
    "COMPILE_AFTER",
    "Field",
    "FrozenInstanceError",
    "asdict",
    "field",
    "fields",
    "record",
    "replace",
]


COMPILE_AFTER = 200


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class Field:
    """One declared field: its name, default (or factory) and what the methods do with it."""

    __slots__ = ("compare", "default", "default_factory", "init", "metadata", "name", "repr")

    def __init__(
        self,
        default: Any,
        default_factory: Any,
        init: bool,
        repr: bool,
        metadata: Mapping[str, Any] | None,
        compare: bool = True,
    ) -> None:
        self.name = ""
        self.compare = compare
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.metadata: Mapping[str, Any] = metadata if metadata is not None else {}

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    init: bool = True,
    repr: bool = True,
    metadata: Mapping[str, Any] | None = None,
    compare: bool = True,
) -> Any:
    """A field with options, as ``dataclasses.field``."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, init, repr, metadata, compare)


_FIELDS = "__record_fields__"
_MUTABLE = (list, dict, set)


@overload
@dataclass_transform(field_specifiers=(field,))
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(*, frozen: bool = False, eq: bool = True) -> Callable[[type[T]], type[T]]: ...  # noqa: F811


def record(cls: Any = None, /, *, frozen: bool = False, eq: bool = True) -> Any:  # noqa: F811
    """Make ``cls`` a record: ``__init__``, ``__repr__``, ``__eq__`` (and ``__hash__`` when
    frozen) over its annotated fields, as ``@dataclass(frozen=..., eq=...)`` would."""

    def wrap(target: type[T]) -> type[T]:
        return _process(target, frozen, eq)

    return wrap if cls is None else wrap(cls)


def _is_class_var(annotation: object) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return getattr(annotation, "__origin__", None) is not None and "ClassVar" in repr(annotation)


def _own_fields(cls: type) -> list[Field]:
    out = []
    # the class's own annotations only (inspect.get_annotations would import inspect)
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        if _is_class_var(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            spec = value
            if spec.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        else:
            if isinstance(value, _MUTABLE):
                raise ValueError(
                    f"mutable default {type(value).__name__} for field {name} of "
                    f"{cls.__qualname__}: use field(default_factory=...)"
                )
            spec = Field(value, MISSING, True, True, None)
        spec.name = name
        out.append(spec)
    return out


def _process(cls: type[T], frozen: bool, eq: bool) -> type[T]:
    merged: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for spec in base.__dict__.get(_FIELDS, ()):
            merged[spec.name] = spec
    for spec in _own_fields(cls):
        merged[spec.name] = spec
    specs = tuple(merged.values())
    seen_default = False
    for spec in specs:
        has_default = spec.default is not MISSING or spec.default_factory is not MISSING
        if spec.init and not has_default and seen_default:
            raise TypeError(
                f"non-default field {spec.name!r} follows a default field in {cls.__qualname__}"
            )
        seen_default = seen_default or (spec.init and has_default)
    setattr(cls, _FIELDS, specs)
    names = tuple(s.name for s in specs if s.compare)
    setattr(cls, "__match_args__", tuple(s.name for s in specs if s.init))  # noqa: B010
    _set_new(cls, "__init__", _generic_init(cls, specs, frozen))
    _set_new(cls, "__repr__", _repr(specs))
    own_hash = cls.__dict__.get("__hash__", MISSING)
    explicit_hash = own_hash is not MISSING and not (own_hash is None and "__eq__" in cls.__dict__)
    if eq:
        _set_new(cls, "__eq__", _eq(names))
        if not explicit_hash:
            # as dataclasses: frozen and eq make it hashable by value, eq alone unhashable
            cls.__hash__ = _hash(names) if frozen else None  # type: ignore[assignment]
    if frozen:
        cls.__setattr__ = _frozen_setattr  # type: ignore[method-assign]
        cls.__delattr__ = _frozen_delattr  # type: ignore[method-assign]
    return cls


def _set_new(cls: type, name: str, method: Any) -> None:
    if name not in cls.__dict__:
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)


def _generic_init(cls: type, specs: tuple[Field, ...], frozen: bool) -> Any:
    """``__init__`` as a closure over the fields; replaced by a compiled one once it is hot."""
    params = tuple(s for s in specs if s.init)
    param_names = frozenset(s.name for s in params)
    others = tuple(s for s in specs if not s.init)
    set_value = object.__setattr__ if frozen else setattr
    post_init = getattr(cls, "__post_init__", None) is not None
    calls = 0

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        if len(args) > len(params):
            raise TypeError(
                f"{type(self).__qualname__}() takes {len(params)} positional arguments "
                f"but {len(args)} were given"
            )
        for key in kwargs:
            if key not in param_names:
                raise TypeError(f"{type(self).__qualname__}() got an unexpected argument {key!r}")
        for position, spec in enumerate(params):
            name = spec.name
            if position < len(args):
                if name in kwargs:
                    raise TypeError(
                        f"{type(self).__qualname__}() got multiple values for argument {name!r}"
                    )
                value = args[position]
            elif name in kwargs:
                value = kwargs[name]
            elif spec.default_factory is not MISSING:
                value = spec.default_factory()
            elif spec.default is not MISSING:
                value = spec.default
            else:
                raise TypeError(f"{type(self).__qualname__}() missing required argument: {name!r}")
            set_value(self, name, value)
        for spec in others:
            if spec.default_factory is not MISSING:
                set_value(self, spec.name, spec.default_factory())
            elif spec.default is not MISSING:
                set_value(self, spec.name, spec.default)
        if post_init:
            self.__post_init__()
        calls += 1
        if calls == COMPILE_AFTER and cls.__dict__.get("__init__") is __init__:
            cls.__init__ = _compiled_init(cls, specs, frozen, post_init)  # type: ignore[misc]

    return __init__


def _compiled_init(cls: type, specs: tuple[Field, ...], frozen: bool, post_init: bool) -> Any:
    """The ``__init__`` dataclasses would write, compiled once the class is created often."""
    scope: dict[str, Any] = {"MISSING": MISSING, "set_value": object.__setattr__}
    params, body = [], []
    for i, spec in enumerate(specs):
        name = spec.name
        if spec.default_factory is not MISSING:
            scope[f"factory{i}"] = spec.default_factory
        if spec.init:
            if spec.default_factory is not MISSING:
                params.append(f"{name}=MISSING")
                value = f"factory{i}() if {name} is MISSING else {name}"
            elif spec.default is not MISSING:
                scope[f"default{i}"] = spec.default
                params.append(f"{name}=default{i}")
                value = name
            else:
                params.append(name)
                value = name
        elif spec.default_factory is not MISSING:
            value = f"factory{i}()"
        elif spec.default is not MISSING:
            scope[f"default{i}"] = spec.default
            value = f"default{i}"
        else:
            continue
        if frozen:
            body.append(f"    set_value(self, {name!r}, {value})")
        else:
            body.append(f"    self.{name} = {value}")
    if post_init:
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass")
    exec(source, scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _repr(specs: tuple[Field, ...]) -> Any:
    shown = tuple(s.name for s in specs if s.repr)

    def __repr__(self: Any) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{type(self).__qualname__}({values})"

    return __repr__


def _values(self: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple([getattr(self, name) for name in names])


def _eq(names: tuple[str, ...]) -> Any:
    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _values(self, names) == _values(other, names)

    return __eq__


def _hash(names: tuple[str, ...]) -> Any:
    def __hash__(self: Any) -> int:
        return hash(_values(self, names))

    return __hash__


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def is_record(obj: object) -> bool:
    """Whether ``obj`` is a record class or an instance of one."""
    cls = obj if isinstance(obj, type) else type(obj)
    return hasattr(cls, _FIELDS)


def fields(obj: object) -> tuple[Field, ...]:
    """The fields of a record class or instance, in declaration order."""
    cls = obj if isinstance(obj, type) else type(obj)
    try:
        specs: tuple[Field, ...] = getattr(cls, _FIELDS)
    except AttributeError:
        raise TypeError(f"{cls.__qualname__} is not a record") from None
    return specs


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the record ``obj`` with ``changes`` applied (through ``__init__``)."""
    for spec in fields(obj):
        if not spec.init:
            if spec.name in changes:
                raise ValueError(f"field {spec.name} is not an __init__ argument")
            continue
        if spec.name not in changes:
            changes[spec.name] = getattr(obj, spec.name)
    return type(obj)(**changes)


def asdict(obj: object) -> dict[str, Any]:
    """The record ``obj`` as a dict, recursing into records, lists, tuples and dicts."""
    if not is_record(obj) or isinstance(obj, type):
        raise TypeError("asdict() should be called on record instances")
    out = _plain(obj)
    assert isinstance(out, dict)
    return out


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return {spec.name: _plain(getattr(value, spec.name)) for spec in fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return value
