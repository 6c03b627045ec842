"""Python's cyclic garbage collector kept from walking the whole heap again and again while a check runs.

Models: nothing of a protocol. A search allocates millions of small values (states, tuples, the visited set's
entries) and keeps most of them to the end; a lockstep keeps its examples, its model's states and its traces.
CPython's collector counts allocations: every 700 net allocations a young collection, every tenth of those a
middle one, every tenth of those a full one (once the old generation grew by a quarter since the last), and each
full collection walks every object the run holds, to free nothing: the values are acyclic. Measured compiled on
this 2-core machine, with the collector as it is against full collections deferred as here:

* the projection lock's ``race`` bounds (``checker.bfs.check``, 23,553 states): 3.6 to 4.6 s against 2.7 s
  (2.4 s with the collector off);
* the migration's model check (``envreplica check --protocol migration``): 2.5 s against 1.9 s;
* the replica's lockstep at the gate's ``ci`` profile: 25.5 and 26.4 s against 22.5 and 24.0 s.

``checker.bfs.check`` and ``checker.liveness.stuck_states`` run inside ``full_collections_deferred()``, and so
does every command (``cli.main.main``). It raises the third threshold for as long as it is entered: young and
middle collections still run, so a cycle a step makes and drops is still freed, but what the run keeps is not
walked over and over. On exit the thresholds are what they were (nesting restores each level's).

What it cannot fix is a cycle through what a check kept: freed only by a full collection, it stays until one
comes, and that one walks it all (3 s after the lock's suite, inside whatever ran next, while
``checker.bfs`` kept a closure whose environment held itself and the model). Checks leave none:
``tests/test_collector.py`` holds each protocol's check to that.

Leaves out on purpose: ``gc.disable()`` (a run that made a cycle per step would grow without bound) and
``gc.freeze()`` (it moves what exists now, not what the run allocates).
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
