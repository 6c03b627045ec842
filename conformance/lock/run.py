"""Running the lock lockstep: its budget, ``run_lock_lockstep`` and its report, replay.

``run_lock_lockstep`` runs ``LockMachine`` for ``max_examples`` examples of ``steps`` rule calls each (counts,
never seconds), derandomized, with Hypothesis's shrinking; then ``minimize`` deletes the moves the divergence does
not need (spans, then single moves; ``MINIMIZE_REPLAYS`` replays at most), and the divergence comes back with
the moves left (``LockLockstepReport.divergence`` and ``trace``), numbered as the model names them.
``replay_moves`` plays a list of moves on a fresh example (the tests' fixed traces; a counterexample again).

An adapter that breaks stops the run where it broke, whether Hypothesis was generating or shrinking or
``minimize`` replaying: the report's ``adapter_failure`` names the first break (``LockMachine.broken``), also
when Hypothesis answers the stopped example with a verdict of its own (``FlakyStrategyDefinition``, when the
break cut short an example whose choices an earlier one had made and gone on from).

Leaves out on purpose: Hypothesis's example database (a run is a function of its budget and the code), and the
clock in any verdict (the seconds in the report are figures).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis.stateful import run_state_machine_as_test

from envreplica.checker.progress import ProgressHook, Tick
from envreplica.conformance.external import AdapterFailure
from envreplica.conformance.lock.coverage import LockCoverage
from envreplica.conformance.lock.forked import reap_all
from envreplica.conformance.lock.example import Divergence, Example, Move, NotEnabled, SideFactory, describe
from envreplica.conformance.lock.machine import BOUNDS, LockMachine
from envreplica.model import lock as ml

#: Rule calls per example: enough for two processes to go through a call each with a kill and a takeover.
STEPS_PER_EXAMPLE = 40
#: Replays ``minimize`` may make.
MINIMIZE_REPLAYS = 400


def lock_settings(max_examples: int, steps: int = STEPS_PER_EXAMPLE) -> hypothesis.settings:
    """Derandomized, no database, no deadline, quiet; generation and shrinking only."""
    return hypothesis.settings(max_examples=max_examples, stateful_step_count=steps, derandomize=True,
                               database=None, deadline=None, report_multiple_bugs=False,
                               phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
                               verbosity=Verbosity.quiet)


@dataclass
class LockLockstepReport:
    """What a run did: examples and moves (every example played, shrinking's replays included; minimization's
    not), coverage, seconds (a figure), and the divergence if one was found (minimized)."""

    examples: int = 0
    moves: int = 0
    seconds: float = 0.0
    coverage: LockCoverage = field(default_factory=LockCoverage)
    divergence: Optional[Divergence] = None
    adapter_failure: Optional[str] = None  # an adapter broke: nothing after it was judged (exit 2)
    found_after_examples: int = 0  # examples played when the divergence was found

    @property
    def moves_per_second(self) -> float:
        return self.moves / self.seconds if self.seconds > 0 else 0.0

    @property
    def passed(self) -> bool:
        return self.divergence is None

    @property
    def counterexample(self) -> tuple[Move, ...]:
        return self.divergence.moves if self.divergence is not None else ()

    def trace(self, cfg: Optional[ml.LockBounds] = None) -> list[str]:
        """The counterexample's moves, numbered, as the model names them (``cfg``: its bounds, when known)."""
        if self.divergence is None:
            return []
        return format_moves(self.counterexample, cfg) + [f"diverged ({self.divergence.key}): "
                                                         f"{self.divergence.reason}"]


def format_moves(moves: Sequence[Move], cfg: Optional[ml.LockBounds] = None) -> list[str]:
    """The moves, numbered, as the model names them (from ``cfg``'s first state; without it, as actions)."""
    lines = []
    st = ml.init(cfg) if cfg is not None else None
    for i, move in enumerate(moves, 1):
        if st is None or cfg is None:
            lines.append(f"{i:3}. {move.action}")
            continue
        lines.append(f"{i:3}. {describe(move, st)}")
        try:
            st = ml.next_state(cfg, st, move.action)[0]
        except Exception:  # a move the model does not take from here (the last of a divergence may be one)
            st = None
    return lines


