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

import contextlib
import itertools
import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import settings

from envreplica.conformance.drivers import TEST_MASTER_KEY, ModelDriver, SqliteDriver
from envreplica.conformance.replica import (
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
def test_ci_lockstep_against_sqlite(variant, scratch, tmp_path, capsys, monkeypatch):
    """The ci run agrees and covers; and every request and response of it, on both drivers (the model and the
    SQLite implementation, nested exchanges included), follows the contract's JSON Schema (``schema_check``)."""
    from envreplica.conformance import drivers
    from schema_check import Contract

    contracts = {"ModelDriver": Contract(), "SqliteDriver": Contract()}
    handle = drivers._BaseDriver.handle

    def recording(self, request):
        response = handle(self, request)
        if self._depth == 0:  # nested exchanges are checked inside their outer one
            side = "SqliteDriver" if isinstance(self, SqliteDriver) else "ModelDriver"
            contracts[side].exchange(request, response)
        return response

    monkeypatch.setattr(drivers._BaseDriver, "handle", recording)
    started = time.perf_counter()
    report = run_lockstep(sqlite_factory(scratch, variant), variant=variant,
                          settings=lockstep_settings("ci"), out_dir=tmp_path / "traces")
    with capsys.disabled():
        print(f"\nlockstep ci [{variant}]: {report.examples} examples, {report.steps} steps, "
              f"{report.steps_per_second:.0f} steps/s, {time.perf_counter() - started:.1f} s")
    assert report.ok, report.failure
    for side, contract in contracts.items():
        assert contract.problems == [], (side, contract.problems[:5])
        assert contract.responses > 10_000, side
    assert {"PageResult", "ApplyResult", "Snapshot", "Crashed", "Diagnosis"} <= contracts["SqliteDriver"].results_seen
    assert report.examples >= PROFILE_EXAMPLES["ci"]
    missing = report.coverage.unreached(exempt=EXEMPT)
    assert not missing, f"the ci profile left reachable items unreached: {missing}"
    from envreplica.conformance.replica.coverage import INPUT_ITEMS

    with capsys.disabled():  # the production-shaped inputs, each required like every row
        print("  " + "; ".join(f"{item}: {report.coverage.inputs[item]:,}" for _, item in INPUT_ITEMS))


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
    assert itf["#meta"]["format"] == "ITF" and itf["#meta"]["protocol"] == "replica"
    assert itf["vars"] == ["request", "model", "implementation", "agree", "mbt::actionTaken", "mbt::nondetPicks"]
    assert [s["mbt::actionTaken"] for s in itf["states"]] == [r["op"] for r in requests]
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


def test_compare_holds_a_diagnosis_by_its_reason():
    """``diagnostics`` (docs/protocol.md section 6): the reason must agree, the message is free text;
    every other result (``ready``, a crash) is compared exactly."""
    diag = {"id": 1, "ok": True, "result": {"reason": "gate_closed", "message": "serving gate is closed"}}
    assert compare_responses(diag, dict(diag, result={"reason": "gate_closed", "message": "closed, sorry"})) is None
    assert ".result.reason" in compare_responses(diag, dict(diag, result={"reason": "projects_mismatch",
                                                                           "message": "x"}))
    assert compare_responses(diag, dict(diag, result=None)) is not None
    assert compare_responses(diag, dict(diag, result={"reason": "gate_closed"})) is not None
    assert compare_responses(diag, dict(diag, result={"reason": "gate_closed", "message": 7})) is not None
    nested = {"id": 2, "ok": True, "result": {}, "nested": [diag]}
    assert compare_responses(nested, dict(nested, nested=[dict(diag, result=dict(diag["result"],
                                                                                  message="other"))])) is None
    ready = {"id": 3, "ok": True, "result": {"ready": True}}
    assert compare_responses(ready, dict(ready, result={"ready": False})) is not None
    crashed = {"id": 4, "ok": True, "result": {"crashedAfterCommit": 2}}
    assert compare_responses(crashed, dict(crashed, result={"crashedAfterCommit": 3})) is not None


# ---------------------------------------------------------------------------
# Production-shaped inputs: long streams, task orders, the Key rule, values, the ack bound
# ---------------------------------------------------------------------------

_KEY_RULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SEGMENT_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ID_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def _bound_machine(directory: Path, variant: str = "fixed"):
    """A ``LockstepMachine`` bound to a run of its own on SQLite (the caller closes ``machine.ctx``)."""
    from envreplica.conformance.replica.context import _Run

    return LockstepMachine.bind(_Run(sqlite_factory(directory, variant), Variant(variant), None, True))()


def test_input_items_are_required_coverage_rows():
    """Every production-shaped input item is a row that ``unreached()`` requires (none exempt), so
    ``test_ci_lockstep_against_sqlite`` fails when the ci profile stops reaching one."""
    from envreplica.conformance.replica.coverage import INPUT_ITEMS

    rows = {(g, i) for g, i, _ in LockstepCoverage().rows()}
    assert set(INPUT_ITEMS) <= rows
    assert set(INPUT_ITEMS) <= set(LockstepCoverage().unreached(exempt=EXEMPT))
    items = {i for _, i in INPUT_ITEMS}
    assert {"an example consumed >= 10", "an example consumed >= 100", "an example consumed >= 1,000",
            "replayed below a decimal boundary", "unsorted task order, served", "duplicate ids while serving: null",
            "128 characters, installed", "legacy, 65 characters: value_reference_invalid",
            "page exactly at the bound, accepted", "page 1 byte over the bound, refused"} <= items
    served = {("served value", c) for c in ("empty", "NUL", "lone surrogate", "non-BMP", "over 64 KiB")}
    assert served <= set(INPUT_ITEMS)


def test_domains_span_the_key_and_segment_rules():
    from envreplica.conformance.replica.coverage import classes_of
    from envreplica.conformance.replica.domains import ALL_KEYS, HARD_VALUES, KEYS, LEGACY_KEYS, ODD_PROJECTS, PROJECTS
    from envreplica.model.store import legacy_parameter_name

    assert list(KEYS) == sorted(KEYS) and list(ALL_KEYS) == sorted(ALL_KEYS) and set(KEYS) < set(ALL_KEYS)
    assert all(_KEY_RULE.match(k) for k in ALL_KEYS)
    assert max(map(len, ALL_KEYS)) == 128 and any(k.startswith("_") for k in ALL_KEYS)
    assert any(c.isdigit() for k in ALL_KEYS for c in k)
    legacy = {len(k): legacy_parameter_name("/x", "p1", k) for k in LEGACY_KEYS}
    assert legacy[64] is not None and legacy[65] is None  # the Segment rule's length bound
    assert all(_SEGMENT_RULE.match(p) for p in PROJECTS + ODD_PROJECTS)
    assert max(map(len, ODD_PROJECTS)) == 64 and sorted(ODD_PROJECTS) != list(ODD_PROJECTS)
    held = {c for v in HARD_VALUES for c in classes_of(v)}
    assert {"empty", "NUL", "lone surrogate", "non-BMP", "over 64 KiB"} <= held
    lone = [v for v in HARD_VALUES if "lone surrogate" in classes_of(v)]
    assert any("\ud800" in v for v in lone)  # a high one alone
    assert any(v.startswith("\udc00") for v in lone)  # a low one alone
    assert any("\ude00\ud83d" in v for v in lone)  # a reversed pair (low, then high)
    assert max(len(v.encode("utf-8", "surrogatepass")) for v in HARD_VALUES) == 262144


def test_page_ack_bytes_is_the_seeds_page_fits_rule():
    """``coverage.page_ack_bytes`` counts what ``pageFits`` counts: a page fits a bound of exactly its size,
    not one byte less (checked against the model's ``page_fits``)."""
    from envreplica.conformance.replica.coverage import page_ack_bytes
    from envreplica.conformance.replica.domains import ALL_KEYS as KEYS
    from envreplica.conformance.replica.records import record
    from envreplica.model.replica import page_fits
    from envreplica.model.state import ModelConfig
    from envreplica.spec import wire
    from envreplica.spec.domain import Cursor

    pages = [[], [record("A")], [record(KEYS[-2], 12, 3, True, listing=7)],
             [record(k, binding={"kind": "withhold", "reason": "legal_hold"}) for k in KEYS]]
    for records in pages:
        frame = {"opId": "page-p10-00", "attemptId": "a1", "projectId": "p10", "after": None, "recordVersion": 12,
                 "records": records, "complete": not records}
        size = page_ack_bytes(frame, records, (1, 2), {"streamId": "s1", "sequence": 1000})
        parsed = wire.parse_page(frame)
        states = parsed.records
        at = ModelConfig(ack_page_bytes=size)
        under = ModelConfig(ack_page_bytes=size - 1)
        assert page_fits(at, parsed, states, (1, 2), Cursor("s1", 1000))
        assert not page_fits(under, parsed, states, (1, 2), Cursor("s1", 1000))


def test_near_ack_bound_sizes_pages_at_and_around_the_bound(scratch):
    """Under ``SMALL_ACK``, a page's opId (and, when needed, its record count) is sized so that its ack is
    one byte under, exactly at, or one byte over the bound; the model answers accordingly."""
    import random

    from envreplica.conformance.replica.coverage import page_ack_bytes
    from envreplica.conformance.replica.domains import SMALL_ACK
    from envreplica.conformance.replica.draw import _Draw
    from envreplica.conformance.replica.generate import _Gen

    m = _bound_machine(scratch)
    try:
        m.send({"op": "reset", "config": {"ackPageBytes": SMALL_ACK}})
        m.send({"op": "begin", "frame": {"attempt": {"streamId": "s1", "attemptId": "a1"}, "projectIds": ["p1"]},
                "keptPolicyEpochs": [1, 2], "orgId": "o1"})
        rng, seen = random.Random(7), set()
        for _ in range(200):
            v = m.view()
            page = _Gen.page(_Draw(rng.randbytes(28)), v)
            sized = _Gen.near_ack_bound(_Draw(rng.randbytes(4)), v, page, SMALL_ACK)
            if sized is page:
                continue
            frame = sized["frame"]
            assert _ID_RULE.match(frame["opId"])
            off = page_ack_bytes(frame, frame["records"], v.epochs, {"streamId": "s1", "sequence": 0}) - SMALL_ACK
            assert off in (-1, 0, 1)
            seen.add(off)
        assert seen == {-1, 0, 1}
    finally:
        m.ctx.close()


def test_project_ids_name_projects_in_any_order_and_twice():
    import random

    from envreplica.conformance.replica.draw import _Draw
    from envreplica.conformance.replica.generate import _Gen
    from envreplica.conformance.replica.records import _View
    from envreplica.model.state import INITIAL

    class Live(_View):
        def __init__(self):
            super().__init__(INITIAL, [])
            self.live_versions = {"p1": 1, "p2": 3, "P1": 0}

    v = Live()
    assert _Gen.project_ids(_Draw(bytes(8)), v) == ["P1", "p1", "p2"]  # all zeros: sorted, the shrink target
    assert _Gen.task_order(_Draw(bytes(8)), ["b", "a"]) == ["b", "a"]
    rng = random.Random(3)
    drawn = [_Gen.project_ids(_Draw(rng.randbytes(8)), v) for _ in range(400)]
    orders = {tuple(ids) for ids in drawn if sorted(ids) == ["P1", "p1", "p2"]}
    assert len(orders) == 6  # every task order of three projects
    assert any(len(set(ids)) < len(ids) for ids in drawn)  # one named twice
    assert any("p3" in ids for ids in drawn) and [] in drawn


def test_restyled_envelopes_mean_the_same():
    from envreplica.conformance.replica.domains import HARD_VALUES
    from envreplica.conformance.replica.draw import _Draw
    from envreplica.conformance.replica.generate import _Gen
    from envreplica.model.store import staged_envelope

    for value in HARD_VALUES[:6]:
        raw = staged_envelope("o1", "p1", "A", "0f8fad5b-d9cb-469f-a165-70867728950e", value)
        styles = {_Gen.restyle(_Draw(bytes([b])), raw) for b in range(0, 256, 5)}
        assert len(styles) >= 3  # ASCII text, JavaScript's (the same when the value is ASCII), indented, reordered
        assert all(json.loads(s) == json.loads(raw) for s in styles)
        for s in styles:
            s.encode("utf-8")  # JavaScript's JSON.stringify escapes lone surrogates: the text is valid UTF-8
        assert any(not s.isascii() for s in styles) == any(not c.isascii() and not 0xD800 <= ord(c) <= 0xDFFF
                                                           for c in value)


def test_fast_forward_consumes_past_1000_then_replays_agree(scratch, capsys):
    """``do_ffwd`` sends a consistent cloud's deliveries past sequence 1,000 (each response compared, the
    state checked at the end); the receipts then answer replays across the decimal boundaries, and the
    steps replay on fresh drivers with the batch's checks deferred."""
    from envreplica.conformance.replica.coverage import FAST_FORWARDED, SHORTER_REPLAY
    from envreplica.conformance.replica.run import replay_steps
    from envreplica.spec import wire

    m = _bound_machine(scratch)
    try:
        m.send({"op": "reset"})
        m.ffwd_scales = (1000,)
        started = time.process_time()
        m.do_ffwd(bytes([255]) * 32)  # last options: a target past 1,000
        seconds = time.process_time() - started
        st = m.model.state
        applied, stream = st.authority.applied_sequence, st.authority.stream_id
        assert 1000 <= applied <= 1001 and m.max_applied == applied
        quiet = [s for s in m.steps if s.get("quiet")]
        assert len(quiet) >= 998 and m.ctx.coverage.inputs[FAST_FORWARDED] == len(quiet)
        assert not m._unchecked  # checked after the last one
        with capsys.disabled():
            print(f"\nfast-forward: {len(quiet)} deliveries in {seconds:.2f} s CPU, "
                  f"{seconds / len(quiet) * 1000:.2f} ms each (clean reconciliation included)")
        for n in (9, 10, 99, 100, 999, applied):
            frame = dict(wire.encode(st.receipts[(stream, n)].request), opId=f"d-{n}")
            answer = m.send({"op": "delivery", "frame": frame})
            assert answer["result"]["replayed"] is True
        assert m.ctx.coverage.inputs[SHORTER_REPLAY] == 5
        receipts = m.send({"op": "receipts"})["result"]
        assert [r["sequence"] for r in receipts] == list(range(1, applied + 1))
        requests = [s["request"] for s in m.steps]
        ids = {s["request"]["id"] for s in quiet}
        fresh = SqliteDriver("fixed", scratch / "replay.db", master_key=TEST_MASTER_KEY)
        _, divergence = replay_steps(requests, fresh, ModelDriver("fixed"), defer=ids)
        assert divergence is None, divergence
    finally:
        m.ctx.close()


@pytest.mark.slow
def test_a_bug_past_sequence_ten_is_caught_and_shrunk(scratch, tmp_path):
    """Receipts listed in text order ("10" before "2") only show once ten sequences are consumed: the
    ci profile's fast-forwards reach it; the shrunk trace keeps its fast-forwarded deliveries."""

    class TextOrderReceipts(SqliteDriver):
        def _op_receipts(self, fields, nested):
            return sorted(self._replica.list_receipts(), key=lambda r: (r.stream_id, str(r.sequence)))

    counter = itertools.count()
    report = run_lockstep(lambda: TextOrderReceipts("fixed", scratch / f"t{next(counter)}.db",
                                                    master_key=TEST_MASTER_KEY),
                          settings=lockstep_settings("ci", max_examples=400), out_dir=tmp_path / "out")
    assert not report.ok
    requests = read_requests(report.trace_path)
    assert requests[-1]["op"] == "receipts"
    assert max(r["frame"]["delivery"]["sequence"] for r in requests if r["op"] == "delivery") >= 10


def test_compare_holds_an_error_to_section_5s_shape():
    err = {"id": 2, "ok": False, "error": {"type": "invalid", "message": "a"}}
    assert compare_responses(err, {"id": 2, "ok": False, "error": {"type": "invalid", "message": "other"}}) is None
    assert ".error:" in compare_responses(err, {"id": 2, "ok": False, "error": {"type": "invalid"}})
    assert ".error:" in compare_responses(err, {"id": 2, "ok": False, "error": {"type": "invalid", "message": 1}})
    assert ".error:" in compare_responses(err, {"id": 2, "ok": False,
                                                "error": {"type": "invalid", "message": "a", "code": 7}})
    assert ".id" in compare_responses(dict(err, id=None), err)  # no integer id: answered with id null


# ---------------------------------------------------------------------------
# Mutants only production-shaped inputs reveal (tests/input_mutants.py)
# ---------------------------------------------------------------------------

#: The longest shrunk trace a catch of an input mutant may have: a bug past sequence ten keeps ten
#: fast-forwarded deliveries (each a step) besides the begin and commit that open the gate.
MAX_INPUT_MUTANT_STEPS = 25


def _input_mutants():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from input_mutants import INPUT_MUTANTS

    return INPUT_MUTANTS


def _play(driver, requests, variant):
    """(same responses, same state) after each request, model against ``driver`` (closed after)."""
    from mutant_play import play

    return [(s.agrees, s.same_state) for s in play(driver, requests, variant)]


@pytest.mark.parametrize("mutant", _input_mutants(), ids=lambda m: m.name)
def test_input_mutant_scenario_parts_from_the_model(mutant, scratch):
    """Each input mutant's scenario runs clean on the real implementation and parts on the mutant."""
    real = _play(SqliteDriver(mutant.variant, scratch / "real.db", master_key=TEST_MASTER_KEY),
                 mutant.scenario, mutant.variant)
    assert all(r and s for r, s in real), real
    broken = _play(mutant.driver(mutant.variant, scratch / "mutant.db"), mutant.scenario, mutant.variant)
    assert not all(r for r, _ in broken), f"{mutant.name}: no response differs"


@pytest.mark.slow
@pytest.mark.parametrize("mutant", _input_mutants(), ids=lambda m: m.name)
def test_ci_profile_catches_input_mutant(mutant, scratch, tmp_path):
    """The ci profile catches each input mutant (``envreplica check``'s budgets for shrinking: a catch
    after ten or more deliveries has a long example to cut down)."""
    report = run_lockstep(mutant.factory(scratch), variant=mutant.variant, settings=lockstep_settings("ci"),
                          out_dir=tmp_path / "trace")
    assert not report.ok, f"{mutant.name} ({mutant.bug}) was not caught in {report.examples} examples"
    assert report.shrunk_steps is not None and report.shrunk_steps <= MAX_INPUT_MUTANT_STEPS, report.failure


def test_minimize_renumbers_requests_after_a_shortened_fast_forward():
    """``run._shift_sequences``: after the last ``cut`` deliveries of a fast-forward are deleted, later
    requests on that stream move down (one at a deleted sequence becomes the last kept one); a begin
    on another stream ends it."""
    from envreplica.conformance.replica.run import _quiet_runs, _shift_sequences

    def d(n, stream="s1"):
        return {"op": "delivery", "frame": {"opId": f"d-{n}", "delivery": {"streamId": stream, "sequence": n}}}

    last_kept = d(10)
    later = [d(100), d(101, "s2"), d(103), {"op": "commit", "frame": {"highWater": {"streamId": "s1", "sequence": 103}}},
             {"op": "delivery", "frame": {"delivery": {"streamId": "s1", "sequence": 5}}, "duringFetch": [d(104)]},
             {"op": "begin", "frame": {"attempt": {"streamId": "s2", "attemptId": "a2"}}}, d(104)]
    out = _shift_sequences(later, last_kept, 92)  # 11..102 were deleted
    seqs = [r["frame"].get("delivery", r["frame"].get("highWater", {})).get("sequence") for r in out]
    assert seqs[:5] == [10, 101, 11, 11, 5] and out[0]["frame"]["opId"] == "d-10"
    assert out[4]["duringFetch"][0]["frame"]["delivery"]["sequence"] == 12
    assert out[6] is later[6]  # past the begin on another stream: as it was
    assert _quiet_runs([{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}], {2, 3}) == [(1, 3)]


def test_shift_versions_keeps_a_chain_of_deliveries_a_chain():
    """``run._shift_versions``: after a delivery that moved p1 to record version 3 is deleted, p1's later
    record versions above 3 move one down (deliveries, pages, commits' lists, nested ones); other projects
    and versions at or below 3 stay."""
    from envreplica.conformance.replica.run import _delivered_version, _shift_versions

    def d(project, version, sequence):
        return {"op": "delivery", "frame": {"projectId": project, "recordVersion": version,
                                            "delivery": {"streamId": "s1", "sequence": sequence}}}

    deleted = d("p1", 3, 2)
    assert _delivered_version(deleted) == ("p1", 3)
    assert _delivered_version({"op": "page", "frame": {"projectId": "p1", "recordVersion": 3}}) is None
    later = [d("p1", 4, 3), d("p2", 9, 4), d("p1", 3, 5),
             {"op": "page", "frame": {"projectId": "p1", "recordVersion": 6}},
             {"op": "commit", "frame": {"versions": [{"projectId": "p1", "recordVersion": 6},
                                                     {"projectId": "p2", "recordVersion": 6}]}},
             dict(d("p2", 10, 6), duringFetch=[d("p1", 5, 7)])]
    out = _shift_versions(later, "p1", 3)
    assert [r["frame"].get("recordVersion") for r in out] == [3, 9, 3, 5, None, 10]
    assert out[4]["frame"]["versions"] == [{"projectId": "p1", "recordVersion": 5},
                                           {"projectId": "p2", "recordVersion": 6}]
    assert out[5]["duringFetch"][0]["frame"]["recordVersion"] == 4
    assert later[0]["frame"]["recordVersion"] == 4  # the input is not edited


def test_shrinking_is_budgeted_in_calls():
    """The lockstep's shrink budget is a count of test-function calls (never seconds): on the pinned
    Hypothesis, a failure that would shrink for about a hundred calls stops after the budget."""
    import hypothesis as hyp
    from hypothesis import strategies as st

    from envreplica.conformance import shrinking

    assert shrinking.shrink_budget_applies(), "this Hypothesis lacks the internals the shrink budget caps"

    def calls_to_fail(budget):
        calls = []

        @hyp.given(st.lists(st.integers(), min_size=30))
        @hyp.settings(database=None, derandomize=True, max_examples=20)
        def always_fails(xs):
            calls.append(len(xs))
            raise AssertionError("always")

        with (shrinking.shrink_budget(budget, 300.0) if budget else contextlib.nullcontext()), \
                pytest.raises(AssertionError):
            always_fails()
        return len(calls)

    uncapped, capped = calls_to_fail(None), calls_to_fail(5)
    assert uncapped > 50, uncapped
    assert capped <= 1 + 5 + 10, capped  # the examples before the failure, the budget, the final replay


def _import_local_module(directory: Path, name: str, source: str):
    """A module of this process's own (not a test file, not installed) that Hypothesis counts as local."""
    import importlib
    import sys

    (directory / f"{name}.py").write_text(source)
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))


