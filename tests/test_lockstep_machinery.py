"""The lockstep's own machinery, job by job: each test fails when its job is undone, not only when an output moves.

Three pieces of the replica's lockstep do jobs that its results show only indirectly (the first and part of the
third at ``conformance/``'s top, shared with the migration's lockstep):

* ``conformance.literals``: the pool of local literals Hypothesis mixes into draws, pinned to envreplica's own
  sources (``applies``, ``source_files``, ``own_constants``, ``pinned``);
* ``replica.draw``: every choice of a step read from one fixed-size block of bytes (``_Draw``, ``_BLOCKS``),
  0 bytes being the shrink target;
* the shrinker: Hypothesis's shrink capped in test-function calls with its explain phase off
  (``conformance.shrinking.shrink_budget``; ``replica.run``'s ``_effective_settings`` and the wiring in
  ``run_lockstep``), then ``replica.run._minimize`` deleting steps, nested requests and projects while the
  divergence stays the same.

``JOBS`` holds one check per job (``test_job`` runs each). ``MUTANTS`` holds, per job, at least one
version of the piece with that job undone (a function rebuilt from its own source with one edit,
``_edited``, or a stand-in), and ``test_mutant_is_killed`` runs the job's check with the mutant patched
in and requires it to fail with an ``AssertionError``; ``test_every_job_has_a_mutant`` keeps the two
tables in step. A mutant whose edit no longer applies (the source moved) fails its meta-test loudly.

Fast and clock-free: ``_minimize`` runs against a fake replay (an oracle over request ids), the
shrink budget against stand-ins of Hypothesis's runner and shrinker (plus two small real shrinks);
every verdict is a count or a value.
"""

from __future__ import annotations

import __future__
import contextlib
import copy
import functools
import importlib.util
import inspect
import json
import random
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import hypothesis
import pytest
from hypothesis import Phase
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine, providers, shrinker
from hypothesis.internal.constants_ast import Constants, _constants_from_source
from hypothesis.internal.floats import float_to_int
from hypothesis.stateful import INITIALIZE_RULE_MARKER, RULE_MARKER, precondition, rule
from sortedcontainers import SortedSet

from envreplica.conformance import literals, shrinking
from envreplica.conformance.replica import draw, machine
from envreplica.conformance.replica import run as lockstep_run
from envreplica.conformance.replica.draw import BLOCK_BYTES, VALUE_BYTES, _Draw
from envreplica.model.state import Variant

#: The repository root (an editable install: the subpackages are its top-level folders).
REPO = Path(literals.__file__).resolve().parents[1]

# ---------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------

#: job name -> its check (raises AssertionError when the job is not done).
JOBS: dict[str, Callable[[], None]] = {}


def job(name: str):
    def register(check: Callable[[], None]) -> Callable[[], None]:
        assert name not in JOBS, name
        JOBS[name] = check
        return check

    return register


@dataclass(frozen=True)
class Mutant:
    job: str  # the job it undoes (whose check must then fail)
    name: str
    apply: Callable[[pytest.MonkeyPatch], None]


MUTANTS: list[Mutant] = []


def mutant(job_name: str, name: str, owner: Any, attr: str, make: Callable[[], Any]) -> None:
    """A mutant that replaces ``owner.attr`` with ``make()`` (built when the meta-test runs)."""
    MUTANTS.append(Mutant(job_name, name, lambda mp: mp.setattr(owner, attr, make())))


def edited(job_name: str, name: str, owner: Any, attr: str, *edits: tuple[str, str]) -> None:
    """A mutant: ``owner.attr`` rebuilt from its own source with each (old, new) edit made once."""
    mutant(job_name, name, owner, attr, lambda: _edited(getattr(owner, attr), *edits))


