"""The lock lockstep: ``impl.lock`` held to ``model.lock``'s ``fixed`` variant, move by move.

``run_lock_lockstep`` (``run``) drives the model (its narrow interface: ``init``, ``enabled``, ``next_state``)
and real lock users with the same moves, drawn by Hypothesis (``machine``): a process calls the lock, takes its
next step (each step the model takes as a move of its own: the process is stopped before it), its operation
ends ok, unchanged or committed, a process is killed (SIGKILL) before any step or inside the operation, a
zombie is reaped, a free pid is taken by another process. After every move both sides must agree (``example``):
the step each process takes and the call it makes, every answer, who is inside the operation, the lock's owner
record, the tickets (their order), the temps, and nothing else on disk. ``coverage`` counts the spec's
"sometimes" items, the steps and the answers reached.

The real side (``processes``): each lock user is a thread of the harness running ``impl.lock`` on a real temp
directory (tmpfs when there is one) with a ``Calls`` that stops before each step and reports it on a queue. A
thread, not a process: a process per step (or a fork per call) costs about a hundred times more, and the budget
of ``tests/test_lock_lockstep.py`` plays thousands of moves in seconds on one core. Nothing the lock does
depends on being a process but what the harness owns anyway: a lock user's pid, start time and PID namespace,
and the kernel's answers to ``kill(pid, 0)`` and ``/proc/PID/stat`` (the harness's ``World``, which stages
kills, zombies, reaps and reused pids, as the migration lockstep's world owns its stand-ins). Kills are
faithful: a killed thread raises ``Killed`` (a ``BaseException``) from where it stopped and every call it would
make after (its clean-up, its release) raises ``Killed`` before touching anything; what it made on disk stays.
Or each lock user a real process (``forked``, ``sides.Side.PROCESSES``: ``envreplica check --lock-side processes``):
a child forked from the harness, paused the same way over a socket pair, asking the harness its identity and the
world's probes over it, and killed by the kernel (SIGKILL while paused, then reaped): nothing of it runs after,
which a thread's ``Killed`` cannot show. It costs 3 to 4.6 times the threads' time a move, so the gate keeps the
threads and the tests run it at a small budget. The lock in real processes killed at any instant is
``tests/test_lock_impl.py``'s and the stress's (``reliability.lock_stress``).

Nonces: the harness gives each call its nonce (``harness.nonce_for``: an order draw of the machine's, then a
count), so the order of tickets of one seq, which the model chooses as a rank (``Step.choice``), is read from
the real names when a ticket is made.

Modules, each importing only those before it: ``harness`` (the harness's own words with its lock users; names),
``protocol`` (the lock adapter protocol's words, docs/protocol.md section 12), ``processes`` (the world and the
paused lock users), ``threads`` (the threads' side), ``example`` (one example's moves and judgement), ``forked``
(the processes' side), ``sides`` (their names), ``coverage``, ``machine`` (Hypothesis), ``run``;
``adapter_side`` (the real side behind an adapter) and ``serve`` (envreplica's own lock adapters); ``traces`` (a
divergence as JSON lines and ITF) and ``findings`` (the finding it is).
"""

from typing import Any

__all__ = ["LockLockstepReport", "lock_settings", "replay_moves", "run_lock_lockstep"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from envreplica.conformance.lock import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
