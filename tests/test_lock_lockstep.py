"""The lock lockstep (``conformance.lock``): ``impl.lock`` held to ``model.lock``'s ``fixed`` variant, move by move.

* our lock passes at a modest budget, and the run reaches every "sometimes" item of ``spec.lock`` (a takeover, a
  busy answer, a kill inside the operation, a kill inside the acquisition, an entry after a takeover), every step
  the model takes as a move, every answer the fixed variant gives (counts at a fixed budget, never the clock);
* each mutant of ``tests/lock_mutants.py`` marked ``lockstep`` (one per class of fault of issue 42) is caught,
  with a counterexample of at most ``LOCKSTEP_MOVES`` moves, which our lock replays without a divergence (the
  fault is the mutant's, not the harness's);
* the harness is faithful: a killed process takes no call again and what it made stays; a name the model does
  not have, and a record it does not have, are divergences;
* a finding about the model (strict expected failure): its ticket ranks keep the gap a removed ticket leaves, so
  a ticket made after it cannot be placed after a ticket of its seq that ranks above the gap.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from envreplica.conformance.lock.coverage import REQUIRED
from envreplica.conformance.lock.example import Divergence, Move
from envreplica.conformance.lock.run import format_moves, replay_moves, run_lock_lockstep
from envreplica.model import lock as ml
from envreplica.spec.lock import Effect

sys.path.insert(0, str(Path(__file__).parent))
from lock_mutants import LOCKSTEP_MOVES, MUTANTS, install  # noqa: E402
from lock_passes import assert_full_coverage, assert_passes  # noqa: E402

#: Examples for our lock's run (every REQUIRED item reached at it, each "sometimes" item several times: measured
#: 12 to 85 times each at 200) and for each mutant's (a generation budget: a run stops at the first divergence;
#: measured at 450, the first divergence of each mutant is met at example 0 to 28, and a zombie judged alive's at
#: example 216).
PASS_EXAMPLES = 200
MUTANT_EXAMPLES = 450

S, Start, Leave, Crash, Reap = ml.Step, ml.Start, ml.Leave, ml.Crash, ml.Reap


@pytest.fixture(scope="module")
def our_run():
    return run_lock_lockstep(PASS_EXAMPLES)


def test_our_lock_passes(our_run):
    assert_passes(our_run, PASS_EXAMPLES)


def test_the_run_reaches_every_sometimes_item_every_step_and_every_answer(our_run):
    assert_full_coverage(our_run)


LOCKSTEP_MUTANTS = [m for m in MUTANTS if m.lockstep]


def test_one_mutant_per_class_of_fault():
    assert {m.fault for m in LOCKSTEP_MUTANTS} == {"a check dropped", "a window widened", "release by path",
                                                   "stale judged by a cached probe", "a crash step not handled",
                                                   "an error misreported"}


@pytest.mark.parametrize("mutant", LOCKSTEP_MUTANTS, ids=lambda m: m.name)
def test_each_mutant_is_caught_in_a_few_moves(mutant, monkeypatch):
    with monkeypatch.context() as patch:
        install(mutant, patch)
        report = run_lock_lockstep(MUTANT_EXAMPLES)
    assert not report.passed, f"{mutant.name} ({mutant.summary}) was not caught"
    d = report.divergence
    trace = "\n".join(report.trace(d.cfg))
    assert len(report.counterexample) <= LOCKSTEP_MOVES, trace
    assert d.key != "model", trace
    replay_moves(d.cfg, report.counterexample).close()  # our lock takes the same moves without a divergence


# ---------------------------------------------------------------------------
# The harness


def test_a_killed_process_takes_no_call_again_and_what_it_made_stays():
    """p0 killed having made its ticket and temp (a zombie): nothing of its removed by itself; p1 proves it dead
    (a zombie is dead), removes its ticket, takes the lock; p0's temp stays, garbage the model keeps too."""
    moves = [Move(Start(0)), Move(S(0)), Move(S(0)), Move(Crash(0))]
    example = replay_moves(ml.CRASH, moves)
    try:
        dead = example.procs[0]
        assert dead.dead and not dead.thread.is_alive()
        real = example.observe_real()
        assert [t[2] for t in real.tickets] == [0] and real.temps == {(0, 1)}
        for move in [Start(1)] + [S(1)] * 9:
            example.play(Move(move))
        real = example.observe_real()
        assert real.inside == {1} and [t[2] for t in real.tickets] == [1] and real.temps == {(0, 1)}
        assert dead.steps_taken() == []  # nothing since the kill
        assert "zombie judged" in example.reached
    finally:
        example.close()


def test_a_name_the_model_does_not_have_is_a_divergence():
    example = replay_moves(ml.FAIR, [Move(Start(0)), Move(S(0)), Move(S(0))])
    try:
        Path(example.directory, "lock.g.0000000000000000.0").write_bytes(b"")  # a grave nobody unlinked
        with pytest.raises(Divergence) as found:
            example.play(Move(S(0)))
        assert found.value.key == "state" and "lock.g." in found.value.reason
    finally:
        example.close()


def test_a_record_the_model_does_not_have_is_a_divergence():
    example = replay_moves(ml.FAIR, [Move(Start(0))] + [Move(S(0))] * 5)  # inside
    try:
        (name,) = os.listdir(example.lock_path)
        path = Path(example.lock_path, name)
        path.write_bytes(path.read_bytes().replace(b'"started_at": 1', b'"started_at": 2'))
        with pytest.raises(Divergence) as found:
            example.play(Move(Leave(0, Effect.OK)))
        assert found.value.key == "state" and "lock:" in found.value.reason
    finally:
        example.close()


def test_the_answers_of_each_outcome_match():
    for effect in Effect:
        moves = [Move(Start(0))] + [Move(S(0))] * 5 + [Move(Leave(0, effect))] + [Move(S(0))] * 2
        replay_moves(ml.ANSWERS, moves).close()


#: Three processes of one seq (RACE: a stale lock, no waits): p0's ticket first, p1's after it; p0 takes the stale
#: lock over, runs and leaves (its ticket removed: a gap at rank 0); p2's nonce orders after p1's.
GAP = ([Move(Start(0)), Move(Start(1)), Move(Start(2)), Move(S(0), 0), Move(S(1), 1), Move(S(2), 2), Move(S(0)),
        Move(S(1))] + [Move(S(0))] * 9 + [Move(Leave(0, Effect.OK)), Move(S(0)), Move(S(0)), Move(S(2))])


def test_a_ticket_made_after_a_removed_one_can_order_last():
    """The lockstep found it: the model kept the gap a removed ticket left among the ranks of its seq, so a ticket
    made after it could never order last; the ranks now close up (``model.lock._without_ticket``)."""
    replay_moves(ml.RACE, GAP).close()