def _edited(func: Any, *edits: tuple[str, str]) -> Any:
    """``func`` compiled again from its source (decorators included) with each ``old`` replaced by ``new``,
    in the globals of its own module (so it sees what the test patches there)."""
    target = inspect.unwrap(func)
    lines, first = inspect.getsourcelines(target)
    source = "".join(lines)  # edited as indented in its file, then dedented (a method)
    for old, new in edits:
        assert source.count(old) == 1, f"the mutant's edit no longer applies to {target.__qualname__}: {old!r}"
        source = source.replace(old, new)
    source = textwrap.dedent(source)
    code = compile("\n" * (first - 1) + source, inspect.getsourcefile(target) or "<mutant>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    namespace: dict[str, Any] = {}
    exec(code, sys.modules[target.__module__].__dict__, namespace)
    return namespace[target.__name__]


# ---------------------------------------------------------------------------
# literals: applies
# ---------------------------------------------------------------------------

LITERAL_INTERNALS = [(providers, "_get_local_constants"), (providers, "CONSTANTS_CACHE"),
                     (importlib.import_module("hypothesis.internal.constants_ast"), "_constants_from_source")]


@job("applies: yes on the installed Hypothesis")
def check_applies_here() -> None:
    """The pinned Hypothesis has the internals ``pinned`` replaces: without this, nothing is pinned."""
    assert literals.applies(), "this Hypothesis lacks the internals the pinned literals replace"


mutant("applies: yes on the installed Hypothesis", "applies always no", literals, "applies", lambda: lambda: False)


@job("applies: no when any internal is missing")
def check_applies_no_when_missing() -> None:
    for owner, name in LITERAL_INTERNALS:
        with pytest.MonkeyPatch.context() as mp:
            mp.delattr(owner, name)
            assert not literals.applies(), f"applies() with {owner.__name__}.{name} missing"


mutant("applies: no when any internal is missing", "applies always yes", literals, "applies", lambda: lambda: True)

# ---------------------------------------------------------------------------
# literals: source_files
# ---------------------------------------------------------------------------


def _subpackage_folders() -> list[Path]:
    """The folders pyproject.toml maps to ``envreplica.<name>`` (the top-level subpackages)."""
    import tomllib

    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return sorted(REPO / folder for folder in mapping.values())


@contextlib.contextmanager
def _not_imported(prefix: str):
    """Within the block, the modules under ``prefix`` are not in ``sys.modules`` (as in a process that never
    imported them); put back after."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
            mp.delitem(sys.modules, name)
        yield


@job("source_files: every .py file of every subpackage, imported or not")
def check_source_files_complete() -> None:
    with _not_imported("envreplica.report"), _not_imported("envreplica.cli"):
        files = set(literals.source_files())
    folders = _subpackage_folders()
    assert len(folders) >= 8, folders
    for folder in folders:
        missing = sorted(set(folder.rglob("*.py")) - files)
        assert not missing, f"source_files() misses {[str(p.relative_to(REPO)) for p in missing[:5]]}"
    nested = REPO / "conformance" / "replica" / "run.py"
    assert nested in files


edited("source_files: every .py file of every subpackage, imported or not", "top-level files only",
       literals, "source_files", ('folder.rglob("*.py")', 'folder.glob("*.py")'))
edited("source_files: every .py file of every subpackage, imported or not", "imported modules only",
       literals, "source_files",
       ("    return sorted(files)",
        "    imported = {Path(m.__file__).resolve() for m in list(__import__('sys').modules.values())\n"
        "                if getattr(m, '__file__', None)}\n"
        "    return sorted(files & imported)"))


@job("source_files: nothing outside the package")
def check_source_files_only_the_package() -> None:
    folders = _subpackage_folders()
    stray = [p for p in literals.source_files() if not any(p.is_relative_to(f) for f in folders)]
    assert not stray, f"source_files() reads files outside the package: {stray[:5]}"
    assert any((REPO / "tests").rglob("*.py")), "the check needs a folder of .py files beside the package"


edited("source_files: nothing outside the package", "every folder's files", literals, "source_files",
       ('        if spec is not None and [Path(p).resolve() for p in spec.submodule_search_locations or ()] == [folder]:',
        '        if folder.is_dir() and not folder.name.startswith("."):'),
       ('        spec = importlib.util.find_spec(f"envreplica.{folder.name}") if (folder / "__init__.py").is_file() else None\n',
        ''))


@job("source_files: a folder counts only when envreplica.<folder> imports from it")
def check_source_files_the_very_folder() -> None:
    real = importlib.util.find_spec

    def report_elsewhere(name, *args, **kwargs):
        spec = real(name, *args, **kwargs)
        if name == "envreplica.report" and spec is not None:
            spec = copy.copy(spec)
            spec.submodule_search_locations = ["/elsewhere/envreplica/report"]
        return spec

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.util, "find_spec", report_elsewhere)
        files = literals.source_files()
    assert files and not [p for p in files if p.is_relative_to(REPO / "report")], \
        "source_files() read a folder that envreplica.report does not import from"


edited("source_files: a folder counts only when envreplica.<folder> imports from it", "any folder that imports",
       literals, "source_files",
       ("if spec is not None and [Path(p).resolve() for p in spec.submodule_search_locations or ()] == [folder]:",
        "if spec is not None:"))


@job("source_files: only regular packages are looked up (no import of docs/, tests/, the egg-info)")
def check_source_files_only_packages_looked_up() -> None:
    real, asked = importlib.util.find_spec, []

    def recording(name, *args, **kwargs):
        asked.append(name)
        return real(name, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.util, "find_spec", recording)
        try:
            literals.source_files()
        except Exception as error:  # e.g. envreplica.egg-info: a dotted name that cannot be looked up
            raise AssertionError(f"source_files() failed: {type(error).__name__}: {error}") from error
    assert asked, "nothing looked up"
    odd = [n for n in asked if not (REPO / n.removeprefix("envreplica.") / "__init__.py").is_file()]
    assert not odd, f"source_files() looked up folders that are not packages: {odd}"


edited("source_files: only regular packages are looked up (no import of docs/, tests/, the egg-info)",
       "every folder looked up", literals, "source_files",
       (' if (folder / "__init__.py").is_file() else None', ""))


@job("source_files: in path order")
def check_source_files_sorted() -> None:
    files = literals.source_files()
    assert len(files) > 20 and len(set(files)) == len(files)
    assert files == sorted(files), "source_files() is not in path order"


edited("source_files: in path order", "set order", literals, "source_files",
       ("    return sorted(files)", "    return list(files)"))

# ---------------------------------------------------------------------------
# literals: own_constants
# ---------------------------------------------------------------------------


def _literals_per_file() -> dict[Path, Constants]:
    """Hypothesis's own reading of each source file as it is now (what the pool must be the union of)."""
    return {p: _constants_of(p, p.stat().st_mtime_ns, p.stat().st_size) for p in _subpackage_files()}


@functools.lru_cache(maxsize=None)
def _constants_of(path: Path, mtime_ns: int, size: int) -> Constants:
    """One file's literals, read again whenever the file changes (others edit the tree meanwhile)."""
    return _constants_from_source(path.read_bytes(), limit=True)


def _subpackage_files() -> list[Path]:
    return sorted(p for folder in _subpackage_folders() for p in folder.rglob("*.py"))


def _fresh_pool() -> Any:
    """``own_constants()`` computed now (past its cache, when it has one)."""
    return getattr(literals.own_constants, "__wrapped__", literals.own_constants)()


def _stray_pool() -> Constants:
    """A pool of Hypothesis's own (another local module's literals), none of them envreplica's."""
    return Constants(integers=SortedSet([917_263]), floats=SortedSet([0.917263], key=float_to_int),
                     bytes=SortedSet([b"stray-9f2c"]), strings=SortedSet(["stray-literal-9f2c"]))


@job("own_constants: every literal of every source file, imported or not")
def check_own_constants_complete() -> None:
    with _not_imported("envreplica.report"), _not_imported("envreplica.cli"), _not_imported("envreplica.reliability"):
        pool = _fresh_pool()
    for path, found in _literals_per_file().items():
        for kind in ("integers", "floats", "bytes", "strings"):
            missing = set(getattr(found, kind)) - set(getattr(pool, kind))
            assert not missing, f"the pool misses {kind} of {path.relative_to(REPO)}: {sorted(map(repr, missing))[:3]}"


edited("own_constants: every literal of every source file, imported or not", "imported modules only",
       literals, "own_constants",
       ("    for path in source_files():",
        "    for path in [Path(m.__file__) for n, m in sorted(__import__('sys').modules.items())\n"
        "                 if n.startswith('envreplica.') and getattr(m, '__file__', None)]:"))


@job("own_constants: nothing but envreplica's literals")
def check_own_constants_nothing_else() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(providers, "_get_local_constants", _stray_pool)  # what Hypothesis found in this process
        pool = _fresh_pool()
    assert "stray-literal-9f2c" not in pool.strings and 917_263 not in pool.integers, "the pool took Hypothesis's own"
    union: dict[str, set] = {k: set() for k in ("integers", "floats", "bytes", "strings")}
    for found in _literals_per_file().values():
        for kind in union:
            union[kind] |= set(getattr(found, kind))
    for kind, allowed in union.items():
        extra = set(getattr(pool, kind)) - allowed
        assert not extra, f"the pool holds {kind} no source file has: {sorted(map(repr, extra))[:3]}"


edited("own_constants: nothing but envreplica's literals", "merged with Hypothesis's pool",
       literals, "own_constants",
       ("    return pool",
        "    from hypothesis.internal.conjecture import providers\n    return pool | providers._get_local_constants()"))


@job("own_constants: each set in a fixed (sorted) order")
def check_own_constants_order() -> None:
    pool = _fresh_pool()
    assert len(pool.strings) > 100 and len(pool.integers) > 10
    for kind, key in (("integers", None), ("floats", float_to_int), ("bytes", None), ("strings", None)):
        values = list(getattr(pool, kind))
        assert values == sorted(values, key=key), f"the pool's {kind} are not in a fixed order"


edited("own_constants: each set in a fixed (sorted) order", "plain sets", literals, "own_constants",
       ("strings=SortedSet())", "strings=set())"), ("integers=SortedSet(),", "integers=set(),"))


@job("own_constants: computed once, the same pool each time")
def check_own_constants_once() -> None:
    assert literals.own_constants() is literals.own_constants(), "own_constants() read the sources again"


edited("own_constants: computed once, the same pool each time", "not cached", literals, "own_constants",
       ("@functools.cache\n", ""))

# ---------------------------------------------------------------------------
# literals: pinned
# ---------------------------------------------------------------------------

_SENTINEL_KEY: Any = ("string", ("envreplica-machinery-sentinel",))


@job("pinned: inside, Hypothesis's providers draw from the own pool")
def check_pinned_inside() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(providers, "_get_local_constants", _stray_pool)
        with literals.pinned():
            pool = providers._get_local_constants()
            assert pool is literals.own_constants(), "inside pinned(), the provider is not the own pool"
            assert providers.HypothesisProvider(None)._local_constants is literals.own_constants(), \
                "inside pinned(), a new HypothesisProvider does not draw from the own pool"
            assert "stray-literal-9f2c" not in pool.strings
            assert {"\ud800", "\udc00"} <= set(pool.strings)  # the implementation's checks' lone surrogates


edited("pinned: inside, Hypothesis's providers draw from the own pool", "provider not replaced",
       literals, "pinned", ("    providers._get_local_constants = lambda: pool\n", ""))


@job("pinned: clears the constants cache on entry")
def check_pinned_clears_on_entry() -> None:
    providers.CONSTANTS_CACHE[_SENTINEL_KEY] = ((), ("stray-literal-9f2c",))  # computed from the old pool
    try:
        with literals.pinned():
            assert _SENTINEL_KEY not in providers.CONSTANTS_CACHE.cache, "a stale cache entry survived entry"
    finally:
        providers.CONSTANTS_CACHE.cache.pop(_SENTINEL_KEY, None)


edited("pinned: clears the constants cache on entry", "no clear on entry", literals, "pinned",
       ("    providers.CONSTANTS_CACHE.cache.clear()\n    providers._get_local_constants = lambda: pool",
        "    providers._get_local_constants = lambda: pool"))


@job("pinned: clears the constants cache on exit")
def check_pinned_clears_on_exit() -> None:
    try:
        with literals.pinned():
            providers.CONSTANTS_CACHE[_SENTINEL_KEY] = ((), ("computed from the own pool",))
        assert _SENTINEL_KEY not in providers.CONSTANTS_CACHE.cache, "the own pool's cache entry survived exit"
    finally:
        providers.CONSTANTS_CACHE.cache.pop(_SENTINEL_KEY, None)


edited("pinned: clears the constants cache on exit", "no clear on exit", literals, "pinned",
       ("        providers._get_local_constants = old\n        providers.CONSTANTS_CACHE.cache.clear()",
        "        providers._get_local_constants = old"))


@job("pinned: restores Hypothesis's provider on exit")
def check_pinned_restores() -> None:
    before = providers._get_local_constants
    with literals.pinned():
        pass
    assert providers._get_local_constants is before, "the provider was not restored"


edited("pinned: restores Hypothesis's provider on exit", "no restore", literals, "pinned",
       ("        providers._get_local_constants = old\n", ""))


@job("pinned: restores and clears even when the block raises")
def check_pinned_restores_on_error() -> None:
    before = providers._get_local_constants
    try:
        with pytest.raises(RuntimeError), literals.pinned():
            providers.CONSTANTS_CACHE[_SENTINEL_KEY] = ((), ("computed from the own pool",))
            raise RuntimeError("a divergence")
        assert providers._get_local_constants is before, "the provider was not restored after an error"
        assert _SENTINEL_KEY not in providers.CONSTANTS_CACHE.cache, "the cache was not cleared after an error"
    finally:
        providers.CONSTANTS_CACHE.cache.pop(_SENTINEL_KEY, None)


edited("pinned: restores and clears even when the block raises", "restore not in finally", literals, "pinned",
       ("    try:\n        yield\n    finally:\n", "    yield\n    if True:\n"))


@job("pinned: leaves Hypothesis alone when applies() is no")
def check_pinned_noop_without_internals() -> None:
    before = providers._get_local_constants
    providers.CONSTANTS_CACHE[_SENTINEL_KEY] = ((), ("kept",))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(literals, "applies", lambda: False)
            with literals.pinned():
                assert providers._get_local_constants is before, "pinned() replaced the provider without the internals"
                assert _SENTINEL_KEY in providers.CONSTANTS_CACHE.cache, "pinned() cleared the cache without the internals"
    finally:
        providers.CONSTANTS_CACHE.cache.pop(_SENTINEL_KEY, None)


edited("pinned: leaves Hypothesis alone when applies() is no", "no applies() guard", literals, "pinned",
       ("    if not applies():\n        yield\n        return\n", ""))

# ---------------------------------------------------------------------------
# draw: _Draw
# ---------------------------------------------------------------------------


def _hypothesis_like_blocks(count: int, size: int, seed: int = 7) -> list[bytes]:
    """Blocks as Hypothesis draws them: far from uniform (many 0s and 255s)."""
    rng = random.Random(seed)
    return [bytes(rng.choice((0, 255, rng.randrange(256))) for _ in range(size)) for _ in range(count)]


def _first(d_choice: Callable[[_Draw], Any], block: bytes) -> Any:
    return d_choice(_Draw(block))


@job("_Draw: past the end of the block every choice is 0 (the first option)")
def check_draw_past_the_end() -> None:
    d = _Draw(bytes([255]))
    assert d.index(4) == 3
    past = [d.index(4), d.one("abc"), d.spread(range(50)), d.weighted([(1, "x"), (5, "y")]), d.flag(60)]
    assert past == [0, "a", 0, "x", False], f"choices past the end of the block: {past}"
    e = _Draw(b"")
    assert [e.index(7), e.flag(99)] == [0, False], "choices from an empty block"


edited("_Draw: past the end of the block every choice is 0 (the first option)", "wraps around",
       _Draw, "_byte", ("return self.block[i] if i < len(self.block) else 0",
                        "return self.block[i % len(self.block)] if self.block else 0"))


@job("_Draw: each choice reads exactly the next byte, whatever its options")
def check_draw_one_byte_per_choice() -> None:
    block = bytes([0, 200, 0, 200, 0, 200, 0, 200, 0, 200, 0, 200])
    choices: list[Callable[[_Draw], Any]] = [
        lambda d: d.index(1), lambda d: d.index(0), lambda d: d.one(["only"]), lambda d: d.spread(["only"]),
        lambda d: d.spread(range(50), b"salt"), lambda d: d.weighted([(3, "only")]),
        lambda d: d.weighted([(1, "a"), (1, "b")]), lambda d: d.flag(50), lambda d: d.index(9)]
    for choose in choices:
        d = _Draw(block)
        choose(d)
        assert d.used == 1, f"a choice used {d.used} bytes"
        assert d.index(4) == 3, "the next choice did not read the next byte"  # 200 * 4 // 256
        d2 = _Draw(block[1:])
        choose(d2)
        assert d2.used == 1 and d2.index(4) == 0


edited("_Draw: each choice reads exactly the next byte, whatever its options", "one option consumes nothing",
       _Draw, "index", ("        b = self._byte()\n        return b * n // 256 if n > 1 else 0",
                        "        if n <= 1:\n            return 0\n        return self._byte() * n // 256"))
edited("_Draw: each choice reads exactly the next byte, whatever its options", "spread peeks",
       _Draw, "spread", ("        if self._byte() == 0:",
                         "        if (self.block[i] if i < len(self.block) else 0) == 0:"))


@job("_Draw.index: byte 0 is option 0, and the bytes split evenly and in order over the options")
def check_draw_index_map() -> None:
    for n in (2, 3, 5, 7, 50, 256, 300):
        picks = [_first(lambda d, n=n: d.index(n), bytes([b])) for b in range(256)]
        assert picks[0] == 0 and picks[255] == 255 * n // 256
        assert picks == sorted(picks), f"index({n}) is not monotone in the byte"
        if n <= 256:
            counts = [picks.count(k) for k in range(n)]
            assert max(counts) - min(counts) <= 1, f"index({n}) is uneven: {counts}"


edited("_Draw.index: byte 0 is option 0, and the bytes split evenly and in order over the options", "modulo",
       _Draw, "index", ("return b * n // 256 if n > 1 else 0", "return b % n if n > 1 else 0"))


@job("_Draw.one: byte 0 is the first element, 255 the last")
def check_draw_one() -> None:
    ends = [_first(lambda d: d.one("abc"), b"\x00"), _first(lambda d: d.one("abc"), b"\xff")]
    assert ends == ["a", "c"], f"one() at bytes 0 and 255: {ends}"
    assert {_first(lambda d: d.one("abc"), bytes([b])) for b in range(256)} == set("abc")


edited("_Draw.one: byte 0 is the first element, 255 the last", "reversed", _Draw, "one",
       ("return seq[self.index(len(seq))]", "return seq[-1 - self.index(len(seq))]"))


@job("_Draw.spread: a 0 byte is the first option")
def check_spread_zero() -> None:
    for block in _hypothesis_like_blocks(50, 8):
        block = b"\x00" + block[1:]
        got = _first(lambda d: d.spread(range(50), b"p1/A"), block)
        assert got == 0, f"spread() at a 0 byte chose option {got}"


edited("_Draw.spread: a 0 byte is the first option", "no zero case", _Draw, "spread",
       ("        if self._byte() == 0:\n            return seq[0]\n", "        self._byte()\n"))


def _spreads(blocks, place: int = 0, salt: bytes = b"", n: int = 50) -> list[int]:
    out = []
    for block in blocks:
        d = _Draw(block)
        for _ in range(place):
            d.index(2)
        out.append(d.spread(range(n), salt))
    return out


def _nonzero_blocks(count: int) -> list[bytes]:
    return [bytes(b or 255 for b in block) for block in _hypothesis_like_blocks(count, 8)]


@job("_Draw.spread: the choice depends on the salt")
def check_spread_salt() -> None:
    blocks = _nonzero_blocks(100)
    same = sum(a == b for a, b in zip(_spreads(blocks, salt=b"p1/A"), _spreads(blocks, salt=b"p2/B")))
    assert same < 20, f"{same} of 100 choices ignore the salt"


edited("_Draw.spread: the choice depends on the salt", "salt ignored", _Draw, "spread",
       ("bytes([i % 256]) + salt)", "bytes([i % 256]))"))


@job("_Draw.spread: the choice depends on its place in the block")
def check_spread_place() -> None:
    blocks = [b"\xff" * 8] + _nonzero_blocks(100)
    same = sum(a == b for a, b in zip(_spreads(blocks, place=0), _spreads(blocks, place=1)))
    assert same < 20, f"{same} of 101 choices are the same at two places of one block"


edited("_Draw.spread: the choice depends on its place in the block", "place ignored", _Draw, "spread",
       ("self.block + bytes([i % 256]) + salt", "self.block + salt"))


@job("_Draw.spread: spread over the options by the whole block, not by its byte")
def check_spread_whole_block() -> None:
    blocks = [b"\xff" + block[1:] for block in _hypothesis_like_blocks(200, 8)]  # the byte itself: always 255
    reached = set(_spreads(blocks))
    assert len(reached) >= 35, f"spread over 50 options reached only {len(reached)} of them from 200 blocks"


edited("_Draw.spread: spread over the options by the whole block, not by its byte", "the byte alone",
       _Draw, "spread", ("zlib.crc32(self.block + bytes([i % 256]) + salt)",
                         "zlib.crc32(self.block[i:i + 1] + bytes([i % 256]) + salt)"))


#: spread(range(1000), salt) at each place of these blocks, as every process computes it (a stable hash,
#: never ``hash()``, which each process salts). A deliberate change of the formula changes every
#: derandomized ci example: update these then.
SPREAD_GOLDEN = [
    (bytes(range(1, 9)), b"", [570, 852, 342, 672, 851, 789, 415, 161]),
    (bytes(range(1, 9)), b"p1/A", [40, 904, 536, 872, 496, 616, 792, 208]),
    (b"\xff" * 8, b"", [253, 147, 673, 231, 92, 818, 24, 806]),
    (bytes([7, 0, 255, 3]), b"k", [147, 0, 825, 424]),
]


@job("_Draw.spread: the same choice in every process (a stable hash)")
def check_spread_stable() -> None:
    for block, salt, expected in SPREAD_GOLDEN:
        d = _Draw(block)
        assert [d.spread(range(1000), salt) for _ in block] == expected, (block, salt)


edited("_Draw.spread: the same choice in every process (a stable hash)", "hash()", _Draw, "spread",
       ("zlib.crc32(self.block + bytes([i % 256]) + salt)", "hash(self.block + bytes([i % 256]) + salt) % 2**32"))


@job("_Draw.weighted: byte 0 is the first option; the bytes split by weight, in order")
def check_weighted_proportional() -> None:
    options = [(1, "a"), (3, "b"), (4, "c")]
    picks = [_first(lambda d: d.weighted(options), bytes([b])) for b in range(256)]
    assert picks[0] == "a" and picks[255] == "c"
    assert picks == sorted(picks), "weighted() is not in option order"
    assert [picks.count(v) for v in "abc"] == [32, 96, 128], [picks.count(v) for v in "abc"]


edited("_Draw.weighted: byte 0 is the first option; the bytes split by weight, in order", "weights ignored",
       _Draw, "weighted", ("            point = self.index(total)",
                           "            return self.one([v for _, v in options])"))


@job("_Draw.weighted: options of weight 0 or less are never chosen, nor counted")
def check_weighted_skips() -> None:
    """Weight 0 alone cannot show the filter (the walk never stops at a weight-0 option anyway); a negative
    weight, which would shrink the total and shift every later option, does."""
    options = [(-5, "negative"), (2, "a"), (0, "zero"), (2, "b")]
    picks = [_first(lambda d: d.weighted(options), bytes([b])) for b in range(256)]
    counts = [picks.count(v) for v in ("a", "b", "negative", "zero")]
    assert counts == [128, 128, 0, 0], f"bytes per option (a, b, negative, zero): {counts}"
    tails = {_first(lambda d, i=i: d.weighted(options, tail=i), block)
             for block in _hypothesis_like_blocks(50, 16) for i in range(4)}
    assert tails == {"a", "b"}, tails


edited("_Draw.weighted: options of weight 0 or less are never chosen, nor counted", "no filter",
       _Draw, "weighted", ("        options = [(w, v) for w, v in options if w > 0]\n", ""))


@job("_Draw.weighted(tail=): consumes nothing")
def check_tail_consumes_nothing() -> None:
    block = bytes([200, 0]) + bytes(range(1, VALUE_BYTES + 1))
    d = _Draw(block)
    d.weighted([(1, "x"), (1, "y")], tail=0)
    d.weighted([(1, "x"), (1, "y")], tail=3)
    assert d.used == 0 and d.index(4) == 3, "a tail choice consumed a byte of the request's choices"


edited("_Draw.weighted(tail=): consumes nothing", "tail consumes a byte", _Draw, "weighted",
       ("            bytes_ = self.block[-VALUE_BYTES:]", "            self._byte()\n            bytes_ = self.block[-VALUE_BYTES:]"))


@job("_Draw.weighted(tail=): an all-zero tail is the first option")
def check_tail_zero() -> None:
    options = [(12, "first"), (10, "second"), (2, "hard")]
    for head in _hypothesis_like_blocks(20, 24):
        got = {_first(lambda d, i=i: d.weighted(options, tail=i), head + bytes(VALUE_BYTES)) for i in range(8)}
        assert got == {"first"}, f"an all-zero tail chose {got}"


edited("_Draw.weighted(tail=): an all-zero tail is the first option", "no zero case", _Draw, "weighted",
       ("point = 0 if not any(bytes_) else zlib.crc32", "point = zlib.crc32"))


@job("_Draw.weighted(tail=): read from the tail alone, apart from the request's choices")
def check_tail_only_tail() -> None:
    options = [(1, v) for v in range(20)]
    heads, tails = _hypothesis_like_blocks(30, 24, seed=1), _hypothesis_like_blocks(30, VALUE_BYTES, seed=2)
    for tail in tails:
        assert len({_first(lambda d: d.weighted(options, tail=2), head + tail) for head in heads}) == 1, \
            "the tail choice moved with the request's own bytes"
    assert len({_first(lambda d: d.weighted(options, tail=2), heads[0] + tail) for tail in tails}) >= 8


edited("_Draw.weighted(tail=): read from the tail alone, apart from the request's choices", "whole block",
       _Draw, "weighted", ("bytes_ = self.block[-VALUE_BYTES:]", "bytes_ = self.block"))


@job("_Draw.weighted(tail=i): each record i gets its own value")
def check_tail_per_record() -> None:
    options = [(1, v) for v in range(20)]
    varied = 0
    for block in _hypothesis_like_blocks(40, 32):
        if any(block[-VALUE_BYTES:]):
            varied += len({_first(lambda d, i=i: d.weighted(options, tail=i), block) for i in range(8)}) > 1
    assert varied >= 30, f"only {varied} blocks gave their records different values"


edited("_Draw.weighted(tail=i): each record i gets its own value", "record ignored", _Draw, "weighted",
       ("zlib.crc32(bytes_ + bytes([tail % 256]))", "zlib.crc32(bytes_)"))


@job("_Draw.flag: False at byte 0, True for exactly percent% of the bytes (the top ones)")
def check_flag() -> None:
    for percent in (0, 5, 50, 60, 100):
        picks = [_first(lambda d, p=percent: d.flag(p), bytes([b])) for b in range(256)]
        true = [b for b, yes in enumerate(picks) if yes]
        assert true == list(range(256 - percent * 256 // 100, 256)), (percent, true[:3], len(true))
        if percent < 100:
            assert picks[0] is False


edited("_Draw.flag: False at byte 0, True for exactly percent% of the bytes (the top ones)", "inverted",
       _Draw, "flag", ("return self._byte() >= 256 - percent * 256 // 100",
                       "return self._byte() < percent * 256 // 100"))

# ---------------------------------------------------------------------------
# draw: one fixed block per rule
# ---------------------------------------------------------------------------


@job("_BLOCKS: each kind's block is exactly BLOCK_BYTES long; its shrink target is all zeros")
def check_blocks_fixed() -> None:
    quiet = hypothesis.settings(database=None, derandomize=True, max_examples=20, deadline=None)
    for kind, size in BLOCK_BYTES.items():
        strategy = draw._BLOCKS[kind]
        assert hypothesis.find(strategy, lambda b: True, settings=quiet) == bytes(size), kind
        try:
            odd = hypothesis.find(strategy, lambda b, size=size: len(b) != size, settings=quiet)
        except hypothesis.errors.NoSuchExample:
            odd = None
        assert odd is None, f"a {kind} block of {len(odd)} bytes"


mutant("_BLOCKS: each kind's block is exactly BLOCK_BYTES long; its shrink target is all zeros", "sized by need",
       draw, "_BLOCKS", lambda: {k: st.binary(max_size=n) for k, n in BLOCK_BYTES.items()})


def _rules_of(cls) -> dict[str, Any]:
    out = {}
    for name in dir(cls):
        member = getattr(cls, name)
        found = getattr(member, RULE_MARKER, None) or getattr(member, INITIALIZE_RULE_MARKER, None)
        if found is not None:
            out[name] = found
    return out


@job("the machine: each rule draws one block of its kind (and close/restart none), nothing else")
def check_rules_draw_one_block() -> None:
    rules = _rules_of(machine.LockstepMachine)
    assert set(rules) >= {"start", *machine.RULE_WEIGHTS}, sorted(rules)
    for name, found in rules.items():
        kind = name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name
        if kind in BLOCK_BYTES:
            assert set(found.arguments) == {"data"} and found.arguments["data"] is draw._BLOCKS[kind], \
                f"rule {name} does not draw one {kind} block: {found.arguments}"
        else:
            assert found.arguments == {}, f"rule {name} draws {found.arguments}"


def _rule_drawing_its_own_bytes():
    @precondition(lambda self: "page" in self.enabled)
    @rule(data=st.binary(min_size=20, max_size=40))
    def page_2(self, data: bytes) -> None:
        self.do_page(data)

    return page_2


mutant("the machine: each rule draws one block of its kind (and close/restart none), nothing else",
       "a page rule sized by need", machine.LockstepMachine, "page_2", _rule_drawing_its_own_bytes)

# ---------------------------------------------------------------------------
# shrinking: shrink_budget, on stand-ins of Hypothesis's runner and shrinker
# ---------------------------------------------------------------------------

SHRINK_INTERNALS = [(shrinker.Shrinker, "shrink"), (shrinker.Shrinker, "explain"),
                    (engine.ConjectureRunner, "test_function"), (engine, "MAX_SHRINKING_SECONDS")]


@contextlib.contextmanager
def _stand_ins():
    """A runner whose ``test_function`` only counts calls, and a shrinker whose ``shrink`` runs a script
    (catching ``StopShrinking`` as Hypothesis's own does): what ``shrink_budget`` wraps, in miniature."""

    class Runner(engine.ConjectureRunner):
        def __init__(self, call_count: int = 0) -> None:  # noqa: D107 - none of the real one's set-up
            self.call_count = call_count

    class Shrink(shrinker.Shrinker):
        def __init__(self, runner, script) -> None:  # noqa: D107
            self.engine, self.script = runner, script

    def counting(self, data) -> None:
        self.call_count += 1

    def scripted(self) -> None:
        with contextlib.suppress(shrinker.StopShrinking):
            self.script(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.ConjectureRunner, "test_function", counting)
        mp.setattr(shrinker.Shrinker, "shrink", scripted)
        yield Runner, Shrink


def _calls(runner, most: int = 1000) -> int:
    """Calls made until the runner stops the shrink (at most ``most``)."""
    for made in range(most):
        try:
            runner.test_function(None)
        except shrinker.StopShrinking:
            return made
    return most


def _until_stopped(into: list) -> Callable[[Any], None]:
    def script(s) -> None:
        into.append(0)
        for _ in range(1000):
            s.engine.test_function(None)
            into[-1] += 1

    return script


@job("shrink_budget: a shrink makes exactly `calls` calls, counted from its start")
def check_budget_counts_from_start() -> None:
    with _stand_ins() as (Runner, Shrink):
        with shrinking.shrink_budget(7, 300.0):
            made: list[int] = []
            runner = Runner(call_count=40)  # 40 calls of generation before the failure
            Shrink(runner, _until_stopped(made)).shrink()
    assert made == [7], f"the shrink made {made} calls under a budget of 7"


edited("shrink_budget: a shrink makes exactly `calls` calls, counted from its start", "absolute count",
       shrinking, "shrink_budget",
       ("self.engine._envreplica_stop_at = self.engine.call_count + calls", "self.engine._envreplica_stop_at = calls"))
edited("shrink_budget: a shrink makes exactly `calls` calls, counted from its start", "one call late",
       shrinking, "shrink_budget", ("self.call_count >= stop_at", "self.call_count > stop_at"))
edited("shrink_budget: a shrink makes exactly `calls` calls, counted from its start", "never stops",
       shrinking, "shrink_budget", ("            raise shrinker.StopShrinking\n", "            pass\n"))


@job("shrink_budget: generation (calls outside a shrink) is never capped")
def check_budget_leaves_generation() -> None:
    with _stand_ins() as (Runner, Shrink):
        with shrinking.shrink_budget(3, 300.0):
            runner = Runner()
            assert _calls(runner, 50) == 50, "generation was stopped"
            Shrink(runner, _until_stopped([])).shrink()
            assert _calls(runner, 50) == 50, "generation after a shrink was stopped"


edited("shrink_budget: generation (calls outside a shrink) is never capped", "caps every call",
       shrinking, "shrink_budget",
       ("if stop_at is not None and self.call_count >= stop_at:",
        "if self.call_count >= (stop_at if stop_at is not None else calls):"))


@job("shrink_budget: each shrink gets its own budget, also after one that raised")
def check_budget_per_shrink() -> None:
    with _stand_ins() as (Runner, Shrink):
        with shrinking.shrink_budget(5, 300.0):
            made: list[int] = []
            runner = Runner(call_count=10)
            Shrink(runner, _until_stopped(made)).shrink()
            Shrink(runner, _until_stopped(made)).shrink()

            def raises(s) -> None:
                s.engine.test_function(None)
                raise RuntimeError("the engine gave up")

            try:
                Shrink(runner, raises).shrink()
                raised = False
            except RuntimeError:
                raised = True
            assert _calls(runner, 50) == 50, "the budget of a shrink that raised stayed armed"
            Shrink(runner, _until_stopped(made)).shrink()
    assert made == [5, 5, 5] and raised, (made, raised)


edited("shrink_budget: each shrink gets its own budget, also after one that raised", "never disarmed",
       shrinking, "shrink_budget",
       ("            if outermost:\n                self.engine._envreplica_stop_at = None\n", "            pass\n"))
edited("shrink_budget: each shrink gets its own budget, also after one that raised", "disarmed only on success",
       shrinking, "shrink_budget",
       ("        try:\n            old_shrink(self)\n        finally:\n", "        old_shrink(self)\n        if True:\n"))


@job("shrink_budget: a nested shrink neither extends nor ends the outermost's budget")
def check_budget_nested() -> None:
    made: list[int] = []
    after_inner: list[int] = []

    def outer(s) -> None:
        for _ in range(3):
            s.engine.test_function(None)
        type(s)(s.engine, _until_stopped(made)).shrink()  # a pass that shrinks a part with a shrinker of its own
        after_inner.append(_calls(s.engine, 1000))

    with _stand_ins() as (Runner, Shrink):
        with shrinking.shrink_budget(8, 300.0):
            Shrink(Runner(call_count=4), outer).shrink()
    assert made == [5] and after_inner == [0], (made, after_inner)


edited("shrink_budget: a nested shrink neither extends nor ends the outermost's budget", "every shrink arms",
       shrinking, "shrink_budget",
       ('outermost = getattr(self.engine, "_envreplica_stop_at", None) is None', "outermost = True"))


@job("shrink_budget: restores every patched attribute, also when the block raises")
def check_budget_restores() -> None:
    before = [(owner, name, getattr(owner, name)) for owner, name in SHRINK_INTERNALS]
    with shrinking.shrink_budget(5, 12.5):
        assert any(getattr(owner, name) is not value for owner, name, value in before)
    for owner, name, value in before:
        assert getattr(owner, name) is value, f"{name} not restored"
    with pytest.raises(RuntimeError), shrinking.shrink_budget(5, 12.5):
        raise RuntimeError("a divergence")
    for owner, name, value in before:
        assert getattr(owner, name) is value, f"{name} not restored after an error"


for _line in ("        shrinker.Shrinker.shrink = old_shrink  # type: ignore[method-assign]\n",
              "        shrinker.Shrinker.explain = old_explain  # type: ignore[method-assign]\n",
              "        engine.ConjectureRunner.test_function = old_test  # type: ignore[method-assign]\n",
              "        engine.MAX_SHRINKING_SECONDS = old_seconds\n"):
    edited("shrink_budget: restores every patched attribute, also when the block raises",
           f"{_line.split('=')[0].strip()} not restored", shrinking, "shrink_budget", (_line, "        pass\n"))
del _line
edited("shrink_budget: restores every patched attribute, also when the block raises", "restore not in finally",
       shrinking, "shrink_budget", ("    try:\n        yield\n    finally:\n", "    yield\n    if True:\n"))


@job("shrink_budget: the guard in seconds is set (only a guard: the cap is the count)")
def check_budget_guard() -> None:
    with shrinking.shrink_budget(5, 12.5):
        assert engine.MAX_SHRINKING_SECONDS == 12.5, f"the guard is {engine.MAX_SHRINKING_SECONDS} s, not 12.5"


edited("shrink_budget: the guard in seconds is set (only a guard: the cap is the count)", "no guard",
       shrinking, "shrink_budget", ("    engine.MAX_SHRINKING_SECONDS = guard_seconds  # type: ignore[assignment]\n", ""))


@job("shrink_budget: leaves Hypothesis alone when shrink_budget_applies() is no")
def check_budget_noop_without_internals() -> None:
    before = [(owner, name, getattr(owner, name)) for owner, name in SHRINK_INTERNALS]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shrinking, "shrink_budget_applies", lambda: False)
        with shrinking.shrink_budget(5, 12.5):
            for owner, name, value in before:
                assert getattr(owner, name) is value, f"{name} patched without the internals"


edited("shrink_budget: leaves Hypothesis alone when shrink_budget_applies() is no", "no guard",
       shrinking, "shrink_budget", ("    if not shrink_budget_applies():\n        yield\n        return\n", ""))


@job("shrink_budget_applies: yes on the installed Hypothesis, no when any internal is missing")
def check_budget_applies() -> None:
    assert shrinking.shrink_budget_applies(), "this Hypothesis lacks the internals the shrink budget caps"
    for owner, name in [(engine, "MAX_SHRINKING_SECONDS"), (shrinker, "StopShrinking"), *SHRINK_INTERNALS[:3]]:
        with pytest.MonkeyPatch.context() as mp:
            mp.delattr(owner, name)
            assert not shrinking.shrink_budget_applies(), f"applies with {name} missing"


mutant("shrink_budget_applies: yes on the installed Hypothesis, no when any internal is missing", "always yes",
       shrinking, "shrink_budget_applies", lambda: lambda: True)
mutant("shrink_budget_applies: yes on the installed Hypothesis, no when any internal is missing", "always no",
       shrinking, "shrink_budget_applies", lambda: lambda: False)

# ---------------------------------------------------------------------------
# shrinking: shrink_budget on the installed Hypothesis
# ---------------------------------------------------------------------------


def _real_shrink(budget: int, fail_from: int = 20) -> tuple[int, int]:
    """(calls before the first failure, calls after it) of a real Hypothesis test that passes ``fail_from - 1``
    times and then always fails, shrunk under ``shrink_budget(budget)``."""
    calls: list[int] = []

    @hypothesis.given(st.lists(st.integers(), min_size=30))
    @hypothesis.settings(database=None, derandomize=True, max_examples=100, deadline=None,
                         report_multiple_bugs=False, phases=[Phase.generate, Phase.shrink])
    def fails_late(xs) -> None:
        calls.append(len(xs))
        if len(calls) >= fail_from:
            raise AssertionError("late")

    with shrinking.shrink_budget(budget, 300.0), pytest.raises(AssertionError, match="late"):
        fails_late()
    return fail_from, len(calls) - fail_from


@job("shrink_budget: on the installed Hypothesis a shrink stops after `calls` calls")
def check_budget_real() -> None:
    for budget in (6, 18):
        before, after = _real_shrink(budget)
        # after the failure: Hypothesis replays it once, shrinks for the budget, and replays the result
        assert budget <= after <= budget + 3, f"{after} calls after the failure under a budget of {budget}"


edited("shrink_budget: on the installed Hypothesis a shrink stops after `calls` calls", "shrink not armed",
       shrinking, "shrink_budget", ("    shrinker.Shrinker.shrink = shrink  # type: ignore[method-assign]\n", ""))
edited("shrink_budget: on the installed Hypothesis a shrink stops after `calls` calls", "calls not checked",
       shrinking, "shrink_budget",
       ("    engine.ConjectureRunner.test_function = test_function  # type: ignore[method-assign]\n", ""))


@job("shrink_budget: the explain phase does not run")
def check_budget_no_explain() -> None:
    explained: list[int] = []
    real_explain = shrinker.Shrinker._explain

    def recording(self) -> None:
        explained.append(1)
        real_explain(self)

    @hypothesis.given(st.integers(), st.integers())
    @hypothesis.settings(database=None, derandomize=True, max_examples=100, deadline=None, phases=list(Phase))
    def fails(a, b) -> None:
        assert a < 10

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shrinker.Shrinker, "_explain", recording)
        with pytest.raises(AssertionError):
            fails()
        assert explained, "the check cannot see the explain phase"  # it runs for this test without the budget
        explained.clear()
        with shrinking.shrink_budget(10_000, 300.0), pytest.raises(AssertionError):
            fails()
    assert not explained, "the explain phase ran under shrink_budget"


edited("shrink_budget: the explain phase does not run", "explain kept", shrinking, "shrink_budget",
       ("    shrinker.Shrinker.explain = explain  # type: ignore[method-assign]\n", ""))


@job("_effective_settings: no explain phase, no deadline, one bug, whatever the settings given")
def check_effective_settings() -> None:
    given = hypothesis.settings(lockstep_run.lockstep_settings("ci"), phases=list(Phase), deadline=1000,
                                report_multiple_bugs=True)
    got = lockstep_run._effective_settings(given)
    assert Phase.explain not in got.phases and {Phase.generate, Phase.shrink} <= set(got.phases), got.phases
    assert got.deadline is None and got.report_multiple_bugs is False, (got.deadline, got.report_multiple_bugs)
    assert got.max_examples == given.max_examples and got.derandomize


edited("_effective_settings: no explain phase, no deadline, one bug, whatever the settings given", "explain kept",
       lockstep_run, "_effective_settings",
       ("phases = tuple(p for p in base.phases if p is not Phase.explain)", "phases = tuple(base.phases)"))


@job("run_lockstep: runs under the shrink budget (read at call time) with the literals pinned")
def check_run_lockstep_wiring() -> None:
    from envreplica.conformance.drivers import ModelDriver

    real_budget, budgets, seen = lockstep_run.shrink_budget, [], []
    original_provider, original_shrink = providers._get_local_constants, shrinker.Shrinker.shrink

    def recording_budget(calls, guard_seconds):
        budgets.append(calls)
        return real_budget(calls, guard_seconds)

    class Watched(ModelDriver):
        def handle(self, request):
            seen.append((providers._get_local_constants() is literals.own_constants(),
                         shrinker.Shrinker.shrink is not original_shrink))
            return super().handle(request)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lockstep_run, "shrink_budget", recording_budget)
        mp.setattr(lockstep_run, "SHRINK_CALLS", 3)
        report = lockstep_run.run_lockstep(
            lambda: Watched(Variant.FIXED), state_check=False,
            settings=hypothesis.settings(lockstep_run.lockstep_settings("ci"), max_examples=1, stateful_step_count=2))
    assert report.ok, report.failure
    assert budgets == [3], f"run_lockstep's shrink budgets: {budgets} (SHRINK_CALLS patched to 3)"
    assert seen and all(pinned for pinned, _ in seen), "the run's draws were not pinned to the own literals"
    assert all(capped for _, capped in seen), "the run was not under the shrink budget"
    assert providers._get_local_constants is original_provider


