"""Progress on long runs, and the adapter's first answer bounded (issue 40, items 2 and 3).

Every stage that can run long reports ``Tick`` s (``checker.progress``) as it goes, counted (after each
example, history, minimization replay; a search's ticks are the checker's own); ``cli.progress.Stages`` shows
them as a row per stage on a terminal and a heartbeat line per stage every ``HEARTBEAT_SECONDS`` elsewhere;
the gate's background process sends its ticks through a pipe to the gate (``PipeStages``, ``relay``; the
whole gate's lines: tests/test_conformance_cli.py, ``test_check_runs_model_check_then_lockstep``). No
verdict here depends on the clock: the heartbeat's clock is a fake one, or its interval 0 (a line per tick);
what is counted is ticks and lines. The timeout tests assert an upper bound with a wide margin, the feature
being a timeout: ``conformance --timeout 2`` with an adapter that never answers took 121 s before (a fixed
120 s start-up allowance); it exits 2 within seconds, saying what it waited for.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import time

import pytest
from rich.console import Console

from envreplica.checker.progress import Tick
from envreplica.cli import progress as shown
from envreplica.cli.main import _gate_failure, _verdict, main
from envreplica.cli.progress import PipeStages, Stages, describe, relay

PY = shlex.quote(sys.executable)
ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
#: An adapter that starts and never answers (nor reads).
NEVER_ANSWERS = f"{PY} -c " + shlex.quote("import time; time.sleep(600)")


def _console() -> Console:
    """A console that is not a terminal (as in a CI log), writing to a string."""
    return Console(file=io.StringIO(), width=200)


def _lines(console: Console) -> list[str]:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue().splitlines()


# ---------------------------------------------------------------------------
# What a tick says; heartbeat lines on a fake clock
# ---------------------------------------------------------------------------


def test_a_tick_says_counts_rate_and_time_left():
    assert describe(Tick(200, 800, "examples", 6_000, "steps"), 20.0) == \
        "200/800 examples, 6,000 steps, 300 steps/s, about 1 min 00 s left"
    assert describe(Tick(10_000, None, "states", note="depth 7"), 4.0) == "10,000 states, 2,500 states/s, depth 7"
    assert describe(Tick(3, 5, "s", note="waiting for the adapter's first answer (`reset`)"), 3.0) == \
        "waiting for the adapter's first answer (`reset`): 3 s of 5 s"
    assert "left" not in describe(Tick(39, 800), 5.0)  # no estimate before 5 % of the budget
    assert "left" in describe(Tick(40, 800), 5.0)
    assert describe(Tick(803, 800), 10.0) == "803 examples, 80 examples/s"  # past the budget: the count alone
    assert Tick.from_json(Tick(3, 9, "moves", note="x").as_json()) == Tick(3, 9, "moves", note="x")
    with pytest.raises(ValueError):
        Tick.from_json({"done": "3"})


def test_a_heartbeat_line_per_stage_every_interval_on_a_fake_clock():
    now = [0.0]
    console = _console()
    stages = Stages(console, "envreplica check", interval=5.0, clock=lambda: now[0])
    assert not stages.live  # not a terminal: heartbeat lines
    with stages.stage("lockstep") as progress:
        for i in range(1, 21):
            now[0] = float(i)
            progress(Tick(i, 20, "examples", i * 30, "steps"))
    lines = _lines(console)
    assert len(lines) == 4, lines  # at 5, 10, 15 and 20 s: none before the first interval
    assert lines[0] == "envreplica check: lockstep: 5/20 examples, 150 steps, 30 steps/s, about 15 s left (5 s)"
    assert lines[-1].startswith("envreplica check: lockstep: 20/20 examples")


def test_a_stage_that_does_not_tick_is_heard_from_every_interval():
    """The timer's pass (``beat``): a stage silent for the interval prints its line again, or ``starting`` before
    its first tick (a stage that prepares for seconds); a stage that printed lately does not."""
    now = [0.0]
    console = _console()
    stages = Stages(console, "envreplica check", interval=5.0, clock=lambda: now[0])
    stages.begin("lockstep")
    stages.begin("model check cloud")
    now[0] = 4.0
    stages.beat()
    assert _lines(console) == []  # not yet an interval
    now[0] = 5.0
    stages.update("model check cloud", Tick(1_000, None, "states", note="depth 3"))  # its line, from the tick
    stages.beat()
    assert _lines(console) == ["envreplica check: model check cloud: 1,000 states, 200 states/s, depth 3 (5 s)",
                               "envreplica check: lockstep: starting (5 s)"]
    now[0] = 10.0
    stages.beat()
    assert _lines(console)[2:] == ["envreplica check: lockstep: starting (10 s)",
                                   "envreplica check: model check cloud: 1,000 states, 100 states/s, depth 3 (10 s)"]
    stages.close()
    now[0] = 20.0
    stages.beat()
    assert len(_lines(console)) == 4


def test_interval_zero_a_line_per_tick_quiet_none_closed_none():
    console = _console()
    stages = Stages(console, "envreplica conformance", interval=0)
    with stages.stage("a") as a, stages.stage("b") as b:
        a(Tick(1, 2))
        b(Tick(1, None, "histories"))
        a(Tick(2, 2))
    assert [line.split(":")[1].strip() for line in _lines(console)] == ["a", "b", "a"]
    stages.close()
    stages.update("a", Tick(3, 3))  # after the verdict's turn: nothing
    assert len(_lines(console)) == 3
    quiet = _console()
    with Stages(quiet, "envreplica check", interval=0, quiet=True).stage("a") as a:
        a(Tick(1, 2))
    assert _lines(quiet) == []


def test_on_a_terminal_a_row_per_running_stage():
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    stages = Stages(console, "envreplica check", clock=lambda: 10.0)
    try:
        assert stages.live
        with stages.stage("lockstep") as progress:
            progress(Tick(40, 800, "examples", 1_200, "steps"))
            (task,) = stages._progress.tasks  # type: ignore[union-attr]
            assert task.description == "lockstep" and task.completed == 40 and task.total == 800
            assert task.fields["info"].startswith("40/800 examples, 1,200 steps")
        assert not stages._progress.tasks  # type: ignore[union-attr]  # the row goes when the stage ends
    finally:
        stages.close()


# ---------------------------------------------------------------------------
# The gate's background process: its ticks reach the gate through a pipe
# ---------------------------------------------------------------------------


def test_the_background_process_ticks_reach_the_gate_through_a_pipe():
    reading, writing = os.pipe()
    child = PipeStages(os.fdopen(writing, "w", encoding="utf-8"), interval=0)
    with child.stage("migration model check") as progress:
        progress(Tick(2_580, None, "states", note="bounds rerun (1/2), depth 31"))
        progress(Tick(14_397, None, "states", note="bounds writers (2/2), bounded liveness"))
    child.stream.write("not a tick\n")  # anything else on the pipe is skipped
    child.close()
    console = _console()
    relay(os.fdopen(reading, encoding="utf-8"), Stages(console, "envreplica check", interval=0))
    lines = _lines(console)
    assert len(lines) == 2 and all(line.startswith("envreplica check: migration model check: ") for line in lines)
    assert "bounded liveness" in lines[1]


def test_the_pipe_holds_ticks_between_sends_and_sends_a_stages_last():
    now = [0.0]
    sent = io.StringIO()
    child = PipeStages(sent, interval=10.0, clock=lambda: now[0])
    with child.stage("migration lockstep") as progress:
        for i in range(1, 6):
            now[0] = float(i)
            progress(Tick(i, 5))
        now[0] = 5.5
        progress(Tick(5, 5, note="minimizing"))  # a new phase: sent at once, whatever the interval
    console = _console()
    stages = Stages(console, "envreplica check", interval=0, clock=lambda: 0.0)
    relay(io.StringIO(sent.getvalue()), stages)
    assert _lines(console) == ["envreplica check: migration lockstep: 1/5 examples (0 s)",  # the first, then
                               "envreplica check: migration lockstep: 5/5 examples, minimizing (0 s)"]  # the phase


# ---------------------------------------------------------------------------
# The stages report as they go (counted)
# ---------------------------------------------------------------------------


def test_the_lockstep_reports_each_step_and_example():
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    ticks: list[Tick] = []
    report = run_lockstep(None, settings=lockstep_settings("dev", max_examples=4), progress=ticks.append)
    assert report.ok, report.failure
    assert len(ticks) == report.steps + report.examples  # a tick after each step, and after each example
    assert [t.work for t in ticks if t.work is not None] == sorted(t.work for t in ticks if t.work is not None)
    assert {t.done for t in ticks} == set(range(report.examples + 1))  # examples done: 0 during the first
    assert {t.total for t in ticks} == {4} and (ticks[-1].done, ticks[-1].work) == (report.examples, report.steps)


def test_the_migration_lockstep_reports_each_example_and_its_tours_search():
    from envreplica.conformance.migration.run import run_migration_lockstep
    from envreplica.conformance.migration.tour import SEARCH_EXAMPLES

    ticks: list[Tick] = []
    report = run_migration_lockstep("dev", max_examples=1, progress=ticks.append)  # dev plays the tour first
    assert report.ok, report.failure
    search = [t for t in ticks if t.note == "searching the model for the coverage tour"]
    searched = max(t.done for t in search)  # Hypothesis may draw past the budget (examples it discards)
    assert searched >= SEARCH_EXAMPLES and {t.done for t in search} == set(range(1, searched + 1))
    played = ticks[len(search):]  # the search first, then the run's examples: the tour's, then the drawn
    assert len(played) == report.moves + report.examples  # a tick after each move, and after each example
    assert {t.done for t in played} == set(range(1, report.examples + 1)) and played[-1].work == report.moves
    assert [t.done for t in played] == sorted(t.done for t in played)
    assert played[0].total == report.tour_examples + 1  # the budget: the tour's examples and the one drawn
    assert {t.unit for t in ticks} == {"examples"} and {t.work_unit for t in ticks} == {"moves"}


def test_the_migration_model_check_reports_each_bounds_liveness():
    from envreplica.checker import migration as cm
    from envreplica.model import migration as mm

    ticks: list[Tick] = []
    suite = cm.run_suite(mm.suite("migration"), progress=ticks.append)
    liveness = [t for t in ticks if "bounded liveness" in t.note]
    assert len(liveness) == len(suite.runs)  # one as each bounds' liveness check begins, whatever the clock
    assert liveness[-1].done == sum(r.result.states for r in suite.runs)  # states over the suite so far
    assert [t.done for t in ticks] == sorted(t.done for t in ticks)


def test_the_lock_model_check_reports_each_bounds_liveness():
    from envreplica.checker import lock as cl
    from envreplica.model import lock as ml

    ticks: list[Tick] = []
    bounds = (ml.LockBounds("two", processes=2, calls=1, crashes=0, max_tries=0),)  # small: a count, not a clock
    suite = cl.run_suite(bounds, progress=ticks.append)
    liveness = [t for t in ticks if "bounded liveness" in t.note]
    assert len(liveness) == 1 and liveness[0].done == suite.runs[0].result.states
    assert f"bounds {bounds[0].name} (1/1)" in liveness[0].note


def test_the_lock_lockstep_reports_each_example():
    from envreplica.conformance.lock import run_lock_lockstep

    ticks: list[Tick] = []
    report = run_lock_lockstep(3, progress=ticks.append)
    assert report.passed
    assert [t.done for t in ticks] == list(range(1, report.examples + 1)) and ticks[-1].work == report.moves
    assert {t.total for t in ticks} == {3}


def test_the_concurrent_stage_reports_each_history():
    from envreplica.conformance.concurrent import run_concurrent

    ticks: list[Tick] = []
    report = run_concurrent("fixed", mode="threads", histories=4, progress=ticks.append)
    assert report.ok
    assert [t.done for t in ticks] == [1, 2, 3, 4] and ticks[-1].work == report.ops


# ---------------------------------------------------------------------------
# The commands: progress while they run, the verdict last
# ---------------------------------------------------------------------------


def _last_line(out: str) -> str:
    return [line for line in out.splitlines() if line.strip()][-1]


def test_a_failed_gates_verdict_names_the_stages_and_their_traces():
    rows = [("model check", "bounds tiny", _verdict(False), "1.0"), ("lockstep", "SQLite", _verdict(True), "2.0"),
            ("concurrent threads", "200 histories", _verdict(False), "3.0")]
    args = type("Args", (), {"out": "out/traces"})()
    said = _gate_failure(rows, {"concurrent threads": "its history: out/traces/concurrent-fixed.json"}, args)
    plain = Console(file=io.StringIO(), width=400)
    plain.print(said)
    line = plain.file.getvalue().strip()  # type: ignore[attr-defined]
    assert line.startswith("FAIL: the gate failed at model check (its traces in out/traces) and concurrent threads "
                           "(its history: out/traces/concurrent-fixed.json)")
    assert "lockstep (" not in line  # the stage that passed is not named


def test_conformance_shows_its_progress_and_ends_with_its_verdict(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(shown, "HEARTBEAT_SECONDS", 0.0)
    adapter = f"{PY} -m envreplica.conformance.adapter --impl sqlite --test-key --db {shlex.quote(str(tmp_path / 'r.db'))}"
    code = main(["conformance", "--adapter", adapter, "--profile", "dev", "--max-examples", "3",
                 "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "waiting up to 120 s for the adapter's first answer (`reset`)" in out  # the default start-up bound
    assert "envreplica conformance: lockstep: 3/3 examples" in out
    assert _last_line(out).startswith("PASS: the implementation agrees with the model")
    adapter = " ".join([PY, "-m", "envreplica.cli.main", "adapter", "--protocol", "migration", "--impl", "model"])
    code = main(["conformance", "--protocol", "migration", "--adapter", adapter, "--profile", "ci",
                 "--max-examples", "1", "--timeout", "60", "--out", str(tmp_path / "out")])  # ci: no tour first
    out = capsys.readouterr().out
    assert code == 0, out
    assert "waiting up to 60 s for the adapter's first answer (`hello`)" in out  # --timeout bounds it too
    assert "envreplica conformance: migration lockstep: " in out
    assert _last_line(out).startswith("PASS: the implementation agrees with the migration model")
    assert "coverage: " in out and "(--coverage lists them)" in out


# ---------------------------------------------------------------------------
# The adapter's first answer: bounded by --timeout, or --start-timeout
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol, op", [("replica", "reset"), ("migration", "hello"), ("lock", "hello")])
def test_timeout_bounds_an_adapters_first_answer(protocol, op, tmp_path):
    started = time.monotonic()
    done = subprocess.run([*ENVREPLICA, "conformance", "--protocol", protocol, "--timeout", "2", "--adapter",
                           NEVER_ANSWERS, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    assert took < 60, took  # a timeout: an upper bound with a wide margin (before: 121 s, the fixed allowance)
    assert f"waiting up to 2 s for the adapter's first answer (`{op}`)" in " ".join(done.stdout.split())
    (line,) = done.stderr.splitlines()
    assert "nothing was checked" in line and "did not answer within 2 s" in line and "--start-timeout" in line


def test_start_timeout_bounds_the_first_answer_alone(tmp_path):
    started = time.monotonic()
    done = subprocess.run([*ENVREPLICA, "conformance", "--timeout", "300", "--start-timeout", "2", "--adapter",
                           NEVER_ANSWERS, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and time.monotonic() - started < 60, done.stdout + done.stderr
    assert "did not answer within 2 s" in done.stderr
    done = subprocess.run([*ENVREPLICA, "conformance", "--start-timeout", "0", "--adapter", NEVER_ANSWERS],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "--start-timeout takes seconds above 0, not 0" in line


def test_the_driver_bounds_its_first_answer_and_says_it_waits():
    from envreplica.conformance.external import START_TIMEOUT, AdapterTimeout, SubprocessDriver

    with SubprocessDriver(f"{PY} -c pass", timeout=5) as default:
        assert default.start_timeout == START_TIMEOUT  # the default allowance, for an adapter that compiles
    waits: list[tuple[str, float, float]] = []
    driver = SubprocessDriver(NEVER_ANSWERS, timeout=300, start_timeout=1.0,
                              waiting=lambda op, waited, limit: waits.append((op, waited, limit)))
    with pytest.raises(AdapterTimeout, match="did not answer within 1 s") as raised:
        driver.handle({"id": 1, "op": "reset"})
    assert raised.value.first
    started = time.monotonic()
    driver.close()  # a process that let its answer time out is not waited on for long
    assert time.monotonic() - started < 60
    assert waits[0] == ("reset", pytest.approx(0.0, abs=0.5), 1.0) and waits[-1][1] >= 1.0