def run_lock_lockstep(max_examples: int = 100, *, steps: int = STEPS_PER_EXAMPLE,
                      bounds: Sequence[ml.LockBounds] = BOUNDS, side: Optional[SideFactory] = None,
                      properties: bool = True, progress: Optional[ProgressHook] = None) -> LockLockstepReport:
    """Run the lockstep (see the module) over ``bounds``; the report. ``side``: the real side (default the
    harness's threads; ``sides.Side.PROCESSES.factory`` for processes forked from the harness;
    ``adapter_side.AdapterShared.side`` for an adapter); ``properties``: whether the model's
    properties are checked on its moves (``example.Example``). An adapter that breaks stops the run at once
    (``adapter_failure``: no shrinking, no minimization). ``progress`` is told the examples (of
    ``max_examples``; Hypothesis's shrinking runs more) and moves after each example."""
    report = LockLockstepReport()
    told = () if progress is None else \
        (lambda examples, moves: progress(Tick(examples, max_examples, "examples", moves, "moves")),)
    broken: list[AdapterFailure] = []  # the adapter's breaks, as the machine met them (the first is reported)
    machine = type("LockRun", (LockMachine,), {"coverage": report.coverage, "bounds": tuple(bounds),
                                               "side": staticmethod(side) if side is not None else None,
                                               "properties": properties, "progress": told, "broken": broken})
    started = time.perf_counter()
    try:
        run_state_machine_as_test(machine, settings=lock_settings(max_examples, steps))
    except AdapterFailure as broke:
        report.adapter_failure = str(broken[0] if broken else broke)
    except Exception as error:  # a divergence; or Hypothesis's verdict over an example a break stopped
        if broken:
            report.adapter_failure = str(broken[0])
        elif not isinstance(error, Divergence):
            raise
        else:
            report.found_after_examples = report.coverage.examples
            try:
                report.divergence = minimize(error, side=side, properties=properties)
            except AdapterFailure as broke:
                report.divergence = error
                report.adapter_failure = str(broke)
    finally:
        reap_all()  # the children of the examples a process side forked: none left a zombie
    report.seconds = time.perf_counter() - started
    report.examples = report.coverage.examples
    report.moves = report.coverage.moves
    return report


def replay_moves(cfg: ml.LockBounds, moves: Sequence[Move], side: Optional[SideFactory] = None,
                 properties: bool = True) -> Example:
    """Play ``moves`` on a fresh example of ``cfg`` (a ``Divergence`` if they part); the example, still open: the
    caller closes it."""
    example = Example(cfg, side, properties)
    try:
        for move in moves:
            example.play(move)
    except BaseException:
        example.close()
        raise
    return example


def _diverges(cfg: ml.LockBounds, moves: Sequence[Move], key: str, side: Optional[SideFactory] = None,
              properties: bool = True) -> Optional[Divergence]:
    """The divergence of kind ``key`` replaying ``moves`` gives (None: none, or another). A move the model does not
    enable where it comes is skipped (a deletion before it changed what its process does: a ``Step`` is "the
    process's next step", whichever it is), and the divergence carries the moves played, up to the one that
    parted: a deletion that leaves a process's later moves meaningless keeps what still makes sense of them."""
    example = Example(cfg, side, properties)
    try:
        for move in moves:
            try:
                example.play(move)
            except NotEnabled:
                continue
    except Divergence as d:
        return d if d.key == key else None
    finally:
        example.close()
    return None


def minimize(divergence: Divergence, replays: int = MINIMIZE_REPLAYS, side: Optional[SideFactory] = None,
             properties: bool = True) -> Divergence:
    """``divergence`` with the moves it does not need deleted: spans of moves (halves, quarters, ... single
    moves), kept deleted when the moves left (those the model still enables where they come: ``_diverges``) part
    the same way in fewer moves; at most ``replays`` replays."""
    cfg, best = divergence.cfg, divergence
    if cfg is None:
        return divergence
    width = max(1, len(best.moves) // 2)
    while width >= 1 and replays > 0:
        start, progressed = 0, False
        while start < len(best.moves) - 1 and replays > 0:
            moves = best.moves[:start] + best.moves[start + width:]
            if len(moves) < len(best.moves) and moves:
                replays -= 1
                found = _diverges(cfg, moves, best.key, side, properties)
                if found is not None and len(found.moves) < len(best.moves):
                    best, progressed = found, True
                    continue
            start += 1
        if not progressed:
            width //= 2
    return best
