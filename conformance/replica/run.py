"""Running the lockstep: Hypothesis settings per profile, ``run_lockstep`` and its report, minimization, replay.

``lockstep_settings`` sizes a profile (``PROFILE_EXAMPLES``);
``run_lockstep`` runs ``LockstepMachine`` with Hypothesis's shrinking capped
(``SHRINK_CALLS`` test-function calls: ``conformance.shrinking``) and its
literals pinned (``conformance.literals``), then ``_minimize`` deletes needless
steps from the concrete requests (``MINIMIZE_REPLAYS`` replays),
``_shrink_data`` shortens the keys, project ids and values of the steps left
(``DATA_REPLAYS`` replays) and ``_report`` writes the ``LockstepReport``.
The budgets are counts, so a busy machine shrinks to the same trace as an
idle one; the seconds of ``SHRINK_GUARD_SECONDS``, ``MINIMIZE_GUARD_SECONDS``
and ``DATA_GUARD_SECONDS`` only stop a hang.
All are read here when a run needs them: patch them on this module
(``envreplica.conformance.replica.run``).
``replay_steps`` / ``replay_requests`` send saved requests to both sides.

An external adapter that breaks (``external.AdapterFailure``: it died,
stalled, wrote a line that is not a JSON object, answered another id; the
machine raises it, and Hypothesis lets it through) stops the run where it
broke, whether Hypothesis was generating or shrinking, or the step deletion
or the data pass replaying: ``LockstepReport.adapter_failure`` names the step
and what broke (exit 2 from the command line); nothing is shrunk or replayed
after it, and a divergence seen before it is named beside it.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Optional, Sequence

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis.stateful import run_state_machine_as_test

from envreplica.checker.progress import ProgressHook, Tick
from envreplica.conformance.drivers import Driver, ModelDriver
from envreplica.conformance import literals
from envreplica.conformance.external import AdapterFailure
from envreplica.conformance.replica import rename
# replay_steps: each saved request to both drivers, compared (compare.py, where findings.py finds it too)
from envreplica.conformance.replica.compare import replay_steps
from envreplica.conformance.replica.context import _Run
from envreplica.conformance.replica.coverage import LockstepCoverage
from envreplica.conformance.replica.findings import finding_of
from envreplica.conformance.replica.machine import LockstepMachine
from envreplica.conformance.replica.traces import format_steps, write_trace
from envreplica.conformance.shrinking import shrink_budget
from envreplica.spec.variants import Variant


# ---------------------------------------------------------------------------
# Hypothesis settings
# ---------------------------------------------------------------------------

#: Examples per lockstep run, per profile (steps per example: ``STEPS_PER_EXAMPLE``).
#: ``ci`` is sized so that one run against the in-process SQLite driver takes
#: about a minute on 2 cores (~370 steps/s) and reaches every reachable coverage
#: item with a margin (the rarest about 15 times; tests/test_lockstep.py).
PROFILE_EXAMPLES = {"dev": 60, "ci": 800, "nightly": 10000}
#: Steps per example. Shorter examples shrink faster; depth comes from the
#: consistent-cloud rule, which opens the gate within a handful of steps.
STEPS_PER_EXAMPLE = 30
#: Profiles whose budget is spent on Hypothesis's target phase. Its hill climbing on
#: the ``target()`` observations takes up to half the examples; measured on ``ci``
#: (800 examples) it left record_version_stale unreached and materialization_pending
#: at 2 hits (18 without), so small budgets skip the phase and keep the observations.
TARGET_PHASE_PROFILES = frozenset({"nightly"})


def lockstep_settings(profile: str = "ci", *, max_examples: Optional[int] = None,
                      step_count: Optional[int] = None) -> hypothesis.settings:
    """Lockstep-sized settings for the ``dev`` / ``ci`` / ``nightly`` profile.

    The parent is the Hypothesis profile of that name when one is registered
    (tests/conftest.py registers all three; Hypothesis has a built-in ``ci``),
    so database and derandomization follow it; the example count and steps
    are sized for the lockstep, whose steps each cost a SQLite round trip.
    """
    try:
        parent = hypothesis.settings.get_profile(profile)
    except hypothesis.errors.InvalidArgument:
        parent = hypothesis.settings.get_profile("default")
    # No example database: it is keyed by the test function, which run_state_machine_as_test
    # shares across every implementation and variant the lockstep is pointed at.
    extra: dict = {"database": None}
    if profile == "ci":
        extra.update(derandomize=True)
    phases = tuple(parent.phases)
    if profile not in TARGET_PHASE_PROFILES:
        phases = tuple(p for p in phases if p is not Phase.target)
    return hypothesis.settings(
        parent,
        max_examples=max_examples if max_examples is not None else PROFILE_EXAMPLES.get(profile, 60),
        stateful_step_count=step_count or STEPS_PER_EXAMPLE,
        deadline=None,
        phases=phases,
        **extra,
    )


#: Test-function calls Hypothesis may make shrinking one failure. Each replays an example on the
#: implementation (tens of ms on SQLite); Hypothesis deletes most steps in its first passes and then
#: lowers choices one by one, which only makes the frames look simpler, and it stops by itself after
#: 200 calls without progress. ``_minimize`` then deletes the remaining needless steps from the
#: concrete requests. A count, not seconds: the same trace on a busy machine as on an idle one.
SHRINK_CALLS = 200
#: Seconds after which a shrink stops whatever the count: a guard against a hang only, far above what
#: ``SHRINK_CALLS`` needs (Hypothesis's own guard).
SHRINK_GUARD_SECONDS = 300.0


def _effective_settings(given: Optional[hypothesis.settings]) -> hypothesis.settings:
    base = given if given is not None else lockstep_settings("dev")
    verbosity = base.verbosity if base.verbosity > Verbosity.normal else Verbosity.quiet
    phases = tuple(p for p in base.phases if p is not Phase.explain)
    return hypothesis.settings(
        base, deadline=None, report_multiple_bugs=False, verbosity=verbosity, phases=phases,
        suppress_health_check=list(HealthCheck),
    )


# ---------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------


@dataclass
class LockstepReport:
    """The outcome of one ``run_lockstep``."""

    ok: bool
    examples: int  # examples run (generation and shrinking)
    steps: int  # requests sent to each side (top level)
    seconds: float
    coverage: LockstepCoverage
    failure: Optional[str] = None  # the shrunk steps, readable, and the divergence
    trace_path: Optional[Path] = None  # the JSON-lines requests of the shrunk example
    shrunk_steps: Optional[int] = None  # steps of the shrunk example
    variant: str = Variant.FIXED.value
    itf_path: Optional[Path] = None
    divergence: Optional[str] = None  # the one-line reason
    found_after_examples: Optional[int] = None  # examples run when the first failure appeared
    found_after_seconds: Optional[float] = None  # seconds into the run when it appeared (before shrinking)
    found_steps: Optional[int] = None  # steps of that first failing example (before shrinking)
    hypothesis_shrunk_steps: Optional[int] = None  # steps after Hypothesis's shrinking, before step deletion
    #: Replays the data pass made once the steps were minimal (``_shrink_data``; None: it did not run).
    data_replays: Optional[int] = None
    #: Per kind of literal the trace holds, its longest before and after the data pass, in characters:
    #: ``{"key": (128, 1), "project": (2, 2), "value": (4, 1)}``.
    data_lengths: Optional[dict] = None
    #: How the implementation's tables were held: read back in process, table by table through the
    #: ``state`` op (an external adapter), or not at all (the adapter answered ``state`` unsupported).
    tables: str = ""
    #: The docs/protocol.md section 6 requests an external adapter does not offer (not generated), or "".
    extensions: str = ""
    checks: int = 0  # state read-backs compared with the model's
    checks_skipped: int = 0  # read-backs skipped because neither side had written since the last
    #: The adapter broke (``external.AdapterFailure``): where and what, one line; the run stopped there.
    adapter_failure: Optional[str] = None
    #: the finding the divergence is (``findings.finding_of``): the trace replays clean beside the model with that
    #: one fix left out, so the implementation lacks it ("F3: ..."); None when no one finding explains it
    finding: Optional[str] = None

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


def run_lockstep(
    impl_factory: Optional[Callable[[], Driver]],
    *,
    variant: Variant = Variant.FIXED,
    settings: Optional[hypothesis.settings] = None,
    out_dir: Optional[Path] = None,
    state_check: bool = True,
    progress: Optional[ProgressHook] = None,
) -> LockstepReport:
    """Run ``LockstepMachine`` against ``impl_factory()``'s driver under ``variant``.

    ``impl_factory`` None: the SQLite implementation in a scratch directory removed afterwards.

    The driver is built once and reused across examples (each example starts
    with a ``reset``); it is rebuilt when an in-process driver raised, or an
    adapter's answer broke its definition. An adapter that broke (died,
    stalled, an unreadable line, another id) ends the run instead
    (``LockstepReport.adapter_failure``). With
    ``out_dir`` the shrunk failing example is written there as
    ``lockstep-VARIANT.jsonl`` and ``lockstep-VARIANT.itf.json``.
    ``settings`` defaults to ``lockstep_settings("dev")``; whatever is given,
    the deadline is off, only the first bug is reported, and Hypothesis's own
    printing is quiet (the report carries the readable trace).
    ``progress`` is told the examples and steps after each example (of the budget), then each replay of a
    divergence's minimization (``checker.progress.Tick``).
    """
    variant = Variant(variant)
    effective = _effective_settings(settings)
    run = _Run(impl_factory, variant, out_dir, state_check, progress=progress, budget=effective.max_examples)
    machine = LockstepMachine.bind(run)
    started = time.perf_counter()
    error: Optional[BaseException] = None
    try:
        try:
            with shrink_budget(SHRINK_CALLS, SHRINK_GUARD_SECONDS), literals.pinned():
                run_state_machine_as_test(machine, settings=effective)
        except Exception as exc:  # a divergence, a driver crash, or Flaky
            error = exc
        except AdapterFailure as broke:  # the adapter broke: nothing after it is judged, nothing shrunk
            return _broken_report(run, broke, started)
        try:
            return _report(run, error, started)
        except AdapterFailure as broke:  # it broke while the divergence was being minimized
            return _broken_report(run, broke, started)
    finally:
        run.close()


def _broken_report(run: _Run, broke: AdapterFailure, started: float) -> LockstepReport:
    """The report of a run the adapter stopped: no verdict; where it broke and what broke, and a divergence
    seen before it (its first, unshrunk trace, when ``out_dir`` was given)."""
    text = str(broke)
    if run.failure is not None:
        text += f" (a divergence was seen before it broke, not shrunk: {run.failure['reason']}"
        text += f"; its trace: {run.trace_path})" if run.trace_path is not None else ")"
    report = LockstepReport(ok=False, examples=run.examples, steps=run.steps, seconds=time.perf_counter() - started,
                            coverage=run.coverage, variant=run.variant.value, tables=run.tables(),
                            extensions=run.extensions(), checks=run.checks, checks_skipped=run.checks_skipped,
                            failure=text, divergence=text, adapter_failure=text)
    if run.first_failure is not None:
        report.found_after_examples, report.found_after_seconds, report.found_steps = run.first_failure
    return report


def _report(run: _Run, error: Optional[BaseException], started: float) -> LockstepReport:
    variant = run.variant
    report = LockstepReport(ok=error is None, examples=run.examples, steps=run.steps, seconds=0.0,
                            coverage=run.coverage, variant=variant.value, tables=run.tables(),
                            extensions=run.extensions(), checks=run.checks, checks_skipped=run.checks_skipped)
    if error is not None:
        failing = run.failure
        if failing is not None:
            steps, reason = failing["steps"], failing["reason"]
            report.hypothesis_shrunk_steps = len(steps)
            quiet = {s["request"].get("id") for s in steps if s.get("quiet")}
            steps, reason = _minimize(run, steps, reason)
            steps, reason, report.data_replays, report.data_lengths = _shrink_data(run, steps, reason, quiet)
            report.finding = finding_of(run, steps, quiet)
        else:
            steps, reason = run.last_steps, f"{type(error).__name__}: {error}"
        if isinstance(error, hypothesis.errors.Flaky) or type(error).__name__.startswith("Flaky"):
            reason = f"{reason} (Hypothesis reports the failure as flaky: {type(error).__name__})"
        if run.out_dir is not None and steps:
            run.trace_path, run.itf_path = write_trace(run.out_dir, run.trace_name, steps, reason,
                                                       {"variant": variant.value, "steps": len(steps),
                                                        **({"finding": report.finding} if report.finding else {})})
        report.divergence = reason
        report.shrunk_steps = len(steps)
        if run.first_failure is not None:
            report.found_after_examples, report.found_after_seconds, report.found_steps = run.first_failure
        header = (f"lockstep divergence under variant {variant.value}, shrunk to {len(steps)} steps:"
                  f"{_data_note(report.data_lengths, report.data_replays)}")
        report.failure = format_steps(steps, reason, header=f"{report.finding}\n{header}" if report.finding
                                      else header)
        report.trace_path, report.itf_path = run.trace_path, run.itf_path
    report.seconds = time.perf_counter() - started
    return report


#: Replays the post-shrink step deletion may make (a count: the same search on a busy machine).
MINIMIZE_REPLAYS = 400
#: Seconds after which the step deletion stops whatever the count: a guard against a hang only.
MINIMIZE_GUARD_SECONDS = 600.0


class _Budget:
    """``replays`` replays, and a guard of ``guard_seconds`` on the clock against a hang; each replay spent is
    reported to ``progress`` with ``note`` (what the replays are for)."""

    def __init__(self, replays: int, guard_seconds: float, progress: Optional[ProgressHook] = None,
                 note: str = "") -> None:
        self.replays = self.total = replays
        self.wall_end = time.perf_counter() + guard_seconds
        self.progress, self.note = progress, note

    def spend(self) -> None:
        self.replays -= 1
        if self.progress is not None:
            self.progress(Tick(self.total - self.replays, self.total, "replays", note=self.note))

    def left(self) -> bool:
        return self.replays > 0 and time.perf_counter() < self.wall_end


def _failure_kind(reason: str) -> str:
    """What a divergence is about, without the values: its path (``response.result.ok``) or its phrase."""
    return reason.removeprefix("after the last step: ").split(":", 1)[0]


def _quiet_runs(requests: list, quiet: Collection) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive requests whose ``id`` is in ``quiet``."""
    runs, start = [], None
    for i, request in enumerate([*requests, None]):
        inside = isinstance(request, dict) and request.get("id") in quiet
        if inside and start is None:
            start = i
        elif not inside and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _consumed_sequence(request: Any) -> Optional[dict]:
    """For a top-level delivery at sequence n on stream s: a stand-in for the delivery before it (sequence
    n - 1 on s), the ``last_kept`` of ``_shift_sequences``; None for any other request."""
    try:
        cursor = request["frame"]["delivery"]
        stream, sequence = cursor["streamId"], cursor["sequence"]
    except (KeyError, TypeError):
        return None
    if request.get("op") != "delivery" or not isinstance(sequence, int) or sequence < 1:
        return None
    return {"frame": {"delivery": {"streamId": stream, "sequence": sequence - 1}}}


