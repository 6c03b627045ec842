"""Progress of a command's long stages: a row each on a terminal, a heartbeat line every few seconds elsewhere.

``Stages`` shows the ``Tick`` s (``checker.progress``) the model checks and the locksteps report while they
run. Each stage is named (``with stages.stage("lockstep") as progress: run(..., progress=progress)``) and
shown one of three ways:

* on a terminal, a row of rich's ``Progress`` per running stage: units done (of the budget, when there is
  one), the rate, the time left where the budget is known, the time since the stage began; the row goes
  when the stage ends (the stage prints its own result);
* elsewhere (a pipe, a CI log), one plain line per stage every ``HEARTBEAT_SECONDS`` (a constant),
  ``envreplica check: lockstep: 230/800 examples, 6,900 steps, 370 steps/s, about 45 s left (19 s)``: the
  first once the stage has run that long, so a stage shorter than it prints none;
* with ``quiet``, nothing.

The gate's model checks run in a second process (``cli.main._BackgroundModelCheck``): there ``PipeStages``
writes each tick as a JSON line to a pipe, and the gate's ``Stages`` shows them beside its own stages
(``relay``). Rates and times are measured here, on the clock ``Stages`` is given (a test passes a fake one and
an interval of 0; no verdict of the run depends on them).

The stages tick often (after each step, move, history or replay; a search every 0.2 s), and a line follows a
tick once the interval has passed; the command line's ``Stages`` also has a timer (``timer``), which prints a
running stage's line when it has not ticked for the interval (``starting``, before its first tick: a stage
that prepares for seconds, as Hypothesis and a scratch replica do before the lockstep's first step).

Left out: a stage's own results (each stage prints them when it ends).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import IO, Callable, Iterator, Optional, Union

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from envreplica.checker.progress import ProgressHook, Tick

__all__ = ["HEARTBEAT_SECONDS", "Board", "Stages", "PipeStages", "describe", "relay", "open_pipe_stages"]

#: Seconds between two heartbeat lines of one stage when the output is not a terminal (and before the first).
HEARTBEAT_SECONDS = 4.0
#: Seconds between two ticks ``PipeStages`` sends of one stage (the gate's background process; the last of a
#: stage is always sent).
PIPE_SECONDS = 0.2
#: Seconds between two looks of the heartbeat timer (``Stages(timer=True)``) at the running stages.
TIMER_SECONDS = 1.0


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``."""
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


def describe(tick: Tick, elapsed: float) -> str:
    """What a tick says, ``elapsed`` seconds into its stage: ``230/800 examples, 6,900 steps, 370 steps/s,
    about 45 s left`` (the time left once 5 % of the budget is done; past the budget, as Hypothesis goes when it
    discards examples, the count alone); a wait (unit ``s``): ``waiting for ...: 3 s of 5 s``."""
    if tick.unit == "s":
        return f"{tick.note}: {tick.done} s" + (f" of {tick.total} s" if tick.total is not None else "")
    budget = tick.total if tick.total is not None and tick.done <= tick.total else None  # past it: no budget
    counts = f"{tick.done:,}/{budget:,} {tick.unit}" if budget is not None else f"{tick.done:,} {tick.unit}"
    parts = [counts]
    if tick.work is not None:
        parts.append(f"{tick.work:,} {tick.work_unit}")
    if elapsed > 0:
        rate, unit = (tick.work, tick.work_unit) if tick.work is not None else (tick.done, tick.unit)
        parts.append(f"{rate / elapsed:,.{0 if rate / elapsed >= 10 else 1}f} {unit}/s")
        if budget is not None and max(1, budget // 20) <= tick.done < budget:  # from 5 % done on
            parts.append(f"about {_duration(elapsed * (budget - tick.done) / tick.done)} left")
    if tick.note:
        parts.append(tick.note)
    return ", ".join(parts)


@dataclass
class _Row:
    """A running stage: when it began, when its last heartbeat line was printed, its row on a terminal, its last
    tick (None: none yet)."""

    began: float
    last_line: float
    task: Optional[TaskID] = None
    tick: Optional[Tick] = None


class Stages:
    """The progress of a command's stages (see the module). ``live``: rows on a terminal (default: whether
    ``console`` is one); ``prefix`` begins each heartbeat line (``envreplica check``); ``interval``: seconds
    between two of a stage's heartbeat lines (default ``HEARTBEAT_SECONDS``, read when made); ``timer``: a thread
    that prints the heartbeat line of a stage that has not ticked for ``interval`` seconds (its last tick again,
    or ``starting``), so that a CI log hears from every running stage every interval whatever it does (the
    command line's; a test calls ``beat`` instead, on its fake clock)."""

    def __init__(self, console: Console, prefix: str, *, live: Optional[bool] = None, quiet: bool = False,
                 interval: Optional[float] = None, clock: Callable[[], float] = time.monotonic,
                 timer: bool = False) -> None:
        self.console = console
        self.prefix = prefix
        self.quiet = quiet
        self.live = (console.is_terminal if live is None else live) and not quiet
        self.interval = HEARTBEAT_SECONDS if interval is None else interval
        self.clock = clock
        self._rows: dict[str, _Row] = {}
        self._lock = threading.RLock()  # the relay thread and the main thread report alike
        self._closed = False
        self._progress: Optional[Progress] = None
        if self.live:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=30),
                                      TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                                      transient=True)
            self._progress.start()
        self._stop = threading.Event()
        self._timer: Optional[threading.Thread] = None
        if timer and not self.live and not quiet and self.interval > 0:
            self._timer = threading.Thread(target=self._beat_every, name="progress-heartbeat", daemon=True)
            self._timer.start()

    def _beat_every(self) -> None:
        while not self._stop.wait(min(TIMER_SECONDS, self.interval)):
            self.beat()

    def beat(self) -> None:
        """A heartbeat line for each running stage that has printed none for ``interval`` seconds (the timer's)."""
        with self._lock:
            if self.quiet or self._closed or self._progress is not None:
                return
            now = self.clock()
            for name, row in self._rows.items():
                if now - row.last_line >= self.interval:
                    self._line(name, row, now)

    def _line(self, name: str, row: _Row, now: float) -> None:
        row.last_line = now
        said = describe(row.tick, now - row.began) if row.tick is not None else "starting"
        self.console.print(f"{self.prefix}: {name}: {said} ({_duration(now - row.began)})", markup=False,
                           highlight=False, soft_wrap=True)

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """No more rows or lines (idempotent): before a command prints its verdict, which is its last line."""
        self._stop.set()
        with self._lock:
            self._closed = True
            self._rows.clear()
            if self._progress is not None:
                self._progress.stop()
                self._progress = None

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[ProgressHook]:
        """A stage called ``name`` runs in the block; the hook to give it."""
        self.begin(name)
        try:
            yield lambda tick: self.update(name, tick)
        finally:
            self.end(name)

    def begin(self, name: str) -> None:
        """Stage ``name`` begins now (its first heartbeat line once it has run ``interval`` seconds)."""
        with self._lock:
            if self.quiet or self._closed or name in self._rows:
                return
            now = self.clock()
            task = self._progress.add_task(name, total=None, info="starting") if self._progress else None
            self._rows[name] = _Row(began=now, last_line=now, task=task)

    def update(self, name: str, tick: Tick) -> None:
        """Stage ``name`` has got as far as ``tick``."""
        with self._lock:
            if self.quiet or self._closed:
                return
            if name not in self._rows:
                self.begin(name)
            row = self._rows[name]
            row.tick = tick
            now = self.clock()
            if self._progress is not None and row.task is not None:
                self._progress.update(row.task, total=tick.total, completed=tick.done,
                                      info=describe(tick, now - row.began))
            elif now - row.last_line >= self.interval:  # a stage may tick at every step: the text only when shown
                self._line(name, row, now)

    def end(self, name: str) -> None:
        """Stage ``name`` has ended: its row goes (it prints its own result)."""
        with self._lock:
            row = self._rows.pop(name, None)
            if row is not None and row.task is not None and self._progress is not None:
                self._progress.remove_task(row.task)


