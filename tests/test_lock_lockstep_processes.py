"""The lock lockstep on real processes (``conformance.lock.forked``, ``Side.PROCESSES``): each lock user a child
forked from the harness, a kill the kernel's SIGKILL.

* our lock passes at a small budget (``tests/budget.py``), with the coverage the threads' run asserts: every
  "sometimes" item of ``spec.lock`` at least twice, every step the model takes as a move, every answer the fixed
  variant gives, a zombie and a reused pid judged;
* two mutants of ``tests/lock_mutants.py`` where the kill matters (a dead process's ticket waited for: a crash step
  not handled; the release by path) are caught on this side in at most ``LOCKSTEP_MOVES`` moves, and our lock
  replays each counterexample on this side without a divergence;
* the kill is the kernel's: a killed child is reaped (no longer a child of the harness, killed by SIGKILL), what it
  made stays, and a clean-up that bypasses the ``Calls`` runs on the threads' kill (an exception) but never on
  this side's;
* ``envreplica adapter --protocol lock --impl lock --side processes`` answers the same lockstep through the
  protocol, and the gate's lock lockstep runs on the side ``--lock-side`` names (threads by default).

Budgets are counts of examples (derandomized), never the clock.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from envreplica.conformance.lock.adapter_side import AdapterShared
from envreplica.conformance.lock.example import Divergence, Move
from envreplica.conformance.lock import forked
from envreplica.conformance.lock.forked import Child
from envreplica.conformance.lock.run import replay_moves, run_lock_lockstep
from envreplica.conformance.lock.sides import Side
from envreplica.impl import lock as il
from envreplica.model import lock as ml

sys.path.insert(0, str(Path(__file__).parent))
from budget import examples  # noqa: E402
from lock_mutants import BY_NAME, LOCKSTEP_MOVES, install  # noqa: E402
from lock_passes import assert_full_coverage, assert_passes  # noqa: E402

#: Examples of our lock's run on processes: measured (the derandomized draws are the threads' at the same count),
#: every REQUIRED item reached, each "sometimes" item at least twice and a zombie and a reused pid judged at 50
#: (57 examples, 1,228 moves) and at 90 (104 examples, 2,234 moves, each "sometimes" item 11 times or more).
PASS_EXAMPLES = examples(ci=90, dev=50)
#: The mutants' bounds: the lockstep's with kills (``model.lock``'s ``crash`` and ``world``), and a generation budget:
#: measured, ``release_by_path`` diverges at example 3 and ``dead_ticket_waited_for`` at example 77 (Hypothesis's
#: shrinking included; at 98 of the lockstep's every bounds, twice the seconds), on either side.
MUTANT_BOUNDS = (ml.CRASH, ml.WORLD)
MUTANT_EXAMPLES = 150
PROCESSES = Side.PROCESSES.factory

S, Start, Leave, Crash = ml.Step, ml.Start, ml.Leave, ml.Crash


@pytest.fixture(scope="module")
def our_run():
    return run_lock_lockstep(PASS_EXAMPLES, side=PROCESSES)


def _children() -> set[int]:
    """The pids whose parent is this process, zombies included (``/proc``)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry))
    return found


def test_a_run_leaves_no_child_behind():
    """Every example's forked lock users are reaped by the run's end (``forked.reap_all``), whatever the last
    example left alive: no zombie, no child left running (it was: the last example's children stayed zombies)."""
    before = _children()
    report = run_lock_lockstep(10, side=PROCESSES)
    assert report.passed and report.moves > 0, report
    assert not forked._EXITING
    assert _children() - before == set()


def test_our_lock_passes_on_real_processes(our_run):
    assert_passes(our_run, PASS_EXAMPLES)


def test_the_process_side_reaches_every_sometimes_item_every_step_and_every_answer(our_run):
    assert_full_coverage(our_run)


@pytest.mark.parametrize("name", ["dead_ticket_waited_for", "release_by_path"])
def test_a_mutant_where_the_kill_matters_is_caught_on_processes(name, monkeypatch):
    mutant = BY_NAME[name]
    with monkeypatch.context() as patch:
        install(mutant, patch)
        report = run_lock_lockstep(MUTANT_EXAMPLES, bounds=MUTANT_BOUNDS, side=PROCESSES)
    assert not report.passed, f"{mutant.name} ({mutant.summary}) was not caught on processes"
    d = report.divergence
    trace = "\n".join(report.trace(d.cfg))
    assert len(report.counterexample) <= LOCKSTEP_MOVES and d.key != "model", trace
    replay_moves(d.cfg, report.counterexample, side=PROCESSES).close()  # our lock takes the same moves


# ---------------------------------------------------------------------------
# The kill is the kernel's

#: p0 makes its ticket and its temp, and is killed (a zombie in the world) paused before its queue's readdir.
KILLED_ACQUIRING = [Move(Start(0)), Move(S(0)), Move(S(0)), Move(Crash(0))]


