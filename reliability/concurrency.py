"""Several processes on one replica file at once: no lost or doubled update, no wrong answer.

``run_concurrency`` starts one process per role (a fresh interpreter running
``worker_main``), each opening the same SQLite file through its own
``SqliteDriver`` (shared holder lock, WAL, ``BEGIN IMMEDIATE``, busy timeout)
and each filling its own in-process value store from the cloud's
``store.put`` requests:

* **deliverers** (two or more) race on the same sequence: each sends the
  whole stream ``cloud.delivery(1..N)`` in order, retries a refusal that is not
  consumed (``replica_state_changed``, ``reconciliation_attempt_mismatch``,
  ``snapshot_incomplete``), tagging the delivery with the replica's open
  attempt when the refusal names one, and takes a replay as acknowledged;
* a **reconciler** activates the replica (the first snapshot) and then cycles
  the gate as progress passes even marks: ``begin`` with a new attempt id, the
  pages of the cloud one delivery past the cursor that ``begin`` answered (a
  delivery whose first transaction wrote its record before ``begin`` but whose
  receipt did not follow may already stand in the live view), then ``commit``
  at the high-water mark read from ``status``, retried when refused
  ``delivery_incomplete`` (a deliverer moved the cursor meanwhile) or
  ``record_version_changed`` (a delivery had bumped a staged record version in
  its first transaction but not yet moved the cursor in its last); now and
  then it abandons an attempt with ``close`` first;
* **readers** loop over ``snapshot`` (followed by ``status``) and ``receipts``.

Every process writes every call and its answer, with wall-clock timestamps,
as JSON lines under ``WORKDIR/logs``. After all stop, the parent checks:

* no lost or doubled update: one receipt for each sequence 1..N and no other;
  the applied sequence is N; every answer a deliverer was given for sequence
  n, replayed or not, equals the receipt of n; the live records equal the
  cloud's ``records_after(N)``, before and after a last reconciliation (the
  parent's ``begin``, pages and ``commit`` at N), whose snapshot serves the
  cloud's own values;
* no wrong answer: every snapshot a reader was served is the cloud's whole
  view (every record and record version) after one sequence s, with s between
  the cursor of the reader's last ``status`` before it and one past the
  cursor of the ``status`` right after it (a delivery writes its record in
  its first transaction and its receipt and cursor in its last, as the seed
  does); each installed entry serves the cloud's value for its staging id,
  no other entry serves a value, and nothing the kept epochs or its binding
  withhold is installed; every receipt list
  is contiguous from 1 and agrees with the final receipts; status answers are
  consistent (organisation, stream, epochs, projects; an open gate has no
  attempt) and the cursor never goes back, within a process or across
  processes (an answer finished before another started never shows more);
* integrity: ``verify()`` is empty and every ``spec`` invariant holds on
  ``impl_model_state(replica)`` (``conformance.readback``) read back from the file;
* no raw error reached a caller: every answer is classified; a result, a
  refusal or a busy replica (``replica unavailable``, lock held past the busy
  timeout: counted, then retried) are expected; an ``internal error`` (a raw
  SQLite or SQLAlchemy exception), ``corrupt``, ``invalid``, another
  ``unsupported``, or an exception out of ``Driver.handle`` stops the process
  and fails the run; so does a refusal code the role should never see.

Leaves out on purpose: restarts and kills (``crash``), more than one stream,
legacy references and adversarial frames (the lockstep has them), and a
second reconciler (the cloud runs one reconciliation at a time per host).
``SqliteDriver`` closes the gate of a file it reopens (a host restarting), so
every process opens the file and says ``ready`` before the parent lets any of
them start.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import os
import random
import select
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Union

from envreplica.conformance.readback import impl_model_state
from envreplica.reliability.scratch import scratch_directory
from envreplica.reliability.stream import ORG, STREAM, Cloud, StreamShape

__all__ = ["ConcurrencyReport", "ConcurrencyFailure", "EXPECTED_CODES", "RETRIED_COMMIT_CODES",
           "RETRIED_DELIVERY_CODES", "outcome_of", "open_sqlite_driver", "run_concurrency", "worker_main"]

#: Refusals of a delivery that are not consumed and that racing the gate produces: retried.
RETRIED_DELIVERY_CODES = frozenset({"replica_state_changed", "reconciliation_attempt_mismatch",
                                    "snapshot_incomplete"})
#: Refusals of a reconciler's commit that racing deliverers produce: retried at a new high-water mark.
#: ``delivery_incomplete``: a delivery moved the cursor after the status read; ``record_version_changed``:
#: a delivery between its first transaction (staged record version bumped) and its last (cursor moved).
RETRIED_COMMIT_CODES = frozenset({"delivery_incomplete", "record_version_changed"})
#: Refusal codes each role may see; any other is a failure.
EXPECTED_CODES = MappingProxyType({
    "deliverer": RETRIED_DELIVERY_CODES,
    "reconciler": RETRIED_COMMIT_CODES,
    "reader": frozenset(),
})
_ROLES = ("deliverer", "reconciler", "reader")
_BUSY_MARK = "holds the replica's lock"  # impl.files.ReplicaBusy's message


class ConcurrencyFailure(AssertionError):
    """The harness found a lost, doubled or wrong answer, a raw error, or a process that failed."""


def open_sqlite_driver(path: str):
    """The implementation under test: ``SqliteDriver`` (variant fixed, test key, replica shared)."""
    from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver

    return SqliteDriver("fixed", path, master_key=TEST_MASTER_KEY)


# ---------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConcurrencyReport:
    """What one run did: processes, calls by role, and the racy states it reached."""

    deliveries: int
    deliverers: int
    readers: int
    processes: int
    operations: Mapping[str, int]  # calls after the start, by role
    replays: int  # delivery answers with replayed: true
    refusals: Mapping[str, int]  # refusal code -> answers, every role
    busy: int  # answers "replica unavailable" for a lock held past the busy timeout
    snapshots_served: int  # reader snapshots that were not null
    snapshots_null: int  # reader snapshots answered null (gate not open)
    cycles: int  # reconciliations committed by the reconciler (its first snapshot included)
    closes: int  # attempts the reconciler abandoned with close
    seconds: float

    def lines(self) -> list[str]:
        refusals = ", ".join(f"{code} {n}" for code, n in sorted(self.refusals.items())) or "none"
        operations = ", ".join(f"{role} {self.operations.get(role, 0)}" for role in _ROLES)
        return [
            f"concurrency: {self.processes} processes ({self.deliverers} deliverers, 1 reconciler, "
            f"{self.readers} reader{'s' if self.readers != 1 else ''}) on one file, {self.deliveries} deliveries: "
            f"{self.seconds:.1f} s",
            f"  calls: {operations}",
            f"  delivery answers that were replays: {self.replays}",
            f"  refusals: {refusals}",
            f"  busy replica answers: {self.busy}",
            f"  reader snapshots: {self.snapshots_served} served, {self.snapshots_null} null",
            f"  reconciliations committed: {self.cycles} ({self.closes} attempts abandoned with close)",
            "  held: one receipt per sequence; every answer equals its receipt; live records equal the cloud's; "
            "served snapshots are cloud states; verify() clean; every invariant",
        ]


# ---------------------------------------------------------------------------
# What every process is given.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """The run, as every process sees it (sent to each child as JSON)."""

    db: str
    logs: str
    shape: StreamShape
    cycles: int
    deadline: float  # time.time() after which every process gives up
    open_driver: str  # "module:function" opening the implementation on a path, in each child
    pace: float = 0.003  # the most a deliverer or reader waits between two calls (seconds)
    latency: float = 0.004  # the most a reconciler's commit waits after its status read
    close_rate: float = 0.3  # the share of cycles that first abandon an attempt with close

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "_Plan":
        fields = json.loads(text)
        shape = fields.pop("shape")
        return cls(shape=StreamShape(**{**shape, "epochs": tuple(shape["epochs"])}), **fields)

    def driver(self):
        module, _, name = self.open_driver.partition(":")
        return getattr(importlib.import_module(module), name)(self.db)


class _Stopped(Exception):
    """The parent asked every process to stop."""


class _Fatal(Exception):
    """An answer or an exception that must stop this process and fail the run."""


def outcome_of(response: Any) -> str:
    """One word for an adapter response: ``ok``, ``refused:CODE``, ``busy``, or what went wrong."""
    if not isinstance(response, dict):
        return "malformed"
    if response.get("ok") is True:
        result = response.get("result")
        if isinstance(result, dict) and result.get("ok") is False and "code" in result:
            return f"refused:{result['code']}"
        return "ok"
    error = found if isinstance(found := response.get("error"), dict) else {}
    kind, message = error.get("type"), str(error.get("message", ""))
    if kind == "unsupported" and message.startswith("replica unavailable:"):
        return "busy" if _BUSY_MARK in message else "unavailable"
    if kind == "unsupported" and message.startswith("internal error:"):
        return "internal"
    return f"error:{kind}"


class _Client:
    """One process's driver: numbers each request, logs each call and answer, stops on what must not happen."""

    def __init__(self, name: str, driver: Any, log, stop, deadline: float) -> None:
        self.name = name
        self.driver = driver
        self._log = log
        self._stop = stop
        self._deadline = deadline
        self._ids = itertools.count(1)

    def check(self, doing: str) -> None:
        if self._stop.is_set():
            raise _Stopped()
        if time.time() > self._deadline:
            raise _Fatal(f"{self.name}: the run's deadline passed while {doing}")

    def call(self, request: dict) -> dict:
        """Send ``request`` (without id); return the response unless it must stop the process."""
        request = {"id": next(self._ids), **request}
        t0 = time.time()
        try:
            response = self.driver.handle(request)
        except BaseException as error:  # Driver.handle answers everything: anything raised is a bug
            self._write(request, t0, None, f"raised:{type(error).__name__}", f"{type(error).__name__}: {error}")
            raise _Fatal(f"{self.name}: {request['op']} #{request['id']} raised {type(error).__name__}: "
                         f"{error}") from None
        outcome = outcome_of(response)
        self._write(request, t0, response, outcome)
        if outcome not in ("ok", "busy") and not outcome.startswith("refused:"):
            raise _Fatal(f"{self.name}: {request['op']} #{request['id']} answered {outcome}: "
                         f"{json.dumps(response.get('error') if isinstance(response, dict) else response)[:300]}")
        return response

    def answered(self, request: dict, doing: str) -> dict:
        """``call`` until the replica is not busy; the response's result."""
        for tries in itertools.count():
            self.check(doing)
            response = self.call(request)
            if response.get("ok"):
                return response["result"]
            time.sleep(min(0.05, 0.002 * (tries + 1)))
        raise AssertionError("unreachable")

    def _write(self, request, t0, response, outcome, raised=None) -> None:
        record = {"process": self.name, "t0": t0, "t1": time.time(), "request": request, "outcome": outcome}
        if response is not None:
            record["response"] = response
        if raised is not None:
            record["raised"] = raised
        self._log.write(record)