class PipeStages:
    """The stages of the gate's background process, each tick sent as one JSON line to ``stream`` (a pipe
    ``relay`` reads in the gate's process), at most one per stage every ``interval`` seconds but the last and
    each that begins a phase (a note other than the last sent: the liveness check after the search)."""

    def __init__(self, stream: IO[str], *, interval: float = PIPE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.interval = interval
        self.clock = clock
        self._sent: dict[str, float] = {}
        self._held: dict[str, Tick] = {}
        self._notes: dict[str, str] = {}  # the note of each stage's last tick sent
        self._lock = threading.Lock()

    def _send(self, message: dict) -> None:
        try:
            self.stream.write(json.dumps(message, separators=(",", ":")) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # the gate stopped listening (it ended): progress is not a result
            pass

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[ProgressHook]:
        with self._lock:
            self._send({"stage": name, "begin": True})
        try:
            yield lambda tick: self.update(name, tick)
        finally:
            self.end(name)

    def update(self, name: str, tick: Tick) -> None:
        with self._lock:
            now = self.clock()
            phase = self._notes.get(name)
            if now - self._sent.get(name, float("-inf")) < self.interval and tick.note == phase:
                self._held[name] = tick  # a new phase (its note) is sent at once: it may tick no more for long
                return
            self._sent[name], self._notes[name] = now, tick.note
            self._held.pop(name, None)
            self._send({"stage": name, "tick": tick.as_json()})

    def end(self, name: str) -> None:
        with self._lock:
            held = self._held.pop(name, None)
            if held is not None:
                self._send({"stage": name, "tick": held.as_json()})
            self._sent.pop(name, None)
            self._notes.pop(name, None)
            self._send({"stage": name, "end": True})

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.close()


#: Where a stage reports: shown here (``Stages``), or sent to the gate's process (``PipeStages``).
Board = Union[Stages, PipeStages]


def relay(lines: IO[str], stages: Stages, stop: Optional[threading.Event] = None) -> None:
    """Show on ``stages`` each line ``PipeStages`` wrote to ``lines``, until its end or ``stop`` is set; a line
    that is not one of its messages is skipped (progress is never a result)."""
    with contextlib.closing(lines):
        for line in lines:
            if stop is not None and stop.is_set():
                break
            try:
                message = json.loads(line)
                name = message["stage"]
                if not isinstance(name, str):
                    continue
                if message.get("begin"):
                    stages.begin(name)
                elif message.get("end"):
                    stages.end(name)
                elif isinstance(message.get("tick"), dict):
                    stages.update(name, Tick.from_json(message["tick"]))
            except (ValueError, KeyError, TypeError):
                continue


def open_pipe_stages(fd: int) -> PipeStages:
    """The ``PipeStages`` of the gate's background process, writing to the pipe its parent passed as ``fd``."""
    return PipeStages(os.fdopen(fd, "w", encoding="utf-8", buffering=1))
