"""Hypothesis's shrinking capped in test-function calls: every lockstep's (the replica's and the migration's).

``shrink_budget(calls, guard_seconds)`` caps each shrink Hypothesis makes within the block at ``calls`` calls of
the test function (each replays an example on the implementation), counted from the shrink's start, and turns
the explain phase off; ``guard_seconds`` only stops a hang. A count, not seconds: a busy machine shrinks to the
same example as an idle one. Each lockstep holds its own budget (``replica.run.SHRINK_CALLS``,
``migration.run.SHRINK_CALLS``) and passes it here when it runs.

Leaves out on purpose: the lock lockstep, which shrinks under Hypothesis's own limits (docs/architecture.md,
"A folder per protocol", says why).

Hypothesis internals (``Shrinker.shrink``, ``Shrinker.explain``, ``ConjectureRunner.test_function``,
``engine.MAX_SHRINKING_SECONDS``, ``StopShrinking``): there is no API for a budget in calls. A version without
them shrinks under its own limits (``shrink_budget_applies()`` says which; a test holds the installed one to it).
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def shrink_budget(calls: int, guard_seconds: float):
    """Cap each of Hypothesis's shrinks at ``calls`` test-function calls, and its time at ``guard_seconds``.

    ``Shrinker.shrink`` marks on its engine the call count at which to stop; the engine's
    ``test_function`` raises ``StopShrinking`` (which ``shrink`` catches: the best example so far stands)
    once it is reached. Both are Hypothesis internals: a version without them shrinks under its own
    limits (``shrink_budget_applies`` says whether this one is capped; a test holds the pinned one to it).
    """
    from hypothesis.internal.conjecture import engine, shrinker

    if not shrink_budget_applies():
        yield
        return
    old_seconds = engine.MAX_SHRINKING_SECONDS
    old_shrink = shrinker.Shrinker.shrink
    old_explain = shrinker.Shrinker.explain
    old_test = engine.ConjectureRunner.test_function

    def shrink(self) -> None:
        # Shrinks nest (a pass may shrink a part with a shrinker of its own): the outermost one arms.
        outermost = getattr(self.engine, "_envreplica_stop_at", None) is None
        if outermost:
            self.engine._envreplica_stop_at = self.engine.call_count + calls
        try:
            old_shrink(self)
        finally:
            if outermost:
                self.engine._envreplica_stop_at = None

    def explain(self) -> None:  # the explain phase (which parts of a failure vary freely): not run, not capped
        return None

    def test_function(self, data) -> None:
        stop_at = getattr(self, "_envreplica_stop_at", None)
        if stop_at is not None and self.call_count >= stop_at:
            raise shrinker.StopShrinking
        old_test(self, data)

    # Hypothesis internals, patched for the duration of the block (there is no API for this): the
    # method-assign ignores say so; the cap is only ever added to time.perf_counter(), so a float serves.
    shrinker.Shrinker.shrink = shrink  # type: ignore[method-assign]
    shrinker.Shrinker.explain = explain  # type: ignore[method-assign]
    engine.ConjectureRunner.test_function = test_function  # type: ignore[method-assign]
    engine.MAX_SHRINKING_SECONDS = guard_seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        shrinker.Shrinker.shrink = old_shrink  # type: ignore[method-assign]
        shrinker.Shrinker.explain = old_explain  # type: ignore[method-assign]
        engine.ConjectureRunner.test_function = old_test  # type: ignore[method-assign]
        engine.MAX_SHRINKING_SECONDS = old_seconds


def shrink_budget_applies() -> bool:
    """Whether this Hypothesis has the internals ``shrink_budget`` caps."""
    from hypothesis.internal.conjecture import engine, shrinker

    return (hasattr(engine, "MAX_SHRINKING_SECONDS") and hasattr(shrinker, "StopShrinking")
            and callable(getattr(shrinker.Shrinker, "shrink", None))
            and callable(getattr(shrinker.Shrinker, "explain", None))
            and callable(getattr(engine.ConjectureRunner, "test_function", None)))