class _Log:
    """A JSON-lines file, one record per call, flushed as it goes."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# ---------------------------------------------------------------------------
# The roles (run in the child processes).
# ---------------------------------------------------------------------------


def _status(client: _Client, doing: str) -> dict:
    return client.answered({"op": "status"}, doing)


def _applied(status: dict) -> int:
    through = status.get("appliedThrough")
    return through["sequence"] if through else 0


def _await(client: _Client, ready: Callable[[dict], bool], doing: str) -> dict:
    """Poll ``status`` until ``ready`` holds of it."""
    while True:
        status = _status(client, doing)
        if ready(status):
            return status
        time.sleep(0.002)


def _backoff(rng: random.Random, tries: int) -> None:
    time.sleep(rng.uniform(0, min(0.02, 0.001 * (tries + 1))))


def _deliver_one(client: _Client, request: dict, attempt: Optional[str],
                 rng: random.Random) -> tuple[bool, Optional[str]]:
    """Send one delivery until it is acknowledged: (whether the answer was a replay, the attempt to tag with)."""
    frame = request["frame"]
    sequence = frame["delivery"]["sequence"]
    for tries in itertools.count():
        client.check(f"delivering sequence {sequence}")
        tagged = frame if attempt is None else {**frame, "reconciliationAttemptId": attempt}
        response = client.call({"op": "delivery", "frame": tagged})
        if response.get("ok"):  # else busy
            result = response["result"]
            if result["ok"] or result["consumed"]:
                return result["replayed"], attempt
            attempt = result["attemptId"]  # the replica's open attempt, or None (gate open or idle)
        _backoff(rng, tries)
    raise AssertionError("unreachable")


def _deliverer(client: _Client, cloud: Cloud, plan: _Plan, rng: random.Random) -> None:
    """The whole stream in order. A replay means another deliverer is ahead: catch up without pausing,
    so that the deliverers meet at the cursor and race on the same sequence."""
    _await(client, lambda s: s["activated"], "waiting for the first snapshot")
    attempt = None
    for sequence in range(1, plan.shape.deliveries + 1):
        replayed, attempt = _deliver_one(client, cloud.delivery(sequence), attempt, rng)
        if not replayed:
            time.sleep(rng.uniform(0, plan.pace))


def _begin_and_page(client: _Client, cloud: Cloud, attempt: str, pages: Optional[int] = None) -> int:
    """``begin``, then the cloud's pages one delivery past the cursor ``begin`` answered; returns that mark."""
    begin = cloud.snapshot(attempt, 0)[0]
    result = client.answered(begin, f"beginning attempt {attempt}")
    through = min(cloud.shape.deliveries, result["appliedThrough"]["sequence"] + 1)
    for page in cloud.snapshot(attempt, through)[1:-1][:pages]:
        answer = client.answered(page, f"sending a page of attempt {attempt}")
        if not answer["ok"]:
            raise _Fatal(f"{client.name}: page {page['frame']['opId']} refused {answer['code']}")
    return through


