"""The two sides of the migration lockstep: the model (``ModelSide``) and real stores with real invocations
(``RealSide``), each taking the same moves and answering in the same words (``observe``).

Models: a move is one action of ``model.migration`` (``Invoke``, ``Step``, ``Crash``, the foreign writer's
``Connect`` / ``Write`` / ``Lock`` / ``Unlock`` / ``Disconnect``, the faults ``ReadOnly`` / ``Writable`` /
``Edit`` / ``Repair``) with, for an invocation, the way it runs (``invocations.Mode``). ``ModelSide`` applies
it to a model state under the lockstep's bounds (``LOCKSTEP_BOUNDS``: variant ``fixed``, every fault, the
lock refused while held: the implementation's readings); ``RealSide`` does it for real (``disk``,
``invocations``, ``writer``).

A model step the implementation has no counterpart for (``SILENT``: the child inputs' ``retain run`` and
``retain resource``) is taken with the step before it, so both sides rest at the same boundaries.

Leaves out on purpose (``allowed``): a writer connecting to, writing or locking a store that cannot be
written (SQLite opens such a file read-only, so that connection is no writer, and answers an earlier
connection's write there with an I/O error and a hot journal, not a refusal: no contract of ours), and input
faults of ``recover`` (it takes only the request).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from envreplica.conformance import hermetic
from envreplica.conformance.migration.disk import KEY, WRONG_KEY, Disk
from envreplica.conformance.migration.invocations import Event, Invocation, Mode, Runners
from envreplica.conformance.migration.observe import Observation, Outcome, from_model, model_outcome
from envreplica.conformance.migration.writer import MARKER_PREFIX
from envreplica.impl import paired as P
from envreplica.model import migration as mm
from envreplica.model.migration import Pc

#: The model's steps with no counterpart in the implementation: taken with the step before them.
SILENT = frozenset({Pc.RETAIN_RUN, Pc.RETAIN_RESOURCE})
#: The last step of each role: the invocation ends right after it.
FINAL = frozenset({Pc.COMPLETE_RESOURCE.value, Pc.REOPEN_RESOURCE.value})

#: The lockstep's bounds: the fixed steps with the implementation's readings, every fault; invocations,
#: crashes, writes and faults bounded only so that an example stays finite.
LOCKSTEP_BOUNDS = mm.MigrationBounds(
    "lockstep", migrations=8, recoveries=6, crashes=6, writes=6, fixes=frozenset(mm.Fix),
    reading=mm.Reading(backup=mm.BackupReading.KEEP_SOURCE, lock=mm.LockReading.REFUSE), faults=frozenset(mm.Fault),
    fault_actions=8)


@dataclass(frozen=True)
class Move:
    """One move of the lockstep: a model action, and how an invocation runs (``mode``, for ``Invoke`` only)."""

    action: mm.Action
    mode: Mode = Mode.THREAD

    def __str__(self) -> str:
        text = mm.describe_action(self.action)
        return f"{text} [{self.mode.value}]" if isinstance(self.action, mm.Invoke) else text


def allowed(st: mm.MigrationState, action: mm.Action) -> bool:
    """Whether the lockstep generates ``action`` in ``st`` (see the module: what it leaves out)."""
    if isinstance(action, (mm.Write, mm.Lock, mm.Connect)):
        return not st.stores[action.store].read_only
    return True


class ModelSide:
    """The model under ``cfg``, with each live invocation's last visible step."""

    def __init__(self, cfg: mm.MigrationBounds = LOCKSTEP_BOUNDS, silent: frozenset[Pc] = SILENT,
                 allows: Optional[Callable[[mm.Action], bool]] = None) -> None:
        self.cfg = cfg
        self.silent = silent  # the steps the real side does not pause at: taken with the step before them
        self.allows = allows  # what else the real side cannot take (an adapter's undeclared input faults)
        self.st = mm.init(cfg)
        self.last: dict[int, str] = {}
        self.history: list[tuple[mm.MigrationState, mm.Action, mm.Result, mm.MigrationState]] = []

    def enabled(self) -> list[mm.Action]:
        return [a for a in mm.enabled(self.cfg, self.st)
                if allowed(self.st, a) and (self.allows is None or self.allows(a))]

    def is_enabled(self, action: mm.Action) -> bool:
        return action in self.enabled()

    def apply(self, action: mm.Action) -> Outcome:
        st = self.st
        step: Optional[str] = None
        if isinstance(action, mm.Step):
            proc = next(p for p in st.procs if p.pid == action.pid)
            step = proc.pc.value
        nxt, result = mm.next_state(self.cfg, st, action)
        self.history.append((st, action, result, nxt))
        if isinstance(action, mm.Step):
            while (going := next((p for p in nxt.procs if p.pid == action.pid), None)) is not None \
                    and going.pc in self.silent:
                before = nxt
                nxt, silent = mm.next_state(self.cfg, nxt, mm.Step(action.pid))
                self.history.append((before, mm.Step(action.pid), silent, nxt))
        self.st = nxt
        alive = {p.pid for p in nxt.procs}
        ended = isinstance(action, mm.Step) and action.pid not in alive
        if isinstance(action, mm.Invoke):
            self.last[max(alive)] = ""
        elif isinstance(action, mm.Step) and not ended:
            self.last[action.pid] = step or ""
        for pid in list(self.last):
            if pid not in alive:
                del self.last[pid]
        return model_outcome(action, result, step, ended)

    def observe(self) -> Observation:
        return from_model(self.st, self.last)


