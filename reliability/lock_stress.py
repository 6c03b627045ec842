"""Many processes on one lock, killed with SIGKILL inside and outside the operation: overlaps and wedged locks.

``run_lock_stress(kind, directory)`` holds one lock path in ``directory`` under ``processes`` worker processes
(8 by default), each looping: take the lock, append ``enter PID T`` to a shared log (``O_APPEND``), hold it a few
milliseconds, append ``leave PID T``, let it go, pause a little. Before they start, the lock is made stale: a first
worker takes it and is killed inside (not reaped at once: a zombie owner for a while). The parent then kills a
worker with SIGKILL after every ``entries_per_kill`` new entries, alternately one that is inside the operation
(as the log last showed it) and one that is not (waiting, acquiring, releasing, between two tries), and starts a
new worker in its place, until ``kills`` kills are done (the stale lock's first holder among them) and
``processes`` more entries followed the last one. At the end, ``names_left`` counts what is left in the directory
beside the log and the lock path (for ours: the garbage of processes killed while acquiring or releasing).

The verdicts come from the log alone, in its order (one file with ``O_APPEND``: every line is one atomic write,
and the log's order is the order of those writes). The parent writes ``kill PID`` there *before* it sends the
signal, so a process is inside from its ``enter`` to its ``leave`` or to its ``kill`` line, whichever is first:

* an **overlap** is an ``enter`` while another process is inside. A correct lock makes none: a leaver writes
  ``leave`` before it releases, a taker of a stale lock enters only once the killed holder is dead, which is
  after the kill line. ``max_inside`` is the most processes inside at once;
* a **wedged** lock is ``stall_rounds`` rounds of the parent (``round_seconds`` each) with no new ``enter`` and
  nobody inside alive (every holder dead). The parent then clears the lock path as an operator would (the
  lock's own files: ``clear``) and counts it, so the run goes on;
* ``kills_inside``: kill lines sent while the victim was inside (by the log); ``busy``: a worker's give-up
  (``LockBusy``, a timeout); ``errors``: any other exception in a worker (its one line kept in ``error_lines``);
* ``overlaps_counting_zombies``, for comparison only: the overlaps a harness would count that took a process
  killed inside for one still inside until it is reaped (the parent reaps a round later and writes ``reaped
  PID``). A zombie runs no code; a lock that takes a zombie's lock over is right to, and ours does, so this
  count is not a verdict on any lock: it shows how much a harness that does not log its kills would see.

The locks (``KINDS``): ``envreplica`` (``impl.lock``), ``filelock`` (``filelock.FileLock``: ``flock``),
``softfilelock`` (``filelock.SoftFileLock``: a marker file), ``fasteners`` (``fasteners.InterProcessLock``:
``fcntl``), ``portalocker`` (``portalocker.Lock``: ``flock``), each at its own defaults, and ``seed``: the
seed's ``projection-lock.js`` unchanged, under Node (``seed_source``: the extracted file; its two imports come
from ``adapters/javascript``'s stand-ins through that kit's loader).

Leaves out on purpose: power loss (fsync ordering below the filesystem), network filesystems, and a second host.
Run small by ``tests/test_lock_stress.py`` (our lock: 0 overlaps, 0 wedged); at full size, with every kind, by
``bench/bench_lock.py``, which prints the table.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

__all__ = ["CHECKS", "KINDS", "LockStressResult", "clear", "filesystem_of", "run_lock_stress", "worker_main"]

KINDS = ("envreplica", "filelock", "softfilelock", "fasteners", "portalocker", "seed")
#: The harness's own checks (tests/test_lock_stress.py): no lock at all (it must count overlaps), and a bare
#: ``mkdir`` lock with no takeover (a holder killed inside wedges it: it must count that).
CHECKS = ("none", "mkdir")

#: The adapters/javascript kit's loader: the seed's files load as they are; its unshipped imports are stand-ins.
_KIT = Path(__file__).resolve().parent.parent / "adapters" / "javascript"
_SEED_WORKER = Path(__file__).resolve().parent / "lock_seed_worker.mjs"


@dataclass
class LockStressResult:
    """What one run saw (counts from the log; ``seconds`` only for the rate)."""

    kind: str
    filesystem: str
    processes: int
    entries: int = 0  # enter lines before the stop
    overlaps: int = 0  # enters while another live process was inside
    max_inside: int = 0  # the most processes inside at once (1 for a lock that holds)
    # what a harness would count that took a process killed inside for one still inside until it is reaped (a
    # zombie runs no code: a lock that takes a zombie's lock over is right to); not a verdict, a comparison
    overlaps_counting_zombies: int = 0
    wedged: int = 0  # times the lock stood still with every holder dead (then cleared by the parent)
    kills: int = 0
    kills_inside: int = 0
    busy: int = 0
    errors: int = 0
    spawned: int = 0
    seconds: float = 0.0
    names_left: int = 0  # names in the directory at the end, the log and the lock path aside (ours: garbage)
    error_lines: list[str] = field(default_factory=list)

    @property
    def entries_per_second(self) -> float:
        return self.entries / self.seconds if self.seconds else 0.0

    def row(self) -> dict[str, object]:
        return {"lock": self.kind, "filesystem": self.filesystem, "entries/s": round(self.entries_per_second, 1),
                "entries": self.entries, "overlaps": self.overlaps, "max inside": self.max_inside,
                "wedged": self.wedged, "kills": self.kills, "inside": self.kills_inside, "busy": self.busy,
                "errors": self.errors, "names left": self.names_left,
                "zombie-incl.": self.overlaps_counting_zombies}


def filesystem_of(path: Path) -> str:
    """The type of the filesystem ``path`` is on (``/proc/mounts``: the longest mount point above it)."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    with open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            parts = line.split()
            point = parts[1].replace("\\040", " ")
            if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, parts[2]
    return kind