def _commit(client: _Client, cloud: Cloud, plan: _Plan, attempt: str, rng: random.Random) -> None:
    """``commit`` at the high-water mark ``status`` reads, again while racing deliveries get it refused."""
    while True:
        mark = _applied(_status(client, f"reading the high-water mark for {attempt}"))
        time.sleep(rng.uniform(0, plan.latency))  # the commit travels to the replica
        commit = cloud.snapshot(attempt, mark)[-1]
        answer = client.answered(commit, f"committing attempt {attempt} at {mark}")
        if answer["ok"]:
            return
        if answer["code"] not in RETRIED_COMMIT_CODES:
            raise _Fatal(f"{client.name}: commit of {attempt} at {mark} refused {answer['code']}")


def _reconcile(client: _Client, cloud: Cloud, plan: _Plan, attempt: str, rng: random.Random) -> None:
    """One whole reconciliation: begin and pages, the deliveries through the paged mark, then commit."""
    through = _begin_and_page(client, cloud, attempt)
    _await(client, lambda s: _applied(s) >= through, f"waiting for the deliveries through {through}")
    _commit(client, cloud, plan, attempt, rng)


def _reconciler(client: _Client, cloud: Cloud, plan: _Plan, rng: random.Random) -> None:
    """Activate, then one reconciliation each time the cursor passes an even mark (some abandoned first)."""
    total = plan.shape.deliveries
    abandons = random.Random(f"{plan.shape.seed}:abandon")  # apart from ``rng``, whose use depends on timing
    _reconcile(client, cloud, plan, "rec-0", rng)  # activation
    for cycle in range(1, plan.cycles + 1):
        mark = cycle * total // (plan.cycles + 1)
        _await(client, lambda s: _applied(s) >= mark, f"waiting for sequence {mark} before cycle {cycle}")
        if abandons.random() < plan.close_rate:
            abandoned = f"rec-{cycle}-abandoned"
            _begin_and_page(client, cloud, abandoned, pages=abandons.randint(0, 3))
            client.answered({"op": "close"}, f"abandoning {abandoned}")
        _reconcile(client, cloud, plan, f"rec-{cycle}", rng)