_REFUSAL = re.compile(r"refused: ([a-z_]+):")


def refusal_code(stderr: str) -> Optional[str]:
    """The refusal code of an invocation's one-line refusal (``envreplica migrate: refused: CODE: ...``)."""
    found = _REFUSAL.search(stderr)
    return found.group(1) if found else None


class WriterProcess:
    """The foreign writer (``conformance.migration.writer``), one process for a run, reset between examples: in
    ``cwd`` (the run's scratch directory; default the system's temporary directory), with none of the caller's
    ``ENVREPLICA_*`` variables (``conformance.hermetic``)."""

    def __init__(self, cwd: Optional[Path] = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "envreplica.conformance.migration.writer"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=hermetic.child_env(), cwd=cwd or tempfile.gettempdir())
        self.count = 0

    def ask(self, **request: object) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the foreign writer process ended")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.ask(op="disconnect")
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()


class RealSide:
    """Real stores (``Disk``), real invocations (``Runners``) and a real foreign writer (``WriterProcess``)."""

    def __init__(self, disk: Disk, runners: Runners, writer: WriterProcess, busy_timeout: float = 0.05) -> None:
        self.disk = disk
        self.runners = runners
        self.writer = writer
        self.busy_timeout = busy_timeout
        self.invocations: dict[int, Invocation] = {}
        self.last: dict[int, str] = {}
        self.started = 0
        self.writes = 0
        self.ends: list[tuple[int, Event]] = []  # every invocation's end, with its standard error

    def _argv(self, action: mm.Invoke) -> list[str]:
        stores = [str(p) for p in self.disk.stores]
        timeout = ["--busy-timeout", str(self.busy_timeout)]
        if action.fault is mm.InputFault.COPY:
            return [action.role.value, "--request", str(self.disk.copy_of_request()), *timeout]
        if action.role is mm.Role.RECOVER:
            return ["recover", "--request", str(self.disk.request), *timeout]
        if action.fault in mm.ALIASES:
            stores = [stores[0], self._alias(action.fault)]
        return ["migrate", *[a for s in stores for a in ("--db", s)], *timeout]

    def _alias(self, fault: mm.InputFault) -> str:
        """Another name of the run store: another spelling of its path, a symlink or a hard link to it."""
        run = self.disk.stores[0]
        if fault is mm.InputFault.SAME_PATH:
            return str(run.parent / "." / ".." / run.parent.name / run.name)
        return str(self.disk.symlink if fault is mm.InputFault.SYMLINK else self.disk.hardlink)

    def apply(self, move: Move) -> Outcome:
        action = move.action
        if isinstance(action, mm.Invoke):
            env = {} if action.fault is mm.InputFault.NO_KEY else \
                {"ENVREPLICA_MASTER_KEY": (WRONG_KEY if action.fault is mm.InputFault.WRONG_KEY else KEY).hex()}
            pid = self.started
            self.started += 1
            self.invocations[pid] = self.runners.start(move.mode, self._argv(action), env)
            self.last[pid] = ""
            return Outcome("started")
        if isinstance(action, mm.Step):
            inv = self.invocations[action.pid]
            event = inv.go()
            if event.ended:
                return self._ended(action.pid, event, None)
            if event.step in FINAL:
                end = inv.go()
                if not end.ended:
                    return Outcome("step", step=f"{event.step}, then {end.step}")
                return self._ended(action.pid, end, event.step)
            self.last[action.pid] = event.step or ""
            return Outcome("step", step=event.step)
        if isinstance(action, mm.Crash):
            self.invocations.pop(action.pid).kill()
            self.last.pop(action.pid, None)
            return Outcome("crashed")
        if isinstance(action, mm.Connect):
            self._ok(self.writer.ask(op="connect", path=str(self.disk.stores[action.store])))
        elif isinstance(action, mm.Disconnect):
            self._ok(self.writer.ask(op="disconnect"))
        elif isinstance(action, mm.Lock):
            self._ok(self.writer.ask(op="lock"))
        elif isinstance(action, mm.Unlock):
            self._ok(self.writer.ask(op="unlock"))
        elif isinstance(action, mm.Write):
            self.writes += 1
            answer = self.writer.ask(op="write", version=action.version, marker=f"{MARKER_PREFIX}{self.writes}")
            return Outcome("write", code=answer.get("outcome", "error"))
        elif isinstance(action, (mm.ReadOnly, mm.Writable)):
            self.disk.make_read_only(action.store, isinstance(action, mm.ReadOnly))
        elif isinstance(action, (mm.Edit, mm.Repair)):
            (self.disk.edit if isinstance(action, mm.Edit) else self.disk.repair)(action.doc.value, action.store)
        elif isinstance(action, mm.MoveAway):
            self.disk.move_away(action.doc.value)
        return Outcome("ok")

    @staticmethod
    def _ok(answer: dict) -> None:
        if not answer.get("ok"):
            raise RuntimeError(f"the foreign writer failed: {answer}")

    def _ended(self, pid: int, event: Event, step: Optional[str]) -> Outcome:
        self.invocations.pop(pid, None)
        self.last.pop(pid, None)
        self.ends.append((pid, event))
        status = event.status if event.status is not None else -1
        code = refusal_code(event.stderr) if status != 0 else None
        if status not in (0, 1, 2) and code is None:
            code = "internal error" if status == 3 else f"status {status}"
        return Outcome("exit", step=step, status=status, code=code)

    def observe(self) -> Observation:
        return self.disk.observe(tuple(sorted(self.last.items())))

    def message(self, pid: int) -> str:
        """The standard error of invocation ``pid``'s end (empty if it has not ended)."""
        return stderr_of(self, pid)

    def close(self) -> None:
        for inv in self.invocations.values():
            inv.abandon()
        self.invocations.clear()
        try:
            self.writer.ask(op="disconnect")
        except (OSError, RuntimeError, ValueError):
            pass
        self.disk.close()


def stderr_of(side: RealSide, pid: int) -> str:
    """The standard error of invocation ``pid``'s end (empty if it has not ended)."""
    return next((e.stderr for p, e in side.ends if p == pid), "")