edited("run_lockstep: runs under the shrink budget (read at call time) with the literals pinned", "not pinned",
       lockstep_run, "run_lockstep", (", literals.pinned():", ":"))
edited("run_lockstep: runs under the shrink budget (read at call time) with the literals pinned", "no budget",
       lockstep_run, "run_lockstep", ("shrink_budget(SHRINK_CALLS, SHRINK_GUARD_SECONDS), ", ""))
edited("run_lockstep: runs under the shrink budget (read at call time) with the literals pinned",
       "budget copied at import", lockstep_run, "run_lockstep", ("shrink_budget(SHRINK_CALLS,", "shrink_budget(200,"))

# ---------------------------------------------------------------------------
# run: _minimize, against a fake replay
# ---------------------------------------------------------------------------


class _FakeImpl:
    def __init__(self) -> None:
        self.alive = True


class _FakeRun:
    """What ``_minimize`` uses of a ``_Run``."""

    variant = Variant.FIXED
    state_check = True
    progress = None  # no progress hook (``_Budget`` reports each replay to one)

    def __init__(self) -> None:
        self.impl = _FakeImpl()
        self.discards = 0

    def driver(self) -> _FakeImpl:
        return self.impl

    def discard(self) -> None:
        self.discards += 1
        self.impl = _FakeImpl()

    def probe(self, impl) -> None:
        return None


