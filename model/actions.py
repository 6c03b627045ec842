"""The actions of the model: one frozen value per operation, and the step that runs it.

Models: every operation a host can see (begin, page, delivery, commit, close,
restart, a value-store read answering, the store going away, a task reading
the served view) as data, and
``step``: run one action on a state, turning invalid/corrupt errors into a
``Failed`` result whose next state is what the failing operation had
committed.

Crashes: ``CrashAfter(action, k)`` runs a page, delivery or resumed read and
kills the process right after that run's k-th write commit (counted as
``model.replica`` marks them, i.e. as docs/protocol.md section 6 says):
the state is what the committed prefix left, then ``restart``; the result is
``Crashed(k)``. A run that ends or suspends (``Pending``) before its k-th
commit returns exactly what the plain action returns. ``run_until_crash`` is
the same with the count of commits made, so a driver can carry a
``crashAfterCommit`` budget across ``Pending`` and ``Resume``. A crash at a
value-store read (between an operation's transactions, with nothing of its
own in flight) is ``Restart`` while the operation is ``Pending``.

Leaves out on purpose: which actions are enabled (``model.generate``), and
crashes inside ``begin``, ``complete`` and ``close_gate``: each is one
transaction, so a crash around it is ``Restart`` before or after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union, cast

from envreplica.model import replica
from envreplica.model.state import ModelConfig, State
from envreplica.model.store import Answer
from envreplica.spec.domain import (
    ActionKind,
    ApplyFrame,
    ApplyResult,
    BeginFrame,
    BeginResult,
    CommitFrame,
    CommitResult,
    Crashed,
    Diagnosis,
    Done,
    Failed,
    PageFrame,
    PageResult,
    Pending,
    ReplicaError,
    Snapshot,
)
from envreplica.spec.frozen import Frozen
from envreplica.spec.gate import TRIGGER_OF, fired_trigger  # noqa: F401 (re-exported: the gate's own)


@dataclass(frozen=True, slots=True)
class Begin(Frozen):
    frame: BeginFrame
    kept_epochs: tuple[int, ...]
    org_id: str
    @property
    def kind(self) -> ActionKind:
        return ActionKind.BEGIN


@dataclass(frozen=True, slots=True)
class Page(Frozen):
    frame: PageFrame
    @property
    def kind(self) -> ActionKind:
        return ActionKind.PAGE


@dataclass(frozen=True, slots=True)
class Deliver(Frozen):
    frame: ApplyFrame
    @property
    def kind(self) -> ActionKind:
        return ActionKind.DELIVERY


@dataclass(frozen=True, slots=True)
class Commit(Frozen):
    frame: CommitFrame
    @property
    def kind(self) -> ActionKind:
        return ActionKind.COMMIT


@dataclass(frozen=True, slots=True)
class CloseGate(Frozen):
    @property
    def kind(self) -> ActionKind:
        return ActionKind.CLOSE


@dataclass(frozen=True, slots=True)
class Restart(Frozen):
    @property
    def kind(self) -> ActionKind:
        return ActionKind.RESTART


@dataclass(frozen=True, slots=True)
class Resume(Frozen):
    """The value-store read of in-flight operation ``slot`` answers ``answer``."""

    slot: int
    answer: Answer
    @property
    def kind(self) -> ActionKind:
        return ActionKind.RESUME


@dataclass(frozen=True, slots=True)
class StoreOff(Frozen):
    @property
    def kind(self) -> ActionKind:
        return ActionKind.STORE_OFF


@dataclass(frozen=True, slots=True)
class Read(Frozen):
    """A task reads the served view of ``project_ids`` (``readProjectEnvReplicaSnapshot``): the state stays."""

    project_ids: tuple[str, ...]  # the projects asked for, in the task's order
    @property
    def kind(self) -> ActionKind:
        return ActionKind.READ


#: The actions a crash can cut: each may make several write commits.
CRASHABLE = (Page, Deliver, Resume)


@dataclass(frozen=True, slots=True)
class CrashAfter(Frozen):
    """``action`` (a Page, Deliver or Resume) runs; the process dies right after its ``commit``-th write commit."""

    action: Union[Page, Deliver, Resume]
    commit: int  # 1 = the run's first write commit
    @property
    def kind(self) -> ActionKind:
        return ActionKind.CRASH

    def __post_init__(self) -> None:
        if not isinstance(self.action, CRASHABLE):
            raise TypeError(f"only a page, delivery or resume can crash after a commit, not {self.action!r}")
        if isinstance(self.commit, bool) or not isinstance(self.commit, int) or self.commit < 1:
            raise ValueError(f"crash commit must be an int >= 1, not {self.commit!r}")


Action = Union[Begin, Page, Deliver, Commit, CloseGate, Restart, Resume, StoreOff, Read, CrashAfter]
#: What a step answers: the operation's result, ``Pending``, ``Failed`` (an error) or ``Crashed``.
StepResult = Union[BeginResult, PageResult, ApplyResult, CommitResult, Done, Pending, Snapshot, Diagnosis, Failed,
                   Crashed]



def step(cfg: ModelConfig, st: State, action: Action) -> tuple[State, StepResult]:
    """Run ``action``; returns ``(next state, result)``. Errors become ``Failed`` results."""
    if isinstance(action, CrashAfter):
        st, result, _ = run_until_crash(cfg, st, action.action, action.commit)
        return st, result
    try:
        if isinstance(action, Page):
            return replica.apply_page(cfg, st, action.frame)
        if isinstance(action, Deliver):
            return replica.apply_delivery(cfg, st, action.frame)
        if isinstance(action, Resume):
            return replica.resume(cfg, st, action.slot, action.answer)
        if isinstance(action, Begin):
            return replica.begin(cfg, st, action.frame, action.kept_epochs, action.org_id)
        if isinstance(action, Commit):
            return replica.complete(cfg, st, action.frame)
        if isinstance(action, CloseGate):
            return replica.close_gate(cfg, st)
        if isinstance(action, Restart):
            return replica.restart(cfg, st)
        if isinstance(action, StoreOff):
            return replica.store_off(cfg, st)
        if isinstance(action, Read):
            return replica.read(cfg, st, action.project_ids)
    except ReplicaError as error:
        committed = cast(Optional[State], error.committed)  # model.replica marks it with a State
        return (st if committed is None else committed), Failed(error.wire_type, error.message)
    raise TypeError(f"unknown action {action!r}")


def run_until_crash(
    cfg: ModelConfig, st: State, action: Union[Page, Deliver, Resume], commits_left: int
) -> tuple[State, StepResult, int]:
    """Run ``action`` (Page, Deliver or Resume) and crash right after its ``commits_left``-th write commit.

    Returns ``(next state, result, commits made)``. On a crash: the state is
    ``restart`` of what the committed prefix left, the result
    ``Crashed(commits_left)`` (counted within this run: a driver that carried
    a budget across ``Pending`` reports its own total), and commits made is
    ``commits_left``. Otherwise (the run ended or suspended first): exactly
    the plain action's state and result, and the commits it made.
    """
    if not isinstance(action, CRASHABLE):
        raise TypeError(f"only a page, delivery or resume can crash after a commit, not {action!r}")
    if isinstance(commits_left, bool) or not isinstance(commits_left, int) or commits_left < 1:
        raise ValueError(f"commits_left must be an int >= 1, not {commits_left!r}")
    with replica.counting_commits(limit=commits_left) as budget:
        try:
            nxt, result = step(cfg, st, action)
        except replica.CrashPoint as crash:
            restarted, _ = replica.restart(cfg, crash.state)
            return restarted, Crashed(crash.commit), crash.commit
    return nxt, result, budget.made


def run_recording_commits(cfg: ModelConfig, st: State, action: Action) -> tuple[State, StepResult, tuple[State, ...]]:
    """Run ``action`` as ``step`` does; also return the state after each of its write commits, in order.

    ``CrashAfter(action, k)`` from ``st`` leads to ``restart`` of the k-th of
    them: one run gives the plain successor and every crash point's.
    """
    with replica.counting_commits(record=True) as budget:
        nxt, result = step(cfg, st, action)
    assert budget.prefixes is not None  # record=True keeps them
    return nxt, result, tuple(budget.prefixes)


