"""Plain record classes for the protocol's messages, instead of `dataclasses`.

`dataclasses` imports `inspect` (and with it `ast`, `dis`, `tokenize`...):
about 1.3 MiB of every idle sandbox's memory when the agent was Python
(since removed), for messages that need only an `__init__`, `__eq__` and
`__repr__` made from a class's annotations.
`record` makes those (the `__init__` compiled once per class, as
dataclasses does, so a frame's message costs no more to build); `field`,
`fields` and `replace` do what their dataclasses namesakes do for them.
Type checkers see a dataclass (`dataclass_transform`).

Stdlib only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated


T = TypeVar("T")
FIELDS = "__record_fields__"
DEFAULTS = "__record_defaults__"


class _Factory:
    """A field's default made anew for each record (a list, a dict...)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], Any]) -> Any:
    return _Factory(default_factory)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


def _is_class_var(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _own_fields(cls: type) -> Dict[str, Any]:
    """Field name → default (MISSING, a value or a _Factory), bases first."""
    found: Dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        made = klass.__dict__.get(DEFAULTS)
        if made is not None:  # a record already (its factories left the class)
            found.update(made)
            continue
        for name, annotation in klass.__dict__.get("__annotations__", {}).items():
            if not _is_class_var(annotation):
                found[name] = klass.__dict__.get(name, MISSING)
    return found


def _make_init(cls: type, defaults: Dict[str, Any], frozen: bool) -> None:
    params, body = ["self"], []
    env: Dict[str, Any] = {"MISSING": MISSING, "setter": object.__setattr__}
    for name, default in defaults.items():
        if isinstance(default, _Factory):
            env[f"make_{name}"] = default.make
            params.append(f"{name}=MISSING")
            value = f"make_{name}() if {name} is MISSING else {name}"
        elif default is MISSING:
            params.append(name)
            value = name
        else:
            env[f"default_{name}"] = default
            params.append(f"{name}=default_{name}")
            value = name
        body.append(
            f"    setter(self, {name!r}, {value})" if frozen else f"    self.{name} = {value}"
        )
    source = f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, env)  # noqa: S102 - built from the class's own field names
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[misc]


def _eq(self: Any, other: Any) -> Any:
    if type(other) is not type(self):
        return NotImplemented
    names = getattr(self, FIELDS)
    return all(getattr(self, n) == getattr(other, n) for n in names)


def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in getattr(self, FIELDS))
    return f"{type(self).__qualname__}({shown})"


def _refuse_set(self: Any, name: str, value: Any) -> None:
    msg = f"cannot assign to field {name!r}"
    raise AttributeError(msg)


def _refuse_delete(self: Any, name: str) -> None:
    msg = f"cannot delete field {name!r}"
    raise AttributeError(msg)


@dataclass_transform(field_specifiers=(field,))
def record(cls: Any = None, *, frozen: bool = False) -> Any:
    """Make `cls` a record: `@record` or `@record(frozen=True)`."""

    def make(klass: type) -> type:
        defaults = _own_fields(klass)
        for name, default in defaults.items():
            if isinstance(default, _Factory) and name in klass.__dict__:
                delattr(klass, name)  # the instance's own value, never the class's
        setattr(klass, FIELDS, tuple(defaults))
        setattr(klass, DEFAULTS, defaults)
        _make_init(klass, defaults, frozen)
        klass.__eq__ = _eq  # type: ignore[method-assign,assignment]
        klass.__hash__ = None  # type: ignore[assignment]  # as a dataclass with eq
        klass.__repr__ = _repr  # type: ignore[method-assign,assignment]
        if frozen:
            klass.__setattr__ = _refuse_set  # type: ignore[method-assign,assignment]
            klass.__delattr__ = _refuse_delete  # type: ignore[method-assign,assignment]
        return klass

    return make if cls is None else make(cls)


def fields(cls_or_record: Any) -> Tuple[str, ...]:
    """The field names, in order."""
    return tuple(getattr(cls_or_record, FIELDS))


def replace(item: T, **changes: Any) -> T:
    """A copy of `item` with `changes`."""
    values = {name: getattr(item, name) for name in fields(item)}
    unknown = changes.keys() - values.keys()
    if unknown:
        msg = f"{type(item).__name__} has no field {sorted(unknown)[0]!r}"
        raise TypeError(msg)
    values.update(changes)
    return type(item)(**values)