@dataclass
class _Minimized:
    requests: list
    reason: str
    steps: list
    replays: list  # one SimpleNamespace(requests, key, defer, alive) per replay
    run: _FakeRun


Oracle = Callable[[list], Optional[str]]


def _minimize(requests: list, oracle: Oracle, *, quiet: frozenset = frozenset(), replays: Optional[int] = None,
              crash: Optional[Callable[[list, _FakeImpl], None]] = None) -> _Minimized:
    """``run._minimize`` of ``requests`` (the first the reset), where a replay of a candidate diverges with
    ``oracle(candidate)`` (a reason, or None: no divergence). ``crash`` may kill the driver or raise."""
    log: list[SimpleNamespace] = []

    def replay(candidate, impl, model, **options):
        log.append(SimpleNamespace(requests=candidate, key=json.dumps(candidate, sort_keys=True),
                                   defer=set(options.get("defer", ())), alive=impl.alive))
        if crash is not None:
            crash(candidate, impl)
        reason = oracle(candidate)
        steps = [{"request": r, "model": {"replay": len(log)}, "impl": {"replay": len(log)}} for r in candidate]
        return steps, None if reason is None else {"index": len(candidate), "reason": reason}

    reason = oracle(requests)
    assert reason is not None, "the scenario must diverge to begin with"
    steps = [dict({"request": r, "model": {}, "impl": {}}, **({"quiet": True} if r.get("id") in quiet else {}))
             for r in requests]
    run = _FakeRun()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lockstep_run, "replay_steps", replay)
        mp.setattr(lockstep_run, "ModelDriver", lambda variant: None)
        if replays is not None:
            mp.setattr(lockstep_run, "MINIMIZE_REPLAYS", replays)
        got, got_reason = lockstep_run._minimize(run, steps, reason)
    return _Minimized([s["request"] for s in got], got_reason, got, log, run)


