"""What our lock's passing lockstep run shows, on either side (``tests/test_lock_lockstep.py``, the threads';
``tests/test_lock_lockstep_processes.py``, real processes): the two sides are held to the same coverage.
"""

from __future__ import annotations

from typing import Any


def assert_passes(run: Any, examples: int) -> None:
    """``run`` (a ``run_lock_lockstep`` report) agreed with the model over at least ``examples`` examples, ten moves
    each on average."""
    assert run.passed, "\n".join(run.trace(run.divergence.cfg))
    assert run.examples >= examples and run.moves >= 10 * examples


def assert_full_coverage(run: Any) -> None:
    """``run`` reached every required item (every "sometimes" item of ``spec.lock``, every step the model takes as
    a move, every answer the fixed variant gives), each "sometimes" item at least twice, and judged a zombie and a
    reused pid."""
    assert run.coverage.unreached() == []
    sometimes = run.coverage.sometimes()
    assert all(count >= 2 for count in sometimes.values()), sometimes
    assert run.coverage.counts["zombie judged"] and run.coverage.counts["reused pid judged"]
