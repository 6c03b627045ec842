"""Concurrent processes on one replica file (``conformance.concurrent``): linearizable against the model.

What is tested:

* the real implementation passes ``run_concurrent`` under the ``ci`` profile
  within its budget, every scenario kind run, the races reached (ops that
  overlap, witnesses that interleave ops' transactions, the refusals only a
  race gives); the other variants pass a short run;
* the checker: hand-made histories that no order of the model's steps
  explains are rejected with a message naming the op and its answer (two
  applied copies of one delivery, real-time order broken, tables that do not
  match); the granularity matters (``AWAIT`` rejects a history that a correct
  multi-process implementation gives; ``TRANSACTION`` explains it); a setup
  divergence and an exhausted search are reported as such, never as a pass;
* the model's steps: run back to back they give exactly what the model driver
  gives, at both granularities, on every kind of scenario;
* each mutant of ``tests/concurrency_mutants.py`` is caught by ``run_concurrent``
  ``ci`` (shrunk, written to ``out_dir``) and passes in one process: the
  concurrent scenarios sent one request after the other, and a short
  single-process lockstep (``LOCKSTEP_EXAMPLES``; the full ``ci`` lockstep
  figures are in docs/concurrent.md).

The figures (histories/s, search sizes, catches) are printed with ``-s``.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from envreplica.conformance.concurrent import (
    KINDS,
    THREAD_KINDS,
    Granularity,
    History,
    Latency,
    Op,
    Scenario,
    ScenarioKind,
    Verdict,
    WorkerPool,
    check_history,
    expected_state,
    generate_scenario,
    run_concurrent,
    sequential_disagreement,
)
from envreplica.conformance.concurrent.history import interleaved, outcome_of
from envreplica.conformance.concurrent.run import PROFILES, Profile
from envreplica.conformance.concurrent.scenarios import BatchOp
from envreplica.conformance.drivers import TEST_MASTER_KEY, ModelDriver, SqliteDriver
from envreplica.conformance.replica import lockstep_settings, replay_steps, run_lockstep
from envreplica.impl.sealing import Sealer

from adapter_requests import SID2, begin, commit, delivery, legacy, page, put, rec, snapshot, staged
from concurrency_mutants import CONCURRENCY_MUTANTS, THREAD_MUTANTS

#: Examples of the single-process lockstep each mutant must pass here (docs/concurrent.md has the full ``ci`` run),
#: and concurrent scenarios it must pass sent one request after the other.
LOCKSTEP_EXAMPLES = 20
SEQUENTIAL_SCENARIOS = 30


# ---------------------------------------------------------------------------
# The real implementation
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ci_report():
    return run_concurrent("fixed", profile="ci")


def test_real_implementation_is_linearizable_under_ci(ci_report):
    print("\n" + "\n".join(ci_report.lines()))
    assert ci_report.ok, "\n".join(ci_report.lines())
    assert ci_report.histories == PROFILES[Profile.CI].histories, ci_report.lines()[0]
    assert set(ci_report.by_kind) == {k.value for k in KINDS}


def test_ci_reaches_the_races(ci_report):
    """Ops ran at once, witnesses interleave transactions, and the answers only a race gives came."""
    assert ci_report.overlapping >= ci_report.histories // 2
    assert ci_report.interleaved >= ci_report.histories // 10
    for answer in ("delivery replayed", "delivery refused replica_state_changed", "delivery ok", "commit ok",
                   "page refused reconciliation_attempt_mismatch", "snapshot served", "snapshot null"):
        assert ci_report.outcomes.get(answer, 0) > 0, (answer, ci_report.outcomes)
    assert ci_report.outcomes.get("commit refused delivery_incomplete", 0) + \
        ci_report.outcomes.get("commit refused record_version_changed", 0) > 0, ci_report.outcomes


#: Histories of a threaded run here: the count ``envreplica check`` runs (``cli.main.THREAD_HISTORIES``).
THREAD_HISTORIES = 200


@pytest.fixture(scope="module")
def threads_report():
    return run_concurrent("fixed", profile="ci", mode="threads", histories=THREAD_HISTORIES)


def test_real_implementation_is_linearizable_in_threads(threads_report):
    """Threads on one ``SqliteReplica``: writers, readers and readiness waiters, every history linearizable,
    and the readiness path reached both ways (a wait that saw the gate open, one that reached its deadline)."""
    print("\n" + "\n".join(threads_report.lines()))
    assert threads_report.ok, "\n".join(threads_report.lines())
    assert threads_report.histories == THREAD_HISTORIES
    assert set(threads_report.by_kind) == {k.value for k in THREAD_KINDS}
    assert threads_report.overlapping >= threads_report.histories // 3
    for answer in ("ready true", "ready false", "diagnostics gate_closed", "diagnostics serves", "commit ok",
                   "snapshot served", "snapshot null", "close ok"):
        assert threads_report.outcomes.get(answer, 0) > 0, (answer, threads_report.outcomes)


THREAD_IDS = [m.name for m in THREAD_MUTANTS]


@pytest.mark.parametrize("mutant", THREAD_MUTANTS, ids=THREAD_IDS)
def test_thread_mutant_is_caught_in_threads(mutant, tmp_path):
    report = run_concurrent("fixed", profile="ci", mode="threads", histories=THREAD_HISTORIES,
                            driver_class=mutant.driver_class(), out_dir=tmp_path)
    assert not report.ok, f"{mutant.name} ({mutant.bug}) was not caught:\n" + "\n".join(report.lines())
    failure = report.failures[0]
    print(f"\n{mutant.name}: caught after {failure.found_after} histories\n{failure.message()}")
    assert failure.check.verdict in (Verdict.NOT_LINEARIZABLE, Verdict.UNREADABLE, Verdict.INVARIANT)
    assert " thread " in failure.message() and "Traceback" not in failure.message()
    assert (tmp_path / f"concurrent-threads-{failure.history.variant}.json").is_file()


@pytest.mark.parametrize("mutant", THREAD_MUTANTS, ids=THREAD_IDS)
def test_thread_mutant_agrees_with_the_model_in_one_thread(mutant, scratch):
    """One request after the other (the readiness scenarios too) and a short lockstep: the mutant is invisible."""
    _invisible_one_at_a_time(mutant, scratch, THREAD_KINDS)


@pytest.mark.parametrize("variant", ["seed", "fix-f1"])
def test_other_variants_are_linearizable(variant):
    report = run_concurrent(variant, profile="ci", histories=60)
    assert report.ok, "\n".join(report.lines())
    assert report.histories == 60


# ---------------------------------------------------------------------------
# The checker, on hand-made histories
# ---------------------------------------------------------------------------

A = rec("A")
A_ROT = rec("A", rev=1, gen=2, ref=staged(SID2))  # a rotation: a new value to fetch
A_OMIT = rec("A", rev=2, gen=1, binding={"kind": "omit"})  # withheld: nothing to fetch
SETUP = (put(), put(ref=staged(SID2)), begin(), page([A], version=1), commit(versions=[("p1", 1)]))


def _model_answers(setup, requests) -> tuple[list[dict], object]:
    """The model's answers to ``requests`` sent one after the other after ``setup``, and its state then."""
    model = ModelDriver("fixed")
    for n, request in enumerate(setup):
        model.handle(dict(request, id=n))
    answers = [model.handle(dict(request, id=100 + n)) for n, request in enumerate(requests)]
    return answers, model.state


