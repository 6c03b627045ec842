"""Running the migration lockstep: profiles, ``run_migration_lockstep`` and its report, minimization, replay.

``run_migration_lockstep`` runs ``MigrationMachine`` under a profile's budget (``PROFILE_EXAMPLES`` examples
of ``STEPS_PER_EXAMPLE`` rule calls: counts, never seconds), with Hypothesis's shrinking capped in calls
(``SHRINK_CALLS``: ``conformance.shrinking``) and its literals pinned (``conformance.literals``); then ``minimize``
deletes needless moves from the shrunk example, and the moves left are replayed with every invocation run
in this process where that keeps the divergence (``MINIMIZE_REPLAYS`` replays in all). The report says what
was run, what was reached (``MigrationCoverage``), how fast, and the divergence as a numbered trace (written
as JSON lines with ``out_dir``). ``replay_moves`` replays a trace on fresh sides.

An adapter that breaks (``adapter_side``: ``AdapterFailure``, which Hypothesis lets through) stops the run
where it broke, whether Hypothesis was generating, shrinking, or minimization replaying: the report's
``adapter_failure`` names the move and what broke (exit 2 from the command line), nothing is shrunk or
replayed after it, and a divergence seen before it is named beside it (``key`` ``"harness"``).

Leaves out on purpose: Hypothesis's example database (a run is a function of its profile and the code), and
the clock in any verdict (the seconds in the report are figures).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis.stateful import run_state_machine_as_test

from envreplica.checker.progress import ProgressHook, Tick
from envreplica.conformance import hermetic, literals
from envreplica.conformance.external import AdapterFailure
from envreplica.conformance.migration.coverage import REQUIRED, MigrationCoverage
from envreplica.conformance.migration.example import Divergence, Example, Shared, World, replay_moves
from envreplica.conformance.migration.findings import finding_of
from envreplica.conformance.migration.invocations import HarnessError, Mode
from envreplica.conformance.migration.machine import MigrationMachine
from envreplica.conformance.migration.sides import Move
from envreplica.conformance.migration.tour import TOUR_PROFILES, Tour, find_tour, play
from envreplica.conformance.migration.traces import format_moves, itf_path_of, write_trace
from envreplica.conformance.shrinking import shrink_budget
from envreplica.model import migration as mm

#: Examples per profile. ``check`` is ``envreplica check``'s (``make check``): sized to finish in the background
#: stage within the time the replica's lockstep takes in the foreground (measured: ``make check`` within 10 %
#: of its time without it, docs/migration.md); ``ci`` is the tests' (every ``REQUIRED`` coverage item
#: reached, the rarest about ten times); ``nightly`` runs fresh interpreters too.
PROFILE_EXAMPLES = {"dev": 20, "check": 20, "ci": 300, "nightly": 2000}
#: Rule calls per example, after the prelude and its scene (which take an example deep): short examples, so
#: that a budget runs many preludes.
STEPS_PER_EXAMPLE = 25
#: How invocations run, per profile (``Mode``), and the share of each in percent.
PROFILE_MODES: dict[str, tuple[tuple[Mode, int], ...]] = {
    "dev": ((Mode.THREAD, 70), (Mode.FORK, 30)),
    "check": ((Mode.THREAD, 85), (Mode.FORK, 15)),
    "ci": ((Mode.THREAD, 70), (Mode.FORK, 30)),
    "nightly": ((Mode.THREAD, 60), (Mode.FORK, 35), (Mode.EXEC, 5)),
}
#: Test-function calls Hypothesis may make shrinking one failure (each replays an example for real).
SHRINK_CALLS = 40
#: Replays ``minimize`` may make (deleting moves, then running the invocations in this process).
MINIMIZE_REPLAYS = 150


def migration_settings(profile: str = "ci", *, max_examples: Optional[int] = None,
                       step_count: Optional[int] = None) -> hypothesis.settings:
    """The lockstep's Hypothesis settings for a profile: derandomized, no database, no deadline, no target
    phase, the explain phase off (it runs unbudgeted), quiet (the report carries the trace)."""
    return hypothesis.settings(
        max_examples=max_examples if max_examples is not None else PROFILE_EXAMPLES.get(profile, 20),
        stateful_step_count=step_count or STEPS_PER_EXAMPLE,
        derandomize=True, database=None, deadline=None, report_multiple_bugs=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)


@dataclass
class MigrationLockstepReport:
    """The outcome of one ``run_migration_lockstep``."""

    ok: bool
    examples: int  # examples run (generation and shrinking)
    moves: int  # moves taken by both sides
    seconds: float
    coverage: MigrationCoverage
    unavailable: list[str] = field(default_factory=list)  # coverage items this machine cannot do, and why
    failure: Optional[str] = None  # the minimized trace, readable, with the divergence
    divergence: Optional[str] = None  # the one-line reason
    key: Optional[str] = None  # the kind of divergence
    shrunk_moves: Optional[int] = None  # moves of the minimized trace
    found_moves: Optional[int] = None  # moves of the first failing example
    found_after_examples: Optional[int] = None  # examples run when it appeared (before shrinking)
    hypothesis_moves: Optional[int] = None  # moves after Hypothesis's shrinking
    trace_path: Optional[Path] = None
    profile: str = "ci"
    #: the finding the divergence is (``protocol.FINDING_FIXES``): the trace replays clean on the model with that
    #: one fix left out, so the implementation lacks it ("F4: ...")
    finding: Optional[str] = None
    #: the minimized trace, move by move: what both answered (``lines``) and, at a state divergence, both
    #: observations (``records``)
    lines: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    tour_examples: int = 0  # explicit examples of the coverage tour played first (``tour``), among ``examples``
    tour_moves: int = 0  # their moves, among ``moves``
    #: the adapter broke (``AdapterFailure``): where and what, one line; the run stopped there (key "harness")
    adapter_failure: Optional[str] = None

    @property
    def moves_per_second(self) -> float:
        return self.moves / self.seconds if self.seconds else 0.0

    @property
    def itf_path(self) -> Optional[Path]:
        """The ITF trace written beside ``trace_path`` (``traces.write_itf``), when there is one."""
        path = itf_path_of(self.trace_path) if self.trace_path is not None else None
        return path if path is not None and path.exists() else None


class _Run:
    """What one run shares across its examples: the sides' shared parts, counts, coverage, the failure."""

    def __init__(self, profile: str, modes: Sequence[tuple[Mode, int]], shared: World,
                 collect: Optional[list[list[Move]]] = None, progress: Optional[ProgressHook] = None,
                 budget: Optional[int] = None) -> None:
        self.profile = profile
        #: told the examples and moves after each example (``budget``: the examples Hypothesis generates, the
        #: tour's added once it is known; shrinking runs more)
        self.progress = progress
        self.budget = budget
        self.collect = collect  # each example's moves, appended as it ends (the tour's search)
        self.modes = list(modes)
        self.shared = shared
        self.examples = 0
        self.moves = 0
        self.coverage = MigrationCoverage()
        self.failure: Optional[tuple[list[Move], str, str]] = None  # (moves, key, reason) of the last failure
        self.first: Optional[int] = None  # moves of the first failing example
        self.first_example: Optional[int] = None  # examples run when the first failure appeared

    def swarm_available(self, kind: str) -> bool:
        return self.shared.swarm_available(kind)

    def mode(self, pick: int) -> Mode:
        for mode, share in self.modes:
            if pick < share:
                return mode
            pick -= share
        return self.modes[-1][0]

    def new_example(self, read_only: bool) -> Example:
        self.examples += 1
        return Example(self.shared, read_only=read_only, on_move=None if self.progress is None else self._moved)

    def _moved(self, moves: int) -> None:
        """The example being played has taken ``moves`` moves: told to ``progress`` (an example may take seconds
        through an adapter)."""
        self._tick(self.moves + moves)

    def end_example(self, example: Example) -> None:
        if self.collect is not None:
            self.collect.append(list(example.moves))
        self.moves += len(example.moves)
        self.coverage.merge(example.coverage)
        example.close()
        self._tick(self.moves)

    def _tick(self, moves: int) -> None:
        if self.progress is not None:
            shrinking = self.first_example is not None
            note = f"shrinking the divergence first seen at example {self.first_example:,}" if shrinking else ""
            self.progress(Tick(self.examples, None if shrinking else self.budget, "examples", moves, "moves",
                               note=note))

    def note_failure(self, example: Example, error: Divergence) -> None:
        self.failure = (list(example.moves), error.key, error.reason)
        if self.first is None:
            self.first, self.first_example = len(example.moves), self.examples


