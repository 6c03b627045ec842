"""Real ``migrate`` and ``recover`` invocations, paused at every step boundary: in this process, or as processes.

Models: the invocations of ``model.migration`` (``Invoke``, ``Step``, ``Crash``) done for real. Each runs
``envreplica ARGV`` with ``ENVREPLICA_PAIRED_STEP_SOCKET`` set, so its hook
(``impl.paired.hook_from_env``) reports each step on a Unix socket this harness listens on and waits to be
told to go on (``impl.paired.STEP_PROTOCOL``). Three ways to run one (``Mode``):

- ``THREAD``: a thread of this process (the fastest; a crash is ``StepperKilled`` raised at the boundary, so
  the run unwinds as a killed process's files and locks are released by the kernel);
- ``FORK``: a child of the zygote (``zygote``): a real process, killed with SIGKILL at the boundary;
- ``EXEC``: ``python -m envreplica.cli.main`` started fresh: the whole command, its start included.

A thread and a fork run what the command does once its options are read (``library_call``: the library's
``impl.paired.migrate_command`` and ``recover_command``, which ``cli.migrate`` and ``cli.recover`` call); only
``EXEC`` reads them as the command line does. The harness's argv take the few shapes ``sides`` builds, so the
command line's own reading of options is left to ``EXEC`` (and to ``tests/test_paired_*.py``), and the
conformance layer imports nothing of the command line's (``docs/architecture.md``).

``Invocation.go`` lets it take its next step and returns what happened (``Event``): a step taken, or the end
with its exit status and standard error. ``Invocation.kill`` crashes it where it waits.

Hermetic (``conformance.hermetic``): an invocation gets none of the caller's ``ENVREPLICA_*`` variables, only
those the harness sets (its step socket, its master key); a process starts in the run's scratch directory, not
the caller's (``python -m`` would import an ``envreplica/`` found there). A thread shares this process's
environment: the run sets the caller's aside for its whole length (``run.run_migration_lockstep``), and each
thread's start does too.

Leaves out on purpose: a crash inside a step (between two writes of one step: each step's writes are one
transaction or one atomic file operation, so the boundaries are the only places a crash leaves something
new), and timing: every wait has a hang guard in seconds (``HANG_GUARD_SECONDS``), never a verdict.
"""

from __future__ import annotations

import enum
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional

from envreplica.conformance import hermetic
from envreplica.impl import paired, sealing

#: Seconds any wait for an invocation may take before the harness calls it hung (a guard, never a verdict).
HANG_GUARD_SECONDS = 120.0


def library_call(argv: list[str]) -> Callable[[], int]:
    """What ``envreplica ARGV`` does once its options are read, as a call of the library: ``migrate`` with two or
    more ``--db`` or with ``--request``, or ``recover --request``, with ``--busy-timeout`` and ``--backup-dir``
    (the shapes ``sides`` builds, and the tests' own); the master key from the environment when the call runs
    (``impl.sealing.master_key_if_set``), as the command reads it. Any other argv is a ``HarnessError``: the
    harness asked for what it cannot run in-process (``EXEC`` runs any)."""
    if not argv or argv[0] not in ("migrate", "recover"):
        raise HarnessError(f"an in-process invocation runs migrate or recover, not {argv[:1]}")
    options: dict[str, list[str]] = {"--db": [], "--request": [], "--busy-timeout": [], "--backup-dir": []}
    rest = argv[1:]
    while rest:
        if rest[0] not in options or len(rest) < 2:
            raise HarnessError(f"an in-process invocation takes {', '.join(options)}, each with a value: {argv}")
        options[rest[0]].append(rest[1])
        rest = rest[2:]
    once = {k: v[-1] if v else None for k, v in options.items()}  # argparse's store: the last one given
    timeout = float(once["--busy-timeout"] or 5.0)
    if argv[0] == "recover":
        request = once["--request"]
        if request is None or options["--db"] or once["--backup-dir"] is not None:
            raise HarnessError(f"recover takes --request alone (and --busy-timeout): {argv}")
        return lambda: paired.recover_command(request, busy_timeout=timeout)
    dbs = options["--db"]
    if len(dbs) == 1 or (not dbs and once["--request"] is None):
        raise HarnessError(f"an in-process migrate is the paired one (two or more --db, or --request): {argv}")
    return lambda: _migrate(dbs, once["--request"], once["--backup-dir"], timeout)


