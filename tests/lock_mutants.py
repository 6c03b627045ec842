"""Deliberately broken versions of ``impl.lock``, to test its tests (and, later, the lock's lockstep).

Each mutant is a realistic bug: an exact source edit of one method of ``impl.lock.ProjectionLock`` (``edits``:
each ``old`` must occur once, so a mutant that no longer applies fails loudly instead of testing nothing),
installed for the duration of a test with ``install``. ``fault`` names the class of fault of issue 42 it belongs
to (a check dropped, a window widened, release by path, stale judged by a cached probe, a crash step not
handled, an error misreported); ``caught_by`` names the tests of ``tests/test_lock_impl.py`` (a ``-k``
expression) that must fail with it (``test_lock_impl.test_each_mutant_is_caught``).
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Callable

import pytest

from envreplica.impl import lock as L


@dataclass(frozen=True)
class LockMutant:
    name: str
    fault: str  # the class of fault it belongs to
    summary: str  # the bug, in words
    method: Callable  # the method of ProjectionLock it edits
    edits: tuple[tuple[str, str], ...]
    caught_by: str  # a pytest -k expression over tests/test_lock_impl.py


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
      "start time is not compared: a reused pid keeps a dead owner's lock for ever)", P._judge,
      (("seen.start != owner.started_at or ", ""),), "reused_pid"),
    M("zombie_alive", "a check dropped", "a zombie owner (exited, not reaped) is judged alive", P._judge,
      (('seen.state in ("Z", "X")', "False"),), "zombie"),
    M("eperm_is_death", "a check dropped", "kill(pid, 0) answering EPERM is taken as proof of death", P._judge,
      (("is Probe.ESRCH:", "is not Probe.OK:"),), "eperm"),
    M("namespace_unchecked", "a check dropped", "an owner in another PID namespace is probed by its pid here",
      P._judge, (("        if owner.pidns != me.pidns:\n            return Judgement.OTHER_NAMESPACE\n", ""),),
      "another_pid_namespace"),
    M("takeover_by_fresh_name", "a window widened", "a takeover moves the lock to a fresh name, not into the dead "
      "holder's own anchor: a mover acting on a stale belief moves whoever holds it now", P._take_over,
      (('os.path.join(anchor, "lock")', "names.grave()"),), "stale_belief"),
    M("release_by_path", "release by path", "the release removes whatever is at the lock path", P._release,
      (("moved = self._step(Call.RENAME, self.calls.rename, self.path, os.path.join(anchor, \"lock\"))  # 16",
        "moved = self._step(Call.RM_TREE, self.calls.rm_tree, self.path)  # 16 MUTANT"),), "release"),
    M("probe_cached", "stale judged by a cached probe", "the first judgement of a pid is kept for the whole "
      "acquisition (the seed's cache of start times)", P._judge,
      (('        """Steps 9a and 9b: dead only on proof, fresh each time (no cache)."""\n',
        '        cache = self.__dict__.setdefault("_mutant_cache", {})  # MUTANT\n'
        "        if owner.pid not in cache:\n"
        "            cache[owner.pid] = self._mutant_judge(owner, me)\n"
        "        return cache[owner.pid]\n"
        "\n"
        "    def _mutant_judge(self, owner: Owner, me: Owner) -> Judgement:\n"),), "dies_while_we_wait"),
    M("dead_ticket_waited_for", "a crash step not handled", "the ticket of a process killed while acquiring is "
      "waited for, never removed: every later process waits behind it, then gives up busy", P._take,
      (("                if judged is Judgement.DEAD:\n                    self._expect(",
        "                if False:  # MUTANT\n                    self._expect("),), "killed_before_any or one_more"),
    M("operation_error_rewrapped", "an error misreported", "the operation's own error comes back as the lock's "
      "(the seed's \"committed\" rewrapping)", P.__exit__,
      (("        self._step(Call.LEAVE, _left, error)  # args: the operation's exception, or None\n",
        "        self._step(Call.LEAVE, _left, error)  # args: the operation's exception, or None\n"
        "        if error is not None:  # MUTANT\n"
        "            self._release()\n"
        "            raise LockError(f\"committed projection needs reconciliation: {error}\", path=self.path)\n"),),
      "propagates_unchanged"),
    M("lost_hides_the_error", "an error misreported", "a lost lock replaces the operation's own error", P.__exit__,
      (("        if error is None:\n            raise lost\n", "        raise lost  # MUTANT\n"),),
      "keeps_the_operations_error"),
    M("give_up_leaves_names", "a crash step not handled", "giving up busy leaves its ticket, anchor and private "
      "directory (its ticket then blocks every later process until it is proved dead)", P._clean_up,
      (("        try:\n            if \"temp\" in self._made:", "        return  # MUTANT\n        try:\n"
        "            if \"temp\" in self._made:"),), "live_owners_lock"),
)


BY_NAME = {m.name: m for m in MUTANTS}