def run_migration_lockstep(profile: str = "ci", *, max_examples: Optional[int] = None,
                           step_count: Optional[int] = None, modes: Optional[Sequence[tuple[Mode, int]]] = None,
                           out_dir: Optional[Path] = None, shared: Optional[World] = None,
                           shrink_calls: Optional[int] = None, minimize_replays: Optional[int] = None,
                           tour: Optional[bool] = None, collect: Optional[list[list[Move]]] = None,
                           progress: Optional[ProgressHook] = None) -> MigrationLockstepReport:
    """Hold ``impl.paired`` (or ``shared``'s implementation: an ``AdapterShared``) to ``model.migration`` for
    ``profile``'s budget, a failure shrunk within ``shrink_calls`` and ``minimize_replays`` (default
    ``SHRINK_CALLS`` and ``MINIMIZE_REPLAYS``, read when it runs); the report. ``tour`` (default: the profile's,
    ``tour.TOUR_PROFILES``) plays the coverage tour first; ``collect`` gets each example's moves; ``progress`` is
    told the examples and moves after each example, then each replay of the minimization. Hermetic: this
    process's ``ENVREPLICA_*`` variables are set aside while it runs (``conformance.hermetic``)."""
    settings = migration_settings(profile, max_examples=max_examples, step_count=step_count)
    with hermetic.scrubbed_environ():  # thread invocations read this process's environment: none of the caller's
        return _lockstep(profile, settings=settings, modes=modes, out_dir=out_dir, shared=shared,
                         shrink_calls=shrink_calls, minimize_replays=minimize_replays, tour=tour, collect=collect,
                         progress=progress)


