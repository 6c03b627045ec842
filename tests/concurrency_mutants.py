"""Concurrency bugs in ``SqliteReplica`` that one process cannot show: the mutants ``run_concurrent`` must catch.

Each is a realistic edit of one to three lines, made with the source-edit
machinery of ``tests/impl_mutants.py`` (``replica_edit``: each edit must
match exactly once, so a refactor of the implementation fails loudly with
``MutationTargetMissing`` instead of silently testing the original). In one
process each behaves exactly like the original, since every transaction of that
process sees every write (its own) and no other process runs between two of
its transactions; ``tests/test_concurrent.py`` shows it (the single-process
lockstep passes, and so do the concurrent scenarios run one request after
the other), then shows ``run_concurrent`` catching it:

* ``write_begins_deferred``: write transactions start with a plain ``BEGIN``
  (deferred) instead of ``BEGIN IMMEDIATE``, so a write transaction reads
  before it holds the write lock (the pysqlite pitfall of
  ``shared/library-notes.md``). Two processes that read the same snapshot and
  both write: the second fails ("database is locked", busy snapshot) however
  long the busy timeout, and a request is answered ``replica unavailable``.
* ``status_authority_cached``: ``read_status`` answers from the authority row
  this process last wrote (kept on the instance after each write transaction,
  dropped when the replica is emptied) instead of reading it: coherent while
  one process writes, stale as soon as another does.
* ``begin_split``: ``begin`` commits the authority row (attempt open, gate
  closed) in one transaction and fills the attempt's staging view in a
  second one. Between the two, another process sees an attempt without its
  staged projects: a page of that attempt is refused
  ``project_not_in_attempt``, which no order of whole ``begin``\\s gives.

Each mutant's ``scenario`` is empty: no single-process request sequence shows
it (that is the point); ``observe`` is ``"concurrent"``.
"""

from __future__ import annotations

import inspect
import textwrap

from envreplica.impl.replica import SqliteReplica

from impl_mutants import ImplMutant, MutationTargetMissing, replica_edit

__all__ = ["CONCURRENCY_MUTANTS", "THREAD_MUTANTS"]


def _begin_split():
    """``begin`` with its staging loop moved into a second write transaction (the loop's text is kept as is)."""
    src = textwrap.dedent(inspect.getsource(SqliteReplica.begin))
    lines = src.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("for project in frame.project_ids:")]
    returns = [line for line in lines if line.strip().startswith("return BeginResult(")]
    if len(starts) != 1 or len(returns) != 1:
        raise MutationTargetMissing("SqliteReplica.begin: expected one 'for project in frame.project_ids:' loop "
                                    "and one 'return BeginResult(' line; the implementation changed, update "
                                    "begin_split")
    start = starts[0]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    loop = "".join(lines[start:end])
    ret = returns[0]
    ret_indent = ret[: len(ret) - len(ret.lstrip())]
    second = (f"{ret_indent}with self._write() as tx:  # MUTANT: the staging view in a second transaction\n"
              + textwrap.indent(textwrap.dedent(loop), ret_indent + "    "))
    return replica_edit("begin", (loop, ""), (ret, second + ret))()


M = ImplMutant
CONCURRENCY_MUTANTS: tuple[ImplMutant, ...] = (
    M(
        "write_begins_deferred",
        "write transactions begin DEFERRED (plain BEGIN): a write transaction reads before it holds the write lock",
        (replica_edit("_write", ("write_transaction(self._conn)", "read_transaction(self._conn)")),),
        (),
        observe="concurrent",
    ),
    M(
        "status_authority_cached",
        "read_status answers from the authority row this process last wrote, kept on the instance",
        (replica_edit("_write", ("moved = tx.flush()",
                                 "moved = tx.flush(); self._authority_seen = tx.authority()  # MUTANT")),
         replica_edit("empty", ("self._notify()", "self.__dict__.pop('_authority_seen', None); self._notify()"
                                                  "  # MUTANT")),
         replica_edit("read_status", ("a = tx.authority()",
                                      "a = self.__dict__.get('_authority_seen') or tx.authority()  # MUTANT"))),
        (),
        observe="concurrent",
    ),
    M(
        "begin_split",
        "begin commits the attempt in one transaction and fills its staging view in a second one",
        (_begin_split,),
        (),
        observe="concurrent",
    ),
)


#: Bugs of threads in one process on one ``SqliteReplica``, which processes (each with a connection of its
#: own) never show: ``run_concurrent(mode="threads")`` must catch each.
THREAD_MUTANTS: tuple[ImplMutant, ...] = (
    M(
        "read_without_the_lock",
        "read transactions do not take the replica's lock: a reader (a snapshot, a readiness check) uses the "
        "held connection while another thread's write transaction is open on it, and sees that write before "
        "it commits",
        (replica_edit("_read", ("with self._lock:", "if True:  # MUTANT: the lock is not taken")),),
        (),
        observe="concurrent",
    ),
    M(
        "woken_means_ready",
        "await_ready returns as soon as a write notifies it, without checking again that the replica is ready "
        "(any write wakes the waiters: a close, a begin, a delivery)",
        (replica_edit("await_ready", (
            "                self._changed.wait(min(READY_POLL_SECONDS, remaining))\n",
            "                self._changed.wait(min(READY_POLL_SECONDS, remaining))\n"
            "            if self._generation != seen:  # MUTANT: woken means ready\n"
            "                return\n")),),
        (),
        observe="concurrent",
    ),
)