def _reader(client: _Client, cloud: Cloud, plan: _Plan, rng: random.Random) -> None:
    """``snapshot`` then ``status`` (its upper bound), and every tenth turn ``receipts``, until stopped."""
    for turn in itertools.count():
        client.check("reading")
        client.answered({"op": "snapshot", "projectIds": list(cloud.projects)}, "reading a snapshot")
        client.answered({"op": "status"}, "reading the status after a snapshot")
        if turn % 10 == 0:
            client.answered({"op": "receipts"}, "reading the receipts")
        time.sleep(rng.uniform(0, plan.pace))


_RUN_ROLE = {"deliverer": _deliverer, "reconciler": _reconciler, "reader": _reader}


def _one_line(error: BaseException) -> str:
    """``Type: message (file:line, in function)`` of where ``error`` was raised."""
    where = traceback.extract_tb(error.__traceback__)[-1:]
    at = f" ({Path(where[0].filename).name}:{where[0].lineno}, in {where[0].name})" if where else ""
    return f"{type(error).__name__}: {error}{at}"


def _watch_stdin(stop: threading.Event) -> None:
    """The parent's "stop" line, or the end of standard input (the parent is gone), stops this process."""
    sys.stdin.readline()
    stop.set()


def worker_main(plan_json: str, role: str, name: str) -> int:
    """A child process: open the replica, load the value store, say ``ready``, wait for ``go``, play ``role``.

    Its standard output carries only ``ready`` (anything else printed goes to
    standard error); its calls go to its log.
    """
    protocol, sys.stdout = sys.stdout, sys.stderr
    plan = _Plan.from_json(plan_json)
    stop = threading.Event()
    log = _Log(Path(plan.logs) / f"{name}.jsonl")
    driver = None
    try:
        driver = plan.driver()  # before the start line: reopening a file closes its gate
        client = _Client(name, driver, log, stop, plan.deadline)
        cloud = Cloud(plan.shape)
        for put in cloud.store_requests():
            client.answered(put, "loading the value store")
        protocol.write("ready\n")
        protocol.flush()
        if sys.stdin.readline().strip() != "go":
            raise _Stopped()
        threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
        _RUN_ROLE[role](client, cloud, plan, random.Random(f"{plan.shape.seed}:{name}"))
        log.write({"process": name, "done": True})
        return 0
    except _Stopped:
        log.write({"process": name, "stopped": True})
        return 0
    except _Fatal as error:
        log.write({"process": name, "fatal": str(error)})
        return 1
    except BaseException as error:  # noqa: BLE001 - the parent reports it; the log keeps the traceback
        log.write({"process": name, "fatal": _one_line(error), "traceback": traceback.format_exc()})
        return 1
    finally:
        with contextlib.suppress(Exception):
            if driver is not None:
                driver.close()
        log.close()


_BOOT = ("import sys; from envreplica.reliability.concurrency import worker_main; "
         "sys.exit(worker_main(*sys.argv[1:]))")


# ---------------------------------------------------------------------------
# The parent: start, wait, stop.
# ---------------------------------------------------------------------------


@dataclass
class _Processes:
    """The children by name, their roles, and what the parent saw go wrong."""

    procs: dict = field(default_factory=dict)  # name -> subprocess.Popen
    roles: dict = field(default_factory=dict)  # name -> role
    notes: list = field(default_factory=list)


def _names(deliverers: int, readers: int) -> list[tuple[str, str]]:
    return ([("deliverer", f"deliverer-{i}") for i in range(1, deliverers + 1)] + [("reconciler", "reconciler-1")]
            + [("reader", f"reader-{i}") for i in range(1, readers + 1)])


def _child_environment() -> dict:
    """This environment, with this process's import path (a test's ``open_driver`` must import in the child)."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _start(plan: _Plan, deliverers: int, readers: int, run: _Processes) -> None:
    env = _child_environment()
    for role, name in _names(deliverers, readers):
        with open(Path(plan.logs) / f"{name}.stderr", "wb") as stderr:
            run.procs[name] = subprocess.Popen(
                [sys.executable, "-c", _BOOT, plan.to_json(), role, name],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        run.roles[name] = role


def _await_ready(run: _Processes, deadline: float) -> bool:
    """Wait for every child's ``ready`` line; False (with a note) if one died or the deadline passed."""
    waiting = {proc.stdout.fileno(): name for name, proc in run.procs.items()}
    while waiting:
        readable, _, _ = select.select(list(waiting), [], [], max(0.0, min(1.0, deadline - time.time())))
        if not readable and time.time() > deadline:
            run.notes.append(f"{', '.join(sorted(waiting.values()))} never became ready before the deadline")
            return False
        for fd in readable:
            name = waiting.pop(fd)
            line = run.procs[name].stdout.readline()
            if line.strip() != b"ready":
                how = f"wrote {line[:80]!r}" if line else "exited"
                run.notes.append(f"{name} {how} while opening the replica or loading its values")
                return False
    return True


def _tell(proc: subprocess.Popen, line: Optional[str]) -> None:
    """Write ``line`` to a child (None: close its input); a child that is gone is not an error here."""
    assert proc.stdin is not None  # every child is started with stdin=PIPE
    with contextlib.suppress(OSError, ValueError):
        if line is not None:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        else:
            proc.stdin.close()