def _shift_sequences(requests: list, last_kept: dict, cut: int) -> list:
    """``requests`` (those after a fast-forward whose last ``cut`` deliveries were deleted) renumbered on
    that stream: a sequence past the deleted ones moves ``cut`` down, one of them becomes the last kept
    one (``last_kept``, a delivery); deliveries, nested ones and commits' high-water marks alike, until
    a begin on another stream. A fast-forward changes no record and no record version
    (``generate._Gen.FFWD_KINDS``), so nothing else moves. A heuristic all the same: the replay decides
    whether it still fails the same way."""
    stream, kept = last_kept["frame"]["delivery"]["streamId"], last_kept["frame"]["delivery"]["sequence"]

    def renumber(request):
        request = json.loads(json.dumps(request))
        frame = request.get("frame") if isinstance(request, dict) else None
        if not isinstance(frame, dict):
            return request
        if request.get("op") == "delivery" and isinstance(frame.get("delivery"), dict):
            where, field = frame["delivery"], "sequence"
        elif request.get("op") == "commit" and isinstance(frame.get("highWater"), dict):
            where, field = frame["highWater"], "sequence"
        else:
            where = None
        if where is not None and where.get("streamId") == stream and isinstance(where.get(field), int) \
                and where[field] > kept:
            where[field] = max(where[field] - cut, kept) if where[field] > kept + cut else kept
            if request["op"] == "delivery":
                frame["opId"] = f"d-{where[field]}"
        if isinstance(request.get("duringFetch"), list):
            request["duringFetch"] = [renumber(n) for n in request["duringFetch"]]
        return request

    out: list = []
    for request in requests:
        frame = request.get("frame") if isinstance(request, dict) else None
        if isinstance(frame, dict) and request.get("op") == "begin" and \
                (frame.get("attempt") or {}).get("streamId") != stream:
            return out + requests[len(out):]
        out.append(renumber(request))
    return out


