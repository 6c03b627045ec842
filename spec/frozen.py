"""Frozen values made cheap for the checker's hot path: a hash kept once computed, and a fast ``replace``.

Models: nothing of the protocol. Two costs of frozen dataclasses dominate an
exhaustive search written in Python, and both are repeated work:

* **Hashing.** A frozen dataclass's generated ``__hash__`` rebuilds the tuple
  of its fields and hashes it again on every call, down the whole tree of
  values it holds. The checker fingerprints every new state, and a new state
  mostly holds values it shares with its parent (the same records, the same
  cloud, the same receipts). A class declared
  ``@dataclass(frozen=True, slots=True, eq=False)`` that derives from
  ``HashOnce`` gets its equality and hash from ``HashOnce`` (``eq=False``
  leaves both to the base): equal when of the same class with equal fields,
  and a hash kept in a slot the first time it is asked. A shared value is
  hashed once in the run, a new state costs its own fields only.
* **Replacing a field.** ``dataclasses.replace`` re-reads the class's field
  list, checks every field's kind and goes through ``__init__`` with keyword
  arguments on every call (a sixth of the checker's time on the cloud
  bounds). ``replace`` here calls, per class, a function generated once that
  builds the new object slot by slot (or, for a class compiled by mypyc,
  through its constructor: ``spec.compiled``).

Both forms are what mypyc compiles to native classes (a class decorator of
our own would make it a plain Python class), so the same source runs
interpreted and compiled. Equality, ``dataclasses.fields``, pickling (a
frozen slots dataclass pickles its fields only, never the kept hash) and
hash values within a process are those of a plain frozen dataclass: the hash
is the hash of the same tuple of fields, and a replaced object is equal to
the one ``dataclasses.replace`` builds (``tests/test_frozen.py`` compares
them on every state type).

Leaves out on purpose: mutable values (a mutation would leave a stale hash;
the model has none), ordering (a class that needs ``order=True`` needs the
dataclass's ``eq`` and so does without a kept hash), and classes with
``__post_init__`` or ``init=False`` fields, which ``replace`` hands to
``dataclasses.replace`` unchanged.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Optional, TypeVar, cast

from mypy_extensions import mypyc_attr

T = TypeVar("T")

#: A class's compared fields as a tuple, per class (made on first use by ``_fields_of``).
_FIELD_TUPLES: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _fields_of(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving an object of ``cls`` its compared fields as a tuple (``dataclasses.fields`` order)."""
    get = _FIELD_TUPLES.get(cls)
    if get is not None:
        return get
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"HashOnce: {cls.__name__} is not a dataclass: declare it "
                        "@dataclass(frozen=True, slots=True, eq=False)")
    names = tuple(f.name for f in dataclasses.fields(cls) if f.compare)
    if len(names) > 1:
        get = cast(Callable[[Any], tuple[Any, ...]], operator.attrgetter(*names))  # two or more names: a tuple
    elif names:
        one = operator.attrgetter(names[0])
        get = lambda obj: (one(obj),)  # noqa: E731
    else:
        get = lambda obj: ()  # noqa: E731
    _FIELD_TUPLES[cls] = get
    return get


@mypyc_attr(allow_interpreted_subclasses=True)  # the migration model's values (interpreted) derive from it
class Frozen:
    """Base of a frozen dataclass that pickles as a call of its class with its fields (compiled or not).

    A frozen slots dataclass pickles its fields and sets them back underneath
    its ``__setattr__``; the class mypyc compiles from it would set them
    through ``__setattr__``, which refuses. A call of the class works for both.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]


@mypyc_attr(allow_interpreted_subclasses=True)
class HashOnce(Frozen):
    """Base of a ``@dataclass(frozen=True, slots=True, eq=False)``: value equality and a hash kept in ``_hash``."""

    __slots__ = ("_hash",)
    _hash: int  # the hash, once asked (a slot of its own: no dataclass field, never compared or pickled)

    def __eq__(self, other: object) -> bool:
        """Equal when ``other`` is of the same class and has equal fields (a dataclass's ``__eq__``)."""
        if type(other) is not type(self):
            return NotImplemented
        if other is self:
            return True
        get = _fields_of(type(self))
        return bool(get(self) == get(other))

    def __hash__(self) -> int:
        """The hash of the tuple of fields (a frozen dataclass's ``__hash__``), computed once."""
        kept: Optional[int] = getattr(self, "_hash", None)  # an unset slot: None, and no exception raised here
        if kept is not None:
            return kept
        h = hash(_fields_of(type(self))(self))
        object.__setattr__(self, "_hash", h)  # the class is frozen: set the slot underneath
        return h


class _Replacers(dict[type, Callable[..., Any]]):
    """type -> its generated replacer (or ``dataclasses.replace`` where none can be), made on first use."""

    def __missing__(self, cls: type) -> Callable[..., Any]:
        fn = self[cls] = _replacer(cls)
        return fn


_REPLACERS = _Replacers()


def replace(obj: T, /, **changes: Any) -> T:
    """``dataclasses.replace(obj, **changes)``, without its per-call overhead on frozen slots dataclasses."""
    # the replacer made for type(obj) builds an object of that same type
    return cast(T, _REPLACERS[type(obj)](obj, **changes))


def _replacer(cls: type) -> Callable[..., Any]:
    """A function ``(obj, **changes)`` for ``cls`` that sets each slot from ``changes`` or ``obj``.

    A class mypyc compiled has no ``__slots__`` of its own (its fields are native attributes), and neither it
    nor an interpreted class deriving from it can be made with ``object.__new__``: their replacer calls the
    class with every field, positionally.
    """
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return dataclasses.replace
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        return dataclasses.replace
    names = [f.name for f in fields]
    if {"_o", "_n", "_missing", "_new", "_set", "_cls"} & set(names):
        return dataclasses.replace  # a field named like the generated function's own locals
    params = ", ".join(f"{n}=_missing" for n in names)
    if "__slots__" in cls.__dict__ and cls.__new__ is object.__new__:  # not under a compiled base's own __new__
        body = "\n".join(f"    _set(_n, {n!r}, _o.{n} if {n} is _missing else {n})" for n in names)
        source = f"def replace_{cls.__name__}(_o, /, *, {params}):\n    _n = _new(_cls)\n{body}\n    return _n\n"
    else:  # compiled (a native class), or derived from one
        args = ", ".join(f"_o.{n} if {n} is _missing else {n}" for n in names)
        source = f"def replace_{cls.__name__}(_o, /, *, {params}):\n    return _cls({args})\n"
    namespace: dict[str, Any] = {"_missing": object(), "_new": object.__new__, "_set": object.__setattr__, "_cls": cls}
    exec(source, namespace)  # noqa: S102 - generated from the class's own field names
    # exec defined it from the source above: a function (obj, /, **changes)
    return cast(Callable[..., Any], namespace[f"replace_{cls.__name__}"])
