"""The reliability harnesses that run real processes: ``reliability.concurrency`` and ``reliability.hostile``.

Each harness runs small here (full sizes are bench runs) and must pass on
the implementation, having reached the states that make a
pass mean something: deliverers that replayed, commits refused
``delivery_incomplete``, snapshots served to readers, every hostile category
sent. Each must also fail on a broken implementation:

* concurrency: a replica whose write transactions read before they take the
  write lock (no ``BEGIN IMMEDIATE``: every statement runs on its own). It is
  built here from ``SqliteReplica``'s private ``_write`` (``_lock``,
  ``_sql_errors``, ``_conn``, ``impl.tables.Tables`` on the driver's
  connection with no transaction begun); a test first checks that it still
  answers a one-process stream correctly, so a refactor that breaks the
  mutant cannot pass for a caught bug;
* hostile: adapter wrappers written to ``tmp_path`` that apply malformed
  requests (answering ``ok``, or answering ``invalid`` after acting on them),
  echo misplaced values, crash, or hang.

The whole file takes 12-30 s on two cores.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
from envreplica.impl.replica import SqliteReplica
from envreplica.reliability.concurrency import ConcurrencyFailure, run_concurrency
from envreplica.reliability.hostile import CATEGORIES, HostileFailure, generate, run_hostile
from envreplica.reliability.stream import Cloud, StreamShape

DELIVERIES = 40
CYCLES = 4
HOSTILE_FRAMES = 2000


# ---------------------------------------------------------------------------
# Concurrency.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def concurrency(tmp_path_factory):
    return run_concurrency(DELIVERIES, reconcile_cycles=CYCLES, seed=1,
                           workdir=tmp_path_factory.mktemp("concurrency"))


def test_concurrency_runs_four_processes_on_one_file(concurrency):
    assert concurrency.processes == 4
    assert set(concurrency.operations) == {"deliverer", "reconciler", "reader"}
    assert concurrency.busy == 0, "a lock held past the 5 s busy timeout: the run is too slow to mean anything"


def test_concurrency_reaches_the_racy_states(concurrency):
    # Each sequence is applied once and acknowledged to the other deliverer as a replay.
    assert concurrency.replays == DELIVERIES
    assert concurrency.refusals.get("delivery_incomplete", 0) > 0, concurrency.lines()
    assert concurrency.cycles == CYCLES + 1  # the activation, then one per cycle
    assert concurrency.snapshots_served > 0 and concurrency.snapshots_null > 0, concurrency.lines()


def test_concurrency_report_lines(concurrency):
    lines = concurrency.lines()
    assert lines[0].startswith("concurrency: 4 processes (2 deliverers, 1 reconciler, 1 reader)")
    assert any("delivery_incomplete" in line for line in lines)


def test_concurrency_refuses_too_few_roles():
    with pytest.raises(ValueError, match="deliverers >= 2"):
        run_concurrency(10, deliverers=1)


def test_a_served_snapshot_must_be_one_cloud_state():
    """The oracle of the readers' check: a view mixing two sequences (a torn read) matches no sequence."""
    from envreplica.reliability.concurrency import _CloudHistory

    cloud = Cloud(StreamShape(deliveries=30, seed=1))
    history = _CloudHistory(cloud)

    def snapshot(records, versions):
        return {"projects": [{"projectId": p, "recordVersion": versions[p],
                              "entries": [{"state": s} for _, s in sorted(records[p].items())]}
                             for p in cloud.projects]}

    at_10, at_20 = cloud.records_after(10), cloud.records_after(20)
    assert history.sequence_of(snapshot(*at_10), 0, 30) == 10
    assert history.sequence_of(snapshot(*at_10), 11, 30) is None
    torn = ({"p1": at_10[0]["p1"], "p2": at_20[0]["p2"]}, {"p1": at_10[1]["p1"], "p2": at_20[1]["p2"]})
    assert all(at_10[1][p] != at_20[1][p] for p in cloud.projects)  # both projects moved in between
    assert history.sequence_of(snapshot(*torn), 0, 30) is None


class _NoWriteLock(SqliteReplica):
    """MUTANT: a write transaction without BEGIN IMMEDIATE; it reads before it has the write lock."""

    @contextmanager
    def _write(self):
        from envreplica.impl.tables import Tables

        self._ensure_open()
        with self._lock, self._sql_errors():
            conn = self._conn.connection.dbapi_connection  # no BEGIN: each statement commits alone
            tx = Tables(conn, self.sealer.rows)
            yield tx
            tx.flush()


