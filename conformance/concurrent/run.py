"""Running it: profiles, ``run_concurrent`` and its report, shrinking a failure.

``run_concurrent`` forks a ``WorkerPool``, then generates scenarios (the kinds
in turn, so every kind runs in every profile), runs each on the pool's file
(emptied before each), and checks each history (``check_history``). It stops at the first failure
and shrinks it:

1. without re-running: read-only ops (``status``, ``snapshot``,
   ``receipts``) are dropped from the recorded history while it stays
   non-linearizable (a reader changes nothing, so the rest is still a history
   of that run);
2. re-running: each batch op, then each setup request, is left out of the
   scenario, and the smaller scenario is run up to ``RERUNS`` times; the first
   failing run is kept (a race does not recur every time, so a step that
   fails to reproduce is kept, not proven needed);
3. when the processes had run earlier histories, the shrunk scenario is run
   on new processes (up to ``RERUNS`` times), so that the history shown has no
   past but this scenario; if it does not recur there, the history says so
   (a bug that keeps something on a process's objects may need that past);
4. step 1 again on the last failing history.

Steps 2 and 3 are bounded by the profile's ``shrink_runs``, a count of
scenario runs (so a busy machine shrinks as far as an idle one), and by
``shrink_guard_seconds``, which only stops a hang.

Leaves out on purpose: shrinking the records or values inside a request
(the scenarios are small by construction) and re-running a failure that is
not a race (``SETUP_DIVERGED``: the single-process lockstep shrinks those).
"""

from __future__ import annotations

import enum
import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from envreplica.checker.progress import ProgressHook, Tick
from envreplica.conformance.concurrent.history import History, history_to_json, interleaved, outcome_of
from envreplica.conformance.concurrent.linearize import DEFAULT_MAX_NODES, Check, Verdict, check_history
from envreplica.conformance.concurrent.scenarios import KINDS, THREAD_KINDS, Scenario, ScenarioKind, generate_scenario
from envreplica.conformance.concurrent.steps import Granularity
from envreplica.conformance.concurrent.workers import Latency, WorkerPool
from envreplica.spec.variants import Variant

if TYPE_CHECKING:
    from envreplica.conformance.concurrent.threads import ThreadPool

    Pool = Union[WorkerPool, ThreadPool]  # what runs a batch at once: processes or threads (``Mode``)

__all__ = ["Mode", "Profile", "ProfileSpec", "PROFILES", "ConcurrentFailure", "ConcurrentReport", "run_concurrent",
           "check_scenario"]


class Profile(str, enum.Enum):
    CI = "ci"
    NIGHTLY = "nightly"


class Mode(str, enum.Enum):
    """Who runs a batch's ops at once on one replica."""

    PROCESSES = "processes"  # forked processes, each with its own connection to the file (``WorkerPool``)
    THREADS = "threads"  # threads of one process sharing one ``SqliteReplica`` (``ThreadPool``)


@dataclass(frozen=True)
class ProfileSpec:
    """The budget of one profile."""

    histories: int  # this many histories (the budget: a count, so a busy machine runs the same ones)
    seconds: float  # a guard against a hang only, far above what the histories need
    processes: int  # worker processes forked
    shrink_runs: int  # scenario runs allowed while shrinking one failure (a count, as ``histories``)
    shrink_guard_seconds: float  # a guard against a hang while shrinking only, far above what the runs need
    latency: Latency  # value-store read latency in a batch
    default_seed: Optional[int]  # the seed when none is given (None: a fresh one, reported)


#: ci: 300 histories (about 5 s on 2 idle cores, 50-70 a second); every mutant of
#: tests/concurrency_mutants.py was caught within 100 histories in 12 seeds of 12 (docs/concurrent.md
#: has the figures); a failure shrinks in up to 240 scenario runs (about what 4 s allowed on 2 idle cores).
#: nightly: 100,000 histories, longer reads and delays. Each profile's ``seconds`` and
#: ``shrink_guard_seconds`` only stop a hung run.
PROFILES: dict[Profile, ProfileSpec] = {
    Profile.CI: ProfileSpec(histories=300, seconds=600.0, processes=3, shrink_runs=240, shrink_guard_seconds=300.0,
                            latency=Latency(200, 1500, 0.3, 1500), default_seed=0),
    Profile.NIGHTLY: ProfileSpec(histories=100_000, seconds=7200.0, processes=3, shrink_runs=4000,
                                 shrink_guard_seconds=3600.0,
                                 latency=Latency(100, 3000, 0.3, 2000), default_seed=None),
}