def _req(i: int, op: str = "read", **fields) -> dict:
    return {"id": i, "op": op, **fields}


def _ids(requests: list) -> list:
    return [r["id"] for r in requests]


def _all_ids(requests: list) -> set:
    out = set()
    for r in requests:
        out.add(r["id"])
        out |= {n["id"] for n in r.get("duringFetch") or ()}
    return out


def _needs(*needed: int, kind: str = "response.ok") -> Oracle:
    return lambda rs: f"{kind}: true != false" if set(needed) <= _all_ids(rs) else None


RESET = _req(0, "reset")


def _scenario_alternate() -> _Minimized:
    """Ten steps, every other one needed (so no run of neighbours is needless: only single deletions)."""
    return _minimize([RESET] + [_req(i) for i in range(1, 11)], _needs(2, 4, 6, 8, 10))


@job("_minimize: deletes every step the divergence does not need")
def check_minimize_deletes() -> None:
    out = _scenario_alternate()
    assert _ids(out.requests) == [0, 2, 4, 6, 8, 10], _ids(out.requests)


edited("_minimize: deletes every step the divergence does not need", "no single-step deletion",
       lockstep_run, "_minimize",
       ("            candidate = best_requests[:i] + best_requests[i + 1:]\n            found = attempt(candidate)\n",
        "            found = None\n"))