class _NoWriteLockDriver(SqliteDriver):
    def _open(self):
        return _NoWriteLock(self.db_path, **self._replica_options())


def open_no_write_lock_driver(path: str) -> SqliteDriver:
    """The mutant, opened in each child process of the harness (imported there by name)."""
    return _NoWriteLockDriver("fixed", path, master_key=TEST_MASTER_KEY)


def test_the_lost_update_mutant_is_sound_in_one_process(tmp_path):
    cloud = Cloud(StreamShape(deliveries=12))
    driver = open_no_write_lock_driver(str(tmp_path / "mutant.db"))
    try:
        requests = cloud.store_requests() + cloud.snapshot("a1", 0) + [cloud.delivery(n) for n in range(1, 13)]
        for n, request in enumerate(requests):
            response = driver.handle({"id": n, **request})
            assert response["ok"] and response["result"].get("ok", True), response
        assert driver.replica.verify() == []
    finally:
        driver.close()


def test_concurrency_catches_a_write_that_reads_before_its_lock(tmp_path):
    with pytest.raises(ConcurrencyFailure) as caught:
        run_concurrency(DELIVERIES, seed=1, workdir=tmp_path, open_driver=open_no_write_lock_driver)
    text = str(caught.value)
    assert "Traceback" not in text, f"the mutant crashed instead of misbehaving: {text}"
    assert any(sign in text for sign in ("corrupt", "internal", "verify()", "lost update", "doubled update",
                                         "differs from its receipt")), text


# ---------------------------------------------------------------------------
# Hostile.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return run_hostile(HOSTILE_FRAMES, seed=0, workdir=tmp_path_factory.mktemp("hostile"))


def test_hostile_sends_every_category(hostile):
    assert hostile.frames == HOSTILE_FRAMES
    assert set(hostile.by_category) == set(CATEGORIES)
    assert hostile.by_category["megabyte"] >= 1


def test_hostile_answers_are_errors_of_the_two_types(hostile):
    assert set(hostile.by_error_type) == {"invalid", "unsupported"}
    # Every hostile line but the valid nested-run deliveries, and every nested request that ran.
    answered = HOSTILE_FRAMES - hostile.by_category["nested-run"] + hostile.nested_run
    assert sum(hostile.by_error_type.values()) == answered


def test_hostile_probes_the_state_and_runs_nested_requests(hostile):
    assert hostile.probes >= HOSTILE_FRAMES // 8
    assert hostile.nested_run > 0  # some hostile requests ran inside a delivery's value-store read
    assert "unknown op without an integer id" in hostile.silent
    assert hostile.max_latency < 10


def test_hostile_report_lines(hostile):
    text = "\n".join(hostile.lines())
    assert text.startswith(f"hostile: {HOSTILE_FRAMES} hostile lines")
    assert "where section 5 is silent" in text


def test_hostile_on_the_model_adapter(tmp_path):
    report = run_hostile(300, seed=2, workdir=tmp_path,
                         adapter_command=[sys.executable, "-m", "envreplica.conformance.adapter", "--impl", "model"])
    assert set(report.by_category) == set(CATEGORIES)


def test_hostile_generation_is_deterministic_one_line_each():
    first = [c.line for c in generate(400, seed=3)]
    assert first == [c.line for c in generate(400, seed=3)]
    assert first != [c.line for c in generate(400, seed=4)]
    assert not any(b"\n" in line for line in first), "a line with a newline would be two requests"


def test_hostile_cases_expect_what_section_5_fixes():
    """Where section 5 is not silent: the id echoed (an integer id) and the one error type it fixes."""
    known = {"reset", "store.put", "store.fail", "store.off", "begin", "page", "delivery", "commit", "close",
             "status", "snapshot", "receipts", "restart"}
    checked = 0
    for case in generate(600, seed=5):
        assert case.types <= {"invalid", "unsupported"}, case
        if case.category == "nested-run" or case.silent:
            continue
        try:
            request = json.loads(case.line)
        except (ValueError, RecursionError):
            assert case.ids == {None}, case  # not JSON (or too deep to read): no id to echo
            continue
        if not (isinstance(request, dict) and type(request.get("id")) is int):
            assert (case.ids, case.types) == ({None}, {"invalid"}), case
        elif isinstance(request.get("op"), str):
            assert case.ids == {request["id"]}, case
            assert case.types == ({"invalid"} if request["op"] in known else {"unsupported"}), case
        checked += 1
    assert checked > 400