def test_a_killed_child_is_reaped_and_what_it_made_stays():
    example = replay_moves(ml.CRASH, KILLED_ACQUIRING, side=PROCESSES)
    try:
        dead = example.procs[0]
        assert isinstance(dead, Child) and dead.dead
        assert dead.os_pid is not None and dead.os_pid != os.getpid()  # a process of its own
        assert dead.killed_by_sigkill  # the harness reaped it: the kernel's SIGKILL ended it
        with pytest.raises(ChildProcessError):  # reaped: no longer a child of the harness, not even a zombie
            os.waitpid(dead.os_pid, os.WNOHANG)
        real = example.observe_real()
        assert [t[2] for t in real.tickets] == [0] and real.temps == {(0, 1)}
        assert real.tickets[0][3] == example.state.procs[0].pid != dead.os_pid  # its identity: the harness's answer
        (nonce,) = [n for n, instance in example.instances.items() if instance == (0, 1)]
        names = os.listdir(example.directory)  # on the disk: its ticket, and its temp with its owner file written
        assert [n for n in names if ".t." in n and nonce in n] and f"lock.n.{nonce}" in names
        record = Path(example.directory, f"lock.n.{nonce}", f"owner-{nonce}.json").read_bytes()
        assert il.parse_record(record, where="temp").nonce == nonce
        for move in [Start(1)] + [S(1)] * 9:  # p1 proves it dead, removes its ticket, takes the lock
            example.play(Move(move))
        real = example.observe_real()
        assert real.inside == {1} and [t[2] for t in real.tickets] == [1] and real.temps == {(0, 1)}
        assert example.procs[1].os_pid not in (None, dead.os_pid)
    finally:
        example.close()


def _cleaning_up_outside_the_calls(patch: pytest.MonkeyPatch) -> None:
    """An acquisition that, on any exception, removes its temp directly (``shutil``, not its ``Calls``): code
    that a kill by an exception runs and the kernel's SIGKILL never does."""
    enter = il.ProjectionLock.__enter__

    def cleaning(self: il.ProjectionLock) -> il.ProjectionLock:
        try:
            return enter(self)
        except BaseException:
            parent, base = os.path.split(self.path)
            for name in os.listdir(parent):
                if name.startswith(base + ".n."):
                    shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            raise

    patch.setattr(il.ProjectionLock, "__enter__", cleaning)


def test_no_clean_up_runs_after_the_kernels_kill(monkeypatch):
    """The threads' kill is an exception raised where the thread stopped: a clean-up outside the ``Calls`` runs,
    and the temp the model keeps is gone (a divergence the real kill never makes). The processes' kill is
    SIGKILL: nothing runs, the temp stays, both sides agree."""
    with monkeypatch.context() as patch:
        _cleaning_up_outside_the_calls(patch)
        with pytest.raises(Divergence) as found:
            replay_moves(ml.CRASH, KILLED_ACQUIRING, side=Side.THREADS.factory).close()
        assert found.value.key == "state" and "temps" in found.value.reason, found.value.reason
        example = replay_moves(ml.CRASH, KILLED_ACQUIRING, side=PROCESSES)
        try:
            assert example.observe_real().temps == {(0, 1)}
        finally:
            example.close()


def test_impl_lock_on_processes_through_its_adapter_passes():
    command = f"{sys.executable} -m envreplica.cli.main adapter --protocol lock --impl lock --side processes"
    shared = AdapterShared(command, ml.Variant.FIXED)
    try:
        report = run_lock_lockstep(30, bounds=shared.bounds, side=shared.side, properties=shared.properties)
    finally:
        shared.close()
    assert "processes" in shared.decl.implementation
    assert report.passed and report.adapter_failure is None, report.trace(report.divergence.cfg)
    assert report.examples >= 30 and report.coverage.counts["sometimes_takeover"]


class _Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)


def test_the_gates_lock_lockstep_runs_on_the_side_it_is_given(monkeypatch):
    """``envreplica check --lock-side processes``: the gate's lock lockstep forks its lock users (counted), passes
    and says on which side it ran (at the dev budget of this module: the gate's 200 examples are the threads')."""
    from envreplica.cli import main as cli
    from envreplica.conformance.lock import forked

    forks: list[int] = []
    fork = forked.Child._fork

    def counted(self: Child):
        forks.append(self.slot)
        return fork(self)

    monkeypatch.setattr(forked.Child, "_fork", counted)
    monkeypatch.setattr(cli, "LOCK_LOCKSTEP_EXAMPLES", examples(ci=50, dev=50))
    rows = _Rows()
    failed = cli._lock_lockstep(rows, side=Side.PROCESSES.value)
    assert not failed, rows.rows
    ((name, what, *_),) = rows.rows
    assert name == "lock lockstep" and "impl.lock vs model (processes)" in what
    assert len(forks) >= 50  # every example forked its lock users
    assert cli.LOCK_SIDE == Side.THREADS.value  # the gate's default (docs/lock.md: the threads are the cheaper)


def test_the_gate_refuses_a_side_it_does_not_have(capsys):
    from envreplica.cli import main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["check", "--lock-side", "fibers"])
    assert exited.value.code == 2 and "--lock-side" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--protocol", "lock"], ["--protocol", "replica,migration"], ["--model-only"],
                                  ["--lockstep-profile", "lock=none"]])
def test_a_side_where_no_lock_lockstep_runs_is_refused_in_one_line(argv, capsys):
    """``--lock-side`` chooses the lock lockstep's users: given where none runs, it is a usage error (it was
    silently ignored), not a side that seems chosen."""
    from envreplica.cli import main as cli

    status = cli.main(["check", "--lock-side", "processes", *argv])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and err.count("--lock-side processes") == 1, err
