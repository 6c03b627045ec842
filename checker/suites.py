"""A protocol's bounds suite, checked bounds by bounds: what ``checker.lock`` and ``checker.migration`` share.

Models: the record of one bounds' check (the search, the bounded-liveness check, the shortest path to a stuck
state), a suite's records with its "sometimes" properties counted over all its bounds, and the loop that runs a
suite's bounds in order with their progress told as one count. Each protocol's module names its own record
(``checker.lock.LockRun``, ``checker.migration.MigrationRun``) with its spec's "sometimes" properties, and how one
bounds is checked (``run``).

Leaves out on purpose: the replica's suites (``checker.run``: its search is parallel, its bounds checked without
a liveness closure).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, ClassVar, Generic, Optional, Protocol, TypeVar

from envreplica.checker.bfs import Result, Violation
from envreplica.checker.liveness import Liveness
from envreplica.checker.progress import ProgressHook, suite_tick

__all__ = ["BoundsRun", "Named", "SuiteRun", "run_each"]


class Named(Protocol):
    """A protocol's bounds, or one of its properties: what the records read of it."""

    @property
    def name(self) -> str: ...


B = TypeVar("B", bound=Named)
S = TypeVar("S")
R = TypeVar("R", bound="BoundsRun[Any, Any]")


@dataclass
class BoundsRun(Generic[B, S]):
    """A check of one bounds: the search, and the liveness check (None when the search stopped early)."""

    #: The protocol's "sometimes" properties (its spec's ``SOMETIMES``), named by the protocol's subclass.
    SOMETIMES: ClassVar[tuple[Named, ...]] = ()

    bounds: B
    result: Result
    liveness: Optional[Liveness[S]]
    stuck: Optional[Violation]  # the shortest path to a stuck state
    seconds: float

    @property
    def missed(self) -> list[str]:
        """The "sometimes" properties never witnessed at these bounds."""
        return [p.name for p in self.SOMETIMES if p.name not in self.result.witnessed]

    @property
    def safe(self) -> bool:
        """No invariant or step property violated, and no reached state is stuck."""
        return not self.result.violations and self.liveness is not None and self.liveness.ok


@dataclass
class SuiteRun(Generic[R]):
    """A bounds suite: each bounds' run; "sometimes" properties count when witnessed in any of them."""

    #: The protocol's "sometimes" properties, as its ``BoundsRun``'s.
    SOMETIMES: ClassVar[tuple[Named, ...]] = ()

    runs: list[R]

    @property
    def missed(self) -> list[str]:
        """The "sometimes" properties witnessed at none of the suite's bounds."""
        return [p.name for p in self.SOMETIMES if all(p.name in r.missed for r in self.runs)]

    @property
    def ok(self) -> bool:
        return all(r.safe for r in self.runs) and not self.missed

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)

    @property
    def states(self) -> int:
        return sum(r.result.states for r in self.runs)


def run_each(bounds: tuple[B, ...], run: Callable[[B, Optional[Callable[[int, int, str], None]]], R],
             stop_on_first: bool = False, progress: Optional[ProgressHook] = None) -> list[R]:
    """``run`` over each bounds of a suite, in order (with ``stop_on_first``: up to the first bounds that fails).
    ``progress`` is told the states reached so far, over the suite's bounds together, and which bounds and phase
    it is at (``run``'s second argument, its ``progress(states, depth, phase)``)."""
    runs: list[R] = []
    for i, b in enumerate(bounds):
        before = sum(r.result.states for r in runs)
        where = f"bounds {b.name} ({i + 1}/{len(bounds)})"
        hook = None if progress is None else partial(suite_tick, progress, before, where)
        runs.append(run(b, hook))
        if stop_on_first and not runs[-1].safe:
            break
    return runs