#: Re-runs of a smaller scenario while shrinking before concluding it no longer fails.
RERUNS = 12


@dataclass(frozen=True)
class ConcurrentFailure:
    """A history the model cannot explain, shrunk."""

    check: Check  # the verdict on the shrunk history
    history: History  # the shrunk history
    original_ops: int  # ops of the history as first found
    original_setup: int  # setup requests as first found
    found_after: int  # histories run when it was found
    path: Optional[Path] = None  # where it was written (``out_dir``)

    def message(self) -> str:
        return (f"concurrent history #{self.found_after} (shrunk from {self.original_ops} ops and "
                f"{self.original_setup} setup requests to {len(self.history.ops)} and "
                f"{len(self.history.setup)}):\n{self.check.message(self.history)}")


@dataclass(frozen=True)
class ConcurrentReport:
    """The outcome of one ``run_concurrent``."""

    variant: str
    profile: str
    seed: int
    granularity: str
    histories: int  # histories run and checked
    ops: int  # batch ops in them
    overlapping: int  # histories in which some two ops ran at once
    nodes: int  # model steps tried by the searches
    leaves: int  # complete orders reached
    max_nodes: int  # the largest search of one history
    seconds: float  # wall time of the histories (forking and shrinking not counted)
    total_seconds: float  # wall time of the whole run
    interleaved: int = 0  # histories whose witness runs some op's transactions apart
    mode: str = "processes"  # who ran the batches: processes on one file, or threads on one replica
    by_kind: dict = field(default_factory=dict)  # scenario kind -> histories
    outcomes: dict = field(default_factory=dict)  # answer class (``history.outcome_of``) -> ops
    failures: tuple[ConcurrentFailure, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def histories_per_second(self) -> float:
        return self.histories / self.seconds if self.seconds else 0.0

    def lines(self) -> list[str]:
        """The figures, for people."""
        out = [f"concurrent {self.mode} ({self.profile}, variant {self.variant}, seed {self.seed}, {self.granularity} "
               f"granularity): {self.histories} histories ({self.histories_per_second:.0f}/s), {self.ops} ops, "
               f"{self.overlapping} with ops overlapping, {self.interleaved} whose witness interleaves ops' "
               f"transactions; linearization search {self.nodes} model steps "
               f"({self.nodes / max(self.histories, 1):.0f} a history, at most {self.max_nodes}), "
               f"{self.leaves} complete orders; {self.seconds:.1f} s of histories, {self.total_seconds:.1f} s in all",
               "  by scenario: " + ", ".join(f"{k} {n}" for k, n in sorted(self.by_kind.items())),
               "  answers: " + ", ".join(f"{k} {n}" for k, n in sorted(self.outcomes.items()))]
        for failure in self.failures:
            out.append(failure.message())
        return out


def check_scenario(pool: Pool, scenario: Scenario, *, granularity: Granularity,
                   max_nodes: int = DEFAULT_MAX_NODES) -> tuple[History, Check]:
    """Run ``scenario`` once on ``pool`` and check its history."""
    history = pool.run(scenario)
    return history, check_history(history, granularity=granularity, max_nodes=max_nodes)


def _scratch() -> str:
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="envreplica-concurrent-", dir=base)


