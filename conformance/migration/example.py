"""One example of the migration lockstep: both sides from the start, each move taken by both and compared.

Models: the lockstep's judgement. ``Example.play(move)`` skips a move the model does not enable (so a trace
with moves deleted still replays), takes it on the model (``ModelSide``) and for real (``RealSide``), then
compares what each answered (``Outcome``: the step taken, the exit status and refusal code, the write's
outcome) and what each holds (``Observation``: every store's version, data, fence and backup, the
publications, the lock, the live invocations); it also checks ``spec.migration``'s invariants and step
properties on the model's own move (the model under faults is not what the checker's suites explore). The
first difference raises ``Divergence``, with the kind of difference (``key``: what minimization keeps) and
the trace so far. ``replay_moves`` plays a trace on fresh sides (the run's minimization and ``findings`` replay
through it).

``Shared`` is what every example of a run shares: the template, the runners (zygote, thread streams), the
foreign writer process, the scratch directories (a tmpfs one when there is one, and one where the immutable
flag works, for examples that make a store read-only as root). Each scratch directory it makes names this
process (``conformance.scratch``), and it first removes those a dead process left (killed, it cleans up
nothing: ``reap_leftovers``).

Leaves out on purpose: the properties' "sometimes" (the checker's), and the model's ``inputs`` (no
counterpart).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

from envreplica.conformance import scratch as S
from envreplica.conformance.migration.coverage import MigrationCoverage
from envreplica.conformance.migration.disk import Disk, Template, read_only_works
from envreplica.conformance.migration.invocations import Mode, Runners
from envreplica.conformance.migration.observe import Outcome
from envreplica.conformance.migration.sides import (LOCKSTEP_BOUNDS, SILENT, ModelSide, Move, RealSide, WriterProcess,
                                                    allowed)
from envreplica.model import migration as mm
from envreplica.spec import migration as spec


class Divergence(AssertionError):
    """The implementation parted from the model (or the model broke a property) at the last move."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key  # what kind of difference: kept by minimization ("outcome:step", "state:run.data", ...)
        self.reason = reason


def _tmpfs() -> Optional[Path]:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


#: The names of ``Shared``'s scratch directories: the stores (in the temporary directory and on tmpfs), and the
#: step sockets (a short name: a socket's path holds at most 107 bytes).
SCRATCH_PREFIX = "envreplica-migration-"
SOCKETS_PREFIX = "erm-"


def reap_leftovers() -> list[Path]:
    """Remove the scratch directories of ``Shared``s whose process is gone (``conformance.scratch.reap``), read-only
    stores in them included; the ones removed."""
    temp, fast = Path(tempfile.gettempdir()), _tmpfs()
    return S.reap(SCRATCH_PREFIX, [temp] + ([fast] if fast else [])) + S.reap(SOCKETS_PREFIX, [temp])


class RealSideLike(Protocol):
    """One example's real side, as ``Example`` takes it: ``RealSide``, or ``adapter_side.AdapterSide``."""

    def apply(self, move: Move) -> Outcome: ...

    def observe(self) -> Any: ...

    def message(self, pid: int) -> str: ...

    def close(self) -> None: ...


class World(Protocol):
    """What every example of one run shares, as ``Example`` and ``run`` ask it: ``Shared`` (impl.paired here), or
    ``adapter_side.AdapterShared`` (an implementation behind an adapter)."""

    cfg: mm.MigrationBounds  # the model's bounds the implementation is held to
    silent: frozenset[mm.Pc]  # the model's steps the implementation does not pause at
    compare_status: bool  # exit statuses are the contract's, and compared
    check_properties: bool  # the model's own properties are checked on its every move
    unavailable: list[str]  # coverage items this run cannot do, and why
    simplest_mode: Optional[Mode]  # the way of running minimization prefers (None: leave it)
    read_only_problem: Optional[str]  # why stores cannot be made read-only here (None: they can)

    def swarm_available(self, kind: str) -> bool: ...

    def allows(self, action: mm.Action) -> bool: ...

    def mode_name(self, mode: Mode) -> str: ...

    def real_side(self, read_only: bool) -> RealSideLike: ...

    def close(self) -> None: ...


class Shared:
    """What every example of one run shares (see the module): a ``World`` of real stores and invocations."""

    def __init__(self, scratch: Optional[Path] = None) -> None:
        self.own_scratch = scratch is None
        if scratch is None:
            reap_leftovers()
        base = S.owned_dir(SCRATCH_PREFIX) if scratch is None else scratch
        base.mkdir(parents=True, exist_ok=True)
        self.disk_root = base
        fast = _tmpfs()
        self.fast_root = S.owned_dir(SCRATCH_PREFIX, fast) if fast and scratch is None else base
        # sockets want a short path (108 bytes): a directory of their own in the temporary directory
        self.runners = Runners(S.owned_dir(SOCKETS_PREFIX))
        self.template = Template(self.fast_root / "template")
        self.writer = WriterProcess(self.runners.scratch)
        self.read_only_problem = read_only_works(self.disk_root)
        self.examples = 0
        self.memo: dict[str, str] = {}
        # what run and Example ask of any real side's shared part (AdapterShared answers the same)
        self.cfg = LOCKSTEP_BOUNDS
        self.silent = SILENT
        self.compare_status = True
        self.check_properties = True  # the model's own properties checked on its every move
        self.unavailable: list[str] = []
        self.simplest_mode: Optional[Mode] = Mode.THREAD

    def swarm_available(self, kind: str) -> bool:
        return kind != "read-only" or self.read_only_problem is None

    def allows(self, action: mm.Action) -> bool:
        return True

    def mode_name(self, mode: Mode) -> str:
        """How an invocation of ``mode`` really runs (coverage's word)."""
        return mode.value

    def real_side(self, read_only: bool) -> RealSide:
        return RealSide(self.disk(read_only), self.runners, self.writer)

    def disk(self, read_only: bool) -> Disk:
        """A fresh example directory: on tmpfs, or (``read_only``: it may make a store read-only, and this is
        root) where the immutable flag works."""
        self.examples += 1
        root = self.disk_root if read_only and os.geteuid() == 0 else self.fast_root
        return Disk(root / f"example-{self.examples}", self.template, self.memo)

    def close(self) -> None:
        self.runners.close()
        self.writer.close()
        S.remove_tree(self.runners.scratch)
        if self.own_scratch:
            S.remove_tree(self.disk_root)
        if self.fast_root != self.disk_root:
            S.remove_tree(self.fast_root)