@job("_minimize: keeps every step the divergence needs (a candidate that no longer diverges is rejected)")
def check_minimize_keeps_needed() -> None:
    out = _scenario_alternate()
    assert {2, 4, 6, 8, 10} <= set(_ids(out.requests)), _ids(out.requests)
    assert out.reason.startswith("response.ok:")


edited("_minimize: keeps every step the divergence needs (a candidate that no longer diverges is rejected)",
       "accepts a passing candidate", lockstep_run, "_minimize",
       ('        if divergence is None or _failure_kind(divergence["reason"]) != kind:\n            return None\n',
        '        if divergence is None:\n            return got, reason\n'
        '        if _failure_kind(divergence["reason"]) != kind:\n            return None\n'))


@job("_minimize: keeps the divergence's kind (a step whose deletion changes it stays)")
def check_minimize_same_kind() -> None:
    def oracle(rs):
        present = _all_ids(rs)
        if 6 not in present:
            return None
        if 4 not in present:
            return "state.tables.replica_values: row 1 differs"  # another divergence, not the one shrunk
        return "response.result.ok: true != false" if 2 in present else None

    out = _minimize([RESET] + [_req(i) for i in range(1, 7)], oracle)
    assert _ids(out.requests) == [0, 2, 4, 6] and out.reason.startswith("response.result.ok:"), \
        (_ids(out.requests), out.reason)


