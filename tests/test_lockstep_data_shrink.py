"""Divergence messages that show where a value differs, and the lockstep's data pass (issue 31, item 5).

* A value two sides hold differently is named by the index where it first differs, the code point of each
  side there, and both values escaped (every code point outside printable ASCII as ``\\uXXXX``, lone
  surrogates too), cut around that place to one line: in the tables of an external adapter
  (``external.state_doc_difference``), in the tables read back in process (``compare.state_difference``)
  and in responses (``compare.compare_responses``). An in-process implementation on a real value store
  shows its values by length only.
* Once a divergence's steps are minimal, ``run._shrink_data`` replaces its keys, project ids and values
  with shorter ones, consistently across the trace (frames, value-store targets, snapshots, the stored
  envelopes), while it diverges at the same step the same way, in a counted budget of replays.

Cheap on purpose: hand-written traces on the in-process SQLite implementation (its ``seed`` variant, which
serves a lone surrogate as U+FFFD: finding F3, against the ``fixed`` model) and on the project's mutants,
through the same post-catch path a run takes (``run._report``); no Hypothesis run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from envreplica.conformance.drivers import TEST_MASTER_KEY, ModelDriver, SqliteDriver
from envreplica.conformance.external import _MacNames, state_doc_difference
from envreplica.conformance.replica import rename
from envreplica.conformance.replica import run as lockstep_run
from envreplica.conformance.replica.compare import compare_responses
from envreplica.conformance.replica.context import _Run
from envreplica.conformance.replica.domains import KEY_128
from envreplica.conformance.replica.text import escape, text_difference
from envreplica.model.store import legacy_envelope, staged_envelope

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_requests import SID, begin, commit, page, put, rec, reset, snapshot, with_ids  # noqa: E402

#: A project id at the Segment rule's bound, and a value with a lone surrogate deep inside a long one.
LONG_PROJECT = "z" + "9" * 63
F3_VALUE = "x" * 300 + "bad\ud800" + "y" * 700


# ---------------------------------------------------------------------------
# (a) the message names the index and both code points, escaped
# ---------------------------------------------------------------------------


def test_text_difference_names_the_index_and_both_code_points_escaped():
    assert text_difference("a\ud800b", "a\ufffdb") == (
        'differs at index 1 (of 3 chars): model U+D800 (lone surrogate), implementation U+FFFD (replacement '
        'character); model "a\\ud800b", implementation "a\\ufffdb"')
    # Printable ASCII as itself, quotes and backslashes escaped, an astral character never as two surrogates.
    assert escape('a"\\\x00é\U0001F600\udc00') == 'a\\"\\\\\\u0000\\u00e9\\U0001f600\\udc00'
    assert "model nothing (the text ends there), implementation U+0021 \"!\"" in text_difference("pw", "pw!")
    # A long value: one line, cut around the first difference, saying how much was cut.
    long = text_difference(F3_VALUE, F3_VALUE.replace("\ud800", "\ufffd") + "z")
    assert long.startswith("differs at index 303 (model 1,004 chars, implementation 1,005 chars): model U+D800")
    assert '…"xxxxxxxxxxxxxbad\\ud800yyyyyyyyyyyyyyyy"…' in long
    assert long.endswith("(cut: 287 chars before, after: model 684, implementation 685)")
    assert "\n" not in long and long.replace("…", "").isascii() and len(long) < 400


def test_a_table_value_difference_names_the_index_and_code_points():
    """The message of finding F3 through an adapter's ``state``: which index, which code points."""
    doc = ModelDriver("fixed")
    for request in with_ids([reset(), begin(projects=("p1",)), put(key="A", value="a\ud800b"),
                             page([rec("A")], version=1)]):
        doc.handle(request)
    want = doc.state_doc()
    got = json.loads(json.dumps(want))
    got["stageValues"][0]["value"] = "a\ufffdb"
    assert state_doc_difference(want, got, _MacNames()) == (
        "state table stageValues: row (a1, p1, A): value: differs at index 1 (of 3 chars): model U+D800 (lone "
        'surrogate), implementation U+FFFD (replacement character); model "a\\ud800b", implementation "a\\ufffdb"')


