"""``kill -9`` of an adapter process applying a long real stream, at random moments.

What it models: the host process dies at an arbitrary instruction (SIGKILL:
no handler, no flush, no close) while it applies the cloud's stream, and is
started again on the same file, as a supervisor restarts it. One run is
``kills`` rounds and a final one, on one replica file (``--db``), driving one
``Cloud`` stream (``reliability.stream``). Each round:

1. starts the adapter on the file (a restarted one reopens it and closes its
   gate, as a host does), sends the value store again (``store.put``: the
   store lives outside the replica), reads ``status``, and resends the last
   acknowledged delivery, which must be answered ``replayed: true`` with the
   acknowledged result: a clean resume;
2. writes ahead, without waiting for the answers, the cloud's reconciliation
   (``begin``, pages, ``commit`` at the applied sequence, a new attempt id
   each round) and the next deliveries, so the kill lands inside operations
   and their transactions;
3. sends SIGKILL to the process group at a moment drawn from a seeded RNG:
   while the process starts (about 10% of kills), inside the reconciliation
   (about 30%), or at a delivery drawn so that the kills spread over the
   whole stream. A kill comes after the answer to the request before its
   target, plus up to a few milliseconds, so it lands inside the target or
   just after it.

A response is acknowledged when its whole line was read from the process's
output, before or after the kill (a line in the pipe was written by the
process, so its operation had returned). After each kill the file is opened
in-process (``SqliteReplica``) and must pass ``verify()`` (SQLite's
``integrity_check``, every row tag, set digest and seal), every invariant of
``spec.properties.INVARIANTS`` on ``impl_model_state()``, and hold a receipt
equal to every delivery acknowledged so far (sequence, ok, code, result,
record version); its applied sequence never goes back, stays within what was
sent, and is what the restarted adapter then reports. After the last kill a
clean round applies the rest of the stream: the served snapshot must equal
the cloud's records after the last delivery, with the values the cloud holds,
and every delivery of the stream must have its receipt.

A delivery commits its record (and its project's record version) in its
first transaction and its receipt and the applied sequence in its last, as
the seed does; a kill between the two leaves the record ahead of the cursor.
The cloud's next reconciliation then describes its records as of that
delivery (a snapshot older than the live records is refused
``record_version_stale``), still committed at the applied sequence; the
delivery, sent again, is answered from the record it left. The report counts
these deliveries.

``adapter_command`` is a command template with ``{db}`` for the replica path
(default: ``envreplica adapter`` under the public test key), so another build
or implementation can be held to the same run; the file is read back with
``SqliteReplica`` under that key, so it must keep envreplica's file format.
The read-back checks (``read_back``, ``check_acknowledged``) are shared with
``reliability.torn``.

Leaves out on purpose: power loss and torn writes (a killed process loses
nothing the kernel already has; ``torn`` cuts the WAL instead), kills of the
value store or the cloud (they live in the harness), other signals than
SIGKILL (a graceful stop closes the replica cleanly), and timing-exact
reproduction: the seed fixes how targets and delays are drawn, but where a
kill lands within a few milliseconds (and so where the next round starts)
depends on the machine, so the report counts where kills actually landed.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import queue
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from envreplica.conformance.drivers import TEST_MASTER_KEY
from envreplica.conformance.readback import impl_model_state
from envreplica.impl.replica import SqliteReplica
from envreplica.impl.sealing import Sealer
from envreplica.model.state import State
from envreplica.reliability.scratch import scratch_directory
from envreplica.reliability.stream import STREAM, Cloud, StreamShape
from envreplica.spec import properties as P
from envreplica.spec import wire
from envreplica.spec.domain import ReceiptView

__all__ = [
    "DEFAULT_ADAPTER",
    "Acknowledged",
    "CrashReport",
    "ReadBack",
    "acknowledged_delivery",
    "adapter_argv",
    "check_acknowledged",
    "read_back",
    "run_crash",
]

#: The adapter under test: a command template, ``{db}`` standing for the replica path.
DEFAULT_ADAPTER = (f"{shlex.quote(sys.executable)} -m envreplica.conformance.adapter "
                   f"--impl sqlite --test-key --variant fixed --db {{db}}")

#: Seconds to wait for an answer (or for the process to exit at the end).
RESPONSE_TIMEOUT = 60.0
#: Shares of the kills aimed at the process start and at the snapshot; the rest aim at deliveries.
STARTUP_SHARE = 0.10
SNAPSHOT_SHARE = 0.30
#: A kill comes this long at most after the answer to the request before its target.
JITTER_SECONDS = 0.004
#: Requests written beyond the target, so that more are in flight when the kill lands.
WRITE_AHEAD = 8
#: The startup time assumed before one has been measured.
FIRST_STARTUP_SECONDS = 0.5


# ---------------------------------------------------------------------------
# Acknowledgements and the file read back (shared with ``torn``).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Acknowledged:
    """A delivery the implementation answered as consumed: the receipt it must keep, and how to ask again."""

    sequence: int
    request: dict  # the adapter request (without ``id``), to replay it
    receipt: dict  # the ``receipts`` row it must keep: streamId, sequence, ok, code, result, recordVersion


def acknowledged_delivery(request: dict, response: dict) -> Optional[Acknowledged]:
    """The acknowledgement a ``delivery`` response gives, or None when it consumed nothing.

    Applied (``ok``) and consumed refusals acknowledge; an error or a refusal
    that consumed nothing (the cloud sends it again) does not.
    """
    if request.get("op") != "delivery" or response.get("ok") is not True:
        return None
    result = response["result"]
    cursor = request["frame"]["delivery"]
    receipt = {"streamId": cursor["streamId"], "sequence": cursor["sequence"], "ok": result["ok"]}
    if result["ok"]:
        receipt.update(code=None, result=result.get("result"), recordVersion=result.get("recordVersion"))
    elif result.get("consumed"):
        receipt.update(code=result.get("code"), result=None, recordVersion=None)
    else:
        return None
    request = {k: v for k, v in request.items() if k != "id"}
    return Acknowledged(cursor["sequence"], request, receipt)


@dataclass(frozen=True)
class ReadBack:
    """A replica file as read back after a crash or a cut: verified, invariants checked."""

    state: State
    applied: int  # the authority row's applied sequence
    receipts: dict  # sequence -> receipts row (wire shape) of the stream ``STREAM``


def read_back(path: Union[str, Path], where: str) -> ReadBack:
    """Open the replica at ``path`` in-process and check it; ``AssertionError`` naming ``where`` otherwise.

    Checks: it opens, ``verify()`` is ``[]`` (SQLite's ``integrity_check``,
    every tag, digest and seal), and every invariant of ``INVARIANTS`` holds
    on ``impl_model_state()``. The receipts are the state's (the same verified
    rows ``list_receipts`` reads). The replica is closed before returning.
    """
    try:
        replica = SqliteReplica(path, sealer=Sealer(TEST_MASTER_KEY), reader=None, create=False)
    except Exception as error:
        raise AssertionError(f"{where}: the replica does not open: {type(error).__name__}: {error}") from error
    try:
        problems = replica.verify()
        state = None if problems else impl_model_state(replica)
    except Exception as error:
        raise AssertionError(f"{where}: reading the replica back failed: {type(error).__name__}: {error}") from error
    finally:
        replica.close()
    assert not problems, f"{where}: verify() found {len(problems)} problem(s): " + "; ".join(problems[:5])
    assert state is not None  # read back above (there were no problems)
    broken = [p for p in P.INVARIANTS if not p.check(state)]
    assert not broken, f"{where}: invariants broken on the state read back: " + "; ".join(
        f"{p.name} ({p.statement})" for p in broken)
    receipts = {
        sequence: wire.encode(ReceiptView(stream, sequence, r.ok, r.code, r.result, r.record_version))
        for (stream, sequence), r in state.receipts.items() if stream == STREAM
    }
    return ReadBack(state, state.authority.applied_sequence, receipts)


def check_acknowledged(back: ReadBack, acks: Iterable[Acknowledged], where: str) -> int:
    """Every acknowledged delivery has its receipt, equal to what was acknowledged; returns how many were checked."""
    checked = 0
    for ack in acks:
        found = back.receipts.get(ack.sequence)
        assert found is not None, (
            f"{where}: acknowledged delivery {ack.sequence} lost: no receipt for it in the file "
            f"(applied sequence {back.applied})")
        differ = sorted(k for k in ack.receipt if found.get(k) != ack.receipt[k])
        assert not differ, (
            f"{where}: acknowledged delivery {ack.sequence}: its receipt differs in {', '.join(differ)}: "
            f"acknowledged {_short(ack.receipt)}, the file holds {_short(found)}")
        checked += 1
    return checked


def _short(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


# ---------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CrashReport:
    """What one ``run_crash`` did and checked."""

    deliveries: int  # the stream's length
    kills: int  # SIGKILLs sent
    kills_in_flight: int  # of them, with requests written and not yet answered
    aimed: tuple[tuple[str, int], ...]  # (phase aimed at: "startup", "snapshot", "delivery"; kills), most first
    landed: tuple[tuple[str, int], ...]  # (what was in flight: an op, "startup" or "idle"; kills), most first
    acknowledged: int  # distinct deliveries acknowledged, each checked after every later kill
    receipts_checked: int  # acknowledged deliveries compared with their receipt in the file, in all
    read_backs: int  # times the file was read back and verified
    invariant_checks: int  # invariants evaluated on states read back
    resumes: int  # restarts whose replay of the last acknowledged delivery was checked
    snapshots: int  # snapshot attempts started (one per round)
    half_applied: int  # deliveries a kill left with their record applied and no receipt (see ``_plan``)
    seconds: float

    def lines(self) -> list[str]:
        aimed = ", ".join(f"{what} {n}" for what, n in self.aimed) or "none"
        landed = ", ".join(f"{what} {n}" for what, n in self.landed) or "none"
        return [
            f"kills: {self.kills} over a stream of {self.deliveries} deliveries "
            f"({self.kills_in_flight} with requests in flight)",
            f"kills aimed at: {aimed}",
            f"kills landed during: {landed}",
            f"acknowledged deliveries checked: {self.acknowledged} "
            f"({self.receipts_checked} receipt comparisons after {self.read_backs} read-backs)",
            f"invariant checks: {self.invariant_checks} ({len(P.INVARIANTS)} invariants per read-back)",
            f"clean resumes (acknowledged delivery replayed after a restart): {self.resumes}",
            f"snapshot attempts: {self.snapshots}",
            f"deliveries a kill left with their record applied and no receipt: {self.half_applied} "
            f"(the cloud's next snapshot described them; each was then answered from the record)",
            f"wall time: {self.seconds:.1f} s",
        ]


# ---------------------------------------------------------------------------
# The adapter process.
# ---------------------------------------------------------------------------


def adapter_argv(template: str, db: Union[str, Path]) -> list[str]:
    """The argument vector of a command template: split like a shell, ``{db}`` replaced by the path."""
    if "{db}" not in template:
        raise ValueError(f"the adapter command must name the replica file as {{db}}: {template!r}")
    return [token.replace("{db}", os.fspath(db)) for token in shlex.split(template)]


_EOF = object()


class _Adapter:
    """One adapter process: requests written ahead by a thread, answers read by another, SIGKILL at will.

    The process leads a new session, so the kill reaches everything it started.
    """

    def __init__(self, argv: list[str], stderr) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # started with stdin=PIPE, stdout=PIPE
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.responses: list[Any] = []
        self.written = 0  # requests written whole to the pipe
        self._next_id = 1
        self._outbox: "queue.Queue[Any]" = queue.Queue()
        self._arrived = threading.Condition()
        self._ended = False
        self._finished = False
        self._writer = threading.Thread(target=self._write, name="crash-adapter-stdin", daemon=True)
        self._reader = threading.Thread(target=self._read, name="crash-adapter-stdout", daemon=True)
        self._writer.start()
        self._reader.start()

    def _write(self) -> None:
        stdin = self.stdin
        try:
            while (line := self._outbox.get()) is not _EOF:
                stdin.write(line)
                stdin.flush()
                self.written += 1
        except (OSError, ValueError):  # the process died: the rest is never written
            pass
        finally:
            with contextlib.suppress(OSError, ValueError):
                stdin.close()

    def _read(self) -> None:
        for line in iter(self.stdout.readline, b""):
            if not line.endswith(b"\n"):
                break  # cut by the kill: not an answer
            try:
                response = json.loads(line)
            except ValueError:
                response = {"unreadable line": line[:300].decode("utf-8", "replace")}
            with self._arrived:
                self.responses.append(response)
                self._arrived.notify_all()
        with self._arrived:
            self._ended = True
            self._arrived.notify_all()

    def send(self, requests: Iterable[dict]) -> list[dict]:
        """Queue requests for writing (each given the next id); returns them with their ids."""
        sent = []
        for request in requests:
            request = {"id": self._next_id, **request}
            self._next_id += 1
            self._outbox.put((json.dumps(request, separators=(",", ":")) + "\n").encode("ascii"))
            sent.append(request)
        return sent

    def wait_for(self, count: int, timeout: float = RESPONSE_TIMEOUT) -> bool:
        """Wait until ``count`` answers have arrived in all; False when the output ended first."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.responses) < count and not self._ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the adapter answered {len(self.responses)} requests and then nothing "
                                         f"for {timeout:g} s (waiting for answer {count})")
                self._arrived.wait(left)
            return len(self.responses) >= count

    def kill(self) -> None:
        """SIGKILL to the process group; then every answer it had written is read."""
        if self.proc.returncode is None:  # not reaped: its process group cannot have been reused
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._finish()

    def close(self, timeout: float = RESPONSE_TIMEOUT) -> int:
        """End of input; the process must exit by itself. Returns its exit status."""
        self._outbox.put(_EOF)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the adapter did not exit within {timeout:g} s of the end of its input") from None
        self._finish()
        return self.proc.returncode

    def _finish(self) -> None:
        self._finished = True
        self.proc.wait()
        self._outbox.put(_EOF)
        self._reader.join(RESPONSE_TIMEOUT)
        self._writer.join(RESPONSE_TIMEOUT)
        with contextlib.suppress(OSError):
            self.stdout.close()

    def __enter__(self) -> "_Adapter":
        return self

    def __exit__(self, *exc) -> None:
        if not self._finished:
            self.kill()