def _await_writers(run: _Processes, deadline: float) -> None:
    """Until the deliverers and the reconciler are done, a process fails, or the deadline passes."""
    writers = [p for n, p in run.procs.items() if run.roles[n] != "reader"]
    while not all(p.poll() == 0 for p in writers):
        failed = [n for n, p in run.procs.items() if p.poll() not in (None, 0)]
        if failed:
            run.notes.append(f"{', '.join(failed)} failed; the others were stopped")
            return
        if time.time() > deadline:
            running = [n for n, p in run.procs.items() if p.poll() is None]
            run.notes.append(f"the deadline passed with {', '.join(running)} still running")
            return
        time.sleep(0.05)


def _run_children(run: _Processes, deadline: float, grace: float = 10.0) -> None:
    """Start them all at once, wait for the writers, then stop everyone (killing what does not stop)."""
    if _await_ready(run, deadline):
        for proc in run.procs.values():
            _tell(proc, "go")
        _await_writers(run, deadline)
    for proc in run.procs.values():
        _tell(proc, None)  # end of input: stop (or never start)
    end = time.time() + grace
    for name, proc in run.procs.items():
        try:
            proc.wait(max(0.0, end - time.time()))
        except subprocess.TimeoutExpired:
            run.notes.append(f"{name} did not stop within {grace:g} s of being asked; killed")


def _kill(run: _Processes) -> None:
    """Kill every child still running and reap them all (runs even when the harness itself fails)."""
    for proc in run.procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                stream.close()


# ---------------------------------------------------------------------------
# The parent: what the logs say.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    process: str
    role: str
    t0: float
    t1: float
    request: dict
    response: Optional[dict]
    outcome: str

    @property
    def op(self) -> str:
        return self.request["op"]

    @property
    def result(self) -> Any:
        assert self.response is not None  # read only of calls that were answered
        return self.response["result"]

    def where(self) -> str:
        return f"{self.process} {self.op} #{self.request['id']}"


@dataclass(frozen=True)
class _Logs:
    calls: tuple[_Call, ...]  # every call after loading the value store, every process
    ends: Mapping[str, str]  # process -> "done" | "stopped" | its fatal message | "no end recorded"


def _read_logs(directory: Path, roles: Mapping[str, str]) -> _Logs:
    calls, ends = [], {}
    for name, role in roles.items():
        ends[name] = "no end recorded (killed?)"
        path = directory / f"{name}.jsonl"
        if not path.exists():
            ends[name] = "no log (the process never started)"
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            if "done" in record or "stopped" in record:
                ends[name] = "done" if "done" in record else "stopped"
            elif "fatal" in record:
                ends[name] = record["fatal"]
            elif record["request"]["op"] != "store.put":
                calls.append(_Call(name, role, record["t0"], record["t1"], record["request"],
                                   record.get("response"), record["outcome"]))
    return _Logs(tuple(calls), MappingProxyType(ends))


# ---------------------------------------------------------------------------
# The parent: checks. Each returns a list of problems (empty when it holds).
# ---------------------------------------------------------------------------


def _stderr_tail(directory: Path, name: str, lines: int = 8) -> str:
    path = directory / f"{name}.stderr"
    text = path.read_text(encoding="utf-8", errors="replace").strip() if path.exists() else ""
    return ("; its standard error ends: " + " | ".join(text.splitlines()[-lines:])) if text else ""


def _check_ends(logs: _Logs, run: _Processes, directory: Path) -> list[str]:
    problems = list(run.notes)
    for name, end in logs.ends.items():
        if end not in ("done", "stopped"):
            problems.append(f"{name}: {end}{_stderr_tail(directory, name)}")
        elif end == "stopped" and run.roles[name] != "reader":
            problems.append(f"{name} was stopped before it finished")
    return problems


def _check_codes(logs: _Logs) -> list[str]:
    unexpected: dict = defaultdict(list)
    for call in logs.calls:
        if call.outcome.startswith("refused:"):
            code = call.outcome.split(":", 1)[1]
            if code not in EXPECTED_CODES[call.role]:
                unexpected[(call.role, code)].append(call.where())
    return [f"{role}s were refused {code} ({len(where)} times, first {where[0]}); a consistent stream "
            f"should never meet it" for (role, code), where in sorted(unexpected.items())]


def _check_receipts(receipts: list, total: int) -> list[str]:
    sequences = [r["sequence"] for r in receipts]
    problems = []
    doubled = sorted(n for n, c in Counter(sequences).items() if c > 1)
    if doubled:
        problems.append(f"doubled update: more than one receipt for sequence {doubled[:10]}")
    missing = sorted(set(range(1, total + 1)) - set(sequences))
    if missing:
        problems.append(f"lost update: no receipt for sequence {missing[:10]} ({len(missing)} missing)")
    extra = sorted(set(sequences) - set(range(1, total + 1)))
    if extra:
        problems.append(f"receipts for sequences the cloud never sent: {extra[:10]}")
    streams = {r["streamId"] for r in receipts} - {STREAM}
    if streams:
        problems.append(f"receipts on streams the cloud never used: {sorted(streams)}")
    return problems