def _delivered_version(request: Any) -> Optional[tuple[str, int]]:
    """For a top-level delivery: (its project, the record version it moves that project to); else None."""
    frame = request.get("frame") if isinstance(request, dict) else None
    if not isinstance(frame, dict) or request.get("op") != "delivery":
        return None
    project, version = frame.get("projectId"), frame.get("recordVersion")
    if not isinstance(project, str) or type(version) is not int:
        return None
    return project, version


def _shift_versions(requests: list, project: str, version: int) -> list:
    """``requests`` (those after a deleted delivery that moved ``project`` to record ``version``) with each
    later record version of ``project`` above ``version`` one down: deliveries, pages and commits' version
    lists, nested ones too. So a chain of deliveries that each advanced the project by one stays a chain
    when one of them goes. A heuristic: the replay decides whether it still fails the same way."""

    def lowered(where: dict) -> None:
        if where.get("projectId") == project and type(where.get("recordVersion")) is int \
                and where["recordVersion"] > version:
            where["recordVersion"] -= 1

    def renumber(request):
        request = json.loads(json.dumps(request))
        frame = request.get("frame") if isinstance(request, dict) else None
        if not isinstance(frame, dict):
            return request
        if request.get("op") in ("delivery", "page"):
            lowered(frame)
        elif request.get("op") == "commit" and isinstance(frame.get("versions"), list):
            for entry in frame["versions"]:
                if isinstance(entry, dict):
                    lowered(entry)
        if isinstance(request.get("duringFetch"), list):
            request["duringFetch"] = [renumber(n) for n in request["duringFetch"]]
        return request

    return [renumber(r) for r in requests]


