"""Test the tester: the lockstep's ``ci`` profile must catch every mutant of ``tests/impl_mutants.py``.

Two parts.

1. Before any lockstep: each mutant's hand-written scenario runs clean on the
   real ``SqliteDriver`` (same responses as the model, same state read back)
   and diverges on the mutant (``test_each_mutant_is_observable``). So every
   mutant is a real behaviour change, not one semantically identical to the
   original, and the lockstep has something to find. The one mutant known to
   be equivalent through the adapter (a constant sealing AD) is shown to be
   equivalent on every scenario.
2. The gate: ``run_lockstep`` with the ``ci`` Hypothesis profile (fewer
   examples, see ``CATCH_MAX_EXAMPLES``) on each mutant must report a
   divergence with a short shrunk trace. A mutant the lockstep misses is kept
   as ``xfail(strict=True)`` with the reason (``MISSED``): that is a gap in the
   lockstep's strategies, not a reason to weaken the mutant.

The table (mutant, caught?, seconds, shrunk steps) is printed at the end of
the module (visible without ``-s``).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import settings

from envreplica.conformance.drivers import ModelDriver, SqliteDriver
from envreplica.impl.replica import with_macs
from envreplica.model.state import Variant

from impl_mutants import EQUIVALENT_MUTANTS, MUTANTS, ImplMutant, with_ids

HAVE_LOCKSTEP = importlib.util.find_spec("envreplica.conformance.lockstep") is not None
NEEDS_LOCKSTEP = pytest.mark.skipif(not HAVE_LOCKSTEP, reason="conformance/lockstep.py is not written yet")

#: Examples per mutant: the ``ci`` profile with a smaller budget, measured so each catch stays well
#: under 20 s (a mutant is either caught within a few examples or not at all; see the table).
CATCH_MAX_EXAMPLES = 100
#: The longest shrunk trace a catch may have.
MAX_SHRUNK_STEPS = 15
#: Seconds Hypothesis may spend shrinking one catch (see ``shrink_budget``).
SHRINK_SECONDS = 10

#: Mutants the lockstep misses (name -> why): strict xfails, each a gap in the lockstep's strategies.
MISSED: dict[str, str] = {}


# ---------------------------------------------------------------------------
# Part 1: each mutant is observable on a hand-written scenario
# ---------------------------------------------------------------------------


def _roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _state_of(driver: SqliteDriver):
    try:
        return driver.replica.to_model_state()
    except Exception as error:  # an unreadable file differs from every model state
        return f"<{type(error).__name__}: {error}>"


@dataclass
class Step:
    request: dict
    model: dict
    impl: dict
    same_state: bool

    @property
    def same_response(self) -> bool:
        return json.dumps(self.model, sort_keys=True) == json.dumps(self.impl, sort_keys=True)


def play(driver: SqliteDriver, requests, variant) -> list[Step]:
    """Run ``requests`` through the model and ``driver``; compare responses and state after each."""
    model = ModelDriver(variant)
    steps = []
    try:
        for request in with_ids(list(requests)):
            m = _roundtrip(model.handle(_roundtrip(request)))
            i = _roundtrip(driver.handle(_roundtrip(request)))
            same_state = with_macs(model.state, driver.sealer) == _state_of(driver)
            steps.append(Step(request, m, i, same_state))
    finally:
        driver.close()
    return steps


def _describe(steps: list[Step]) -> str:
    return "\n".join(
        f"  {s.request['op']:<10} same response={s.same_response!s:<5} same state={s.same_state!s:<5} "
        f"model={json.dumps(s.model)[:150]}  impl={json.dumps(s.impl)[:150]}"
        for s in steps
    )


def _ids(mutants) -> list:
    return [pytest.param(m, id=m.name) for m in mutants]


def test_there_are_at_least_12_mutants():
    assert len(MUTANTS) >= 12
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("mutant", _ids(MUTANTS))
def test_scenario_is_clean_on_the_real_implementation(mutant: ImplMutant, tmp_path):
    """The control: the unmutated implementation agrees with the model on the whole scenario."""
    steps = play(SqliteDriver(mutant.variant, tmp_path / "real.db"), mutant.scenario, mutant.variant)
    assert all(s.same_response and s.same_state for s in steps), _describe(steps)


@pytest.mark.parametrize("mutant", _ids(MUTANTS))
def test_each_mutant_is_observable(mutant: ImplMutant, tmp_path):
    """The mutant parts from the model on its scenario, where ``observe`` says."""
    steps = play(mutant.driver(mutant.variant, tmp_path / "mutant.db"), mutant.scenario, mutant.variant)
    if mutant.observe == "responses":
        assert any(not s.same_response for s in steps), f"{mutant.name}: no response differs\n{_describe(steps)}"
    else:
        assert mutant.observe == "state", mutant.observe
        assert all(s.same_response for s in steps), f"{mutant.name}: expected state-only\n{_describe(steps)}"
        assert any(not s.same_state for s in steps), f"{mutant.name}: no state differs\n{_describe(steps)}"


@pytest.mark.parametrize("name", list(EQUIVALENT_MUTANTS))
def test_equivalent_mutant_is_equivalent_through_the_adapter(name, tmp_path):
    """Why "AD dropped from sealing" is not in the list: no scenario tells it from the original."""
    mutant = EQUIVALENT_MUTANTS[name]
    for n, other in enumerate(MUTANTS):
        steps = play(mutant.driver(other.variant, tmp_path / f"eq-{n}.db"), other.scenario, other.variant)
        assert all(s.same_response and s.same_state for s in steps), f"{other.name}\n{_describe(steps)}"


# ---------------------------------------------------------------------------
# Part 2: the ci profile catches every mutant
# ---------------------------------------------------------------------------


@dataclass
class Catch:
    name: str
    caught: bool
    seconds: float
    shrunk_steps: Optional[int]
    examples: Optional[int]


CATCHES: list[Catch] = []


def _table() -> str:
    rows = [("mutant", "caught?", "seconds", "shrunk steps", "examples run")]
    for c in CATCHES:
        rows.append((c.name, "yes" if c.caught else "NO", f"{c.seconds:.1f}",
                     "-" if c.shrunk_steps is None else str(c.shrunk_steps),
                     "-" if c.examples is None else str(c.examples)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    mutants = [c for c in CATCHES if c.name != CONTROL]
    lines.append(f"{sum(c.caught for c in mutants)}/{len(mutants)} mutants caught, "
                 f"{sum(c.seconds for c in CATCHES):.1f} s in all (ci profile, max_examples={CATCH_MAX_EXAMPLES}, "
                 f"shrinking capped at {SHRINK_SECONDS} s per run)")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _print_catch_table(request):
    yield
    if not CATCHES:
        return
    text = "\nmutants vs the lockstep (ci profile)\n" + _table()
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)
    else:  # pragma: no cover
        print(text)


def _catch_settings() -> settings:
    """The ``ci`` profile (derandomized, no database) with the measured example budget."""
    return settings(settings.get_profile("ci"), max_examples=CATCH_MAX_EXAMPLES)


@pytest.fixture
def scratch(tmp_path):
    """Where the databases go: tmpfs when there is one (the lockstep's own default does the same)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="envreplica-mutants-", dir=shm))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path / "db"


@pytest.fixture
def shrink_budget(monkeypatch):
    """Cap Hypothesis's shrinking at ``SHRINK_SECONDS`` per run (its own cap is 300 s).

    Hypothesis has no public setting for this; ``MAX_SHRINKING_SECONDS`` is
    the engine's module constant, read when shrinking starts. The shrunk
    length is still asserted, so a cap too tight for a catch shows as a
    failure, never as a pass.
    """
    from hypothesis.internal.conjecture import engine

    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", SHRINK_SECONDS, raising=False)


def _lockstep_params() -> list:
    out = []
    for m in MUTANTS:
        marks = [NEEDS_LOCKSTEP]
        if m.name in MISSED:
            marks.append(pytest.mark.xfail(strict=True, reason=MISSED[m.name]))
        out.append(pytest.param(m, id=m.name, marks=marks))
    return out


CONTROL = "(real SqliteReplica)"


@NEEDS_LOCKSTEP
def test_ci_profile_passes_the_real_implementation(scratch, shrink_budget):
    """The control: the same settings find nothing in the unmutated implementation."""
    from envreplica.conformance.lockstep import run_lockstep

    counter = itertools.count()
    started = time.perf_counter()
    report = run_lockstep(lambda: SqliteDriver(Variant.FIXED, scratch / f"real-{next(counter)}.db"),
                          variant=Variant.FIXED, settings=_catch_settings())
    CATCHES.append(Catch(CONTROL, not report.ok, time.perf_counter() - started, report.shrunk_steps,
                         report.examples))
    assert report.ok, report.failure


@pytest.mark.parametrize("mutant", _lockstep_params())
def test_ci_profile_catches_mutant(mutant: ImplMutant, scratch, shrink_budget, tmp_path):
    from envreplica.conformance.lockstep import run_lockstep

    started = time.perf_counter()
    report = run_lockstep(mutant.factory(scratch), variant=mutant.variant, settings=_catch_settings(),
                          out_dir=tmp_path / "trace")
    seconds = time.perf_counter() - started
    CATCHES.append(Catch(mutant.name, not report.ok, seconds, report.shrunk_steps, report.examples))
    assert not report.ok, f"{mutant.name} ({mutant.bug}) was not caught in {report.examples} examples"
    assert report.shrunk_steps is not None and report.shrunk_steps <= MAX_SHRUNK_STEPS, (
        f"{mutant.name}: shrunk trace of {report.shrunk_steps} steps\n{report.failure}")