def _lockstep(profile: str, *, settings: hypothesis.settings, modes: Optional[Sequence[tuple[Mode, int]]],
              out_dir: Optional[Path], shared: Optional[World], shrink_calls: Optional[int],
              minimize_replays: Optional[int], tour: Optional[bool],
              collect: Optional[list[list[Move]]],
              progress: Optional[ProgressHook] = None) -> MigrationLockstepReport:
    own = shared is None
    shared = Shared() if shared is None else shared
    run = _Run(profile, modes or getattr(shared, "modes", None) or PROFILE_MODES.get(profile, PROFILE_MODES["ci"]),
               shared, collect, progress, settings.max_examples)
    machine = MigrationMachine.bind(run)
    started = time.perf_counter()
    error: Optional[BaseException] = None
    played: Optional[Tour] = None
    broke: Optional[AdapterFailure] = None
    try:
        try:
            if tour if tour is not None else profile in TOUR_PROFILES:
                played = _play_tour(run)
            with shrink_budget(SHRINK_CALLS if shrink_calls is None else shrink_calls, 600.0), literals.pinned():
                run_state_machine_as_test(machine, settings=settings)
        except Exception as exc:  # a divergence, or the harness failed
            error = exc
        except AdapterFailure as failure:  # the adapter broke: nothing after it is judged, nothing shrunk
            broke = failure
        report = MigrationLockstepReport(ok=error is None and broke is None, examples=run.examples, moves=run.moves,
                                         seconds=0.0, coverage=run.coverage, profile=profile)
        if played is not None:
            report.tour_examples, report.tour_moves = len(played.examples), played.moves
        if shared.read_only_problem is not None:
            report.unavailable.append(f"fault: read-only, fault: writable ({shared.read_only_problem})")
        report.unavailable += shared.unavailable
        if error is not None:
            try:
                _explain(report, run, error, out_dir, minimize_replays)
            except AdapterFailure as failure:  # broke while minimization replayed the divergence
                broke = failure
        if broke is not None:
            _adapter_broke(report, run, broke)
        report.seconds = time.perf_counter() - started
        return report
    finally:
        if own:
            shared.close()


def _play_tour(run: _Run) -> Tour:
    """Find the coverage tour on the model (``tour.find_tour``) and play it on both sides, example by example."""
    found = find_tour(run.shared, getattr(run.shared, "required", REQUIRED), run_migration_lockstep,
                      progress=run.progress)
    if run.budget is not None:
        run.budget += len(found.examples)
    for moves in found.examples:
        example = run.new_example(read_only=any(isinstance(m.action, mm.ReadOnly) for m in moves))
        try:
            play(example, moves)
        except Divergence as e:
            run.note_failure(example, e)
            raise
        finally:
            run.end_example(example)
    return found


def _adapter_broke(report: MigrationLockstepReport, run: _Run, broke: AdapterFailure) -> None:
    """The report of a run the adapter stopped: no verdict, the move that broke and what broke; a divergence
    seen before it, named (its moves were not minimized: that needs the adapter)."""
    text = str(broke)
    if run.failure is not None:
        moves, key, reason = run.failure
        text += f" (a divergence was seen before it broke, not minimized: {key}: {reason})"
    report.ok = False
    report.key = "harness"
    report.adapter_failure = report.divergence = text
    report.failure = text
    report.finding = None
    report.lines, report.records, report.trace_path = [], [], None