def _without_project(requests: list, begin_at: int, project: str) -> Optional[list]:
    """``requests`` with ``project`` taken out of the snapshot that the begin at ``begin_at`` opens: out of
    the begin's ``projectIds``, its pages of that attempt gone (nested ones too) and its entry gone from
    that attempt's commits, up to the next begin. None when the begin does not name it."""
    begin = requests[begin_at]
    frame: Any  # a JSON value: an odd shape raises below
    frame = begin.get("frame") if isinstance(begin, dict) else None
    try:
        attempt = frame["attempt"]["attemptId"]
        projects = list(frame["projectIds"])
    except (KeyError, TypeError):
        return None
    if project not in projects:
        return None

    def keep(request) -> bool:
        inner = request.get("frame") if isinstance(request, dict) else None
        return not (request.get("op") == "page" and isinstance(inner, dict)
                    and inner.get("attemptId") == attempt and inner.get("projectId") == project)

    def edit(request):
        request = json.loads(json.dumps(request))
        inner = request.get("frame")
        if request.get("op") == "commit" and isinstance(inner, dict) and inner.get("attemptId") == attempt \
                and isinstance(inner.get("versions"), list):
            inner["versions"] = [e for e in inner["versions"]
                                 if not (isinstance(e, dict) and e.get("projectId") == project)]
        if isinstance(request.get("duringFetch"), list):
            request["duringFetch"] = [edit(n) for n in request["duringFetch"] if not isinstance(n, dict) or keep(n)]
        return request

    smaller = json.loads(json.dumps(begin))
    smaller["frame"]["projectIds"] = [p for p in projects if p != project]
    out = requests[:begin_at] + [smaller]
    for at, request in enumerate(requests[begin_at + 1:], begin_at + 1):
        if isinstance(request, dict) and request.get("op") == "begin":
            return out + requests[at:]
        if isinstance(request, dict) and keep(request):
            out.append(edit(request))
        elif not isinstance(request, dict):
            out.append(request)
    return out