edited("_minimize: keeps the divergence's kind (a step whose deletion changes it stays)", "any divergence",
       lockstep_run, "_minimize",
       ('if divergence is None or _failure_kind(divergence["reason"]) != kind:', "if divergence is None:"))


@job("_failure_kind: a divergence after the last step is the same kind as one at a step; values do not count")
def check_failure_kind() -> None:
    kind = lockstep_run._failure_kind
    kinds = [kind("after the last step: state.tables.receipts: 1 != 2"), kind("state.tables.receipts: 3 != 4")]
    assert kinds == ["state.tables.receipts"] * 2, kinds
    assert kind("response.result.ok: true != false") != kind("state.tables.receipts: 3 != 4")


edited("_failure_kind: a divergence after the last step is the same kind as one at a step; values do not count",
       "prefix kept", lockstep_run, "_failure_kind",
       ('reason.removeprefix("after the last step: ")', "reason"))
edited("_failure_kind: a divergence after the last step is the same kind as one at a step; values do not count",
       "values count", lockstep_run, "_failure_kind", ('.split(":", 1)[0]', ""))


@job("_minimize: returns the steps as last replayed, with that replay's reason")
def check_minimize_returns_replayed() -> None:
    def oracle(rs):
        return f"response.result: diverged after {len(rs)} steps" if {2, 5} <= _all_ids(rs) else None

    out = _minimize([RESET] + [_req(i) for i in range(1, 6)], oracle)
    assert _ids(out.requests) == [0, 2, 5]
    assert out.reason == "response.result: diverged after 3 steps", out.reason
    assert all(s["model"] and s["impl"] for s in out.steps), "the steps are not those of a replay"


edited("_minimize: returns the steps as last replayed, with that replay's reason", "the first reason kept",
       lockstep_run, "_minimize", ("    return best\n", "    return best[0], reason\n"))


@job("_minimize: never deletes the first step (the reset)")
def check_minimize_keeps_reset() -> None:
    out = _minimize([RESET] + [_req(i) for i in range(1, 5)], _needs(3, 4))  # the oracle does not need it
    assert out.requests[0] is RESET or out.requests[0] == RESET, _ids(out.requests)
    assert all(r.get("op") == "reset" for r in (c.requests[0] for c in out.replays)), "a replay without its reset"


edited("_minimize: never deletes the first step (the reset)", "the reset deletable", lockstep_run, "_minimize",
       ("        while i >= 1 and budget.left():  # never the first step (the reset)",
        "        while i >= 0 and budget.left():"))


@job("_minimize: stops at MINIMIZE_REPLAYS replays (read at call time)")
def check_minimize_budget() -> None:
    scenario = [RESET] + [_req(i) for i in range(1, 21)]
    capped = _minimize(scenario, _needs(20), replays=6)
    assert len(capped.replays) <= 6, f"{len(capped.replays)} replays under a budget of 6"
    assert len(capped.requests) > 2, "the budget did not bind: the check proves nothing"
    free = _minimize(scenario, _needs(20))
    assert _ids(free.requests) == [0, 20] and len(free.replays) <= lockstep_run.MINIMIZE_REPLAYS


def _budget_never_spent():
    class Unbounded(lockstep_run._Budget):
        def left(self) -> bool:
            return True

    return Unbounded


mutant("_minimize: stops at MINIMIZE_REPLAYS replays (read at call time)", "budget ignored",
       lockstep_run, "_Budget", _budget_never_spent)
edited("_minimize: stops at MINIMIZE_REPLAYS replays (read at call time)", "budget copied at import",
       lockstep_run, "_minimize", ("_Budget(MINIMIZE_REPLAYS,", "_Budget(400,"))


@job("_minimize: never replays a candidate twice")
def check_minimize_no_repeats() -> None:
    delivery = _req(1, "delivery", frame={"opId": "d-1", "delivery": {"streamId": "s1", "sequence": 1},
                                          "projectId": "p1", "recordVersion": 1})
    # Deleting the delivery, then deleting it with later sequences (none) and versions (none) shifted: the
    # same candidate three times.
    out = _minimize([RESET, _req(5), delivery, _req(6)], _needs(1, 6))
    keys = [c.key for c in out.replays]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} replays repeated a candidate"
    assert _ids(out.requests) == [0, 1, 6]


edited("_minimize: never replays a candidate twice", "no memory", lockstep_run, "_minimize",
       ("        if key in tried:\n            return None\n", ""))


@job("_minimize: goes round again until nothing more goes")
def check_minimize_rounds() -> None:
    def oracle(rs):  # step 5 can go only once step 2 has gone (which a backward pass reaches after it)
        present = _all_ids(rs)
        if not {1, 8} <= present or (2 in present and 5 not in present):
            return None
        return "response.ok: true != false"

    out = _minimize([RESET] + [_req(i) for i in range(1, 9)], oracle)
    assert _ids(out.requests) == [0, 1, 8], _ids(out.requests)


edited("_minimize: goes round again until nothing more goes", "one round", lockstep_run, "_minimize",
       ("    while changed and budget.left():\n        changed = False\n",
        "    for _round in (1,):\n        changed = False\n"))


@job("_minimize: deletes a run of neighbours none of which goes alone")
def check_minimize_runs() -> None:
    def oracle(rs):  # 3, 4 and 5 go together or not at all (a begin, its page and its commit)
        present = _all_ids(rs)
        together = {3, 4, 5} <= present or not {3, 4, 5} & present
        return "response.ok: true != false" if together and {1, 2, 6, 7, 8} <= present else None

    out = _minimize([RESET] + [_req(i) for i in range(1, 9)], oracle)
    assert _ids(out.requests) == [0, 1, 2, 6, 7, 8], _ids(out.requests)


edited("_minimize: deletes a run of neighbours none of which goes alone", "no runs", lockstep_run, "_minimize",
       ("        for size in (5, 4, 3, 2):", "        for size in ():"))


@job("_minimize: deletes needless nested requests, and an emptied duringFetch with them")
def check_minimize_nested() -> None:
    outer = _req(2, "page", duringFetch=[_req(100), _req(101), _req(102)])
    alone = _req(3, "page", duringFetch=[_req(103)])
    out = _minimize([RESET, _req(1), outer, alone, _req(4)], _needs(2, 3, 4, 101))
    assert _ids(out.requests) == [0, 2, 3, 4], _ids(out.requests)
    assert _ids(out.requests[1]["duringFetch"]) == [101], out.requests[1]
    assert "duringFetch" not in out.requests[2], out.requests[2]


edited("_minimize: deletes needless nested requests, and an emptied duringFetch with them", "nested kept",
       lockstep_run, "_minimize", ("            j = len(inner) - 1\n", "            j = -1\n"))
edited("_minimize: deletes needless nested requests, and an emptied duringFetch with them", "empty list kept",
       lockstep_run, "_minimize", ('                if not rest:\n                    del smaller["duringFetch"]\n', ""))