def _answer_matches(result: dict, receipt: dict) -> bool:
    if result["ok"]:
        return receipt["ok"] and result["result"] == receipt["result"] \
            and result["recordVersion"] == receipt["recordVersion"]
    return not receipt["ok"] and result["code"] == receipt["code"]


def _check_delivery_answers(logs: _Logs, receipts: Mapping[int, dict]) -> list[str]:
    problems = []
    for call in logs.calls:
        if call.op != "delivery" or call.response is None or not call.response.get("ok"):
            continue
        result = call.result
        if not (result["ok"] or result["consumed"]):
            continue
        sequence = call.request["frame"]["delivery"]["sequence"]
        receipt = receipts.get(sequence)
        if receipt is None or not _answer_matches(result, receipt):
            kind = "replay" if result["replayed"] else "answer"
            problems.append(f"{call.where()}: the {kind} for sequence {sequence} differs from its receipt: "
                            f"{json.dumps(result)[:200]} vs {json.dumps(receipt)[:200]}")
    return problems


class _CloudHistory:
    """The cloud's whole served view after each sequence, canonical, to find the sequence a snapshot shows."""

    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        self.views = [self.view(*cloud.records_after(n)) for n in range(cloud.shape.deliveries + 1)]

    @staticmethod
    def view(records: Mapping[str, Mapping[str, dict]], versions: Mapping[str, int]) -> str:
        from envreplica.spec.wire import canonical_json

        return canonical_json({p: {"version": versions[p], "records": records[p]} for p in sorted(records)})

    def sequence_of(self, snapshot: dict, low: int, high: int) -> Optional[int]:
        """The sequence in ``low..high`` after which the cloud held exactly what ``snapshot`` serves, or None."""
        served = self.view({p["projectId"]: {e["state"]["key"]: e["state"] for e in p["entries"]}
                            for p in snapshot["projects"]},
                           {p["projectId"]: p["recordVersion"] for p in snapshot["projects"]})
        return next((n for n in range(low, min(high, len(self.views) - 1) + 1) if self.views[n] == served), None)


def _check_entry(project: str, entry: dict, cloud: Cloud) -> Optional[str]:
    """An entry's materialization and value agree with its state: the cloud's value, installed only if allowed."""
    from envreplica.model.rules import desired_materialization
    from envreplica.spec.domain import MatKind
    from envreplica.spec.wire import parse_binding_state

    state, mat, value = entry["state"], entry["materialization"], entry["value"]
    where = f"{project}/{state['key']}"
    if desired_materialization(parse_binding_state(state), cloud.shape.epochs).kind is MatKind.WITHHELD \
            and mat["kind"] != "withheld":
        return f"{where} is withheld by its binding or epoch but was served {mat['kind']}"
    if mat["kind"] != "installed":
        return None if value is None else f"{where} is {mat['kind']} but was served a value"
    ref = state["head"]["valueRef"]
    if ref is None or ref.get("kind") != "staged":
        return f"{where} is installed without a staged reference"
    if value != cloud.value(project, state["key"], ref["stagingId"]):
        return f"{where} was served a value that is not the cloud's for {ref['stagingId']}"
    return None


def _check_snapshot(call: _Call, low: int, high: int, history: _CloudHistory) -> list[str]:
    """A served snapshot is the cloud's whole view after one sequence in ``low..high``, values included."""
    snapshot = call.result
    if snapshot is None:
        return []
    if history.sequence_of(snapshot, low, high) is None:
        return [f"{call.where()}: the served snapshot is not the cloud's state after any sequence in "
                f"{low}..{high} (a record or version from elsewhere in the stream, or a torn read)"]
    return [f"{call.where()}: {problem}" for project in snapshot["projects"] for entry in project["entries"]
            if (problem := _check_entry(project["projectId"], entry, history.cloud))]


_INACTIVE: MappingProxyType[str, object] = MappingProxyType({"activated": False, "gateOpen": False, "attemptId": None, "orgId": None,
                              "appliedThrough": None, "policyEpochs": [], "projectIds": []})


def _check_status(call: _Call, cloud: Cloud) -> list[str]:
    """A status the run can produce: inactive before the first begin, then the cloud's organisation and epochs,
    its projects once committed (none before), a cursor on its stream within 0..N, and no attempt when open."""
    status = call.result
    if not status["activated"]:
        return [] if status == dict(_INACTIVE) else [f"{call.where()}: an inactive replica's status is {status}"]
    problems = []
    if status["orgId"] != ORG or status["policyEpochs"] != list(cloud.shape.epochs):
        problems.append(f"{call.where()}: status organisation {status['orgId']!r} or epochs "
                        f"{status['policyEpochs']} are not the cloud's")
    if status["projectIds"] not in ([], sorted(cloud.projects)):
        problems.append(f"{call.where()}: status projects {status['projectIds']} are not the cloud's")
    if status["gateOpen"] and status["attemptId"] is not None:
        problems.append(f"{call.where()}: status shows an open gate with attempt {status['attemptId']}")
    through = status["appliedThrough"]
    if through is None or through["streamId"] != STREAM or not 0 <= through["sequence"] <= cloud.shape.deliveries:
        problems.append(f"{call.where()}: status cursor {through!r} is not on {STREAM} within 0..N")
    return problems