def clear(kind: str, lock_path: Path) -> None:
    """What an operator does to a wedged lock: remove its path (a directory for ours and the seed's)."""
    if lock_path.is_dir() and not lock_path.is_symlink():
        shutil.rmtree(lock_path, ignore_errors=True)
    else:
        try:
            lock_path.unlink()
        except FileNotFoundError:
            pass


class _Log:
    """The parent's reader of the shared log, and the verdicts (in the log's order)."""

    def __init__(self, path: Path, result: LockStressResult) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.offset = 0
        self.partial = b""
        self.result = result
        self.inside: set[int] = set()
        self.inside_or_zombie: set[int] = set()  # killed inside: counted until reaped (overlaps_counting_zombies)
        self.killed: set[int] = set()
        self.seen: set[int] = set()  # pids that wrote a line (started up)
        self.stopped = False

    def write(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\n")

    def read(self) -> int:
        """Read what was appended since; the number of new ``enter`` lines before the stop."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        entered = 0
        for raw in lines:
            entered += self._line(raw.decode(errors="replace"))
        return entered

    def _line(self, line: str) -> int:
        if self.stopped or not line:
            return 0
        word, _, rest = line.partition(" ")
        if word == "stop":
            self.stopped = True
            return 0
        if word in ("error", "busy"):
            pid = int(rest.split()[0])
            if pid not in self.killed:
                if word == "busy":
                    self.result.busy += 1
                else:
                    self.result.errors += 1
                    self.result.error_lines.append(line)
            return 0
        pid = int(rest.split()[0])
        self.seen.add(pid)
        if word == "reaped":
            self.inside_or_zombie.discard(pid)
            return 0
        if word == "kill":
            self.result.kills += 1
            if pid in self.inside:
                self.result.kills_inside += 1
            self.inside.discard(pid)
            self.killed.add(pid)
            return 0
        if pid in self.killed:  # written between the kill line and the signal's arrival: not a live process
            return 0
        if word == "enter":
            if self.inside - {pid}:
                self.result.overlaps += 1
            if self.inside_or_zombie - {pid}:
                self.result.overlaps_counting_zombies += 1
            self.inside.add(pid)
            self.inside_or_zombie.add(pid)
            self.result.max_inside = max(self.result.max_inside, len(self.inside))
            self.result.entries += 1
            return 1
        if word == "leave":
            self.inside.discard(pid)
            self.inside_or_zombie.discard(pid)
        return 0

    def close(self) -> None:
        os.close(self.fd)


def _command(kind: str, lock_path: Path, log: Path, hold_ms: float, seed_source: Optional[Path]) -> list[str]:
    if kind == "seed":
        if seed_source is None:
            raise ValueError("the seed's lock needs seed_source: the extracted storage/projection-lock.js")
        return ["node", "--import", str(_KIT / "src" / "register.mjs"), str(_SEED_WORKER), str(seed_source),
                str(lock_path), str(log), str(hold_ms)]
    return [sys.executable, "-m", "envreplica.reliability.lock_stress", "worker", kind, str(lock_path), str(log),
            str(hold_ms)]


def _spawn(kind: str, lock_path: Path, log: Path, hold_ms: float, seed_source: Optional[Path]) -> subprocess.Popen:
    env = dict(os.environ)
    if kind == "seed":
        assert seed_source is not None
        env["ENVREPLICA_MIGRATION_KIT_SOURCE"] = str(seed_source)
    return subprocess.Popen(_command(kind, lock_path, log, hold_ms, seed_source), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run_lock_stress(kind: str, directory: Path, *, processes: int = 8, kills: int = 40, entries_per_kill: int = 2,
                    hold_ms: float = 5.0, seed: int = 0, round_seconds: float = 0.02, stall_rounds: int = 500,
                    seed_source: Optional[Path] = None, first_holder_rounds: int = 3000) -> LockStressResult:
    """One stress run of the lock ``kind`` at ``directory/lock`` (see the module's text).

    ``stall_rounds`` x ``round_seconds``: how long the lock may stand still, with every holder dead, before it
    counts as wedged (10 s by default: a worker that was just started takes a while on a busy machine; a safety
    margin, not a measure). ``first_holder_rounds``: how long the first holder may take to enter (a safety net).
    """
    if kind not in KINDS + CHECKS:
        raise ValueError(f"unknown lock {kind!r}: one of {', '.join(KINDS + CHECKS)}")
    directory.mkdir(parents=True, exist_ok=True)
    lock_path, log_path = directory / "lock", directory / "log"
    result = LockStressResult(kind, filesystem_of(directory), processes)
    log = _Log(log_path, result)
    rng = random.Random(seed)
    workers: dict[int, subprocess.Popen] = {}
    reaping: list[subprocess.Popen] = []  # killed, reaped a round later (zombies meanwhile)

    def spawn() -> None:
        proc = _spawn(kind, lock_path, log_path, hold_ms, seed_source)
        workers[proc.pid] = proc
        result.spawned += 1

    def kill(pid: int) -> None:
        log.write(f"kill {pid}")
        proc = workers.pop(pid)
        proc.kill()
        reaping.append(proc)

    started = time.perf_counter()
    first: Optional[subprocess.Popen] = None
    try:
        # the stale lock: a first holder, killed inside (its hold is long: it cannot leave first)
        first = _spawn(kind, lock_path, log_path, 600_000.0, seed_source)
        workers[first.pid] = first
        result.spawned += 1
        for _ in range(first_holder_rounds):
            log.read()
            if first.pid in log.inside or first.poll() is not None:
                break
            time.sleep(round_seconds)
        if first.pid not in log.inside:
            raise RuntimeError(f"the first holder ({kind}) did not enter: {_stderr(first)}")
        kill(first.pid)
        for _ in range(processes):
            spawn()
        since_kill = still = 0
        inside_next = False
        after_last = 0
        while True:
            time.sleep(round_seconds)
            for proc in reaping:
                proc.wait()
                log.write(f"reaped {proc.pid}")
            reaping.clear()
            for pid, proc in list(workers.items()):
                if proc.poll() is not None:  # a worker that ended by itself: a bug in it; replaced
                    result.errors += 1
                    result.error_lines.append(f"worker {pid} ended with {proc.returncode}: {_stderr(proc)}")
                    del workers[pid]
                    spawn()
            entered = log.read()
            since_kill += entered
            after_last += entered if result.kills >= kills else 0
            still = 0 if entered or (log.inside & set(workers)) else still + 1
            if still >= stall_rounds:
                result.wedged += 1
                clear(kind, lock_path)
                still = 0
            if result.kills >= kills:
                if after_last >= processes:
                    break
                continue
            if since_kill < entries_per_kill:
                continue
            live_inside = sorted(log.inside & set(workers))
            if inside_next and live_inside:
                victim = live_inside[0]
            elif not inside_next:
                outside = sorted((set(workers) & log.seen) - set(live_inside))  # started: acquiring, or between
                victim = rng.choice(outside) if outside else 0
            else:
                continue
            if victim:
                kill(victim)
                spawn()
                since_kill = 0
                inside_next = not inside_next
    finally:
        log.write("stop")
        for proc in list(workers.values()) + reaping:
            proc.kill()
        for proc in list(workers.values()) + reaping:
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        if first is not None and first.stderr is not None:
            first.stderr.close()
        result.seconds = time.perf_counter() - started
        log.read()
        log.close()
        result.names_left = len([n for n in os.listdir(directory) if n not in ("log", "lock")])
    return result


def _stderr(proc: subprocess.Popen) -> str:
    if proc.poll() is None or proc.stderr is None:
        return "(still running)"
    text = proc.stderr.read().decode(errors="replace").strip().splitlines()
    return text[-1] if text else "(no output)"


# ---------------------------------------------------------------------------
# The worker (a process of its own: python -m envreplica.reliability.lock_stress worker KIND LOCK LOG HOLD_MS)


def _lock(kind: str, lock_path: str):
    """A context manager for one acquisition of ``kind`` at ``lock_path``, and the exceptions that mean busy."""
    if kind == "envreplica":
        from envreplica.impl.lock import LockBusy, projection_lock

        return (lambda: projection_lock(lock_path)), (LockBusy,)
    if kind in ("filelock", "softfilelock"):
        import filelock

        cls = filelock.FileLock if kind == "filelock" else filelock.SoftFileLock
        lock = cls(lock_path)
        return (lambda: lock), (filelock.Timeout,)
    if kind == "fasteners":
        import fasteners

        ipl = fasteners.InterProcessLock(lock_path)
        return (lambda: ipl), ()
    if kind == "portalocker":
        import portalocker

        plock = portalocker.Lock(lock_path)
        return (lambda: plock), (portalocker.exceptions.LockException,)
    if kind == "none":
        return contextlib.nullcontext, ()
    if kind == "mkdir":
        return (lambda: _MkdirLock(lock_path)), ()
    raise ValueError(f"no Python worker for {kind!r}")


class _MkdirLock:
    """The bare ``mkdir`` lock (the harness's check): ``mkdir`` until it succeeds, ``rmdir`` to release; no owner,
    no takeover, so a holder killed inside leaves it held for ever."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        while True:
            try:
                os.mkdir(self.path)
                return
            except FileExistsError:
                time.sleep(0.005)

    def __exit__(self, *exc: object) -> None:
        os.rmdir(self.path)


def worker_main(kind: str, lock_path: str, log: str, hold_ms: float) -> None:
    """Loop for ever: lock, ``enter``, hold, ``leave``, unlock, a short pause. Killed by the parent."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    pid = os.getpid()
    hold = hold_ms / 1000.0
    make, busy = _lock(kind, lock_path)
    rng = random.Random(pid)
    while True:
        try:
            with make():
                os.write(fd, f"enter {pid} {time.monotonic_ns()}\n".encode())
                time.sleep(hold)
                os.write(fd, f"leave {pid} {time.monotonic_ns()}\n".encode())
        except busy:
            os.write(fd, f"busy {pid} {time.monotonic_ns()}\n".encode())
        except Exception as error:  # noqa: BLE001 - reported to the parent, which counts it
            text = " ".join(f"{type(error).__name__}: {error}".split())
            os.write(fd, f"error {pid} {text}\n".encode())
            time.sleep(hold)
        time.sleep(rng.random() * hold)


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "worker":
        sys.exit("usage: python -m envreplica.reliability.lock_stress worker KIND LOCK LOG HOLD_MS")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    worker_main(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