def _snapshot_oracle(rs) -> Optional[str]:
    """The commit refuses a snapshot whose begin, pages and commit name different projects; the divergence
    needs project p1 in it and the last read."""
    begin = next((r for r in rs if r["op"] == "begin"), None)
    commit = next((r for r in rs if r["op"] == "commit"), None)
    if begin is None or commit is None or 9 not in _all_ids(rs):
        return None
    listed = set(begin["frame"]["projectIds"])
    paged = {r["frame"]["projectId"] for r in rs if r["op"] == "page" and r["frame"]["attemptId"] == "a1"}
    committed = {v["projectId"] for v in commit["frame"]["versions"]}
    return "response.ok: true != false" if listed == paged == committed and "p1" in listed else None


@job("_minimize: takes a project out of a snapshot whole (begin, pages, commit)")
def check_minimize_project() -> None:
    requests = [RESET,
                _req(1, "begin", frame={"attempt": {"attemptId": "a1", "streamId": "s1"}, "projectIds": ["p1", "p2"]}),
                _req(2, "page", frame={"attemptId": "a1", "projectId": "p1"}),
                _req(3, "page", frame={"attemptId": "a1", "projectId": "p2"}),
                _req(4, "commit", frame={"attemptId": "a1", "versions": [{"projectId": "p1", "recordVersion": 0},
                                                                         {"projectId": "p2", "recordVersion": 0}]}),
                _req(9)]
    out = _minimize(requests, _snapshot_oracle)
    assert "p2" not in json.dumps(out.requests), out.requests
    assert _ids(out.requests) == [0, 1, 2, 4, 9]


mutant("_minimize: takes a project out of a snapshot whole (begin, pages, commit)", "no project removal",
       lockstep_run, "_without_project", lambda: lambda requests, begin_at, project: None)


def _delivery(i: int, sequence: int, project: Optional[str] = None, version: Optional[int] = None) -> dict:
    frame: dict = {"opId": f"d-{sequence}", "delivery": {"streamId": "s1", "sequence": sequence}}
    if project is not None:
        frame.update(projectId=project, recordVersion=version)
    return _req(i, "delivery", frame=frame)


def _stream_oracle(needed: int, *, from_sequence: int = 1) -> Oracle:
    """Deliveries must come in sequence from 1 and move each project's record version up by one from 1
    (anything else is refused alike on both sides: no divergence); the divergence needs delivery ``needed``
    at sequence ``from_sequence`` or later."""

    def oracle(rs):
        deliveries = [r["frame"] for r in rs if r["op"] == "delivery"]
        if [f["delivery"]["sequence"] for f in deliveries] != list(range(1, len(deliveries) + 1)):
            return None
        versions: dict = {}
        for f in deliveries:
            if "projectId" in f:
                if f["recordVersion"] != versions.get(f["projectId"], 0) + 1:
                    return None
                versions[f["projectId"]] = f["recordVersion"]
        bad = [f for r, f in zip([r for r in rs if r["op"] == "delivery"], deliveries) if r["id"] == needed]
        if not bad or bad[0]["delivery"]["sequence"] < from_sequence:
            return None
        return "response.result.materialization: installed != withheld"

    return oracle


@job("_minimize: deletes a delivery that only moved the cursor, the later sequences one down")
def check_minimize_cursor() -> None:
    out = _minimize([RESET] + [_delivery(i, i) for i in range(1, 6)], _stream_oracle(5))
    assert _ids(out.requests) == [0, 5], _ids(out.requests)
    assert out.requests[1]["frame"]["delivery"]["sequence"] == 1 and out.requests[1]["frame"]["opId"] == "d-1"


mutant("_minimize: deletes a delivery that only moved the cursor, the later sequences one down", "no renumbering",
       lockstep_run, "_consumed_sequence", lambda: lambda request: None)


@job("_minimize: deletes a link of a chain of deliveries to one project, its later record versions one down")
def check_minimize_chain() -> None:
    requests = [RESET, _delivery(1, 1, "p1", 1), _delivery(2, 2, "p1", 2), _delivery(3, 3, "p2", 1),
                _delivery(4, 4, "p1", 3)]
    out = _minimize(requests, _stream_oracle(4))
    assert _ids(out.requests) == [0, 4], _ids(out.requests)
    frame = out.requests[1]["frame"]
    assert (frame["delivery"]["sequence"], frame["recordVersion"]) == (1, 1), frame


mutant("_minimize: deletes a link of a chain of deliveries to one project, its later record versions one down",
       "no version shift", lockstep_run, "_delivered_version", lambda: lambda request: None)


@job("_minimize: cuts a fast-forward to its shortest failing head, never deleting one of its deliveries alone")
def check_minimize_fast_forward() -> None:
    quiet = frozenset(range(101, 141))
    requests = [RESET] + [_delivery(100 + n, n) for n in range(1, 41)] + [_delivery(200, 41)]
    out = _minimize(requests, _stream_oracle(200, from_sequence=11), quiet=quiet)
    assert _ids(out.requests) == [0, *range(101, 111), 200], _ids(out.requests)
    assert out.requests[-1]["frame"]["delivery"]["sequence"] == 11
    for candidate in out.replays:
        kept = [i for i in _ids(candidate.requests) if i in quiet]
        assert kept == list(range(101, 101 + len(kept))), f"a replay dropped a delivery from inside a fast-forward: {kept}"
        assert candidate.defer == set(quiet), "the fast-forward's checks were not deferred in a replay"


mutant("_minimize: cuts a fast-forward to its shortest failing head, never deleting one of its deliveries alone",
       "no head search", lockstep_run, "_quiet_runs", lambda: lambda requests, quiet: [])
edited("_minimize: cuts a fast-forward to its shortest failing head, never deleting one of its deliveries alone",
       "its deliveries deleted alone", lockstep_run, "_minimize",
       ('        while i >= 1 and budget.left():  # never the first step (the reset)\n'
        '            if best_requests[i].get("id") in quiet:',
        '        while i >= 1 and budget.left():  # never the first step (the reset)\n'
        '            if False:'))
edited("_minimize: cuts a fast-forward to its shortest failing head, never deleting one of its deliveries alone",
       "checks not deferred", lockstep_run, "_minimize",
       ("_replay_candidate(run, requests, quiet)", "_replay_candidate(run, requests, ())"))


@job("_minimize: a replay that raises or kills the driver drops it; the next replay gets a live one")
def check_minimize_dead_driver() -> None:
    def crash(candidate, impl) -> None:
        present = _all_ids(candidate)
        if 3 not in present:
            impl.alive = False
            raise RuntimeError("the adapter died")
        if 5 not in present:
            impl.alive = False  # answered, then died

    out = _minimize([RESET] + [_req(i) for i in range(1, 8)], _needs(1, 7), crash=crash)
    assert all(c.alive for c in out.replays), "a replay was sent to a dead driver"
    assert 3 in _ids(out.requests) and 5 not in _ids(out.requests), _ids(out.requests)
    assert out.run.discards == sum(1 for c in out.replays if not ({3, 5} <= _all_ids(c.requests))) >= 2


edited("_minimize: a replay that raises or kills the driver drops it; the next replay gets a live one",
       "kept after raising", lockstep_run, "_replay_candidate",
       ("    except Exception:\n        run.discard()\n        return None\n",
        "    except Exception:\n        return None\n"))
edited("_minimize: a replay that raises or kills the driver drops it; the next replay gets a live one",
       "kept when dead", lockstep_run, "_replay_candidate",
       ('    if getattr(impl, "alive", True) is False:\n        run.discard()\n', ""))

# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------


@pytest.fixture
def hypothesis_internals_restored(monkeypatch):
    """Whatever a mutant leaves patched in Hypothesis's internals is put back (and the constants cache
    emptied) after the test."""
    for owner, name in [(providers, "_get_local_constants"), *SHRINK_INTERNALS]:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    yield
    providers.CONSTANTS_CACHE.cache.clear()


@pytest.mark.parametrize("name", list(JOBS))
def test_job(name, hypothesis_internals_restored):
    """Each job of the machinery is done."""
    JOBS[name]()


@pytest.mark.parametrize("m", MUTANTS, ids=[f"{m.job} <- {m.name}" for m in MUTANTS])
def test_mutant_is_killed(m: Mutant, monkeypatch, hypothesis_internals_restored):
    """Undo the job (the mutant), and its check fails."""
    m.apply(monkeypatch)
    try:
        JOBS[m.job]()
    except AssertionError:
        return
    pytest.fail(f"the check of {m.job!r} passes with the mutant {m.name!r}: it does not test that job")


def test_every_job_has_a_mutant():
    assert {m.job for m in MUTANTS} == set(JOBS), set(JOBS) ^ {m.job for m in MUTANTS}
    names = [(m.job, m.name) for m in MUTANTS]
    assert len(names) == len(set(names))
