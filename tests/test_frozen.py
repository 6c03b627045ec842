"""spec.frozen: the kept hash and the generated replace change no value the checker sees (compiled or not)."""

from __future__ import annotations

import dataclasses
import pickle
import sys

import pytest

from envreplica.checker.bfs import reachable
from envreplica.checker.run import build_model
from envreplica.model.presets import suite
from envreplica.spec.frozen import HashOnce, replace
from envreplica.spec.variants import Variant


def _reached(name: str = "tiny", limit: int = 3000) -> list:
    """Worlds of the tiny bounds, in BFS order."""
    return [w for bounds in suite(name, Variant.SEED) for w in reachable(build_model(bounds), limit)]


def _values(obj, out: list) -> list:
    """``obj`` and every frozen dataclass value reachable inside it (fields, tuples, FMaps)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out.append(obj)
        for f in dataclasses.fields(obj):
            _values(getattr(obj, f.name), out)
    elif isinstance(obj, tuple):
        for item in obj:
            _values(item, out)
    elif hasattr(obj, "items") and hasattr(obj, "sorted_items"):  # FMap
        for k, v in obj.items():
            _values(k, out)
            _values(v, out)
    return out


def _field_tuple(obj) -> tuple:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj) if f.compare)


def test_kept_hash_is_the_hash_of_the_fields_asked_twice_or_after_pickling():
    values = [v for w in _reached() for v in _values(w, [])]
    kinds = {type(v) for v in values if isinstance(v, HashOnce)}
    assert {"World", "State", "Authority", "BindingState", "LiveRow", "AwaitRead"} <= {k.__name__ for k in kinds}
    for v in values:
        if isinstance(v, HashOnce):
            assert hash(v) == hash(_field_tuple(v)) == hash(v) == v._hash  # kept once asked
            copy = pickle.loads(pickle.dumps(v))
            assert copy == v and hash(copy) == hash(v)


def test_every_hash_once_class_leaves_equality_and_hash_to_the_base():
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    final = [c for c in subclasses(HashOnce)  # dataclass(slots=True) leaves the class it rebuilt behind
             if getattr(sys.modules[c.__module__], c.__name__, None) is c]
    assert len(final) >= 30
    for cls in final:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        assert not cls.__dataclass_params__.eq, f"{cls.__name__}: declare it @dataclass(..., eq=False)"
        compiled = "__slots__" not in cls.__dict__  # mypyc's native class: a slot wrapper of its own calls the base's
        assert compiled or (cls.__hash__ is HashOnce.__hash__ and cls.__eq__ is HashOnce.__eq__), cls


def test_equality_is_a_dataclasss_equality():
    from envreplica.model.state import INITIAL

    other = replace(INITIAL)
    assert other == INITIAL and other is not INITIAL and not (other != INITIAL)
    assert INITIAL != replace(INITIAL, stage_values=INITIAL.stage_values.set("p", "v"))
    assert INITIAL.__eq__(object()) is NotImplemented and INITIAL != 1


def test_replace_builds_what_dataclasses_replace_builds():
    values = [v for w in _reached() for v in _values(w, [])]
    checked = set()
    for v in values:
        fields = dataclasses.fields(v)
        for i, f in enumerate(fields):
            other = getattr(values[(hash(v) + i) % len(values)], f.name, None)
            ours, theirs = replace(v, **{f.name: other}), dataclasses.replace(v, **{f.name: other})
            assert ours == theirs and type(ours) is type(theirs) and hash(ours) == hash(theirs)
            assert replace(v) == v
        checked.add(type(v).__name__)
    assert {"State", "Authority", "World", "Cloud"} <= checked


def test_replace_refuses_an_unknown_field_and_hash_once_a_class_that_is_no_dataclass():
    from envreplica.model.state import INITIAL

    with pytest.raises(TypeError, match="bogus"):
        replace(INITIAL, bogus=1)

    class NotADataclass(HashOnce):
        __slots__ = ()

    with pytest.raises(TypeError, match="is not a dataclass"):
        hash(NotADataclass())

    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int

    assert replace(Plain(1), x=2) == Plain(2)  # not slots: dataclasses.replace does it