def test_local_literals_are_pinned_to_envreplicas_own(tmp_path):
    """Within ``literals.pinned()`` Hypothesis's pool of local literals is envreplica's own, read from
    its sources: a module imported before the run adds nothing, one not yet imported is in it."""
    import sys

    from hypothesis.internal.conjecture import providers

    from envreplica.conformance import literals

    assert literals.applies(), "this Hypothesis lacks the internals the pinned literals replace"
    assert literals.source_files() == sorted(literals.source_files())
    assert any(p.name == "literals.py" for p in literals.source_files())
    _import_local_module(tmp_path, "stray_literals", 'STRAY = "stray-literal-7f3a"\n')
    try:
        assert "stray-literal-7f3a" in providers._get_local_constants().strings  # Hypothesis's own pool
        with literals.pinned():
            pool = providers._get_local_constants()
            assert pool is literals.own_constants()
            assert "stray-literal-7f3a" not in pool.strings
            assert {"\ud800", "\udc00"} <= set(pool.strings)  # the implementation's checks' lone surrogates
            assert list(pool.strings) == sorted(pool.strings)
        assert "stray-literal-7f3a" in providers._get_local_constants().strings  # restored
    finally:
        sys.modules.pop("stray_literals", None)


def test_a_ci_run_draws_the_same_examples_whatever_the_process_imported(scratch, tmp_path):
    """Derandomized means the same examples in any process: a run after another local module was imported
    (as a test file run earlier in the same pytest-xdist worker would) sends the same requests."""
    import sys

    def requests_of_a_run(name: str) -> list[str]:
        sent: list[str] = []
        make = sqlite_factory(scratch / name, Variant.FIXED.value)

        class Recording:
            def __init__(self):
                self.inner = make()

            def handle(self, request):
                sent.append(json.dumps(request, sort_keys=True, default=str))
                return self.inner.handle(request)

            def __getattr__(self, attr):
                return getattr(self.inner, attr)

        (scratch / name).mkdir()
        report = run_lockstep(Recording, variant=Variant.FIXED.value,
                              settings=settings(lockstep_settings("ci"), max_examples=6))
        assert report.ok, report.failure
        return sent

    before = requests_of_a_run("before")
    # Literals such a run can draw: bytes of each rule's block size (every lockstep choice is read from one
    # such block, ``lockstep.draw``), none of them envreplica's.
    from envreplica.conformance.replica.draw import BLOCK_BYTES

    literal_lines = "".join(f"B{n}_{i} = {bytes((7 * i + k) % 256 for k in range(n))!r}\n"
                            for n in sorted(set(BLOCK_BYTES.values())) for i in range(1, 40))
    _import_local_module(tmp_path, "stray_many_literals", literal_lines)
    try:
        after = requests_of_a_run("after")
    finally:
        sys.modules.pop("stray_many_literals", None)
    assert len(before) > 20
    assert after == before