def _explain(report: MigrationLockstepReport, run: _Run, error: BaseException, out_dir: Optional[Path],
             replays: Optional[int] = None) -> None:
    if run.failure is None or not isinstance(error, Divergence):
        report.divergence = f"{type(error).__name__}: {error}"
        report.key = "harness" if isinstance(error, HarnessError) else type(error).__name__
        report.failure = report.divergence
        return
    moves, key, reason = run.failure
    report.found_moves, report.hypothesis_moves = run.first, len(moves)
    report.found_after_examples = run.first_example
    moves, reason, lines, records = minimize(run.shared, moves, key, reason, replays, run.progress)
    report.key, report.divergence, report.shrunk_moves = key, reason, len(moves)
    report.lines, report.records = list(lines), list(records)
    report.finding = finding_of(run.shared, moves)
    header = f"migration lockstep divergence ({key}), shrunk to {len(moves)} moves:"
    if report.finding:
        header = f"{report.finding}\n{header}"
    report.failure = format_moves(moves, lines, reason, header=header)
    if out_dir is not None:
        report.trace_path = write_trace(out_dir, "migration-lockstep", moves, records, reason,
                                        {"key": key, "moves": len(moves), "finding": report.finding},
                                        world=run.shared)  # and its ITF beside it


def without(moves: Sequence[Move], drop: Iterable[int]) -> list[Move]:
    """``moves`` without those at the indices ``drop``: an invocation dropped takes its steps and crash with it,
    and the invocations after it are renumbered (an invocation's number is its place among them)."""
    drop = set(drop)
    number: dict[int, int] = {}
    old = new = 0
    for i, move in enumerate(moves):
        if isinstance(move.action, mm.Invoke):
            if i not in drop:
                number[old] = new
                new += 1
            old += 1
    out = []
    for i, move in enumerate(moves):
        action = move.action
        if i in drop:
            continue
        if isinstance(action, (mm.Step, mm.Crash)):
            if action.pid not in number:
                continue
            move = replace(move, action=type(action)(number[action.pid]))
        out.append(move)
    return out


def minimize(shared: World, moves: list[Move], key: str, reason: str, replays: Optional[int] = None,
             progress: Optional[ProgressHook] = None) -> tuple[list[Move], str, list[str], list[dict[str, Any]]]:
    """Delete the moves a divergence of kind ``key`` does not need (and bring the world's moves just before the
    last one sooner, where the divergence then comes sooner), then run its invocations in this process where that keeps it; within ``replays`` replays (default ``MINIMIZE_REPLAYS``), each told to ``progress``.
    The moves, the reason, and what each move answered (lines, records) on the last replay that diverged."""
    total = MINIMIZE_REPLAYS if replays is None else replays
    budget = [total]
    best: tuple[list[Move], str, list[str], list[dict[str, Any]]] = (moves, reason, [], [])

    def attempt(candidate: list[Move]) -> bool:
        nonlocal best
        if budget[0] <= 0:
            return False
        budget[0] -= 1
        if progress is not None:
            progress(Tick(total - budget[0], total, "replays", note="deleting the divergence's needless moves"))
        found, example = replay_moves(shared, candidate)
        if found is None or found.key != key:
            return False
        used = example.moves  # the moves it took (those not enabled were skipped)
        best = (list(used), found.reason, list(example.lines), list(example.records))
        return True

    if not attempt(moves):  # the failure itself, replayed: its lines (and proof it replays)
        return moves, reason, [f"(not replayed: {reason})"] * len(moves), [{} for _ in moves]
    changed = True
    while changed and budget[0] > 0:
        changed = False
        current = best[0]
        size = max(1, len(current) // 2)
        while size >= 1 and budget[0] > 0:
            i = len(current) - size
            while i >= 0 and budget[0] > 0:
                candidate = without(current, range(i, i + size))
                if candidate and attempt(candidate):
                    current = best[0]
                    changed = True
                    i = min(i, len(current) - size)
                else:
                    i -= 1
            size //= 2
        if not changed:  # the world's moves just before the last, put back as early as the divergence still
            # comes of them: what they do to a store may meet an earlier step, and the steps after it are not needed
            current = best[0]
            end = start = len(current) - 1
            while start > 0 and not isinstance(current[start - 1].action, (mm.Invoke, mm.Step)):
                start -= 1
            block, rest = current[start:end], current[:start] + current[end:]
            for place in range(start if block else 0):
                kept = best
                if attempt(rest[:place] + block + rest[place:]) and len(best[0]) < len(current):
                    changed = True
                    break
                best = kept
    simplest = shared.simplest_mode
    for i, move in enumerate(best[0]):  # an invocation run in this process is simpler to read and debug
        if simplest is not None and isinstance(move.action, mm.Invoke) and move.mode is not simplest \
                and budget[0] > 0:
            candidate = list(best[0])
            candidate[i] = replace(move, mode=simplest)
            attempt(candidate)
    return best
