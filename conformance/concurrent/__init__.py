"""Concurrent processes on one replica file, held to the model by a linearizability check.

The single-process lockstep drives one connection, so a bug that shows only
when two processes write the file at once (a transaction that reads before it
takes the write lock, an authority row kept across transactions, a check and
its act in two transactions) passes it. Here two or three OS processes, each
with its own driver on the same file, run a small batch of ops at once after
a sequential setup; every op's call and return is timestamped on one
monotonic clock; the history must be linearizable against the model: some
order of the model's steps of the ops, each op's steps between its call and
its return, gives every answer the processes got and leaves the tables the
processes left.

The threaded mode (``Mode.THREADS``) runs the same scenarios, and readiness
waiters beside the writers (``ScenarioKind.READINESS``: ``ready`` with a
deadline, ``diagnostics``, ``snapshot``), as threads of one process sharing
one ``SqliteReplica``: a lock mix-up between the read path and the readiness
waiters shows there, and never between processes.

Modules, each importing only those above it:

* ``history``: ``Op``, ``History``, ``Response`` (what is compared), formatting;
* ``steps``: ``Granularity`` and ``ModelOp``, an op as the model's steps;
* ``linearize``: ``check_history`` (the search) and its ``Check`` / ``Verdict``;
* ``scenarios``: ``ScenarioKind`` and ``generate_scenario``;
* ``workers``: ``WorkerPool`` (forked processes, barrier, latency store);
* ``threads``: ``ThreadPool`` (threads of one process on one replica object);
* ``run``: ``run_concurrent`` (``Mode``: processes or threads), profiles,
  ``ConcurrentReport``, shrinking.

Leaves out on purpose: crashes and restarts in a batch (``reliability.crash``
kills processes), the value store changing during a batch (its requests act on
one process), and more than one project or stream (see ``scenarios``).
"""

from envreplica.conformance.concurrent.history import History, Op, OpKind, Response, format_history
from envreplica.conformance.concurrent.linearize import Check, Verdict, check_history, expected_state, impl_state
from envreplica.conformance.concurrent.run import (
    PROFILES,
    Mode,
    ConcurrentFailure,
    ConcurrentReport,
    Profile,
    run_concurrent,
)
from envreplica.conformance.concurrent.scenarios import KINDS, THREAD_KINDS, Scenario, ScenarioKind, generate_scenario
from envreplica.conformance.concurrent.threads import ThreadPool
from envreplica.conformance.concurrent.steps import Granularity, ModelOp, sequential_disagreement
from envreplica.conformance.concurrent.workers import HarnessError, Latency, WorkerPool

__all__ = [
    "Check",
    "ConcurrentFailure",
    "ConcurrentReport",
    "Granularity",
    "HarnessError",
    "History",
    "KINDS",
    "Latency",
    "Mode",
    "ModelOp",
    "Op",
    "OpKind",
    "PROFILES",
    "Profile",
    "Response",
    "Scenario",
    "ScenarioKind",
    "Verdict",
    "THREAD_KINDS",
    "ThreadPool",
    "WorkerPool",
    "check_history",
    "expected_state",
    "format_history",
    "generate_scenario",
    "impl_state",
    "run_concurrent",
    "sequential_disagreement",
]