def _await_unlocked(db: Path, timeout: float = 10.0) -> None:
    """Wait until no process holds ``db.lock`` (a killed process's children may take a moment to die)."""
    lock = Path(f"{db}.lock")
    if not lock.exists():
        return
    deadline = time.monotonic() + timeout
    fd = os.open(lock, os.O_RDONLY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{lock} is still held {timeout:g} s after the adapter was killed") from None
                time.sleep(0.01)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """Where a kill aims: at the process start, or inside request ``index`` of the round's plan."""

    phase: str  # "startup", "snapshot" or "delivery"
    index: int  # the request of the plan it aims at (startup: unused)
    delay: float  # seconds after the answer to the request before it (startup: after the process started)
    aim: str  # what it aims at, for messages


class _CrashRun:
    """One replica file, one stream, the kills so far and what they showed."""

    def __init__(self, cloud: Cloud, directory: Path, template: str, rng: random.Random) -> None:
        self.cloud = cloud
        self.length = cloud.shape.deliveries
        self.db = directory / "replica.db"
        self.argv = adapter_argv(template, self.db)
        self.stderr_path = directory / "adapter.stderr"
        self.rng = rng
        self.acks: dict[int, Acknowledged] = {}  # sequence -> its first acknowledgement
        self.applied = 0  # the applied sequence read back last
        self.cloud_through = 0  # the cloud's snapshots describe its records after this many deliveries
        self.half_applied: set[int] = set()  # deliveries a kill left with their record applied, no receipt
        self.sent_through = 0  # the highest delivery sequence ever written to an adapter
        self.attempts = 0
        self.startup_seconds = FIRST_STARTUP_SECONDS
        self.aimed: collections.Counter = collections.Counter()
        self.landed: collections.Counter = collections.Counter()
        self.kills = self.kills_in_flight = self.receipts_checked = self.read_backs = 0
        self.invariant_checks = self.resumes = 0

    # -- rounds -------------------------------------------------------------

    def kill_round(self, kill: int, kills: int) -> None:
        """Start, resume, write ahead, kill at the drawn moment; then read the file back and check it."""
        where = f"kill {kill} of {kills}"
        target = self._draw_target(kills - kill + 1)
        self.aimed[target.phase] += 1
        with self._start() as adapter:
            if target.phase == "startup":
                sent, first = self._send(adapter, self.cloud.store_requests() + [{"op": "status"}]), 0
                time.sleep(max(0.0, target.delay - (time.monotonic() - adapter.started)))
            else:
                n = self._resume(adapter, where)
                sent = self._send(adapter, self._plan(n)[:target.index + WRITE_AHEAD])
                first = len(adapter.responses)
                if not adapter.wait_for(first + target.index):
                    raise AssertionError(f"{where}: the adapter ended by itself before the kill, after "
                                         f"{len(adapter.responses) - first} answers{self._stderr_tail()}")
                time.sleep(target.delay)
            adapter.kill()
            landing = self._note_landing(adapter, sent, first)
            where = f"{where} (aimed at {target.aim}, landed during {landing})"
            self._take_answers(sent, adapter.responses[first:], where)
        self._check_file(where)

    def final_round(self) -> None:
        """No kill: apply the rest of the stream, then compare the served snapshot with the cloud's records."""
        where = "the final round (after the last kill)"
        with self._start() as adapter:
            n = self._resume(adapter, where)
            plan = self._plan(n)
            reads: list[dict[str, Any]] = [{"op": "snapshot", "projectIds": list(self.cloud.projects)},
                                           {"op": "status"}]
            sent = self._send(adapter, plan + reads)
            first = len(adapter.responses)
            if not adapter.wait_for(first + len(sent)):
                raise AssertionError(f"{where}: the adapter stopped after {len(adapter.responses) - first} of "
                                     f"{len(sent)} requests{self._stderr_tail()}")
            answers = adapter.responses[first:]
            self._take_answers(sent[:len(plan)], answers[:len(plan)], where)
            snapshot, status = (self._result(r, a, where) for r, a in zip(sent[len(plan):], answers[len(plan):]))
            self._check_served(snapshot, where)
            assert _applied_of(status) == self.length, (
                f"{where}: applied sequence {_applied_of(status)} at the end of a stream of {self.length}")
            code = adapter.close()
            assert code == 0, (f"{where}: the adapter exited with status {code} at the end of its input"
                               f"{self._stderr_tail()}")
        back = self._check_file(where)
        assert back is not None  # the final round has just run on the file
        missing = [n for n in range(1, self.length + 1) if n not in back.receipts]
        assert not missing, f"{where}: deliveries {missing[:10]} have no receipt at the end of the stream"

    # -- steps --------------------------------------------------------------

    def _start(self) -> _Adapter:
        _await_unlocked(self.db)
        with open(self.stderr_path, "ab") as stderr:  # the child keeps its own descriptor
            return _Adapter(self.argv, stderr)

    def _draw_target(self, rounds_left: int) -> _Target:
        """Where the next kill aims.

        Three draws a round, whatever happened before: the same seed aims
        the same kills at the start, the snapshot and deliveries (a kill
        drawn for a delivery once the stream is all applied aims at the
        snapshot).
        """
        phase, position, moment = self.rng.random(), self.rng.random(), self.rng.random()
        if phase < STARTUP_SHARE:
            return _Target("startup", 0, moment * self.startup_seconds, "the process start")
        snapshot_len = len(self.cloud.snapshot("a", self.cloud_through))
        remaining = self.length - self.applied
        if phase < STARTUP_SHARE + SNAPSHOT_SHARE or remaining == 0:
            index = int(position * snapshot_len)
            return _Target("snapshot", index, moment * JITTER_SECONDS,
                           f"request {index + 1} of the {snapshot_len} of the snapshot")
        # Only the rounds aimed at deliveries advance the stream: aim far enough that the kills span it.
        delivery_share = 1.0 - STARTUP_SHARE - SNAPSHOT_SHARE
        reach = max(1, min(remaining, round(2 * remaining / (rounds_left * delivery_share))))
        offset = int(position * reach)
        return _Target("delivery", snapshot_len + offset, moment * JITTER_SECONDS,
                       f"delivery {self.applied + 1 + offset}")

    def _send(self, adapter: _Adapter, requests: list[dict]) -> list[dict]:
        sent = adapter.send(requests)
        self.sent_through = max([self.sent_through] + [_sequence_of(r) for r in sent])
        return sent

    def _ask(self, adapter: _Adapter, requests: list[dict], where: str) -> list[Any]:
        """Send and wait for every answer; each must be ``ok``. Returns the results."""
        sent = self._send(adapter, requests)
        first = len(adapter.responses)
        if not adapter.wait_for(first + len(sent)):
            raise AssertionError(f"{where}: the adapter ended after {len(adapter.responses) - first} of "
                                 f"{len(sent)} requests{self._stderr_tail()}")
        return [self._result(r, a, where) for r, a in zip(sent, adapter.responses[first:])]

    def _resume(self, adapter: _Adapter, where: str) -> int:
        """Value store, ``status`` (the applied sequence read back), replay of the last acknowledgement."""
        status = self._ask(adapter, self.cloud.store_requests() + [{"op": "status"}], where)[-1]
        self.startup_seconds = time.monotonic() - adapter.started
        applied = _applied_of(status)
        if applied != self.applied:
            lost = sorted(n for n in self.acks if n > applied)
            what = f": acknowledged delivery {lost[0]} lost ({len(lost)} acknowledged deliveries lost)" if lost else ""
            raise AssertionError(
                f"{where}: the adapter, restarted after the previous kill, reports applied sequence {applied}, but "
                f"{self.applied} was read back from the file after that kill{what}")
        if self.acks:
            self._replay(adapter, self.acks[max(self.acks)], where)
        return applied

    def _replay(self, adapter: _Adapter, ack: Acknowledged, where: str) -> None:
        """The last acknowledged delivery, sent again: ``replayed: true`` and the acknowledged answer."""
        [result] = self._ask(adapter, [ack.request], where)
        replay = acknowledged_delivery(ack.request, {"ok": True, "result": result})
        assert result.get("replayed") is True and replay is not None and replay.receipt == ack.receipt, (
            f"{where}: acknowledged delivery {ack.sequence}, sent again after the restart, was answered "
            f"{_short(result)}; expected replayed: true and {_short(ack.receipt)}")
        self.resumes += 1

    def _plan(self, applied: int) -> list[dict]:
        """A reconciliation under a new attempt id, committed at ``applied``, then every later delivery.

        Its pages are the cloud's records after ``cloud_through`` deliveries:
        ``applied``, or the next one when the kill left that delivery's record
        applied without its receipt (its first transaction committed, its last
        not). The cloud's records are never older than the replica's: a
        snapshot older than the live records is refused ``record_version_stale``.
        """
        self.attempts += 1
        *snapshot, commit = self.cloud.snapshot(f"a{self.attempts}", self.cloud_through)
        commit = {**commit, "frame": {**commit["frame"], "highWater": {"streamId": STREAM, "sequence": applied}}}
        deliveries = [self.cloud.delivery(n) for n in range(applied + 1, self.length + 1)]
        return snapshot + [commit] + deliveries

    def _note_landing(self, adapter: _Adapter, sent: list[dict], first: int) -> str:
        """Count the kill by what it interrupted: the first unanswered request, "startup", or "idle"."""
        self.kills += 1
        answered = len(adapter.responses) - first
        written = min(adapter.written - first, len(sent))
        if not adapter.responses:
            landing = "startup"  # nothing answered yet: starting, opening the file, closing its gate
        elif answered < written:
            landing = sent[answered]["op"]
        else:
            landing = "idle"
        self.kills_in_flight += landing != "idle"
        self.landed[landing] += 1
        return landing

    def _take_answers(self, sent: list[dict], answers: list[Any], where: str) -> None:
        """Every answer must be the consistent stream's success; each delivery answered is acknowledged."""
        for request, response in zip(sent, answers):
            result = self._result(request, response, where)
            if request["op"] in ("page", "commit", "delivery") and result.get("ok") is not True:
                raise AssertionError(f"{where}: the consistent stream's {_describe(request)} was refused: "
                                     f"{_short(result)}")
            if request["op"] == "delivery":
                ack = acknowledged_delivery(request, response)
                assert result.get("replayed") is False and ack is not None, (
                    f"{where}: new {_describe(request)} answered as a replay: {_short(result)}")
                self.acks.setdefault(ack.sequence, ack)

    def _result(self, request: dict, response: Any, where: str) -> Any:
        """The result of an answer that must be ``ok``; ``AssertionError`` naming the request otherwise."""
        if not isinstance(response, dict) or response.get("id") != request["id"] or response.get("ok") is not True:
            raise AssertionError(f"{where}: {_describe(request)} (id {request['id']}) was answered "
                                 f"{_short(response)}{self._stderr_tail()}")
        return response["result"]

    def _check_file(self, where: str) -> Optional[ReadBack]:
        """The file after a kill: verified, invariants, every acknowledgement kept, applied never back."""
        _await_unlocked(self.db)
        if not self.db.exists():  # killed while creating it (creation is atomic)
            assert not self.acks, f"{where}: the replica file is gone, with {len(self.acks)} deliveries acknowledged"
            return None
        back = read_back(self.db, where)
        self.read_backs += 1
        self.invariant_checks += len(P.INVARIANTS)
        self.receipts_checked += check_acknowledged(back, self.acks.values(), where)
        assert back.applied >= self.applied, (
            f"{where}: the applied sequence went back from {self.applied} to {back.applied}: acknowledged "
            f"deliveries {[n for n in sorted(self.acks) if n > back.applied][:10]} lost")
        assert back.applied <= self.sent_through, (
            f"{where}: applied sequence {back.applied}, beyond every delivery sent ({self.sent_through})")
        self.applied = back.applied
        self.cloud_through = self._cloud_through(back, where)
        return back

    def _cloud_through(self, back: ReadBack, where: str) -> int:
        """The first sequence from the applied one whose cloud records are at least as new as the replica's."""
        live = dict(back.state.projects.items())
        for through in (back.applied, back.applied + 1):
            versions = self.cloud.records_after(min(through, self.length))[1]
            if all(version <= versions.get(project, -1) for project, version in live.items()):
                if through > back.applied:
                    self.half_applied.add(through)
                return min(through, self.length)
        raise AssertionError(f"{where}: the replica's live record versions {live} are ahead of the cloud's after "
                             f"delivery {back.applied + 1}, with applied sequence {back.applied}")

    def _check_served(self, snapshot: Any, where: str) -> None:
        """The served snapshot is the cloud's records after the last delivery, with the cloud's values."""
        records, versions = self.cloud.records_after(self.length)
        assert snapshot is not None, f"{where}: the snapshot is not served (null) at the end of the stream"
        served = {p["projectId"]: p for p in snapshot["projects"]}
        assert list(served) == list(self.cloud.projects), (
            f"{where}: the snapshot serves projects {list(served)}, the cloud has {self.cloud.projects}")
        for project, cloud_records in records.items():
            got = served[project]
            assert got["recordVersion"] == versions[project], (
                f"{where}: project {project} served at record version {got['recordVersion']}, "
                f"the cloud's is {versions[project]}")
            entries = {e["state"]["key"]: e for e in got["entries"]}
            assert sorted(entries) == sorted(cloud_records), (
                f"{where}: project {project} serves keys {sorted(entries)}, the cloud has {sorted(cloud_records)}")
            for key, record in cloud_records.items():
                self._check_entry(project, record, entries[key], where)

    def _check_entry(self, project: str, record: dict, entry: dict, where: str) -> None:
        """One served entry: the cloud's record, and its value exactly when a value is referenced and bound."""
        name = f"{project}/{record['key']}"
        assert entry["state"] == record, (
            f"{where}: {name} is served as {_short(entry['state'])}, the cloud holds {_short(record)}")
        ref = record["head"]["valueRef"]
        bound = ref is not None and record["binding"] is None
        expected = self.cloud.value(project, record["key"], ref["stagingId"]) if bound else None
        installed = entry["materialization"]["kind"] == "installed"
        assert installed == bound, (
            f"{where}: {name} is served {entry['materialization']}; expected "
            f"{'installed' if bound else 'withheld (tombstone or withhold binding)'}")
        assert entry["value"] == expected, (  # values are not shown: only their sizes
            f"{where}: {name} is served with a value that is not the cloud's (served {_size(entry['value'])}, "
            f"expected {_size(expected)})")

    def _stderr_tail(self, lines: int = 8) -> str:
        try:
            text = self.stderr_path.read_text("utf-8", "replace").splitlines()[-lines:]
        except OSError:
            return ""
        return ("\n  the adapter's standard error ends with:\n    " + "\n    ".join(text)) if text else ""

    def report(self, seconds: float) -> CrashReport:
        return CrashReport(
            deliveries=self.length, kills=self.kills, kills_in_flight=self.kills_in_flight,
            aimed=tuple(self.aimed.most_common()), landed=tuple(self.landed.most_common()),
            acknowledged=len(self.acks), receipts_checked=self.receipts_checked, read_backs=self.read_backs,
            invariant_checks=self.invariant_checks, resumes=self.resumes, snapshots=self.attempts,
            half_applied=len(self.half_applied), seconds=seconds,
        )


def _size(value: Optional[str]) -> str:
    return "no value" if value is None else f"{len(value)} characters"


def _applied_of(status: dict) -> int:
    cursor = status.get("appliedThrough")
    return 0 if cursor is None else cursor["sequence"]


def _sequence_of(request: dict) -> int:
    """The delivery sequence a request carries (0 for anything but a delivery)."""
    if request.get("op") != "delivery":
        return 0
    return request["frame"]["delivery"]["sequence"]


def _describe(request: dict) -> str:
    op = request.get("op")
    frame = request.get("frame") or {}
    if op == "delivery":
        return f"delivery {frame['delivery']['sequence']}"
    if op == "page":
        return f"page {frame['opId']}"
    if op in ("begin", "commit"):
        attempt = frame.get("attempt", {}).get("attemptId") if op == "begin" else frame.get("attemptId")
        return f"{op} of attempt {attempt}"
    return str(op)


def run_crash(kills: int, deliveries: int, seed: int = 0, workdir: Optional[Union[str, Path]] = None,
              adapter_command: Optional[str] = None) -> CrashReport:
    """Kill the adapter ``kills`` times while it applies a stream of ``deliveries``; check after each kill.

    ``adapter_command``: a command template with ``{db}`` (default
    ``DEFAULT_ADAPTER``). ``workdir``: where the scratch directory is made
    (default: the system's temporary directory); it is removed at the end.
    Raises ``AssertionError`` naming the kill and what was lost or broken.
    """
    if kills < 0 or deliveries < 0:
        raise ValueError("kills and deliveries must be non-negative")
    started = time.monotonic()
    cloud = Cloud(StreamShape(deliveries=deliveries, seed=seed))
    with scratch_directory(workdir, "envreplica-crash-") as directory:
        run = _CrashRun(cloud, directory, adapter_command or DEFAULT_ADAPTER, random.Random(seed))
        for kill in range(1, kills + 1):
            run.kill_round(kill, kills)
        run.final_round()
    return run.report(time.monotonic() - started)