def _replay_candidate(run: _Run, requests: list, quiet: Collection) -> Optional[tuple[list, Optional[dict]]]:
    """Replay a shrinking candidate on a fresh implementation beside the model: (steps, divergence or None); None
    when the implementation could not be driven (it is discarded, as is one that died in the replay)."""
    try:
        impl = run.driver()
        got, divergence = replay_steps(requests, impl, ModelDriver(run.variant), variant=run.variant,
                                       state_check=run.state_check, probe=run.probe(impl), defer=quiet,
                                       adapter_failures="a replay while shrinking")
    except Exception:
        run.discard()
        return None
    if getattr(impl, "alive", True) is False:
        run.discard()
    return got, divergence


def _minimize(run: _Run, steps: list, reason: str) -> tuple[list, str]:
    """Delete steps (and nested requests) from Hypothesis's shrunk example while it still fails the same way.

    Hypothesis shrinks the choices that generate an example; this replays
    the concrete requests (each replay starts with the example's ``reset``),
    so a step that only fed the generator's state goes too: a project out of
    a snapshot (from its begin, its pages and its commit at once), single
    steps (a delivery also with the later sequences renumbered one down, and
    also with its project's later record versions one down), then
    runs of five down to two neighbours at once, then nested requests, until
    nothing goes. A candidate already replayed is not replayed again.
    Bounded by ``MINIMIZE_REPLAYS``; returns the steps as replayed and their
    divergence.
    """
    budget = _Budget(MINIMIZE_REPLAYS, MINIMIZE_GUARD_SECONDS, run.progress,
                     "deleting the divergence's needless steps")
    kind = _failure_kind(reason)
    best_requests = [s["request"] for s in steps]
    # A fast-forward's deliveries (machine.do_ffwd): checked at their end, and never deleted one by one
    # (each later one would then be a gap).
    quiet = {s["request"].get("id") for s in steps if s.get("quiet")}
    best = (steps, reason)

    tried: set[str] = set()

    def attempt(requests: list):
        key = json.dumps(requests, sort_keys=True, default=str)
        if key in tried:
            return None
        tried.add(key)
        budget.spend()
        replayed = _replay_candidate(run, requests, quiet)
        if replayed is None:
            return None
        got, divergence = replayed
        if divergence is None or _failure_kind(divergence["reason"]) != kind:
            return None
        return got, divergence["reason"]

    # A fast-forward first: keep the shortest head of each run of its deliveries that still fails (bisected;
    # the requests after it renumbered, ``_shift_sequences``), so a bug past sequence ten keeps ten
    # deliveries, and one that a retransmission after a long fast-forward shows keeps a handful.
    for start, end in reversed(_quiet_runs(best_requests, quiet)):
        shortest_failing, longest_passing = end - start, 0
        while longest_passing + 1 < shortest_failing and budget.left():
            # Doubling from one while nothing failed (short replays first: most bugs need a few), then halving.
            keep = min(2 * longest_passing or 1, shortest_failing - 1) if shortest_failing == end - start \
                else (longest_passing + shortest_failing) // 2
            cut = shortest_failing - keep
            after = _shift_sequences(best_requests[start + shortest_failing:], best_requests[start + keep - 1], cut) \
                if keep else best_requests[start + shortest_failing:]
            found = attempt(best_requests[:start + keep] + after)
            if found is None:
                longest_passing = keep
                continue
            best, best_requests, shortest_failing = found, [s["request"] for s in found[0]], keep

    changed = True
    while changed and budget.left():
        changed = False
        for b in range(len(best_requests) - 2, 0, -1):
            # A project the divergence does not need: out of its snapshot whole (its pages alone cannot go:
            # the commit then refuses a snapshot that misses one).
            if b >= len(best_requests) - 1 or best_requests[b].get("op") != "begin" \
                    or best_requests[b].get("id") in quiet:
                continue
            for project in list((best_requests[b].get("frame") or {}).get("projectIds") or ()):
                candidate = _without_project(best_requests, b, project) if budget.left() else None
                found = attempt(candidate) if candidate is not None else None
                if found is not None:
                    best = found
                    best_requests = [s["request"] for s in found[0]]
                    changed = True
                    if b >= len(best_requests) - 1 or best_requests[b].get("op") != "begin":
                        break
        i = len(best_requests) - 2
        while i >= 1 and budget.left():  # never the first step (the reset)
            if best_requests[i].get("id") in quiet:
                i -= 1
                continue
            candidate = best_requests[:i] + best_requests[i + 1:]
            found = attempt(candidate)
            cursor = _consumed_sequence(best_requests[i])
            if found is None and cursor is not None and budget.left():
                # A delivery that only moved the cursor: gone, with the later sequences one down.
                found = attempt(best_requests[:i] + _shift_sequences(best_requests[i + 1:], cursor, 1))
            moved = _delivered_version(best_requests[i]) if found is None else None
            if moved is not None and cursor is not None and budget.left():
                # One link of a chain of deliveries to one project: gone, with the later sequences and that
                # project's later record versions one down.
                found = attempt(best_requests[:i] + _shift_versions(
                    _shift_sequences(best_requests[i + 1:], cursor, 1), *moved))
            if found is not None:
                best = found
                best_requests = [s["request"] for s in found[0]]
                changed = True
            i = min(i - 1, len(best_requests) - 2)
        for size in (5, 4, 3, 2):
            # No single step goes: try a run of neighbours at once (a begin, its pages and its commit; a
            # store answer and the read it feeds), each of which alone the rest still needs.
            if changed:
                break
            i = len(best_requests) - 1 - size
            while i >= 1 and budget.left():
                if not {r.get("id") for r in best_requests[i:i + size]} & quiet:
                    found = attempt(best_requests[:i] + best_requests[i + size:])
                    if found is not None:
                        best = found
                        best_requests = [s["request"] for s in found[0]]
                        changed = True
                        break
                i -= 1
        i = 0
        while i < len(best_requests) and budget.left():
            request = best_requests[i]
            inner = request.get("duringFetch") if isinstance(request, dict) else None
            if not isinstance(inner, list):
                inner = []  # nothing nested to take out
            j = len(inner) - 1
            while j >= 0 and budget.left():
                rest = inner[:j] + inner[j + 1:]
                smaller = dict(request, duringFetch=rest)
                if not rest:
                    del smaller["duringFetch"]
                found = attempt(best_requests[:i] + [smaller] + best_requests[i + 1:])
                if found is not None:
                    best = found
                    best_requests = [s["request"] for s in found[0]]
                    changed = True
                    if i >= len(best_requests):
                        break
                    request, inner = smaller, rest
                j -= 1
            i += 1
    return best


