"""The words between the lock lockstep and its processes: what a paused process reports, what it is told, and
how the implementation's names read as the model's.

A process of the lockstep (``processes.Process``) runs ``impl.lock`` with a ``Calls`` that stops before each
step the model takes as a move of its own (``paused_at``) and reports it (``Paused``); it is told ``GO`` (take it,
and run on to the next such step), ``DIE`` (SIGKILL: it takes no call again), or, inside the operation,
``Leave`` (end the operation with an ``Effect``). Between two stops it reports nothing: the steps the model takes
silently with the one before (``model.lock.silent_steps``) and those it leaves out (``NOT_MODELLED``) run on.
When its call ends it reports ``Ended`` (the answer, read from what the call returned or raised: ``answer_of``).

Names: an ``impl.lock.Step``'s value is the model's ``Pc`` value (``pc_of``); an ``impl.lock.Call``'s value is
``spec.lock.Call``'s. The nonces are the harness's (``nonce_for``): their order among tickets of one seq is the
order of their draws, ties broken by the order they were made, so the model's ticket ranks follow from them.

Leaves out on purpose: a wire format. The processes are threads of the harness (``processes``), so the words are
Python objects on a queue, not JSON lines on a pipe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from envreplica.impl import lock as il
from envreplica.model import lock as ml
from envreplica.spec.lock import Answer, Call, Effect

#: Steps of ``impl.lock`` the model leaves out: taken with the step before them, never paused at.
NOT_MODELLED = frozenset({il.Step.INSPECT, il.Step.CLAIM_UNLINK, il.Step.RELEASE_UNLINK})
#: ``LEAVE`` is the model's ``Leave`` action (not a ``Step``): taken when the operation ends, never paused at.
BY_LEAVE = frozenset({il.Step.LEAVE})
#: The first PID namespace's inode number in the harness's world (namespace ``n`` is ``PIDNS_BASE + n``).
PIDNS_BASE = 4026531836


def pc_of(step: il.Step) -> Optional[ml.Pc]:
    """The model's step of the same name (None: not modelled)."""
    return None if step in NOT_MODELLED else ml.Pc(step.value)


def paused_at(cfg: ml.LockBounds) -> frozenset[il.Step]:
    """The steps a process stops before, under ``cfg``: every modelled step the model does not take silently."""
    silent = {pc.value for pc in ml.silent_steps(cfg)}
    return frozenset(s for s in il.Step if s not in NOT_MODELLED | BY_LEAVE and s.value not in silent)


def call_of(step: il.Step) -> Call:
    """The spec's call a step makes."""
    return Call(step.call.value)


def nonce_for(draw: int, made: int) -> str:
    """The 16-hex nonce of the ``made``-th call of an example whose order draw is ``draw`` (8 hex digits each)."""
    return f"{draw:08x}{made:08x}"


# -- what the harness tells a process


@dataclass(frozen=True)
class Go:
    """Take the step you stopped before (``nonce``: the nonce your call draws next, when it draws one)."""

    nonce: Optional[str] = None


@dataclass(frozen=True)
class Die:
    """SIGKILL."""


@dataclass(frozen=True)
class Leave:
    """End the operation having done ``effect``."""

    effect: Effect


@dataclass(frozen=True)
class StartCall:
    """Call the lock (once more)."""


Order = Union[Go, Die, Leave, StartCall]
GO, DIE, START = Go(), Die(), StartCall()


# -- what a process reports


@dataclass(frozen=True)
class Taken:
    """One step a process took: its name, the ``Calls`` methods it ran (their ``Call``), and its outcome."""

    step: il.Step
    calls: tuple[str, ...]
    outcome: str


@dataclass(frozen=True)
class Paused:
    """Stopped before ``step`` (``args``: its arguments)."""

    step: il.Step
    args: tuple[object, ...]


@dataclass(frozen=True)
class Inside:
    """Inside the operation, waiting to be told how it ends."""


@dataclass(frozen=True)
class Ended:
    """The call ended: its ``answer`` (None: an answer no ``Answer`` names, ``error`` says what), whom it waited
    for when busy (``busy_nonce``, and whether it judged that one: ``busy_judged``)."""

    answer: Optional[Answer]
    error: str = ""
    busy_nonce: Optional[str] = None
    busy_judged: bool = True


@dataclass(frozen=True)
class Killed:
    """The process is dead (it took no call after the order)."""


Report = Union[Paused, Inside, Ended, Killed]


class OperationUnchanged(Exception):
    """The operation failed having changed nothing (``Effect.UNCHANGED``)."""


class OperationCommitted(Exception):
    """The operation failed having committed (``Effect.COMMITTED``)."""


def answer_of(error: Optional[BaseException]) -> Ended:
    """What a call's caller got: its return (``error`` None), or what it raised."""
    if error is None:
        return Ended(Answer.OK)
    if isinstance(error, (OperationUnchanged, OperationCommitted)):
        if getattr(error, "lock_lost", None) is not None:
            return Ended(Answer.LOST)
        return Ended(Answer.FAILED_UNCHANGED if isinstance(error, OperationUnchanged) else Answer.FAILED_COMMITTED)
    if isinstance(error, il.LockLost):
        return Ended(Answer.LOST)
    if isinstance(error, il.LockBusy):
        return Ended(Answer.BUSY, busy_nonce=error.owner.nonce,
                     busy_judged=error.judgement is not il.Judgement.OTHER_NAMESPACE)
    return Ended(None, error=f"{type(error).__name__}: {error}")