def test_a_response_value_difference_is_escaped_and_plain_strings_stay_as_they_were():
    model = {"id": 6, "ok": True, "result": {"projects": [{"entries": [{"value": "bad\ud800"}]}]}}
    impl = {"id": 6, "ok": True, "result": {"projects": [{"entries": [{"value": "bad\ufffd"}]}]}}
    assert compare_responses(model, impl) == (
        "response.result.projects[0].entries[0].value: differs at index 3 (of 4 chars): model U+D800 (lone "
        'surrogate), implementation U+FFFD (replacement character); model "bad\\ud800", implementation "bad\\ufffd"')
    code = {"id": 1, "ok": True, "result": {"ok": False, "code": "delivery_gap"}}
    other = {"id": 1, "ok": True, "result": {"ok": False, "code": "delivery_conflict"}}
    assert compare_responses(code, other) == "response.result.code: model delivery_gap, implementation delivery_conflict"


def _f3_requests(key: str = "A", project: str = "p1", value: str = "a\ud800b") -> list[dict]:
    return with_ids([reset(), begin(projects=(project,)), put(key=key, value=value, project=project),
                     page([rec(key)], project=project, version=1)])


def test_the_readback_shows_a_value_difference_unless_the_store_is_real(scratch):
    """In process (the tables read back): the value where it differs; on a real store (an ``SsmStore``, or a
    driver that refuses the public test key as ``--store ssm`` does) by length only."""
    seed = SqliteDriver("seed", scratch / "seed.db", master_key=TEST_MASTER_KEY)
    _, divergence = lockstep_run.replay_steps(_f3_requests(), seed, ModelDriver("fixed"))
    assert divergence is not None and divergence["index"] == 4
    assert divergence["reason"].endswith(
        '— value: differs at index 1 (of 3 chars): model U+D800 (lone surrogate), implementation U+FFFD '
        '(replacement character); model "a\\ud800b", implementation "a\\ufffdb"'), divergence["reason"]
    real = SqliteDriver("seed", scratch / "real.db", master_key=bytes([7]) * 32, forbid_test_key=True)
    _, divergence = lockstep_run.replay_steps(_f3_requests(), real, ModelDriver("fixed"))
    assert divergence is not None and "stage_values differs" in divergence["reason"]
    assert "value=<value of 3 chars>" in divergence["reason"]
    assert "differs at index" not in divergence["reason"] and "\\ud800" not in divergence["reason"]


# ---------------------------------------------------------------------------
# (b) the data pass: short keys, projects and values, within its budget
# ---------------------------------------------------------------------------


def _report_after_catch(run: _Run, requests: list[dict], variant: str):
    """``run._report`` on the steps a catch would hand it (the divergence at the last request)."""
    steps, divergence = lockstep_run.replay_steps(requests, run.driver(), ModelDriver(variant), variant=variant)
    assert divergence is not None and divergence["index"] == len(requests), divergence
    run.failure = {"steps": steps, "reason": divergence["reason"]}
    return lockstep_run._report(run, AssertionError(divergence["reason"]), time.perf_counter())


def _seed_factory(scratch: Path):
    counter = iter(range(10_000))
    return lambda: SqliteDriver("seed", scratch / f"seed-{next(counter)}.db", master_key=TEST_MASTER_KEY)


def test_the_data_pass_shortens_keys_projects_and_values_of_f3(scratch, tmp_path):
    """F3 with a 128-character key, a 64-character project and a 1,004-character value, beside a second
    project and key the divergence does not need (the step deletion takes them out): the trace ends with a key
    and a project of one character and the lone surrogate alone as the value, in a counted budget."""
    requests = with_ids([
        reset(), begin(projects=(LONG_PROJECT, "p1")),
        put(key=KEY_128, value=F3_VALUE, project=LONG_PROJECT), put(key="B", value="v1", project=LONG_PROJECT),
        put(key="A", value="v2", project="p1"),
        page([rec("A")], project="p1", version=1), page([rec("B"), rec(KEY_128)], project=LONG_PROJECT, version=1)])
    run = _Run(_seed_factory(scratch), "fixed", tmp_path, True)
    try:
        report = _report_after_catch(run, requests, "fixed")
    finally:
        run.close()
    shrunk = [json.loads(line) for line in report.trace_path.read_text().splitlines()]
    keys, projects = rename.literals(shrunk, "key"), rename.literals(shrunk, "project")
    values = rename.literals(shrunk, "value")
    assert keys and max(map(len, keys)) <= 2 and projects and max(map(len, projects)) <= 2, (keys, projects)
    assert values == ["\ud800"], values  # minimal: the lone surrogate alone
    assert report.data_lengths == {"key": (128, 1), "project": (64, 1), "value": (1004, 1)}
    assert report.data_replays is not None and 0 < report.data_replays <= lockstep_run.DATA_REPLAYS
    assert f"data shrunk in {report.data_replays} replays: longest key 128 -> 1 chars" in report.failure
    assert report.divergence.endswith('model "\\ud800", implementation "\\ufffd"'), report.divergence
    # Consistent everywhere: each stored envelope names the project and key of its store.put.
    for request in shrunk:
        if request["op"] == "store.put":
            envelope = json.loads(request["raw"])
            assert (envelope["projectId"], envelope["key"]) == (request["projectId"], request["key"])
    # The written trace replays to the same divergence; the real implementation agrees with the model on it.
    again = SqliteDriver("seed", scratch / "again.db", master_key=TEST_MASTER_KEY)
    assert lockstep_run.replay_requests(shrunk, again, ModelDriver("fixed"))["reason"] == report.divergence
    fixed = SqliteDriver("fixed", scratch / "fixed.db", master_key=TEST_MASTER_KEY)
    assert lockstep_run.replay_requests(shrunk, fixed, ModelDriver("fixed")) is None