#: Replays the data pass may make once the steps are minimal (``_shrink_data``; a count, as above).
DATA_REPLAYS = 80
#: Replays one value's cutting may take of them (a long value that must stay long gives up there).
DATA_REPLAYS_PER_VALUE = 32
#: Steps the data pass may replay in all: a long trace (a fast-forward kept past a thousand deliveries) gets
#: fewer replays than ``DATA_REPLAYS`` (this many steps divided by its length, one at least).
DATA_STEPS = 2400
#: Seconds after which the data pass stops whatever the count: a guard against a hang only.
DATA_GUARD_SECONDS = 300.0
#: Literals no longer than this are left as they are (``p1``, ``A``: short already, and readable).
SHORT_LITERAL = 2

_TABLE_NAMES = re.compile(r"state table (\w+):|(?:: |\| )(\w+) differs: ")
_ROW_FIELDS = re.compile(r"row \([^)]*\): (\w+):")


def _divergence_shape(reason: str) -> tuple:
    """What the data pass keeps of a divergence: its kind (``_failure_kind``), and for the tables the ones
    that differ and the fields named, without the keys, ids or values (which the pass renames)."""
    tables = sorted({a or b for a, b in _TABLE_NAMES.findall(reason)})
    fields = sorted(set(_ROW_FIELDS.findall(reason)) | ({"value"} if " — value: " in reason else set()))
    return _failure_kind(reason), tuple(tables), tuple(fields)