def run_concurrent(
    variant: Union[str, Variant] = Variant.FIXED,
    *,
    profile: Union[str, Profile] = Profile.CI,
    seed: Optional[int] = None,
    driver_class: Optional[Callable[..., Any]] = None,
    out_dir: Optional[Union[str, Path]] = None,
    granularity: Union[str, Granularity] = Granularity.TRANSACTION,
    histories: Optional[int] = None,
    seconds: Optional[float] = None,
    kinds: Optional[tuple[ScenarioKind, ...]] = None,
    mode: Union[str, Mode] = Mode.PROCESSES,
    progress: Optional[ProgressHook] = None,
) -> ConcurrentReport:
    """Run concurrent histories of ``variant`` on real processes and check each against the model.

    ``driver_class(variant, path, master_key=..., store_factory=...)`` builds
    each process's driver (default ``SqliteDriver``; a mutant's
    ``MutantSqliteDriver`` subclass, or any factory with that signature).
    ``histories`` / ``seconds`` override the profile's budget, ``kinds`` the
    scenario kinds (in turn; by default ``KINDS`` for processes, ``THREAD_KINDS``
    for threads). ``mode``: processes on one file, or threads on one replica
    object (``threads.ThreadPool``). Stops at the first failure, shrinks it, and
    writes it to ``out_dir`` (``concurrent-VARIANT.json`` and ``.txt``). ``progress`` is told the histories
    checked (of the budget) and their operations after each history.
    """
    from envreplica.conformance.concurrent.threads import ThreadPool
    from envreplica.conformance.drivers import SqliteDriver

    started = time.perf_counter()
    variant = Variant(variant)
    profile = Profile(profile)
    spec = PROFILES[profile]
    granularity = Granularity(granularity)
    if seed is None:
        seed = spec.default_seed if spec.default_seed is not None else random.SystemRandom().randrange(2 ** 32)
    factory = driver_class or SqliteDriver
    budget = spec.histories if histories is None else histories
    limit = spec.seconds if seconds is None else seconds
    mode = Mode(mode)
    kinds = tuple(kinds or (THREAD_KINDS if mode is Mode.THREADS else KINDS))
    pool_class = ThreadPool if mode is Mode.THREADS else WorkerPool
    rng = random.Random(seed)
    scratch = Path(_scratch())
    totals: Counter = Counter()
    by_kind: Counter = Counter()
    outcomes: Counter = Counter()
    failure: Optional[ConcurrentFailure] = None
    largest = 0
    histories_started = time.perf_counter()
    histories_seconds = 0.0
    try:
        with pool_class(spec.processes, factory, variant.value, latency=spec.latency, seed=seed,
                        scratch=scratch) as pool:
            histories_started = time.perf_counter()
            while totals["histories"] < budget and time.perf_counter() - histories_started < limit:
                kind = kinds[totals["histories"] % len(kinds)]
                scenario = generate_scenario(kind, rng)
                history, check = check_scenario(pool, scenario, granularity=granularity)
                totals["histories"] += 1
                totals["ops"] += len(history.ops)
                totals["overlapping"] += history.overlapping
                totals["interleaved"] += check.passed and interleaved(check.witness)
                outcomes.update(outcome_of(op) for op in history.ops)
                totals["nodes"] += check.nodes
                totals["leaves"] += check.leaves
                largest = max(largest, check.nodes)
                by_kind[kind.value] += 1
                if progress is not None:
                    progress(Tick(totals["histories"], budget, "histories", totals["ops"], "ops"))
                if not check.passed:
                    histories_seconds = time.perf_counter() - histories_started
                    def fresh_pool():
                        return pool_class(spec.processes, factory, variant.value, latency=spec.latency,
                                          seed=seed + 1, scratch=Path(_scratch()))

                    failure = _shrink(pool, fresh_pool, scenario, history, check, granularity,
                                      spec.shrink_runs, spec.shrink_guard_seconds,
                                      found_after=totals["histories"])
                    break
            else:
                histories_seconds = time.perf_counter() - histories_started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failure is not None and out_dir is not None:
        failure = _write_failure(Path(out_dir), failure, mode)
    return ConcurrentReport(
        variant=variant.value, profile=profile.value, seed=seed, granularity=granularity.value,
        histories=totals["histories"], ops=totals["ops"], overlapping=totals["overlapping"],
        nodes=totals["nodes"], leaves=totals["leaves"], max_nodes=largest,
        seconds=histories_seconds, total_seconds=time.perf_counter() - started,
        interleaved=totals["interleaved"], by_kind=dict(by_kind), outcomes=dict(outcomes),
        failures=() if failure is None else (failure,), mode=mode.value,
    )


# ---------------------------------------------------------------------------
# Shrinking
# ---------------------------------------------------------------------------


def _drop_readers(history: History, check: Check, granularity: Granularity) -> tuple[History, Check]:
    """Drop read-only ops from the recorded history while it stays non-linearizable (no re-run)."""
    changed = True
    while changed:
        changed = False
        for op in history.ops:
            if not op.kind.read_only or len(history.ops) <= 1:
                continue
            smaller = history.without({op.index})
            smaller_check = check_history(smaller, granularity=granularity)
            if smaller_check.verdict is check.verdict:
                history, check, changed = smaller, smaller_check, True
                break
    return history, check