def test_the_data_pass_stops_at_its_budget(scratch, monkeypatch):
    """A budget of a few replays: the pass makes no more, and what it kept still diverges the same way."""
    monkeypatch.setattr(lockstep_run, "DATA_REPLAYS", 3)
    requests = _f3_requests(KEY_128, LONG_PROJECT, F3_VALUE)
    run = _Run(_seed_factory(scratch), "fixed", None, True)
    try:
        report = _report_after_catch(run, requests, "fixed")
    finally:
        run.close()
    assert report.data_replays == 3
    assert report.data_lengths["key"] == (128, 1) and report.data_lengths["project"] == (64, 1)
    assert "U+D800 (lone surrogate), implementation U+FFFD" in report.divergence


def _mutant(name: str):
    from impl_mutants import MUTANTS
    from input_mutants import INPUT_MUTANTS

    return next(m for m in MUTANTS + INPUT_MUTANTS if m.name == name)


def test_a_mutants_envelope_is_renamed_inside_and_its_value_emptied(scratch, tmp_path):
    """``legacy_envelope_project_unchecked`` installs a legacy value whose envelope names another project:
    with long keys, projects and values, and envelopes written in JavaScript's style, the key and both
    projects are renamed inside the envelopes too (else the envelope would name other ones and the
    divergence change), and the values emptied."""
    mutant = _mutant("legacy_envelope_project_unchecked")
    legacy = {"kind": "legacy", "ssmVersion": 1}
    other = "q" + "8" * 40
    raw = json.dumps(json.loads(legacy_envelope(other, "L" + "1" * 60, "é" * 500 + "\ud83d")),
                     ensure_ascii=False, separators=(",", ":")).replace("\ud83d", "\\ud83d")
    requests = with_ids([
        reset(), begin(projects=(LONG_PROJECT,)), page(project=LONG_PROJECT), commit(versions=((LONG_PROJECT, 0),)),
        put(key="L" + "1" * 60, ref=legacy, raw=raw, project=LONG_PROJECT),
        {"op": "delivery", "frame": {"kind": "env.replica.apply", "opId": "d-1", "projectId": LONG_PROJECT,
                                     "recordVersion": 1, "state": rec("L" + "1" * 60, ref=legacy),
                                     "delivery": {"streamId": "s1", "sequence": 1}}}])
    run = _Run(mutant.factory(scratch), mutant.variant, tmp_path, True)
    try:
        report = _report_after_catch(run, requests, mutant.variant.value)
    finally:
        run.close()
    shrunk = [json.loads(line) for line in report.trace_path.read_text().splitlines()]
    put_request = next(r for r in shrunk if r["op"] == "store.put")
    envelope = json.loads(put_request["raw"])
    assert len(put_request["key"]) <= 2 and envelope["key"] == put_request["key"], put_request
    assert len(put_request["projectId"]) <= 2 and len(envelope["projectId"]) <= 2, put_request
    assert envelope["projectId"] != put_request["projectId"]  # still another project's envelope
    assert report.data_lengths["value"] == (501, 0), report.data_lengths
    assert "é" not in put_request["raw"] and "\\u" not in put_request["raw"]  # JavaScript's style, kept
    replayed = lockstep_run.replay_requests(shrunk, mutant.driver(None, scratch / "again.db"),
                                            ModelDriver(mutant.variant))
    assert replayed is not None and replayed["reason"] == report.divergence


# ---------------------------------------------------------------------------
# (c) the data pass never turns a divergence into another
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["legacy_name_length_unchecked", "staged_envelope_org_unchecked",
                                  "legacy_value_stringified"])
