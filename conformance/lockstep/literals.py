"""The literals Hypothesis mixes into the lockstep's draws, pinned to envreplica's own.

Hypothesis (6.13x and later) draws, now and then, a literal of a "local"
module: every int, float, bytes and str constant in the source of each
module in ``sys.modules`` that is not a test file, a third-party package or
the standard library. Those literals are how the lockstep finds some bugs: the
lone surrogates and the odd key names in the implementation's own checks are
drawn because the source holds them. But the pool is whatever this process
happened to import before the run: the same derandomized ``ci`` run drew
different examples (and shrank a catch to a different length) after another
test file had imported the adapter module, or in a pytest-xdist worker that
had run other files first.

``pinned()`` replaces that pool, for the duration of one run, with a fixed one:
the literals of every module of the ``envreplica`` package, read from the
source files (imported or not) in path order. So the examples of a ``ci`` run
are a function of the code alone, in any process and any test order; a user's
own modules add nothing to the pool (their literals are not the contract's).

Hypothesis internals (``providers._get_local_constants``,
``providers.CONSTANTS_CACHE``, ``constants_ast._constants_from_source``): there
is no API to choose the pool. A version without them draws from its own pool
(``applies()`` says which; a test holds the installed version to it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The import package's subpackages, one per top-level folder of the repository.
PACKAGES = ("spec", "model", "checker", "impl", "conformance", "cli", "report", "reliability")


def applies() -> bool:
    """Whether the installed Hypothesis has the internals ``pinned`` replaces."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal import constants_ast
    except ImportError:  # pragma: no cover - a Hypothesis before local constants
        return False
    return all(hasattr(providers, name) for name in ("_get_local_constants", "CONSTANTS_CACHE")) \
        and hasattr(constants_ast, "_constants_from_source")


def source_files() -> list[Path]:
    """Every ``.py`` file of the ``envreplica`` package, in path order."""
    files: set[Path] = set()
    for name in PACKAGES:
        spec = importlib.util.find_spec(f"envreplica.{name}")
        for root in (spec.submodule_search_locations or ()) if spec is not None else ():
            files.update(p.resolve() for p in Path(root).rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(files)


@functools.cache
def own_constants() -> Any:
    """The pool: the literals of ``source_files()``, in Hypothesis's sorted sets (a deterministic order)."""
    from hypothesis.internal.constants_ast import Constants, _constants_from_source
    from hypothesis.internal.floats import float_to_int
    from sortedcontainers import SortedSet

    pool = Constants(integers=SortedSet(), floats=SortedSet(key=float_to_int), bytes=SortedSet(),
                     strings=SortedSet())
    for path in source_files():
        try:
            found = _constants_from_source(path.read_bytes(), limit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # what Hypothesis skips too
            continue
        for kind in ("integers", "floats", "bytes", "strings"):
            getattr(pool, kind).update(getattr(found, kind))
    return pool


@contextlib.contextmanager
def pinned() -> Iterator[None]:
    """Within the block, Hypothesis draws local literals from ``own_constants()`` only."""
    if not applies():
        yield
        return
    from hypothesis.internal.conjecture import providers

    pool = own_constants()
    old = providers._get_local_constants
    # The cache of permitted constants per choice type holds the pool it was computed from: cleared on the
    # way in and out (it is per thread; the lockstep runs in this one).
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = lambda: pool
    try:
        yield
    finally:
        providers._get_local_constants = old
        providers.CONSTANTS_CACHE.cache.clear()
