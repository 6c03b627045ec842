"""Worker processes: each holds its own driver on the same replica file; a barrier releases a batch.

Models: a host whose several OS processes share one replica file (shared
holder lock, WAL, ``BEGIN IMMEDIATE``, busy timeout), each with its own
connection and its own value-store client. ``WorkerPool`` forks its workers
once (``multiprocessing``, start method ``fork``: the driver factory may be a
class built at run time, such as a mutant's) and opens one file in each of
them: worker 0 creates it, then the others open it (``SqliteDriver`` closes
the gate of a file it reopens: on a fresh, inactive replica that changes
nothing, and it happens before any scenario). For each scenario it

1. clears every worker's value store, and sends ``reset`` to worker 0: the
   replica is emptied in place (rows, never the file);
2. sends the setup to worker 0, and the setup's ``store.*`` requests to the
   other workers too, so every process's value store answers alike;
3. hands each worker its batch ops; they wait on one barrier, then each runs
   its ops in order, each after its start delay, stamping the call and the
   return with ``time.monotonic_ns`` (``CLOCK_MONOTONIC``: one clock for all
   processes);
4. reads the tables back in worker 0 (``linearize.impl_state``).

The processes and their connections live as long as the pool, as a host's
do: a bug that keeps something on the replica object across operations
meets other processes' writes.

Schedule noise during a batch (``Latency``): value-store reads sleep (a real
store answers over the network, and the windows the seed's ``await`` opens
are where other processes' transactions land), and some transactions start
late (``BeginJitter``: a process descheduled between two of its
transactions), so that another process can land between two transactions
that one op runs back to back.

Leaves out on purpose: restarts and kills (``reliability.crash``), and
``spawn``/``forkserver`` (they would need the factory importable by name).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from envreplica.conformance.concurrent.history import BATCH_OPS, BROADCAST_OPS, PROCESS_OPS, History, Op
from envreplica.conformance.concurrent.linearize import impl_state
from envreplica.conformance.concurrent.scenarios import Scenario
from envreplica.impl.files import remove_replica
from envreplica.impl.valuestores import EmbeddedStore

__all__ = ["BeginJitter", "HarnessError", "Latency", "LatencyStore", "WorkerPool"]

#: Seconds the parent waits for a worker's answer before it declares the run stuck.
REPLY_TIMEOUT = 60.0


class HarnessError(RuntimeError):
    """The harness itself failed (a worker died, hung, or could not open the file): not a verdict."""


@dataclass(frozen=True)
class Latency:
    """During a batch: how long a value-store read takes, and how often a transaction starts late.

    ``low_us`` .. ``high_us``: a read's duration, uniform. ``begin_chance``:
    the chance that a transaction's ``BEGIN`` waits ``0`` .. ``begin_high_us``
    before it runs (before it takes any lock): a process descheduled between
    two of its transactions. Without it, two transactions of one op run back
    to back and another process almost never lands between them (SQLite's
    busy handler sleeps a millisecond or more before it retries a lock).
    """

    low_us: int = 200
    high_us: int = 1500
    begin_chance: float = 0.3
    begin_high_us: int = 1500


class LatencyStore(EmbeddedStore):
    """The embedded store whose reads take a while when ``slow`` (as a store across a network does)."""

    def __init__(self, latency: Latency, rng: random.Random) -> None:
        super().__init__()
        self.latency = latency
        self.rng = rng
        self.slow = False

    def _wait(self) -> None:
        if self.slow:
            time.sleep(self.rng.uniform(self.latency.low_us, self.latency.high_us) / 1e6)

    def read_staged(self, name: str):
        self._wait()
        return super().read_staged(name)

    def read_legacy(self, name: str, version: int):
        self._wait()
        return super().read_legacy(name, version)


class BeginJitter:
    """Delays some transactions' ``BEGIN`` in this process (``Latency.begin_chance``) while ``on``.

    Installed on every SQLite connection the process opens through SQLAlchemy
    (a ``connect`` listener on ``sqlalchemy.pool.Pool``) as the connection's
    trace callback, which SQLite calls when a statement starts, before the
    statement takes any lock. An implementation that opens SQLite otherwise
    is simply not perturbed.
    """

    def __init__(self, latency: Latency, rng: random.Random) -> None:
        self.latency = latency
        self.rng = rng
        self.on = False
        self.delayed = 0

    def install(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.pool import Pool

        event.listen(Pool, "connect", self._connect)

    def _connect(self, dbapi_connection, _record) -> None:
        set_trace = getattr(dbapi_connection, "set_trace_callback", None)
        if set_trace is not None:
            set_trace(self._trace)

    def _trace(self, statement: str) -> None:
        if self.on and statement.startswith("BEGIN") and self.rng.random() < self.latency.begin_chance:
            self.delayed += 1
            time.sleep(self.rng.uniform(0, self.latency.begin_high_us) / 1e6)


# ---------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------


def _worker_main(index: int, conn, barrier, factory: Callable[..., Any], variant: str, latency: Latency,
                 seed: int) -> None:
    from envreplica.conformance.drivers import TEST_MASTER_KEY

    rng = random.Random(seed * 7919 + index)
    jitter = BeginJitter(latency, random.Random(seed * 7919 + index + 1))
    jitter.install()
    driver: Any = None  # what factory makes (a SqliteDriver or a mutant of one): "open" comes first
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        command, args = message[0], message[1:]
        try:
            if command == "open":
                driver = factory(variant, args[0], master_key=TEST_MASTER_KEY,
                                 store_factory=lambda: LatencyStore(latency, rng))
                reply: Any = None
            elif command == "setup":
                reply = [driver.handle(dict(request, id=n)) for n, request in enumerate(args[0])]
            elif command == "batch":
                reply = _run_batch(driver, barrier, args[0], args[1], jitter)
            elif command == "clear-store":
                driver.store.clear()
                reply = None
            elif command == "readback":
                try:
                    reply = ("state", impl_state(driver.replica))
                except Exception as error:  # a corrupt or tampered file is a finding, not a harness failure
                    reply = ("error", f"{type(error).__name__}: {error}")
            elif command == "close":
                if driver is not None:
                    driver.close()
                driver = None
                reply = None
            elif command == "exit":
                if driver is not None:
                    driver.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {command!r}")
            conn.send(("ok", reply))
        except BaseException:
            conn.send(("failed", traceback.format_exc()))


def _run_batch(driver, barrier, ops: list, timeout: float, jitter: BeginJitter) -> list:
    """Wait on the barrier, then run ``ops`` (index, request, delay µs) in order; (index, call, return, response)."""
    store = getattr(driver, "store", None) if driver is not None else None
    if isinstance(store, LatencyStore):
        store.slow = True
    jitter.on = True
    try:
        barrier.wait(timeout)
        released = time.monotonic_ns()
        out = []
        for index, request, delay_us in ops:
            wait = released + delay_us * 1000 - time.monotonic_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            call = time.monotonic_ns()
            response = driver.handle(dict(request, id=index))
            returned = time.monotonic_ns()
            out.append((index, call, returned, response))
        return out
    finally:
        jitter.on = False
        if isinstance(store, LatencyStore):
            store.slow = False


# ---------------------------------------------------------------------------
# The pool
# ---------------------------------------------------------------------------


class WorkerPool:
    """``processes`` forked workers running ``factory(variant, path, master_key=..., store_factory=...)``."""

    def __init__(self, processes: int, factory: Callable[..., Any], variant: str, *, latency: Latency,
                 seed: int, scratch: Path) -> None:
        if processes < 2:
            raise ValueError("a concurrent run needs at least 2 worker processes")
        ctx = multiprocessing.get_context("fork")
        self.variant = variant
        self.scratch = Path(scratch)
        self.barrier = ctx.Barrier(processes)
        self._conns = []
        self._procs = []
        for i in range(processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, name=f"envreplica-concurrent-{i}",
                               args=(i, child, self.barrier, factory, variant, latency, seed), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self.path = self.scratch / "replica.db"
        self.histories = 0  # scenarios run so far
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    @property
    def size(self) -> int:
        return len(self._procs)

    # -- messaging -------------------------------------------------------------

    def _send(self, i: int, *message) -> None:
        try:
            self._conns[i].send(message)
        except (BrokenPipeError, OSError) as error:
            raise HarnessError(f"worker process {i} is gone ({error}); exit code {self._procs[i].exitcode}")

    def _recv(self, i: int, what: str, timeout: float = REPLY_TIMEOUT) -> Any:
        conn = self._conns[i]
        if not conn.poll(timeout):
            raise HarnessError(f"worker process {i} did not answer {what} within {timeout:.0f} s (stuck)")
        try:
            status, payload = conn.recv()
        except EOFError:
            raise HarnessError(f"worker process {i} died during {what}; exit code {self._procs[i].exitcode}")
        if status != "ok":
            raise HarnessError(f"worker process {i} failed during {what}:\n{payload}")
        return payload

    def _all(self, workers, message: tuple, what: str) -> list:
        for i in workers:
            self._send(i, *message)
        return [self._recv(i, what) for i in workers]

    # -- one scenario ------------------------------------------------------------

    def _open(self) -> None:
        """Open the pool's file in every worker, one after the other (worker 0 creates it).

        One at a time: opening is not what is under test, and a reopening
        driver closes the gate in a write transaction.
        """
        for i in range(self.size):
            self._send(i, "open", str(self.path))
            self._recv(i, "open (creating the replica)" if i == 0 else "open")

    def run(self, scenario: Scenario) -> History:
        """Run ``scenario`` from an empty replica; the history with every answer and the tables read back."""
        used = scenario.processes
        odd = sorted({str(op.request.get("op")) for op in scenario.batch} - BATCH_OPS)
        if odd:
            raise ValueError(f"op {odd[0]!r} cannot be a concurrent op (one of {', '.join(sorted(BATCH_OPS))})")
        unfit = sorted(PROCESS_OPS.intersection(r.get("op") for r in scenario.setup))
        if unfit:
            raise ValueError(f"setup op {unfit[0]!r} acts on one process (its store or its connection), which the "
                             f"model cannot tell from the others; a scenario's setup may not hold it")
        if used > self.size:
            raise ValueError(f"the scenario needs {used} processes; the pool has {self.size}")
        try:
            # Empty the replica (reset: rows in place, never the file) and every process's value store.
            self._all(range(1, self.size), ("clear-store",), "clearing the value store")
            response = self._all([0], ("setup", [{"op": "reset"}]), "reset")[0][0]
            if not response.get("ok"):
                raise HarnessError(f"worker 0 could not reset the replica: {response}")
            for i in range(1, used):
                self._send(i, "setup", [r for r in scenario.setup if r.get("op") in BROADCAST_OPS])
            self._send(0, "setup", list(scenario.setup))
            setup_responses = self._recv(0, "setup")
            for i in range(1, used):
                for response in self._recv(i, "setup (value store)"):
                    if not response.get("ok"):
                        raise HarnessError(f"worker process {i} refused a value-store setup request: {response}")
            per_process: list[list] = [[] for _ in range(self.size)]
            for index, op in enumerate(scenario.batch):
                per_process[op.process].append((index, op.request, op.delay_us))
            for i in range(self.size):
                self._send(i, "batch", per_process[i], REPLY_TIMEOUT / 2)
            ops = []
            for i in range(self.size):
                for index, call, returned, response in self._recv(i, "batch"):
                    ops.append(Op(index, i, scenario.batch[index].request, response, call, returned))
            self._send(0, "readback")
            kind, payload = self._recv(0, "readback")
        except HarnessError:
            self.close()
            raise
        self.histories += 1
        return scenario.history(self.variant, setup_responses, ops, payload if kind == "state" else None,
                                payload if kind == "error" else None, processes=used, earlier=self.histories - 1)

    def close(self) -> None:
        """Stop every worker (asked first; those that do not stop within 5 s are terminated)."""
        for i, proc in enumerate(self._procs):
            if proc.is_alive():
                try:
                    self._conns[i].send(("exit",))
                except (BrokenPipeError, OSError):
                    pass
        deadline = time.monotonic() + 5
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.terminate()
                proc.join(1)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        remove_replica(self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{self.path}.lock")

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
