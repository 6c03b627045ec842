"""The lockstep: the model and the SQLite implementation driven together by Hypothesis.

The main tests run ``LockstepMachine`` under the ``ci`` profile (derandomized,
so every run generates the same examples) against ``SqliteDriver`` for
variant ``fixed`` and variant ``seed``: no divergence, and every reachable
refusal code, materialization reason, error type and gate transition is
reached (``receipt_missing`` is argued unreachable in
``checker.coverage.UNREACHABLE``; nothing else is exempt). The rest pin the
harness itself: response comparison, the readable trace, the files a failure
writes, replay, and that a broken implementation is caught and shrunk.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from hypothesis import settings

from envreplica.conformance.drivers import TEST_MASTER_KEY, ModelDriver, SqliteDriver
from envreplica.conformance.lockstep import (
    COVERAGE,
    KINDS,
    PROFILE_EXAMPLES,
    LockstepCoverage,
    LockstepMachine,
    compare_responses,
    describe_request,
    describe_response,
    lockstep_settings,
    print_coverage,
    read_requests,
    replay_requests,
    run_lockstep,
)
from envreplica.model.state import Variant
from envreplica.spec.gate import TRANSITIONS

#: Coverage items no run reaches, with the reason (beyond checker.coverage.UNREACHABLE).
EXEMPT: dict[str, str] = {}


def sqlite_factory(directory: Path, variant: str):
    counter = itertools.count()

    def make():
        return SqliteDriver(variant, directory / f"replica-{next(counter)}.db", master_key=TEST_MASTER_KEY)

    return make


# ---------------------------------------------------------------------------
# The ci run, per variant
# ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("variant", [Variant.FIXED.value, Variant.SEED.value])
def test_ci_lockstep_against_sqlite(variant, scratch, tmp_path, capsys):
    started = time.perf_counter()
    report = run_lockstep(sqlite_factory(scratch, variant), variant=variant,
                          settings=lockstep_settings("ci"), out_dir=tmp_path / "traces")
    with capsys.disabled():
        print(f"\nlockstep ci [{variant}]: {report.examples} examples, {report.steps} steps, "
              f"{report.steps_per_second:.0f} steps/s, {time.perf_counter() - started:.1f} s")
    assert report.ok, report.failure
    assert report.examples >= PROFILE_EXAMPLES["ci"]
    missing = report.coverage.unreached(exempt=EXEMPT)
    assert not missing, f"the ci profile left reachable items unreached: {missing}"


def test_every_gate_transition_and_code_is_a_coverage_row():
    rows = {(g, i) for g, i, _ in LockstepCoverage().rows()}
    assert {("gate", e.label()) for e in TRANSITIONS} <= rows
    assert ("refusal", "receipt_missing") in rows
    assert ("materialization", "unavailable: materialization_pending") in rows
    assert ("op", "restart") in rows and ("error", "unsupported") in rows
    # receipt_missing is left out of unreached() as argued unreachable; nothing else
    assert ("refusal", "receipt_missing") not in LockstepCoverage().unreached()
    assert len(LockstepCoverage().unreached()) == len(rows) - 1


def test_module_coverage_accumulates_and_prints(scratch):
    before = sum(COVERAGE.ops.values())
    report = run_lockstep(sqlite_factory(scratch, "fixed"),
                          settings=lockstep_settings("dev", max_examples=5))
    assert report.ok, report.failure
    # The module-wide counters grow by exactly what this run counted (ops of requests and nested ones).
    added = sum(report.coverage.ops.values())
    assert added > 0
    assert sum(COVERAGE.ops.values()) == before + added
    from rich.console import Console

    console = Console(width=120, record=True)
    print_coverage(report.coverage, console)
    text = console.export_text()
    assert "refusal" in text and "restart: open -> closed.idle" in text and "unreachable" in text


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------


def test_compare_responses_rules():
    ok = {"id": 1, "ok": True, "result": {"ok": True, "n": 1}}
    assert compare_responses(ok, json.loads(json.dumps(ok))) is None
    assert "result.n" in compare_responses(ok, {"id": 1, "ok": True, "result": {"ok": True, "n": 2}})
    # true is not 1 on the wire
    assert compare_responses({"id": 1, "ok": True, "result": {"x": True}},
                             {"id": 1, "ok": True, "result": {"x": 1}}) is not None
    err = {"id": 2, "ok": False, "error": {"type": "invalid", "message": "a"}}
    assert compare_responses(err, {"id": 2, "ok": False, "error": {"type": "invalid", "message": "b"}}) is None
    assert "error.type" in compare_responses(err, {"id": 2, "ok": False,
                                                    "error": {"type": "corrupt", "message": "a"}})
    assert ".id" in compare_responses(ok, dict(ok, id=3))
    assert "keys differ" in compare_responses(ok, dict(ok, extra=1))
    nested = dict(ok, nested=[ok])
    assert compare_responses(nested, dict(ok, nested=[dict(ok, result={"ok": False})])).startswith(
        "response.nested[0].result")
    assert "not a JSON object" in compare_responses(ok, [1])


def test_describe_is_readable():
    begin = {"op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": ["p1"]},
             "keptPolicyEpochs": [1, 2], "orgId": "o1"}
    assert describe_request(begin) == "begin s1/a1 projects=['p1'] kept=[1, 2] org=o1"
    assert describe_request({"op": "explode"}).startswith("(raw)")
    refused = {"id": 1, "ok": True, "result": {"ok": False, "replayed": False, "consumed": False,
                                                "code": "delivery_gap"}}
    assert describe_response(refused).startswith("refused delivery_gap")
    assert describe_response({"id": 1, "ok": False, "error": {"type": "invalid", "message": "m"}}) == \
        "ERROR invalid: m"


# ---------------------------------------------------------------------------
# A broken implementation is caught, shrunk, and written down
# ---------------------------------------------------------------------------


class FlipCommitDriver(SqliteDriver):
    """Answers a refused commit as accepted (a response-only bug)."""

    def handle(self, request):
        response = super().handle(request)
        if request.get("op") == "commit" and response.get("ok") and response["result"].get("ok") is False:
            result = dict(response["result"])
            result.pop("code")
            result["ok"] = True
            response = dict(response, result=result)
        return response


def test_divergence_is_caught_shrunk_and_written(scratch, tmp_path):
    directory = scratch
    counter = itertools.count()
    out = tmp_path / "out"
    report = run_lockstep(lambda: FlipCommitDriver("fixed", directory / f"r{next(counter)}.db",
                                                           master_key=TEST_MASTER_KEY),
                          settings=lockstep_settings("ci", max_examples=100), out_dir=out)
    assert not report.ok
    assert report.shrunk_steps is not None and report.shrunk_steps <= 6, report.failure
    assert "DIVERGENCE" in report.failure and "commit" in report.failure
    assert report.trace_path == out / "lockstep-fixed.jsonl" and report.trace_path.exists()
    assert report.itf_path is not None and report.itf_path.exists()
    requests = read_requests(report.trace_path)
    assert len(requests) == report.shrunk_steps and requests[0]["op"] == "reset"
    itf = json.loads(report.itf_path.read_text())
    assert itf["#meta"]["format"] == "ITF" and itf["vars"] == ["request", "model", "implementation", "agree"]
    assert len(itf["states"]) == report.shrunk_steps and itf["states"][-1]["agree"] is False
    # The written requests replay to the same divergence, and agree on the real implementation.
    again = FlipCommitDriver("fixed", directory / "again.db", master_key=TEST_MASTER_KEY)
    diverged = replay_requests(requests, again, ModelDriver("fixed"))
    assert diverged is not None and diverged["index"] == len(requests)
    real = SqliteDriver("fixed", directory / "real.db", master_key=TEST_MASTER_KEY)
    assert replay_requests(requests, real, ModelDriver("fixed")) is None


class ForgetfulCloseDriver(SqliteDriver):
    """Answers close but leaves the attempt staged (a state-only bug: responses agree until later)."""

    def _op_close(self, fields, nested):
        from envreplica.spec.domain import Done

        return Done()


def test_state_divergence_is_caught_by_the_readback(scratch):
    directory = scratch
    counter = itertools.count()
    report = run_lockstep(lambda: ForgetfulCloseDriver("fixed", directory / f"r{next(counter)}.db",
                                                               master_key=TEST_MASTER_KEY),
                          settings=lockstep_settings("ci", max_examples=100))
    assert not report.ok
    assert "state after the step differs" in report.divergence or "authority" in report.divergence
    assert report.failure.splitlines()[-2].lstrip().startswith(("model:", "implementation:"))
    assert "close" in report.failure.splitlines()[-4]


def test_replay_requests_agrees_on_a_saved_scenario(tmp_path):
    requests = [{"id": 1, "op": "reset"},
                {"id": 2, "op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"},
                                                   "projectIds": ["p1"]}, "keptPolicyEpochs": [1], "orgId": "o1"},
                {"id": 3, "op": "status"}]
    real = SqliteDriver("fixed", tmp_path / "r.db", master_key=TEST_MASTER_KEY)
    assert replay_requests(requests, real, ModelDriver("fixed")) is None


def test_bare_machine_runs_as_a_testcase():
    """``LockstepMachine.TestCase`` works unbound (built-in SQLite, variant fixed)."""
    from hypothesis.stateful import run_state_machine_as_test

    try:
        run_state_machine_as_test(LockstepMachine, settings=settings(lockstep_settings("dev", max_examples=3),
                                                                     deadline=None))
    finally:
        if LockstepMachine.run is not None:
            assert LockstepMachine.run.examples >= 3 and LockstepMachine.run.steps > 3
            LockstepMachine.run.close()
            LockstepMachine.run = None
    assert set(KINDS) >= {"begin", "page", "delivery", "commit", "close", "restart", "read", "store", "invalid"}