#: Broken adapters: each wraps the real one (``drivers._BaseDriver.handle`` or ``adapter._respond``).
WRAPPERS = {
    "applies-extra-keys": ("""
        def handle(self, request):  # BUG: a known op's unlisted keys are dropped, and the request applied
            if isinstance(request, dict) and request.get("op") in drivers.OPS and type(request.get("id")) is int:
                allowed = {"id", "op", *sum(drivers.OPS[request["op"]], ())}
                request = {k: v for k, v in request.items() if k in allowed}
            return original(self, request)
        drivers._BaseDriver.handle = handle
        """, r"it was accepted"),
    "acts-then-refuses": ("""
        def handle(self, request):  # BUG: answers invalid, but first applies the request without its extra keys
            response = original(self, request)
            if isinstance(request, dict) and request.get("op") in drivers.OPS and type(request.get("id")) is int:
                allowed = {"id", "op", *sum(drivers.OPS[request["op"]], ())}
                if set(request) - allowed:
                    original(self, {k: v for k, v in request.items() if k in allowed})
            return response
        drivers._BaseDriver.handle = handle
        """, r"the state changed"),
    "echoes-misplaced-values": ("""
        def handle(self, request):  # BUG: the error message quotes the request
            response = original(self, request)
            if not response.get("ok"):
                response["error"]["message"] += " (request: " + repr(request)[:5000] + ")"
            return response
        drivers._BaseDriver.handle = handle
        """, r"echoes the misplaced value"),
    "crashes-on-nan": ("""
        respond = adapter._respond
        def crash(driver, line):  # BUG: dies on a line it cannot parse
            if b"NaN" in line:
                os._exit(3)
            return respond(driver, line)
        adapter._respond = crash
        """, r"exit status 3\): a crash"),
    "hangs-on-deep-nesting": ("""
        respond = adapter._respond
        def hang(driver, line):  # BUG: never answers a deeply nested line
            if line.count(b"[") > 100 or line.count(b"{") > 100:
                time.sleep(3600)
            return respond(driver, line)
        adapter._respond = hang
        """, r"no answer within 3 s \(a hang\)"),
}


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_hostile_catches_a_broken_adapter(name, tmp_path):
    body, symptom = WRAPPERS[name]
    script = tmp_path / f"{name.replace('-', '_')}.py"
    script.write_text("import os, sys, time\n"
                      "from envreplica.conformance import adapter, drivers\n"
                      "original = drivers._BaseDriver.handle\n"
                      + textwrap.dedent(body)
                      + "from envreplica.cli.adapter import main\n"
                      + "sys.exit(main())\n")
    command = [sys.executable, str(script), "--impl", "sqlite", "--test-key", "--db", "{db}"]
    # Only after the hostile lines began: a wrapper that breaks at start-up (a renamed private) proves nothing.
    with pytest.raises(HostileFailure, match=rf"^hostile line \d+: .*{symptom}"):
        # The hang is caught by the answer timeout (3 s there, each process's first answer excepted: a slow start
        # on a busy machine never reads as one); elsewhere it only guards against a hang.
        timeout = 3 if name == "hangs-on-deep-nesting" else 120
        run_hostile(HOSTILE_FRAMES, seed=0, workdir=tmp_path / "run", adapter_command=command, timeout=timeout)


def test_hostile_refuses_too_few_frames():
    with pytest.raises(ValueError, match="at least"):
        run_hostile(3)


def _children() -> list[int]:
    """This process's child processes, zombies included (Linux ``/proc``)."""
    me, found = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to list child processes")
def test_failed_runs_leave_no_process_and_no_directory(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _children()
    with pytest.raises(HostileFailure, match="a crash|exited"):
        run_hostile(len(CATEGORIES) * 10, seed=6, adapter_command=[sys.executable, "-c", "import sys; sys.exit(5)"])
    with pytest.raises(ConcurrencyFailure):
        run_concurrency(10, reconcile_cycles=1, open_driver="no.such.module:open_driver")
    assert _children() == before
    assert list(tmp_path.iterdir()) == []
