"""The literals Hypothesis mixes into a lockstep's draws, pinned to envreplica's own (every lockstep's: the replica's
and the migration's run under ``pinned()``).

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
    """Every ``.py`` file of the ``envreplica`` package, in path order.

    Its subpackages are the folders beside ``conformance`` (the repository's top-level folders in an editable
    install, ``site-packages/envreplica`` otherwise) that import as ``envreplica.<folder>``."""
    root = Path(__file__).resolve().parents[1]
    files: set[Path] = set()
    for folder in root.iterdir():
        spec = importlib.util.find_spec(f"envreplica.{folder.name}") if (folder / "__init__.py").is_file() else None
        if spec is not None and [Path(p).resolve() for p in spec.submodule_search_locations or ()] == [folder]:
            files.update(folder.rglob("*.py"))
    return sorted(files)


@functools.cache
def own_constants() -> Any:
    """The pool: the literals of ``source_files()``, in Hypothesis's sorted sets (a deterministic order)."""
    from hypothesis.internal.constants_ast import Constants, _constants_from_source
    from hypothesis.internal.floats import float_to_int
    from sortedcontainers import SortedSet

    pool = Constants(integers=SortedSet(), floats=SortedSet(key=float_to_int), bytes=SortedSet(),
                     strings=SortedSet())
    for path in source_files():  # envreplica's own sources: they parse (Hypothesis's own read may fail on others)
        found = _constants_from_source(path.read_bytes(), limit=True)
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