def _check_reader_receipts(call: _Call, final: Mapping[int, dict]) -> list[str]:
    sequences = [r["sequence"] for r in call.result]
    if sequences != list(range(1, len(sequences) + 1)):
        return [f"{call.where()}: receipts are not contiguous from 1: {sequences[:20]}"]
    changed = [r["sequence"] for r in call.result if final.get(r["sequence"]) != r]
    return [f"{call.where()}: receipts {changed[:10]} differ from the final ones"] if changed else []


def _check_readers(logs: _Logs, history: _CloudHistory, final: Mapping[int, dict]) -> list[str]:
    """Each reader's snapshots against the cursors of the status reads around them, and its receipt lists."""
    problems = []
    by_process: dict = defaultdict(list)
    for call in logs.calls:
        if call.role == "reader" and call.outcome == "ok":
            by_process[call.process].append(call)
    for calls in by_process.values():
        low = 0  # the cursor of the last status read before: the live view is at least that far
        for i, call in enumerate(calls):
            if call.op == "status":
                low = _applied(call.result)
            elif call.op == "snapshot" and i + 1 < len(calls) and calls[i + 1].op == "status":
                # A delivery writes its record in its first transaction and moves the cursor in its last.
                high = _applied(calls[i + 1].result) + 1
                problems += _check_snapshot(call, low, high, history)
            elif call.op == "receipts":
                problems += _check_reader_receipts(call, final)
    return problems


def _check_statuses(logs: _Logs, cloud: Cloud) -> list[str]:
    """Every status answer is consistent, and no answer shows less than one finished before it started."""
    statuses = [c for c in logs.calls if c.op == "status" and c.outcome == "ok"]
    problems = [p for call in statuses for p in _check_status(call, cloud)]
    finished = sorted(statuses, key=lambda c: c.t1)
    seen, best, best_call = 0, -1, None
    for call in sorted(statuses, key=lambda c: c.t0):
        while seen < len(finished) and finished[seen].t1 < call.t0:
            if _applied(finished[seen].result) > best:
                best, best_call = _applied(finished[seen].result), finished[seen]
            seen += 1
        if _applied(call.result) < best:
            assert best_call is not None  # best is past -1: set with it
            problems.append(f"{call.where()}: the cursor went back to {_applied(call.result)} after "
                            f"{best_call.where()} had answered {best}")
    return problems


def _live_records(state) -> tuple[dict, dict]:
    """({project: {key: wire state}}, {project: record version}) of a model state's live view."""
    from envreplica.spec.wire import encode

    records: dict = defaultdict(dict)
    for (project, key), row in state.records.items():
        records[project][key] = encode(row.state)
    return dict(records), dict(state.projects.items())


def _check_live(state, cloud: Cloud, when: str) -> list[str]:
    records, versions = _live_records(state)
    want_records, want_versions = cloud.records_after(cloud.shape.deliveries)
    problems = []
    if versions != want_versions:
        problems.append(f"{when}: live record versions {versions} differ from the cloud's {want_versions}")
    for project, by_key in want_records.items():
        got = records.get(project, {})
        wrong = sorted(k for k in set(by_key) | set(got) if got.get(k) != by_key.get(k))
        if wrong:
            problems.append(f"{when}: live records of {project} differ from the cloud's at N: keys {wrong[:10]}")
    return problems


def _check_integrity(replica, when: str) -> list[str]:
    from envreplica.spec import properties as P

    problems = [f"{when}: verify(): {p}" for p in replica.verify()]
    state = impl_model_state(replica)
    problems += [f"{when}: invariant {p.name} does not hold" for p in P.INVARIANTS if not p.check(state)]
    return problems


def _final_reconciliation(driver, cloud: Cloud, history: _CloudHistory) -> list[str]:
    """The parent's last ``begin``, pages and ``commit`` at N; its snapshot must be the cloud's, values too."""
    total = cloud.shape.deliveries
    for i, request in enumerate(cloud.snapshot("final", total)):
        response = driver.handle({"id": i, **request})
        if outcome_of(response) != "ok":
            return [f"final reconciliation: {request['op']} answered {json.dumps(response)[:300]}"]
    response = driver.handle({"id": -1, "op": "snapshot", "projectIds": list(cloud.projects)})
    if outcome_of(response) != "ok" or response["result"] is None:
        return [f"final reconciliation: the snapshot after commit is {json.dumps(response)[:300]}"]
    call = _Call("parent", "reader", 0.0, 0.0, {"id": -1, "op": "snapshot"}, response, "ok")
    return _check_snapshot(call, total, total, history)


def _check_file(plan: _Plan, cloud: Cloud, history: _CloudHistory, logs: _Logs) -> list[str]:
    """Everything read back from the file by the parent, once the workers have stopped."""
    from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver

    try:
        driver = SqliteDriver("fixed", plan.db, master_key=TEST_MASTER_KEY)  # reopening closes the gate only
    except Exception as error:  # noqa: BLE001 - a file the implementation cannot reopen is a finding
        return [f"the parent could not reopen the replica: {type(error).__name__}: {error}"]
    try:
        return _check_reopened(driver, cloud, history, logs)
    except Exception as error:  # noqa: BLE001 - e.g. TamperDetected reading the file back
        return [f"reading the replica back raised {type(error).__name__}: {error}"]
    finally:
        driver.close()


