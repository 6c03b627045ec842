"""Python's cyclic garbage collector kept from walking the whole heap again and again while a search runs.

Models: nothing of a protocol. A search allocates millions of small values (states, tuples, the visited set's
entries) and keeps most of them to the end. CPython's collector counts allocations: every 700 net allocations
a young collection, every tenth of those a middle one, every tenth of those a full one (when the old generation
grew by a quarter since the last), and each full collection walks every object the search holds, to free
nothing: the values are acyclic. Measured on the projection lock's ``race`` bounds (``checker.bfs.check``,
compiled, 23,553 states): 3.6 to 4.6 s with the
collector as it is, 2.4 s without it, 2.7 s with full collections deferred as here; the migration's check
2.5 s against 1.9 s.

``full_collections_deferred()`` raises the third threshold for as long as it is entered: young and middle
collections still run, so a cycle a step makes and drops is still freed, but the heap the search keeps is not
walked over and over. On exit the thresholds are what they were (nesting restores each level's).

Leaves out on purpose: ``gc.disable()`` (a model that made a cycle per step would grow without bound) and
``gc.freeze()`` (it moves what exists now, not what the search allocates).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

#: The third generation's threshold inside ``full_collections_deferred``: a full collection after this many
#: middle ones (CPython's default is 10), about 70 million net allocations at the default first threshold.
DEFERRED_THRESHOLD = 1000


@contextmanager
def full_collections_deferred() -> Iterator[None]:
    """Young and middle collections as usual, full ones deferred (``DEFERRED_THRESHOLD``), until exit."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], max(before[2], DEFERRED_THRESHOLD))
    try:
        yield
    finally:
        gc.set_threshold(*before)