def _migrate(dbs: list[str], request: Optional[str], backup_dir: Optional[str], timeout: float) -> int:
    """``envreplica migrate`` as the library runs it, the master key read as the command reads it: a key that
    is set but unusable is the command's exit 2 and its one line (``cli.errors.guarded``), not a traceback."""
    try:
        key = sealing.master_key_if_set()
    except sealing.KeyConfigError as error:
        print(f"envreplica migrate: {error}", file=sys.stderr)
        return 2
    return paired.migrate_command(dbs, request=request, backup_dir=backup_dir, master_key=key,
                                  busy_timeout=timeout)


class Mode(enum.Enum):
    """How an invocation runs."""

    THREAD = "thread"  # a thread of this process
    FORK = "fork"  # a process forked from the zygote
    EXEC = "exec"  # a fresh interpreter
    PROCESS = "process"  # a process an adapter starts (docs/protocol.md, 11.3): how is the adapter's


class HarnessError(Exception):
    """The harness itself failed (an invocation hung past the guard, a broken protocol line): not a verdict."""


@dataclass(frozen=True)
class Event:
    """What an invocation did when let go: a step (``step``), or its end (``status``, ``stderr``)."""

    step: Optional[str] = None
    status: Optional[int] = None
    stderr: str = ""

    @property
    def ended(self) -> bool:
        return self.step is None