def _history(setup, ops, final_state=None) -> History:
    """``ops``: (process, request, response, call µs, return µs)."""
    return History("fixed", "hand-made", tuple(setup), None,
                   tuple(Op(i, p, req, resp, call * 1000, ret * 1000)
                         for i, (p, req, resp, call, ret) in enumerate(ops)),
                   final_state)


def test_one_delivery_applied_twice_is_rejected():
    d = delivery(A_ROT, version=2)
    (applied, replayed), _ = _model_answers(SETUP, [d, d])
    ok = _history(SETUP, [(0, d, applied, 0, 100), (1, d, replayed, 10, 90)])
    check = check_history(ok)
    assert check.verdict is Verdict.LINEARIZABLE and check.passed
    assert check.witness[-1].startswith("op1 delivery: prepare -> ok (replayed)"), check.witness
    twice = _history(SETUP, [(0, d, applied, 0, 100), (1, d, applied, 10, 90)])
    check = check_history(twice)
    assert check.verdict is Verdict.NOT_LINEARIZABLE and not check.passed
    message = check.message(twice)
    assert "no order of the model's transactions" in message
    assert "each answer occurs in some order, but no one order gives them all" in message
    assert "op0 process 0" in message and "op1 process 1" in message  # the history is shown


def test_real_time_order_is_respected():
    d = delivery(A_ROT, version=2)
    (applied, replayed), _ = _model_answers(SETUP, [d, d])
    # op0 answered "replayed": it must come second, so op1 must not have started after op0 returned.
    overlapping = _history(SETUP, [(0, d, replayed, 0, 100), (1, d, applied, 50, 200)])
    check = check_history(overlapping)
    assert check.passed
    assert check.witness[0].startswith("op1 ")
    after = _history(SETUP, [(0, d, replayed, 0, 100), (1, d, applied, 150, 200)])
    check = check_history(after)
    assert check.verdict is Verdict.NOT_LINEARIZABLE
    assert "op0 (delivery s1:1" in check.reason and "answered ok (replayed)" in check.reason


