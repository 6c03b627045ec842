"""Frozen values made cheap for the checker's hot path: a hash kept once computed, and a fast ``replace``.

Models: nothing of the protocol. Two costs of frozen dataclasses dominate an
exhaustive search written in Python, and both are repeated work:

* **Hashing.** A frozen dataclass's generated ``__hash__`` rebuilds the tuple
  of its fields and hashes it again on every call, down the whole tree of
  values it holds. The checker fingerprints every new state, and a new state
  mostly holds values it shares with its parent (the same records, the same
  cloud, the same receipts). A class that derives from ``HashOnce`` and is
  decorated with ``hash_once`` keeps its hash in a slot the first time it is
  asked: a shared value is hashed once in the run, a new state costs its own
  fields only.
* **Replacing a field.** ``dataclasses.replace`` re-reads the class's field
  list, checks every field's kind and goes through ``__init__`` with keyword
  arguments on every call (a sixth of the checker's time on the cloud
  bounds). ``replace`` here calls, per class, a function generated once that
  builds the new object slot by slot.

Equality, ``dataclasses.fields``, pickling (a frozen slots dataclass pickles
its fields only, never the kept hash) and hash values within a process are as
before: the hash is the hash of the same tuple of fields, and a replaced
object is equal to the one ``dataclasses.replace`` builds (a test compares
them on every state type).

Leaves out on purpose: mutable values (a mutation would leave a stale hash;
the model has none), and classes with ``__post_init__`` or ``init=False``
fields, which ``replace`` hands to ``dataclasses.replace`` unchanged.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any, Callable, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")


class HashOnce:
    """Base of a frozen slots dataclass whose hash ``hash_once`` keeps in the ``_hash`` slot."""

    __slots__ = ("_hash",)
    _hash: int  # declared for the checker only: a bare annotation, so no class attribute and no dataclass field


def hash_once(cls: type[D]) -> type[D]:
    """Replace the dataclass's generated ``__hash__`` by one that keeps the hash of the same field tuple."""
    if not issubclass(cls, HashOnce):
        raise TypeError(f"hash_once: {cls.__name__} must derive from HashOnce (the hash is kept in its slot)")
    names = tuple(f.name for f in dataclasses.fields(cls) if f.compare and (f.hash is None or f.hash))
    # attrgetter of two or more names gives the field tuple; one name gives the bare value, so wrap it
    get: Callable[[Any], Any] = operator.attrgetter(*names) if len(names) > 1 else (
        lambda self: tuple(getattr(self, n) for n in names))
    store = object.__setattr__

    def __hash__(self: HashOnce) -> int:
        try:
            return self._hash
        except AttributeError:
            h = hash(get(self))
            store(self, "_hash", h)
            return h

    cls.__hash__ = __hash__
    return cls


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
    """A function ``(obj, **changes)`` for ``cls`` that sets each slot from ``changes`` or ``obj``."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        return dataclasses.replace
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        return dataclasses.replace
    names = [f.name for f in fields]
    if {"_o", "_n", "_missing", "_new", "_set", "_cls"} & set(names):
        return dataclasses.replace  # a field named like the generated function's own locals
    missing = object()
    params = ", ".join(f"{n}=_missing" for n in names)
    body = "\n".join(
        f"    _set(_n, {n!r}, _o.{n} if {n} is _missing else {n})" for n in names)
    source = f"def replace_{cls.__name__}(_o, /, *, {params}):\n    _n = _new(_cls)\n{body}\n    return _n\n"
    namespace: dict[str, Any] = {"_missing": missing, "_new": object.__new__, "_set": object.__setattr__, "_cls": cls}
    exec(source, namespace)  # noqa: S102 - generated from the class's own field names
    # exec defined it from the source above: a function (obj, /, **changes)
    return cast(Callable[..., Any], namespace[f"replace_{cls.__name__}"])