def test_the_data_pass_keeps_the_divergence(name, scratch):
    """On a mutant's own scenario, made long: the shrunk trace diverges at the same step, of the same kind,
    in the same tables and fields. ``legacy_name_length_unchecked`` needs its 65-character key (one
    character fewer has a legacy name): that key stays as long, the others shorten."""
    mutant = _mutant(name)
    requests = with_ids(list(mutant.scenario))
    requests = rename.rewrite(requests, "key", {"A": "K" * 60})  # a Segment: a legacy value keeps its name
    requests = rename.rewrite(requests, "value", {v: v * 50 for v in rename.literals(requests, "value")})
    requests = rename.rewrite(requests, "project", {"p1": LONG_PROJECT})
    run = _Run(mutant.factory(scratch), mutant.variant, None, True)
    try:
        got, first = lockstep_run.replay_steps(requests, run.driver(), ModelDriver(mutant.variant),
                                               variant=mutant.variant)
        assert first is not None, name
        requests = requests[:first["index"]]
        steps, reason, replays, lengths = lockstep_run._shrink_data(run, got, first["reason"], set())
        again, divergence = lockstep_run.replay_steps([s["request"] for s in steps], run.driver(),
                                                      ModelDriver(mutant.variant), variant=mutant.variant)
    finally:
        run.close()
    assert divergence is not None and divergence["index"] == first["index"] == len(steps)
    assert steps[-1]["request"]["op"] == requests[-1]["op"]
    assert lockstep_run._divergence_shape(divergence["reason"]) == lockstep_run._divergence_shape(first["reason"])
    assert divergence["reason"] == reason and replays <= lockstep_run.DATA_REPLAYS
    keys = rename.literals([s["request"] for s in steps], "key")
    if name == "legacy_name_length_unchecked":
        assert "L" + "0" * 64 in keys, keys
        assert all(len(k) <= 2 for k in keys if k != "L" + "0" * 64), keys
    else:
        assert max(map(len, keys)) <= 2 and lengths["key"] == (60, 1), (keys, lengths)
    assert lengths["project"] == (64, 1), lengths


def test_an_envelope_in_any_style_is_renamed_in_that_style():
    """``rename.rewrite`` keeps a stored envelope's style: compact, reordered, JavaScript's, indented."""
    envelope = json.loads(staged_envelope("o1", "p1", "LONGKEY", SID, "\ud800é"))
    styles = [json.dumps(envelope, separators=(",", ":")),
              json.dumps(dict(reversed(list(envelope.items()))), separators=(",", ":")),
              json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).replace("\ud800", "\\ud800"),
              json.dumps(envelope, indent=2)]
    for raw in styles:
        [out] = rename.rewrite([put(key="LONGKEY", raw=raw)], "key", {"LONGKEY": "A"})
        assert out["key"] == "A" and out["raw"] == raw.replace('"LONGKEY"', '"A"'), out["raw"]
    assert rename.rewrite([put(raw="{not json")], "key", {"A": "B"})[0]["raw"] == "{not json"


def test_a_key_that_must_change_class_to_shorten_does_when_the_divergence_allows(scratch):
    """``f2_fix_dropped``'s scenario with bystander records of keys ``L000...`` (65 characters: no legacy
    name), ``M`` and ``_X`` (withheld, epoch unknown): no order-preserving names keep every key's class
    (a short key without a legacy name starts with ``_``, above every uppercase one), so the pass renames
    them as Keys of any class, which this divergence allows."""
    mutant = _mutant("f2_fix_dropped")
    legacy = {"kind": "legacy", "ssmVersion": 1}
    bystanders = [rec(k, ref=legacy, epoch=None) for k in ("L" + "0" * 64, "M", "_X")]

    def with_bystanders(request: dict) -> dict:
        if request.get("op") == "page" and request["frame"]["records"]:
            request = json.loads(json.dumps(request))
            request["frame"]["records"] += bystanders
        return request

    requests = [with_bystanders(r) for r in with_ids(list(mutant.scenario))]
    assert rename.names(rename.literals(requests, "key"), "key") is None  # no names of the same classes
    run = _Run(mutant.factory(scratch), mutant.variant, None, True)
    try:
        got, first = lockstep_run.replay_steps(requests, run.driver(), ModelDriver(mutant.variant))
        assert first is not None
        steps, reason, replays, lengths = lockstep_run._shrink_data(run, got, first["reason"], set())
    finally:
        run.close()
    assert lengths["key"] == (65, 1) and replays <= 3, (lengths, replays)
    assert len(steps) == first["index"] and lockstep_run._failure_kind(reason) == lockstep_run._failure_kind(
        first["reason"])