def test_minimize_takes_a_project_out_of_a_snapshot(scratch):
    """A divergence that one project shows keeps no other: ``_minimize`` takes a project out of a
    snapshot whole (begin, pages, commit), which deleting single steps cannot (the commit then misses a
    page). The trace is one the ci profile shrank for ``replay_reapplies`` on a busy machine: 13 steps,
    of which two pages, their projects and a refused delivery are needless."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from adapter_requests import begin, commit, delivery, page, rec, reset, with_ids
    from impl_mutants import MUTANTS

    from envreplica.conformance.replica import run as lockstep_run

    mutant = next(m for m in MUTANTS if m.name == "replay_reapplies")
    a, z = rec("A", epoch=None), rec("Z")
    requests = with_ids([
        reset(), begin(projects=("p1", "0"), epochs=(1, 2)), page(), page([a, z], project="0", version=1),
        commit(versions=[("0", 1), ("p1", 0)]), delivery(z, project="0", version=1),
        begin("a2", projects=("p10", "p2", "p1"), epochs=(1, 2)),
        page([rec("A"), z], attempt="a2", project="p10", version=1),
        page([rec("L"), rec("M")], attempt="a2", project="p2", version=1),
        page([rec("A", epoch=2), rec("B")], attempt="a2", project="p1", version=2),
        commit("a2", sequence=1, versions=[("p1", 2), ("p10", 1), ("p2", 1)]),
        delivery(rec("M", rev=1, gen=0, tomb=True), sequence=2, project="p10", version=1),
        delivery(z, project="0", version=1)])
    run = lockstep_run._Run(mutant.factory(scratch), mutant.variant, None, True)
    try:
        got, divergence = lockstep_run.replay_steps(requests, run.driver(), ModelDriver(mutant.variant),
                                                    variant=mutant.variant)
        assert divergence is not None and divergence["index"] == len(requests), divergence
        steps, reason = lockstep_run._minimize(run, got, divergence["reason"])
    finally:
        run.close()
    ops = [s["request"]["op"] for s in steps]
    assert len(steps) <= 9, lockstep_run.format_steps(steps, reason)
    assert ops[-1] == "delivery" and "p10" not in json.dumps([s["request"] for s in steps]), ops