def test_tables_that_no_order_leaves_are_rejected():
    d = delivery(A_ROT, version=2)
    sealer = Sealer(TEST_MASTER_KEY)
    (applied, replayed), state = _model_answers(SETUP, [d, d])
    good = expected_state(state, sealer)
    ops = [(0, d, applied, 0, 100), (1, d, replayed, 10, 90)]
    assert check_history(_history(SETUP, ops, good)).passed
    (_, _), other = _model_answers(SETUP, [delivery(A_OMIT, version=2), delivery(A_OMIT, version=2)])
    check = check_history(_history(SETUP, ops, expected_state(other, sealer)))
    assert check.verdict is Verdict.NOT_LINEARIZABLE
    assert "none of those orders leaves the tables the implementation holds" in check.reason
    assert "records differs" in check.reason


def test_await_granularity_rejects_what_two_processes_may_do():
    """A delivery with nothing to fetch is two transactions (prepare, final) and no await between them.

    In one process nothing runs between them; in two, another delivery of the
    same sequence can finish in between, and the first is refused
    ``replica_state_changed``. The implementation really answers this
    (found by ``run_concurrent`` at ``AWAIT`` granularity); only
    ``TRANSACTION`` granularity explains it.
    """
    d = delivery(A_OMIT, version=2)
    (applied,), _ = _model_answers(SETUP, [d])
    state_changed = {"id": 1, "ok": True, "result": {
        "ok": False, "replayed": False, "consumed": False, "attemptId": None, "code": "replica_state_changed",
        "policyEpochs": [1], "appliedThrough": {"streamId": "s1", "sequence": 1}}}
    history = _history(SETUP, [(0, d, state_changed, 0, 300), (1, d, applied, 50, 200)])
    assert check_history(history, granularity=Granularity.AWAIT).verdict is Verdict.NOT_LINEARIZABLE
    check = check_history(history, granularity=Granularity.TRANSACTION)
    assert check.passed, check.message(history)
    assert check.witness[0] == "op0 delivery: prepare"
    assert check.witness[-1].startswith("op0 delivery: final -> refused replica_state_changed")


def test_setup_divergence_and_budget_are_never_a_pass():
    d = delivery(A_ROT, version=2)
    (applied,), _ = _model_answers(SETUP, [d])
    wrong_setup = History("fixed", "hand-made", SETUP, ({"ok": True, "result": {}},) * len(SETUP),
                          (Op(0, 0, d, applied, 0, 1),), None)
    check = check_history(wrong_setup)
    assert check.verdict is Verdict.SETUP_DIVERGED and not check.passed
    assert "setup step s3" in check.reason  # the begin: the store.put answers {} as the model does
    tiny = check_history(_history(SETUP, [(0, d, applied, 0, 100), (1, d, applied, 10, 90)]), max_nodes=1)
    assert tiny.verdict is Verdict.UNDECIDED and not tiny.passed


def test_interleaved_and_outcomes():
    assert interleaved(("op0 a", "op1 b", "op0 c"))
    assert not interleaved(("op0 a", "op0 b", "op1 c"))
    op = Op(0, 0, snapshot(), {"ok": True, "result": None}, 0, 1)
    assert outcome_of(op) == "snapshot null"