def _longest(requests: list) -> dict[str, int]:
    """Per kind of literal the trace holds (``rename.KINDS``), its longest, in characters."""
    return {kind: max(map(len, found)) for kind in rename.KINDS if (found := rename.literals(requests, kind))}


def _data_note(lengths: Optional[dict], replays: Optional[int]) -> str:
    """A line under the report's header, ``data shrunk in N replays: longest key 128 -> 1 chars, ...``, or ""."""
    changed = [f"longest {kind} {before:,} -> {after:,} chars" for kind, (before, after) in (lengths or {}).items()
               if before != after]
    return f"\n  data shrunk in {replays} replays: {', '.join(changed)}" if changed else ""


def _shrink_data(run: _Run, steps: list, reason: str, quiet: Collection) -> tuple[list, str, int, dict]:
    """Replace the trace's literals with shorter ones while it still diverges the same way.

    Once the steps are minimal: each kind of literal (``rename.KINDS``: record keys, project ids, stored
    values) renamed at every place it appears (frames, value-store targets, snapshot ids, inside the stored
    envelopes; nested requests too). First every key, then every project, to its shortest name in the same
    order and of the same class (``rename.names``; for keys, failing that, of any class a Key has); then
    every value to ``""``; then each key and project still long on its own (``rename.between``, likewise),
    and each value cut to the shortest text that keeps the
    divergence (``rename.shrink_text``: ``""``, then halves, quarters..., single characters). A candidate is
    kept only when its replay diverges at the same step, of the same kind (``_failure_kind``) and in the same
    tables and fields (``_divergence_shape``). Literals of ``SHORT_LITERAL`` characters or fewer stay as they
    are. Bounded by ``DATA_REPLAYS`` (fewer for a trace longer than ``DATA_STEPS`` / ``DATA_REPLAYS``
    steps; ``DATA_REPLAYS_PER_VALUE`` for one value); returns the steps as
    replayed, their divergence, the replays made, and the literal lengths before and after
    (``LockstepReport.data_lengths``).
    """
    best_requests = [s["request"] for s in steps]
    allowed = min(DATA_REPLAYS, max(1, DATA_STEPS // max(1, len(best_requests))))
    budget = _Budget(allowed, DATA_GUARD_SECONDS, run.progress, "shortening the divergence's keys and values")
    shape, length = _divergence_shape(reason), len(best_requests)
    best = (steps, reason)
    before = _longest(best_requests)
    tried: set[str] = {json.dumps(best_requests, sort_keys=True, default=str)}

    def attempt(requests: list) -> bool:
        nonlocal best, best_requests
        key = json.dumps(requests, sort_keys=True, default=str)
        if key in tried or not budget.left():
            return False
        tried.add(key)
        budget.spend()
        replayed = _replay_candidate(run, requests, quiet)
        if replayed is None:
            return False
        got, divergence = replayed
        if divergence is None or divergence["index"] != length or _divergence_shape(divergence["reason"]) != shape:
            return False
        best, best_requests = (got, divergence["reason"]), requests
        return True

    def renamed(kind: str, mapping: Optional[dict]) -> bool:
        return mapping is not None and attempt(rename.rewrite(best_requests, kind, mapping))

    for kind in ("key", "project"):
        found = rename.literals(best_requests, kind)
        if any(len(f) > SHORT_LITERAL for f in found):
            strict = rename.names(found, kind)
            if not renamed(kind, strict) and kind == "key":  # a key need then only stay a Key
                loose = rename.names(found, kind, strict=False)
                renamed(kind, loose if loose != strict else None)
    values = rename.literals(best_requests, "value")
    if any(values):
        renamed("value", {v: "" for v in values})
    for kind in ("key", "project"):
        for old in sorted(rename.literals(best_requests, kind), key=lambda f: (-len(f), f)):
            found = rename.literals(best_requests, kind)
            if len(old) > SHORT_LITERAL and old in found and budget.left():
                new = rename.between(found, old, kind)
                if not renamed(kind, {old: new} if new is not None else None) and kind == "key":
                    other = rename.between(found, old, kind, strict=False)
                    renamed(kind, {old: other} if other is not None and other != new else None)
    for old in sorted(rename.literals(best_requests, "value"), key=lambda v: (-len(v), v)):
        if not old or old not in rename.literals(best_requests, "value") or not budget.left():
            continue
        cap = budget.replays - DATA_REPLAYS_PER_VALUE
        current = old

        def works(text: str) -> bool:
            nonlocal current
            if text == current or (text and text in rename.literals(best_requests, "value")):
                return False  # another value's text (but ""): the two would then be renamed as one
            if renamed("value", {current: text}):
                current = text
                return True
            return False

        rename.shrink_text(old, works, lambda: budget.left() and budget.replays > cap)
    after = _longest(best_requests)
    lengths = {kind: (before[kind], after[kind]) for kind in before if kind in after}
    return best[0], best[1], allowed - budget.replays, lengths


# ---------------------------------------------------------------------------
# Replay of saved requests
# ---------------------------------------------------------------------------


def replay_requests(requests: Sequence[Any], impl: Driver, model: Driver) -> Optional[dict]:
    """Replay adapter requests on both drivers; the first divergence, or None when they agree.

    The divergence is ``{"index" (1-based), "request", "model", "impl", "reason"}``.
    """
    return replay_steps(requests, impl, model)[1]