def _shrink(pool: Pool, fresh_pool: Callable[[], Pool], scenario: Scenario, history: History,
            check: Check, granularity: Granularity, runs: int, guard_seconds: float, *,
            found_after: int) -> ConcurrentFailure:
    original_ops, original_setup = len(history.ops), len(history.setup)
    deadline = time.perf_counter() + guard_seconds  # a hang guard only: ``runs`` is the budget
    left = runs  # scenario runs still allowed

    def spent() -> bool:
        return left <= 0 or time.perf_counter() > deadline

    if check.verdict is Verdict.NOT_LINEARIZABLE:
        history, check = _drop_readers(history, check, granularity)
    if check.verdict in (Verdict.NOT_LINEARIZABLE, Verdict.UNREADABLE, Verdict.INVARIANT):
        kept = (scenario, history, check)

        def fails(candidate: Scenario):
            nonlocal left
            for _ in range(RERUNS):
                if spent():
                    return None
                left -= 1
                got_history, got_check = check_scenario(pool, candidate, granularity=granularity)
                if got_check.verdict is kept[2].verdict:
                    return candidate, got_history, got_check
            return None

        position = len(kept[0].batch) - 1
        while position >= 0 and not spent():
            if len(kept[0].batch) > 2:
                found = fails(kept[0].without_op(position))
                if found is not None:
                    kept = found
            position -= 1
        position = len(kept[0].setup) - 1
        while position >= 0 and not spent():
            found = fails(kept[0].without_setup(position))
            if found is not None:
                kept = found
            position -= 1
        scenario, history, check = kept
        if history.earlier:
            # its own RERUNS runs, whatever the budget left: the history shown must be tried on new processes
            history, check = _on_fresh_processes(fresh_pool, scenario, history, check, granularity,
                                                 time.perf_counter() + guard_seconds)
        if check.verdict is Verdict.NOT_LINEARIZABLE:
            history, check = _drop_readers(history, check, granularity)
    return ConcurrentFailure(check, history, original_ops, original_setup, found_after)


def _on_fresh_processes(fresh_pool: Callable[[], Pool], scenario: Scenario, history: History, check: Check,
                        granularity: Granularity, deadline: float) -> tuple[History, Check]:
    """The failure again on new processes whose only past is this same scenario, or the history noted as needing more.

    New processes run the shrunk scenario up to ``RERUNS`` times; the first
    failing run is the history shown (its earlier histories, if any, are this
    same scenario).
    """
    pool = fresh_pool()
    try:
        for n in range(RERUNS):
            if n and time.perf_counter() > deadline:
                break
            got_history, got_check = check_scenario(pool, scenario, granularity=granularity)
            if got_check.verdict is check.verdict:
                if got_history.earlier:
                    got_history = replace(got_history, notes=got_history.notes + (
                        f"new {got_history.unit}s ran this same scenario {got_history.earlier} time"
                        f"{'s' if got_history.earlier > 1 else ''} before it failed",))
                return got_history, got_check
    finally:
        pool.close()
        shutil.rmtree(pool.scratch, ignore_errors=True)
    note = (f"on new {history.unit}s it did not recur in {n + 1} runs: either a rare race, or what the "
            f"{history.unit}s kept from their {history.earlier} earlier histories is part of the cause")
    return replace(history, notes=history.notes + (note,)), check


def _write_failure(out_dir: Path, failure: ConcurrentFailure, mode: Mode = Mode.PROCESSES) -> ConcurrentFailure:
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"concurrent-{failure.history.variant}" if mode is Mode.PROCESSES \
        else f"concurrent-{mode.value}-{failure.history.variant}"
    doc = history_to_json(failure.history)
    doc["verdict"] = failure.check.verdict.value
    doc["reason"] = failure.check.reason
    doc["attempt"] = list(failure.check.witness)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    (out_dir / f"{name}.txt").write_text(failure.message() + "\n")
    return ConcurrentFailure(failure.check, failure.history, failure.original_ops, failure.original_setup,
                             failure.found_after, path)
