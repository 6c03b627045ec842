"""Threads in one process on one ``SqliteReplica``: the threaded mode of the concurrent stage.

Models: a host process whose threads share one replica object (one
connection, one value-store client): some apply what the cloud sends, others
read the served view, wait for readiness and diagnose, as ``SqliteReplica``
documents they may (its lock serializes transactions on the held connection;
``await_ready`` waits on a condition that every write notifies). A lock
mix-up between the read path and the readiness waiters shows here and never
between processes, which each hold a connection of their own.

``ThreadPool`` has ``WorkerPool``'s interface (``run(scenario) -> History``),
so ``run_concurrent`` and its linearizability check serve both. For each
scenario it

1. empties the replica in place (``reset``) and runs the setup, one request
   after the other, through one driver;
2. gives each thread a copy of that driver (``copy.copy``: the same replica,
   value store and sealer; its own per-request fields), so that each thread
   speaks the adapter protocol while every thread works on the one replica;
3. releases the threads at one barrier: each runs its ops in order, each after
   its start delay, stamping call and return with ``time.monotonic_ns``;
4. reads the tables back.

The value store's reads sleep during a batch (``LatencyStore``), which opens
the seed's ``await`` windows, where another thread's transactions land.

Leaves out on purpose: the ``BEGIN`` jitter of the process mode (a thread
waiting on the replica's lock cannot land between two transactions any other
way than the lock lets it), and restarts (a restart replaces the replica
object under every thread: not a concurrent op in either mode).
"""

from __future__ import annotations

import copy
import random
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

from envreplica.conformance.concurrent.history import BATCH_OPS, PROCESS_OPS, History, Op
from envreplica.conformance.concurrent.linearize import impl_state
from envreplica.conformance.concurrent.scenarios import Scenario
from envreplica.conformance.concurrent.workers import REPLY_TIMEOUT, HarnessError, Latency, LatencyStore
from envreplica.impl.files import remove_replica
from envreplica.model.state import State

__all__ = ["ThreadPool"]


class ThreadPool:
    """``threads`` threads sharing one driver's replica, built by ``factory(variant, path, master_key=...,
    store_factory=...)``; the same interface as ``WorkerPool``."""

    def __init__(self, threads: int, factory: Callable[..., Any], variant: str, *, latency: Latency,
                 seed: int, scratch: Path) -> None:
        from envreplica.conformance.drivers import TEST_MASTER_KEY

        if threads < 2:
            raise ValueError("a threaded run needs at least 2 threads")
        self.variant = variant
        self.scratch = Path(scratch)
        self.path = self.scratch / "replica.db"
        self.threads = threads
        self.histories = 0  # scenarios run so far
        rng = random.Random(seed * 7919)
        self.driver = factory(variant, str(self.path), master_key=TEST_MASTER_KEY,
                              store_factory=lambda: LatencyStore(latency, rng))

    @property
    def size(self) -> int:
        return self.threads

    def run(self, scenario: Scenario) -> History:
        """Run ``scenario`` from an empty replica; the history with every answer and the tables read back."""
        odd = sorted({str(op.request.get("op")) for op in scenario.batch} - BATCH_OPS)
        if odd:
            raise ValueError(f"op {odd[0]!r} cannot be a concurrent op (one of {', '.join(sorted(BATCH_OPS))})")
        unfit = sorted(PROCESS_OPS.intersection(r.get("op") for r in scenario.setup))
        if unfit:
            raise ValueError(f"setup op {unfit[0]!r} is the harness's own; a scenario's setup may not hold it")
        if scenario.processes > self.size:
            raise ValueError(f"the scenario needs {scenario.processes} threads; the pool has {self.size}")
        driver = self.driver
        response = driver.handle({"op": "reset", "id": 0})
        if not response.get("ok"):
            raise HarnessError(f"the replica could not be reset: {response}")
        setup_responses = [driver.handle(dict(request, id=n)) for n, request in enumerate(scenario.setup)]
        per_thread: list[list] = [[] for _ in range(self.size)]
        for index, op in enumerate(scenario.batch):
            per_thread[op.process].append((index, op.request, op.delay_us))
        barrier = threading.Barrier(self.size)
        results: list[list] = [[] for _ in range(self.size)]
        errors: list[str] = []

        def work(i: int, own: Any) -> None:
            try:
                barrier.wait(REPLY_TIMEOUT / 2)
                released = time.monotonic_ns()
                for index, request, delay_us in per_thread[i]:
                    wait = released + delay_us * 1000 - time.monotonic_ns()
                    if wait > 0:
                        time.sleep(wait / 1e9)
                    call = time.monotonic_ns()
                    answer = own.handle(dict(request, id=index))
                    results[i].append((index, call, time.monotonic_ns(), answer))
            except BaseException:  # the harness failed, not the implementation: a driver answers errors itself
                errors.append(f"thread {i}:\n{traceback.format_exc()}")
                barrier.abort()

        store = getattr(driver, "store", None)
        if isinstance(store, LatencyStore):
            store.slow = True
        try:
            workers = [threading.Thread(target=work, args=(i, copy.copy(driver)), name=f"envreplica-thread-{i}",
                                        daemon=True) for i in range(self.size)]
            for worker in workers:
                worker.start()
            for i, worker in enumerate(workers):
                worker.join(REPLY_TIMEOUT)  # a guard against a hang (a deadlock is a finding): far above a batch
                if worker.is_alive():
                    raise HarnessError(f"thread {i} did not return within {REPLY_TIMEOUT:.0f} s (stuck: a "
                                       f"deadlock between the replica's lock and its readiness waiters?)")
        finally:
            if isinstance(store, LatencyStore):
                store.slow = False
        if errors:
            raise HarnessError(errors[0])
        ops = [Op(index, i, scenario.batch[index].request, answer, call, returned)
               for i in range(self.size) for index, call, returned, answer in results[i]]
        final_state: Optional[State] = None
        readback_error: Optional[str] = None
        try:
            final_state = impl_state(driver.replica)
        except Exception as error:  # a corrupt or tampered file is a finding, not a harness failure
            readback_error = f"{type(error).__name__}: {error}"
        self.histories += 1
        return scenario.history(self.variant, setup_responses, ops, final_state, readback_error,
                                processes=scenario.processes, earlier=self.histories - 1, unit="thread")

    def close(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None:
            driver.close()
        remove_replica(self.path)
        lock = Path(f"{self.path}.lock")
        if lock.exists():
            lock.unlink()

    def __enter__(self) -> "ThreadPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