# ---------------------------------------------------------------------------
# The model's steps, back to back, are the model driver
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("granularity", list(Granularity))
def test_steps_back_to_back_are_the_model(granularity):
    rng = random.Random(5)
    checked = 0
    for n in range(120):
        scenario = generate_scenario(THREAD_KINDS[n % len(THREAD_KINDS)], rng)  # every kind
        model = ModelDriver("fixed")
        for i, request in enumerate(scenario.setup):
            model.handle(dict(request, id=i))
        for op in scenario.batch:
            problem = sequential_disagreement(model, op.request, granularity)
            assert problem is None, (scenario.kind, problem)
            checked += 1
    # Odd reads too: a legacy reference (its own parameter name), one with no legacy name, a failing store.
    model = ModelDriver("fixed")
    failing = {"op": "store.fail", "projectId": "p1", "key": "A", "ref": staged(), "mode": "error"}
    for i, request in enumerate([put(key="L", ref=legacy(3), raw="not an envelope"), begin(), failing]):
        model.handle(dict(request, id=i))
    for request in (page([rec("A"), rec("L", ref=legacy(3)), rec("_X", ref=legacy(1))], version=1),
                    commit(versions=[("p1", 1)]), delivery(rec("L", gen=2, ref=legacy(4)), version=2),
                    {"op": "status"}, snapshot(), {"op": "receipts"}, {"op": "close"}):
        assert sequential_disagreement(model, request, granularity) is None
        checked += 1
    assert checked > 300


# ---------------------------------------------------------------------------
# The mutants
# ---------------------------------------------------------------------------

MUTANT_IDS = [m.name for m in CONCURRENCY_MUTANTS]


@pytest.mark.parametrize("mutant", CONCURRENCY_MUTANTS, ids=MUTANT_IDS)
def test_mutant_is_caught_under_ci(mutant, tmp_path):
    started = time.perf_counter()
    report = run_concurrent("fixed", profile="ci", driver_class=mutant.driver_class(), out_dir=tmp_path)
    print(f"\n{mutant.name}: {'caught' if not report.ok else 'MISSED'} after "
          f"{report.failures[0].found_after if report.failures else report.histories} histories, "
          f"{time.perf_counter() - started:.1f} s with shrinking")
    assert not report.ok, f"{mutant.name} ({mutant.bug}) was not caught:\n" + "\n".join(report.lines())
    failure = report.failures[0]
    print(failure.message())
    assert failure.check.verdict in (Verdict.NOT_LINEARIZABLE, Verdict.UNREADABLE, Verdict.INVARIANT)
    assert "Traceback" not in failure.message()
    assert len(failure.history.ops) <= failure.original_ops
    doc = json.loads(failure.path.read_text())
    assert doc["verdict"] == failure.check.verdict.value and doc["ops"]
    assert (tmp_path / f"concurrent-{failure.history.variant}.txt").is_file()


@pytest.mark.parametrize("mutant", CONCURRENCY_MUTANTS, ids=MUTANT_IDS)
def test_mutant_agrees_with_the_model_in_one_process(mutant, scratch):
    """The concurrent scenarios, one request after the other, and a short lockstep: the mutant is invisible."""
    _invisible_one_at_a_time(mutant, scratch, KINDS)


def _invisible_one_at_a_time(mutant, scratch, kinds) -> None:
    """``mutant`` answers as the model on ``SEQUENTIAL_SCENARIOS`` scenarios of ``kinds`` sent one request
    after the other, and passes a short single-process lockstep."""
    driver = mutant.driver("fixed", scratch / "one.db")
    try:
        rng = random.Random(9)
        for n in range(SEQUENTIAL_SCENARIOS):
            scenario = generate_scenario(kinds[n % len(kinds)], rng)
            requests = [{"op": "reset"}, *scenario.setup, *(op.request for op in scenario.batch)]
            requests = [dict(r, id=i) for i, r in enumerate(requests)]
            _, divergence = replay_steps(requests, driver, ModelDriver("fixed"), variant="fixed")
            assert divergence is None, (mutant.name, scenario.kind, divergence)
    finally:
        driver.close()
    report = run_lockstep(mutant.factory(scratch), variant="fixed",
                          settings=lockstep_settings("ci", max_examples=LOCKSTEP_EXAMPLES))
    assert report.ok, report.failure


def test_harness_refuses_ops_of_one_process_in_a_setup(scratch):
    scenario = Scenario(ScenarioKind.MIXED, ({"op": "store.off"},), (BatchOp(0, {"op": "status"}),
                                                                      BatchOp(1, {"op": "status"})))
    with WorkerPool(2, SqliteDriver, "fixed", latency=Latency(), seed=0, scratch=scratch) as pool:
        with pytest.raises(ValueError, match="acts on one process"):
            pool.run(scenario)