class _ThreadStreams(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` while threads run invocations: each registered thread writes to its own
    buffer, every other thread to the stream that was there."""

    def __init__(self, real: IO[str]) -> None:
        self.real = real
        self.buffers: dict[int, io.StringIO] = {}

    def write(self, s: str) -> int:
        buffer = self.buffers.get(threading.get_ident())
        return (buffer if buffer is not None else self.real).write(s)

    def flush(self) -> None:
        if threading.get_ident() not in self.buffers:
            self.real.flush()


def thread_streams() -> tuple[_ThreadStreams, _ThreadStreams]:
    """``sys.stdout`` and ``sys.stderr`` as ``_ThreadStreams`` (installed over whatever streams are there now: a
    test runner replaces them between tests)."""
    if not isinstance(sys.stdout, _ThreadStreams):
        sys.stdout = _ThreadStreams(sys.stdout)
    if not isinstance(sys.stderr, _ThreadStreams):
        sys.stderr = _ThreadStreams(sys.stderr)
    return sys.stdout, sys.stderr


def _uninstall_streams() -> None:
    if isinstance(sys.stdout, _ThreadStreams) and not sys.stdout.buffers:
        sys.stdout = sys.stdout.real
    if isinstance(sys.stderr, _ThreadStreams) and not sys.stderr.buffers:
        sys.stderr = sys.stderr.real


class Runners:
    """What every invocation of one run shares: a scratch directory for sockets and output, and the zygote."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self._zygote: Optional[subprocess.Popen[str]] = None

    def __enter__(self) -> "Runners":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        _uninstall_streams()
        if self._zygote is not None:
            try:
                assert self._zygote.stdin is not None
                self._zygote.stdin.close()
                self._zygote.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._zygote.kill()
            self._zygote = None

    def zygote(self) -> subprocess.Popen[str]:
        if self._zygote is None or self._zygote.poll() is not None:
            self._zygote = subprocess.Popen([sys.executable, "-m", "envreplica.conformance.migration.zygote"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                            env=_child_env({}), cwd=self.scratch)
        return self._zygote

    def start(self, mode: Mode, argv: list[str], env: dict[str, str]) -> "Invocation":
        """Start ``envreplica ARGV`` in ``mode`` with ``env`` added to the environment; it waits before its first
        step (or has already ended, refused before it could wait: ``Invocation.early``)."""
        self.count += 1
        return Invocation(self, mode, argv, env, self.scratch / f"i{self.count}")


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    """An invocation's environment: none of the caller's ``ENVREPLICA_*`` (``hermetic``), then ``extra``."""
    return hermetic.child_env(extra)


class Invocation:
    """One run of ``migrate`` or ``recover``, paused at each step boundary."""

    def __init__(self, runners: Runners, mode: Mode, argv: list[str], env: dict[str, str], base: Path) -> None:
        self.mode = mode
        self.argv = argv
        self.pid: Optional[int] = None
        self.early: Optional[Event] = None  # the end, when it came before the first step
        self.finished: Optional[Event] = None
        self._base = base
        self._sock_path = f"{base}.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._sock_path)
        self._listener.listen(1)
        self._listener.settimeout(HANG_GUARD_SECONDS)
        self._conn: Optional[socket.socket] = None
        self._reader: Optional[IO[str]] = None
        self._thread: Optional[threading.Thread] = None
        self._thread_result: dict[str, Any] = {}
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._stdout, self._stderr = Path(f"{base}.out"), Path(f"{base}.err")
        self._runners = runners
        env = dict(env, ENVREPLICA_PAIRED_STEP_SOCKET=self._sock_path)
        if mode is Mode.THREAD:
            self._start_thread(env)
        elif mode is Mode.FORK:
            zygote = runners.zygote()
            assert zygote.stdin is not None and zygote.stdout is not None
            zygote.stdin.write(json.dumps({"argv": argv, "env": _child_env(env), "socket": self._sock_path,
                                           "stdout": str(self._stdout), "stderr": str(self._stderr)}) + "\n")
            zygote.stdin.flush()
            self.pid = json.loads(zygote.stdout.readline())["pid"]
            self._accept()
            self._expect_ready()
        else:
            with open(self._stdout, "wb") as out, open(self._stderr, "wb") as err:
                self._proc = subprocess.Popen([sys.executable, "-m", "envreplica.cli.main", *argv],
                                              env=_child_env(env), cwd=runners.scratch, stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=err)
            self.pid = self._proc.pid
            self._accept()
            self._expect_ready()

    # -- starting -----------------------------------------------------------

    def _start_thread(self, env: dict[str, str]) -> None:
        call = library_call(list(self.argv))
        streams = thread_streams()
        aside = hermetic.caller_keys()  # none of this process's ENVREPLICA_* while the thread starts
        saved = {k: os.environ.get(k) for k in (*env, *aside)}
        result = self._thread_result
        buffer = io.StringIO()
        result["stderr"] = buffer

        def run() -> None:
            ident = threading.get_ident()
            streams[0].buffers[ident] = io.StringIO()
            streams[1].buffers[ident] = buffer
            try:
                result["status"] = call()
            except paired.StepperKilled:
                result["killed"] = True
            except BaseException:  # a bug that escaped the call: as the command reports one
                buffer.write(traceback.format_exc())
                result["status"] = 3
            finally:
                stepper = paired._STEPPERS.pop(ident, None)
                if stepper is not None:
                    stepper.sock.close()
                streams[0].buffers.pop(ident, None)
                streams[1].buffers.pop(ident, None)

        for k in aside:
            os.environ.pop(k, None)
        os.environ.update(env)
        try:
            self._thread = threading.Thread(target=run, name=f"envreplica {' '.join(self.argv[:1])}", daemon=True)
            self._thread.start()
            self.pid = os.getpid()
            self._accept(thread=True)
            if self._conn is not None:
                self._expect_ready()
        finally:  # the thread read its environment before it said ready (or it ended)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _accept(self, thread: bool = False) -> None:
        """Wait for the invocation to connect (or, before it could, to end)."""
        self._listener.settimeout(0.05)
        waited = 0.0
        while True:
            try:
                conn, _ = self._listener.accept()
                break
            except socket.timeout:
                waited += 0.05
                if self._gone_before_connecting():
                    self.early = self.finished = self._end_event()
                    return
                if waited > HANG_GUARD_SECONDS:
                    raise HarnessError(f"{self.argv[0]} ({self.mode.value}) never connected to its step socket")
        conn.settimeout(HANG_GUARD_SECONDS)
        self._conn = conn
        self._reader = conn.makefile("r", encoding="utf-8", newline="\n")
        line = self._line()
        if not line.startswith("hello "):
            raise HarnessError(f"expected hello, got {line!r}")

    def _gone_before_connecting(self) -> bool:
        if self._thread is not None:
            return not self._thread.is_alive()
        if self._proc is not None:
            return self._proc.poll() is not None
        return self.pid is not None and not _alive(self.pid)

    def _expect_ready(self) -> None:
        line = self._line()
        if line == "ready":
            return
        if line.startswith("exit ") or line == "":
            self.early = self.finished = self._end_event(line)
            return
        raise HarnessError(f"expected ready, got {line!r}")

    # -- stepping -----------------------------------------------------------

    def _line(self) -> str:
        assert self._reader is not None
        try:
            return self._reader.readline().strip()
        except (socket.timeout, OSError) as e:
            raise HarnessError(f"{self.argv[0]} ({self.mode.value}) did not answer: {e}") from None

    def go(self) -> Event:
        """Let it take its next step; what it did (a step, or its end)."""
        if self.finished is not None:
            return self.finished
        assert self._conn is not None
        try:
            self._conn.sendall(b"go\n")
        except OSError:
            pass  # it ended meanwhile: the end is read below
        line = self._line()
        if line.startswith("step "):
            return Event(step=line[5:])
        if line.startswith("exit ") or line == "":
            self.finished = self._end_event(line)
            return self.finished
        raise HarnessError(f"unexpected line from {self.argv[0]}: {line!r}")

    def kill(self) -> None:
        """Crash it where it waits (at a step boundary): SIGKILL for a process, ``StepperKilled`` for a thread."""
        if self.finished is not None:
            return
        if self.mode is Mode.THREAD:
            assert self._conn is not None
            self._conn.sendall(b"kill\n")
            assert self._thread is not None
            self._thread.join(HANG_GUARD_SECONDS)
            if self._thread.is_alive():
                raise HarnessError("a killed thread did not end")
        else:
            assert self.pid is not None
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self._proc is not None:
                self._proc.wait(HANG_GUARD_SECONDS)
            else:
                _wait_gone(self.pid)
        self.finished = Event(status=-9, stderr="")
        self.close()

    def _end_event(self, line: str = "") -> Event:
        """The end: its exit status and standard error."""
        if self._thread is not None:
            self._thread.join(HANG_GUARD_SECONDS)
            if self._thread.is_alive():
                raise HarnessError("an invocation's thread did not end")
            status = self._thread_result.get("status", 3)
            stderr = self._thread_result["stderr"].getvalue()
        elif self._proc is not None:
            status = self._proc.wait(HANG_GUARD_SECONDS)
            stderr = self._stderr.read_text(errors="replace") if self._stderr.exists() else ""
        else:
            status = int(line.split()[1]) if line.startswith("exit ") else -9
            assert self.pid is not None
            _wait_gone(self.pid)
            stderr = self._stderr.read_text(errors="replace") if self._stderr.exists() else ""
        self.close()
        return Event(status=status, stderr=stderr)

    def close(self) -> None:
        for closeable in (self._reader, self._conn, self._listener):
            if closeable is not None:
                try:
                    closeable.close()
                except OSError:
                    pass
        try:
            os.unlink(self._sock_path)
        except OSError:
            pass

    def abandon(self) -> None:
        """End it whatever it is doing (the example is over): as a crash."""
        try:
            self.kill()
        except (HarnessError, OSError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive (the zygote ignores SIGCHLD, so none should linger)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int) -> None:
    import time

    waited = 0.0
    while _alive(pid):
        time.sleep(0.002)
        waited += 0.002
        if waited > HANG_GUARD_SECONDS:
            raise HarnessError(f"process {pid} did not end")
