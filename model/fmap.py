"""An immutable, hashable mapping: the model's tables.

Models: one SQLite table as a value. ``set``/``delete``/``where`` return new
maps; equality and hash are by content, so two states holding the same rows
are one state to the checker.

Leaves out on purpose: ordering. Readers that need the seed's ``ORDER BY``
sort explicitly (``sorted_items``), as the SQL does.
"""

from __future__ import annotations

from typing import (
    Any, Callable, Generic, ItemsView, Iterable, Iterator, KeysView, Mapping, TypeVar, ValuesView, overload,
)

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class FMap(Mapping[K, V], Generic[K, V]):
    """A frozen dict with a cached hash."""

    __slots__ = ("_d", "_h")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._d: dict[K, V] = dict(items)
        self._h: int | None = None

    # Mapping protocol
    def __getitem__(self, key: K) -> V:
        return self._d[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: D | None = None) -> V | D | None:
        return self._d.get(key, default)

    # The dict's own views: read-only, and iterated in C (Mapping's mixins iterate in Python).
    def keys(self) -> KeysView[K]:
        return self._d.keys()

    def values(self) -> ValuesView[V]:
        return self._d.values()

    def items(self) -> ItemsView[K, V]:
        return self._d.items()

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(frozenset(self._d.items()))
        return self._h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FMap):
            return self._d == other._d
        return NotImplemented

    def __repr__(self) -> str:
        return f"FMap({self._d!r})"

    # Functional updates
    def set(self, key: K, value: V) -> "FMap[K, V]":
        d = dict(self._d)
        d[key] = value
        return FMap(d)

    def delete(self, key: K) -> "FMap[K, V]":
        if key not in self._d:
            return self
        d = dict(self._d)
        del d[key]
        return FMap(d)

    def where_not(self, predicate: Callable[[K], bool]) -> "FMap[K, V]":
        """The map without the keys matching ``predicate`` (a ``DELETE ... WHERE``)."""
        kept = {k: v for k, v in self._d.items() if not predicate(k)}
        return self if len(kept) == len(self._d) else FMap(kept)

    def update(self, items: Mapping[K, V] | Iterable[tuple[K, V]]) -> "FMap[K, V]":
        d = dict(self._d)
        d.update(items)
        return FMap(d)

    def sorted_items(self) -> list[tuple[K, V]]:
        # K carries no ordering bound (the tables' keys are str or tuples of str and int, all ordered)
        return sorted(self._d.items(), key=lambda kv: kv[0])  # type: ignore[arg-type, return-value]


#: The empty table, shared by every map type (nothing in it to disagree with K or V).
EMPTY: FMap[Any, Any] = FMap()
