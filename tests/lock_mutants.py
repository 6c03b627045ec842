"""Deliberately broken versions of ``impl.lock``, to test its tests and its lockstep.

Each mutant is a realistic bug: an exact source edit of one method of ``impl.lock.ProjectionLock`` (``edits``:
each ``old`` must occur once, so a mutant that no longer applies fails loudly instead of testing nothing),
installed for the duration of a test with ``install``. ``fault`` names the class of fault of issue 42 it belongs
to (a check dropped, a window widened, release by path, stale judged by a cached probe, a crash step not
handled, an error misreported); ``caught_by`` names the tests of ``tests/test_lock_impl.py`` (a ``-k``
expression) that must fail with it (``test_lock_impl.test_each_mutant_is_caught``); ``lockstep``: the lockstep
(``conformance.lock``) must catch it too, with a counterexample of at most ``LOCKSTEP_MOVES`` moves
(``test_lock_lockstep.test_each_mutant_is_caught_in_a_few_moves``). The others need what the model leaves out
(``kill`` answering EPERM; a lock lost, which no process of the model makes).
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Callable

import pytest

from envreplica.impl import lock as L

#: The longest counterexample the lockstep may report for a mutant (moves: starts, steps, leaves, kills, ...).
LOCKSTEP_MOVES = 12


@dataclass(frozen=True)
class LockMutant:
    name: str
    fault: str  # the class of fault it belongs to
    summary: str  # the bug, in words
    method: Callable  # the method of ProjectionLock it edits
    edits: tuple[tuple[str, str], ...]
    caught_by: str  # a pytest -k expression over tests/test_lock_impl.py
    lockstep: bool = False  # the lockstep catches it too (within LOCKSTEP_MOVES moves)


def mutated(mutant: "LockMutant") -> dict[str, Callable]:
    """The methods the mutant's edited source defines (its method, and any helper it adds), in ``impl.lock``'s
    namespace."""
    src = inspect.getsource(mutant.method)  # as indented in the class: the edits are written so
    for old, new in mutant.edits:
        assert src.count(old) == 1, f"the mutant {mutant.name}'s edit no longer matches: {old!r}"
        src = src.replace(old, new)
    src = textwrap.dedent(src)
    namespace: dict = {}
    body = "class _Mutant:\n" + textwrap.indent(src, "    ")
    exec(compile(body, f"<mutant {mutant.name}>", "exec"), vars(L), namespace)  # noqa: S102
    return {name: value for name, value in vars(namespace["_Mutant"]).items() if callable(value)}


def install(mutant: "LockMutant", monkeypatch: pytest.MonkeyPatch) -> None:
    for name, method in mutated(mutant).items():
        monkeypatch.setattr(L.ProjectionLock, name, method, raising=False)


P = L.ProjectionLock
M = LockMutant
MUTANTS: tuple[LockMutant, ...] = (
    M("start_time_unchecked", "a check dropped", "a live process with the owner's pid is taken for the owner (the "
      "start time is not compared: a reused pid keeps a dead owner's lock for ever)", P._verdict,
      (("seen.start != owner.started_at or ", ""),), "reused_pid", lockstep=True),
    M("zombie_alive", "a check dropped", "a zombie owner (exited, not reaped) is judged alive", P._verdict,
      (('seen.state in ("Z", "X")', "False"),), "zombie", lockstep=True),
    M("eperm_is_death", "a check dropped", "kill(pid, 0) answering EPERM is taken as proof of death", P._verdict,
      (("is Probe.ESRCH:", "is not Probe.OK:"),), "eperm"),
    M("namespace_unchecked", "a check dropped", "an owner in another PID namespace is probed by its pid here",
      P._verdict, (("        if owner.pidns != me.pidns:\n            return Judgement.OTHER_NAMESPACE\n", ""),),
      "another_pid_namespace", lockstep=True),
    M("claim_what_is_listed", "a window widened", "a takeover lists the lock again just before its claim and "
      "claims the owner file it finds then, not the one it judged: the window between the judgement and the claim "
      "is as wide as the probes, and a stale belief claims whoever holds the lock now", P._try,
      (("        self._claim(Step.CLAIM, Step.CLAIM_RMDIR, Step.CLAIM_UNLINK, where)\n",
        "        again = self._step(Step.LIST, calls.readdir, self.path)  # MUTANT\n"
        "        if isinstance(again, tuple) and self._understood(again):\n"
        "            where = names.owner_file(self._understood(again))\n"
        "        self._claim(Step.CLAIM, Step.CLAIM_RMDIR, Step.CLAIM_UNLINK, where)\n"),),
      "stale_belief", lockstep=True),
    M("release_by_path", "release by path", "the release removes whatever is at the lock path", P._release,
      (("        if self._claim(Step.RELEASE_CLAIM, Step.RELEASE_RMDIR, Step.RELEASE_UNLINK, "
        "self._names.owner_file(me.nonce)):\n",
        "        if self._step(Step.RELEASE_CLAIM, self.calls.rm_tree, self.path) == \"ok\":  # MUTANT\n"),),
      "release", lockstep=True),
    M("probe_cached", "stale judged by a cached probe", "the first judgement of a pid is kept for the whole "
      "acquisition (the seed's cache of start times)", P._judge,
      (("        self._judged = self._verdict(owner, me, kill, proc)\n",
        "        cache = self.__dict__.setdefault(\"_mutant_cache\", {})  # MUTANT\n"
        "        if owner.pid not in cache:\n"
        "            cache[owner.pid] = self._verdict(owner, me, kill, proc)\n"
        "        self._judged = cache[owner.pid]\n"),), "dies_while_we_wait", lockstep=True),
    M("dead_ticket_waited_for", "a crash step not handled", "the ticket of a process killed while acquiring is "
      "waited for, never removed: every later process waits behind it, then gives up busy", P._try,
      (("if self._judge(first.owner, me, Step.QUEUE_KILL, Step.QUEUE_PROC) is Judgement.DEAD:",
        "if self._judge(first.owner, me, Step.QUEUE_KILL, Step.QUEUE_PROC) is None:  # MUTANT"),),
      "killed_before_any or one_more", lockstep=True),
    M("operation_error_rewrapped", "an error misreported", "the operation's own error comes back as the lock's "
      "(the seed's \"committed\" rewrapping)", P.__exit__,
      (("        self._step(Step.LEAVE, _left, error)  # args: the operation's exception, or None\n",
        "        self._step(Step.LEAVE, _left, error)  # args: the operation's exception, or None\n"
        "        if error is not None:  # MUTANT\n"
        "            self._release()\n"
        "            self._leave_queue()\n"
        "            raise LockError(f\"committed projection needs reconciliation: {error}\", path=self.path)\n"),),
      "propagates_unchanged", lockstep=True),
    M("lost_hides_the_error", "an error misreported", "a lost lock replaces the operation's own error", P.__exit__,
      (("        if error is None:\n            raise lost\n", "        raise lost  # MUTANT\n"),),
      "keeps_the_operations_error"),
    M("give_up_leaves_names", "a crash step not handled", "giving up busy leaves its ticket and private "
      "directory (its ticket then blocks every later process until it is proved dead)", P._clean_up,
      (("        try:\n            if self._temp is not None:", "        return  # MUTANT\n        try:\n"
        "            if self._temp is not None:"),), "live_owners_lock", lockstep=True),
)


BY_NAME = {m.name: m for m in MUTANTS}
