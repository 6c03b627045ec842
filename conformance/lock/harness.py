"""The lock harness's own words: between the lockstep and its paused lock users (what a paused process reports,
what it is told), what any real side reports after a move (``Event``, ``Observation``: threads, processes or an
adapter, read into these), and how the implementation's names read as the model's. (The lock adapter protocol's
words are ``protocol``'s.)

A process of the lockstep (``processes.Process``) runs ``impl.lock`` with a ``Calls`` that stops before each
step the model takes as a move of its own (``paused_at``) and reports it (``Paused``); it is told ``GO`` (take it,
and run on to the next such step), ``DIE`` (SIGKILL: it takes no call again), or, inside the operation,
``Leave`` (end the operation with an ``Effect``). Between two stops it reports nothing: the steps the model takes
silently with the one before (``model.lock.silent_steps``) and those it leaves out (``NOT_MODELLED``) run on.
When its call ends it reports ``Ended`` (the answer, read from what the call returned or raised: ``answer_of``).

Names: an ``impl.lock.Step``'s value is the model's ``Pc`` value (``pc_of``); an ``impl.lock.Call``'s value is
``spec.lock.Call``'s. The nonces are the harness's (``nonce_for``): their order among tickets of one seq is the
order of their draws, ties broken by the order they were made, so the model's ticket ranks follow from them.

Leaves out on purpose: a wire format. The lock users are threads of the harness (``processes``) or processes
forked from it (``forked``), so the words are Python objects, on a queue or pickled over a socket pair, not JSON
lines (the adapter's, docs/protocol.md section 12, are ``protocol``'s).
"""

from __future__ import annotations

import re
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
    busy_named: bool = True  # False: the implementation does not say whom it waited for (the seed's does not)


@dataclass(frozen=True)
class Killed:
    """The process is dead (it took no call after the order)."""


Report = Union[Paused, Inside, Ended, Killed]


#: ``Event.at`` of a process inside the operation.
INSIDE = "inside"


@dataclass(frozen=True)
class Event:
    """What a real side reports of one process after a move (``Start``, ``Step``, ``Leave``), in the model's words,
    whatever drives it (threads of the harness, or an adapter: ``sides``): the steps it took in the move
    (``taken``: the model's step names, ``Pc`` values, the move's own first, then the silent ones; a step the model
    leaves out is not listed), the call each made (``calls``: ``spec.lock.Call`` values, None where the side does
    not say), where it stopped (``at``: the step it is paused before, ``INSIDE``, or None: its call ended), the
    call's end (``ended``), and the name the step it is paused before acts on (``path``: a base name beside the
    lock, when the side says; a ticket's ``mkdir`` needs it)."""

    taken: tuple[str, ...]
    calls: tuple[Optional[str], ...]
    at: Optional[str]
    ended: Optional[Ended] = None
    path: Optional[str] = None


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


@dataclass(frozen=True)
class Observation:
    """What both sides show after a move: who is inside the operation (live processes, by slot); the lock (the
    CLAIM design's: its owner file's record, ``(instance, pid, start, ns)``, None when ``L`` is absent or empty;
    the seed's: ``(None, pid, start, ns)`` for an ``owner.json`` with a record, ``EMPTY_OWNER`` for an empty one,
    ``NO_OWNER`` for a lock directory with no owner file); the tickets (``(seq, place among its seq, slot, pid,
    start, ns, instance)``, sorted); the temps (their instances); the seed's directories moved aside
    (``L.stale-<uuid>``: each as ``lock`` says, sorted); and the names the model has no word for (``others``)."""

    inside: frozenset[int]
    lock: Optional[tuple[object, ...]]
    tickets: tuple[tuple[object, ...], ...]
    temps: frozenset[object]
    others: tuple[str, ...]
    moved: tuple[tuple[object, ...], ...] = ()


#: ``Observation.lock`` of a lock directory holding an empty ``owner.json`` (created, not yet written), and of one
#: holding no owner file at all (the seed's).
EMPTY_OWNER: tuple[object, ...] = ("empty owner file",)
NO_OWNER: tuple[object, ...] = ("no owner file",)


#: A ticket's name (``impl.lock``'s ``L.t.<seq>.<nonce>.<pid>.<start>.<pidns>``).
TICKET = re.compile(r".*\.t\.(\d{8,})\.([0-9a-f]{16})\.(\d+)\.(\d+)\.(\d+)")


def ranked(tickets: list[tuple[int, str, int, int, int]],
           instances: dict[str, tuple[int, int]]) -> tuple[tuple[object, ...], ...]:
    """Tickets seen as ``(seq, nonce, pid, start, ns)`` in the observation's words: ``(seq, place among its seq,
    slot, pid, start, ns, instance)``, sorted (a nonce no call of the example drew is ``("?", nonce)``)."""
    out = []
    for seq, nonce, pid, start, ns in tickets:
        rank = sum(1 for s, n, *_ in tickets if s == seq and n < nonce)
        instance = instances.get(nonce, ("?", nonce))
        out.append((seq, rank, instance[0], pid, start, ns, instance))
    return tuple(sorted(out, key=repr))