@dataclass
class Example:
    """Both sides of one example, and what happened so far."""

    shared: World
    read_only: bool = True  # this example may make a store read-only
    cfg: Optional[mm.MigrationBounds] = None  # None: the shared part's (``Shared.cfg``)
    check_properties: Optional[bool] = None  # None: the shared part's (``Shared.check_properties``)
    moves: list[Move] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # per move: what both answered
    records: list[dict[str, Any]] = field(default_factory=list)
    coverage: MigrationCoverage = field(default_factory=MigrationCoverage)
    #: told the moves taken so far after each move both sides took (the run's progress), when given
    on_move: Optional[Callable[[int], None]] = None

    def __post_init__(self) -> None:
        if self.cfg is None:
            self.cfg = self.shared.cfg
        if self.check_properties is None:
            self.check_properties = self.shared.check_properties
        self.model = ModelSide(self.cfg, silent=self.shared.silent, allows=self.shared.allows)
        self.real = self.shared.real_side(self.read_only)

    def enabled(self) -> list[mm.Action]:
        return self.model.enabled()

    def play(self, move: Move) -> bool:
        """Take ``move`` on both sides and compare (``Divergence`` on a difference); False when not enabled."""
        if not self.model.is_enabled(move.action) or not allowed(self.model.st, move.action):
            return False
        pre = self.model.st
        described = describe(move, pre)
        expected = self.model.apply(move.action)
        got = self.real.apply(move)
        self.coverage.record(pre, move.action, self.shared.mode_name(move.mode), expected)
        if not self.shared.compare_status:  # an implementation whose exit statuses are not the contract's
            expected, got = replace(expected, status=None), replace(got, status=None)
        self.moves.append(move)
        self.lines.append(f"{described}: {expected}" if expected == got
                          else f"{described}: model {expected} | implementation {got}")
        self.records.append({"model": str(expected), "implementation": str(got)})
        if self.on_move is not None:
            self.on_move(len(self.moves))
        if expected != got:
            key = f"outcome:{expected.kind}"
            detail = ""
            if got.kind == "exit" and (got.status not in (0, None) or got.code):
                pid = move.action.pid if isinstance(move.action, mm.Step) else -1
                detail = f" ({_first_line(self.real.message(pid))})"
            raise Divergence(key, f"{described}: the model {expected}, the implementation {got}{detail}")
        if self.check_properties:
            self._check_model(pre, move.action)
        mine, theirs = self.model.observe(), self.real.observe()
        if mine != theirs:
            diffs = mine.differences(theirs)
            self.records[-1].update(model_state=mine.to_json(), implementation_state=theirs.to_json())
            key = "state:" + ",".join(sorted(d.split(":", 1)[0] for d in diffs))
            raise Divergence(key, f"after {described}: the files differ from the model's (model | "
                                  f"implementation): {'; '.join(diffs)}")
        return True

    def _check_model(self, pre: mm.MigrationState, action: mm.Action) -> None:
        for before, act, result, after in self._last_transitions(pre):
            for prop in spec.STEP_PROPERTIES:
                if not prop.check(before, act, result, after):
                    raise Divergence(f"model:{prop.name}", f"the model itself breaks {prop.name} "
                                                           f"({prop.statement})")
        for prop in spec.INVARIANTS:
            if not prop.check(self.model.st):
                raise Divergence(f"model:{prop.name}", f"the model itself breaks {prop.name} ({prop.statement})")

    def _last_transitions(self, pre: mm.MigrationState) -> list[tuple[Any, Any, Any, Any]]:
        out = []
        for transition in reversed(self.model.history):
            out.append(transition)
            if transition[0] is pre:
                break
        return out

    def close(self) -> None:
        self.real.close()


def describe(move: Move, st: mm.MigrationState) -> str:
    """One line for a move in ``st``: the invocation and its step, the writer's move, the fault (and the mode)."""
    text = mm.describe_action(move.action, st)
    return f"{text} [{move.mode.value}]" if isinstance(move.action, mm.Invoke) else text


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


@contextlib.contextmanager
def _example(shared: World, moves: Sequence[Move], cfg: Optional[mm.MigrationBounds] = None) -> Iterator[Example]:
    example = Example(shared, read_only=any(isinstance(m.action, mm.ReadOnly) for m in moves), cfg=cfg)
    try:
        yield example
    finally:
        example.close()


def replay_moves(shared: World, moves: Sequence[Move],
                 cfg: Optional[mm.MigrationBounds] = None) -> tuple[Optional[Divergence], Example]:
    """Replay ``moves`` on fresh sides (skipping those the model does not enable; ``cfg``: the model's bounds,
    default the run's); the divergence, if any, and the example (closed)."""
    with _example(shared, moves, cfg) as example:
        try:
            for move in moves:
                example.play(move)
        except Divergence as e:
            return e, example
    return None, example