def _check_reopened(driver, cloud: Cloud, history: _CloudHistory, logs: _Logs) -> list[str]:
    from envreplica.spec.wire import encode

    total = cloud.shape.deliveries
    for put in cloud.store_requests():
        if outcome_of(driver.handle({"id": 0, **put})) != "ok":
            return [f"the parent could not load the value {put['ref']} into its value store"]
    replica = driver.replica
    receipts = [encode(r) for r in replica.list_receipts()]
    final = MappingProxyType({r["sequence"]: r for r in receipts})
    problems = _check_receipts(receipts, total)
    applied = replica.read_status().applied_through
    if applied is None or applied.sequence != total:
        problems.append(f"the applied sequence is {applied}, not {total}")
    problems += _check_delivery_answers(logs, final)
    problems += _check_readers(logs, history, final)
    problems += _check_live(impl_model_state(replica), cloud, "after the run")
    problems += _check_integrity(replica, "after the run")
    problems += _final_reconciliation(driver, cloud, history)
    problems += _check_live(impl_model_state(replica), cloud, "after the final reconciliation")
    problems += _check_integrity(replica, "after the final reconciliation")
    return problems


# ---------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------


def _report(logs: _Logs, run: _Processes, deliveries: int, deliverers: int, readers: int,
            seconds: float) -> ConcurrencyReport:
    outcomes = Counter(c.outcome for c in logs.calls)
    reconciler = [c for c in logs.calls if c.role == "reconciler"]
    snapshots = [c for c in logs.calls if c.role == "reader" and c.op == "snapshot" and c.outcome == "ok"]
    return ConcurrencyReport(
        deliveries=deliveries,
        deliverers=deliverers,
        readers=readers,
        processes=len(run.procs),
        operations=MappingProxyType(dict(Counter(c.role for c in logs.calls))),
        replays=sum(1 for c in logs.calls if c.op == "delivery" and c.outcome == "ok" and c.result["replayed"]),
        refusals=MappingProxyType({o.split(":", 1)[1]: n for o, n in outcomes.items() if o.startswith("refused:")}),
        busy=outcomes["busy"],
        snapshots_served=sum(1 for c in snapshots if c.result is not None),
        snapshots_null=sum(1 for c in snapshots if c.result is None),
        cycles=sum(1 for c in reconciler if c.op == "commit" and c.outcome == "ok"),
        closes=sum(1 for c in reconciler if c.op == "close" and c.outcome == "ok"),
        seconds=seconds,
    )


def _reference(open_driver: Union[str, Callable[[str], Any]]) -> str:
    """``"module:function"`` for a function a child process can import."""
    if isinstance(open_driver, str):
        return open_driver
    module, name = open_driver.__module__, open_driver.__qualname__
    if module == "__main__" or "." in name or "<" in name:
        raise ValueError(f"open_driver must be a module-level function of an importable module; got {module}.{name}")
    return f"{module}:{name}"


def _fail(problems: list[str], directory: Path, kept: bool) -> ConcurrencyFailure:
    shown = problems[:25]
    more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
    where = f"\n  logs: {directory / 'logs'}" if kept else "\n  (pass workdir= to keep the logs)"
    return ConcurrencyFailure("concurrency run failed:\n  " + "\n  ".join(shown) + more + where)


def run_concurrency(deliveries: int, deliverers: int = 2, readers: int = 1, reconcile_cycles: int = 4,
                    seed: int = 0, workdir: Union[str, Path, None] = None, *,
                    timeout: Optional[float] = None,
                    open_driver: Union[str, Callable[[str], Any]] = open_sqlite_driver) -> ConcurrencyReport:
    """Run the roles on one replica file; return the report, or raise ``ConcurrencyFailure`` naming every problem.

    ``workdir`` (a directory without a previous run) keeps the replica and the
    logs there (default: a temporary directory, removed). ``open_driver(path)`` opens the implementation in each
    child process: a module-level function, or ``"module:function"``, imported
    there (the children get this process's ``sys.path``); the parent always
    checks the file with ``SqliteDriver``. ``timeout`` bounds the run
    (default 120 s plus 0.5 s per delivery).
    """
    if deliveries < 1 or deliverers < 2 or readers < 1 or reconcile_cycles < 1:
        raise ValueError("run_concurrency needs deliveries >= 1, deliverers >= 2, readers >= 1, "
                         "reconcile_cycles >= 1")
    started = time.monotonic()
    budget = 120.0 + 0.5 * deliveries if timeout is None else timeout
    shape = StreamShape(deliveries=deliveries, seed=seed)
    with scratch_directory(workdir, "envreplica-concurrency-") as root:
        (root / "logs").mkdir()
        plan = _Plan(db=str(root / "replica.db"), logs=str(root / "logs"), shape=shape, cycles=reconcile_cycles,
                     deadline=time.time() + budget, open_driver=_reference(open_driver))
        open_sqlite_driver(plan.db).close()  # create the file before anyone races to
        run = _Processes()
        try:
            _start(plan, deliverers, readers, run)
            _run_children(run, plan.deadline)
        finally:
            _kill(run)
        logs = _read_logs(root / "logs", run.roles)
        cloud = Cloud(shape)
        problems = _check_ends(logs, run, root / "logs") + _check_codes(logs) + _check_statuses(logs, cloud)
        if not problems:
            problems = _check_file(plan, cloud, _CloudHistory(cloud), logs)
        if problems:
            raise _fail(problems, root, kept=workdir is not None)
        return _report(logs, run, deliveries, deliverers, readers, time.monotonic() - started)
