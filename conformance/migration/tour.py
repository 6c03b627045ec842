"""The coverage tour: explicit examples that reach every required item, found on the model, then played for real.

Models: a small budget's coverage. Drawing alone, the ``check`` profile's 20 examples reach about nine tenths of
``coverage.REQUIRED`` (the rest need a fault at one step of a deep prelude: a backup edited after the result
recorded it, a recovery request edited before its rerun, a write between a request and its fence). So a profile
with a tour (``TOUR_PROFILES``) first searches the model alone: the run's own generation (``MigrationMachine``,
derandomized, ``SEARCH_EXAMPLES`` examples) against a second model in the real side's place, which costs no store
and no process; each example's moves are replayed on the model to learn the move at which each item is first
reached; a greedy cover then takes the fewest examples (each cut after the last move that reaches an item no
example taken before reaches) that reach every required item the search reached. Those are the tour: the run
plays them on both sides first, compared move by move like any example (a divergence is minimized and reported
the same way), then draws its budget as before.

Leaves out on purpose: items the search does not reach (the report lists them as unreached, as before), and
any cache of the tour (it is a function of the code: derandomized, found again by every run).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from envreplica.checker.progress import ProgressHook
from envreplica.conformance.migration.coverage import MigrationCoverage
from envreplica.conformance.migration.example import Example, World
from envreplica.conformance.migration.observe import Observation, Outcome
from envreplica.conformance.migration.sides import ModelSide, Move

#: The migration lockstep's run (``run.run_migration_lockstep``), which the tour's search runs on the model alone.
Search = Callable[..., Any]

#: The profiles that play a tour before their drawn examples.
TOUR_PROFILES = frozenset({"check", "dev"})
#: Examples the model-only search draws (the ``ci`` shape; about 6,500 model moves, a second or two).
SEARCH_EXAMPLES = 150


class _SecondModel(ModelSide):
    """A second model in the real side's place: the search's real side costs no store and no process."""

    def apply(self, move: Move) -> Outcome:  # type: ignore[override]
        return super().apply(move.action)

    def message(self, pid: int) -> str:
        return ""

    def close(self) -> None:
        pass


class _ModelWorld:
    """``world`` with a second model in the real side's place, and no property checks (the run checks them)."""

    check_properties = False

    def __init__(self, world: World) -> None:
        self.world = world

    def __getattr__(self, name: str) -> Any:
        return getattr(self.world, name)

    def real_side(self, read_only: bool) -> _SecondModel:
        return _SecondModel(self.world.cfg, silent=self.world.silent, allows=self.world.allows)


@dataclass(frozen=True)
class Tour:
    """The explicit examples a run plays first, and what the search found."""

    examples: tuple[tuple[Move, ...], ...]  # each example's moves, cut after the last one it is taken for
    reached: frozenset[str]  # the required items ("group: item") the tour reaches
    searched: int  # examples the search drew
    moves_searched: int  # model moves it took

    @property
    def moves(self) -> int:
        return sum(len(e) for e in self.examples)


def _first_reached(world: World, moves: Sequence[Move], required: dict[str, frozenset[str]]) -> dict[str, int]:
    """Each required item ``moves`` reach on the model, and the number of moves it takes to reach it first."""
    side = ModelSide(world.cfg, silent=world.silent, allows=world.allows)
    first: dict[str, int] = {}
    for i, move in enumerate(moves, 1):
        if not side.is_enabled(move.action):
            continue
        pre = side.st
        outcome = side.apply(move.action)
        coverage = MigrationCoverage()
        coverage.record(pre, move.action, world.mode_name(move.mode), outcome)
        for group, item, _ in coverage.rows():
            if item in required.get(group, frozenset()):
                first.setdefault(f"{group}: {item}", i)
    return first


def find_tour(world: World, required: dict[str, frozenset[str]], search: Search, examples: int = SEARCH_EXAMPLES,
              progress: Optional[ProgressHook] = None) -> Tour:
    """The tour for ``world``: the search's examples, the greedy cover of ``required``. ``search`` is the run's
    own generation (``run.run_migration_lockstep``, handed in by the run: this module is below it). ``progress``
    is told the search's examples as they go (``checker.progress.Tick``, noted as the tour's search)."""
    found: list[list[Move]] = []
    searching = None if progress is None else \
        (lambda tick: progress(replace(tick, note="searching the model for the coverage tour")))
    report = search("ci", max_examples=examples, shared=_ModelWorld(world), collect=found, tour=False,
                    progress=searching)
    reach = [(moves, _first_reached(world, moves, required)) for moves in found]
    chosen: list[tuple[Move, ...]] = []
    covered: set[str] = set()
    while True:
        best: Optional[tuple[int, int, int]] = None  # (new items, -cut, index)
        for index, (moves, first) in enumerate(reach):
            new = [at for item, at in first.items() if item not in covered]
            if new:
                candidate = (len(new), -max(new), index)
                best = candidate if best is None or candidate > best else best
        if best is None:
            break
        moves, first = reach[best[2]]
        cut = -best[1]
        chosen.append(tuple(moves[:cut]))
        covered |= {item for item, at in first.items() if at <= cut}
    return Tour(tuple(chosen), frozenset(covered), report.examples, report.moves)


def play(example: Example, moves: Sequence[Move]) -> None:
    """Play ``moves`` on both sides of ``example`` (those the model does not enable now are skipped)."""
    for move in moves:
        example.play(move)


__all__ = ["Observation", "SEARCH_EXAMPLES", "TOUR_PROFILES", "Tour", "find_tour", "play"]
