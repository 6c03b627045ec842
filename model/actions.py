"""The actions of the model: one frozen value per operation, and the step that runs it.

Models: every operation a host can see (begin, page, delivery, commit, close,
restart, a value-store read answering, the store going away) as data, and
``step``: run one action on a state, turning invalid/corrupt errors into a
``Failed`` result whose next state is what the failing operation had
committed.

Leaves out on purpose: which actions are enabled (``model.generate``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from envreplica.model import replica
from envreplica.model.state import ModelConfig, State
from envreplica.model.store import Answer
from envreplica.spec.domain import (
    ApplyFrame,
    BeginFrame,
    CommitFrame,
    Failed,
    PageFrame,
    ReplicaError,
)
from envreplica.spec.gate import Trigger


class ActionKind(str, enum.Enum):
    """The kinds of action, for coverage and swarm choices."""

    BEGIN = "begin"
    PAGE = "apply_page"
    DELIVERY = "apply_delivery"
    COMMIT = "complete"
    CLOSE = "close_gate"
    RESTART = "restart"
    RESUME = "resume"
    STORE_OFF = "store_off"


@dataclass(frozen=True, slots=True)
class Begin:
    frame: BeginFrame
    kept_epochs: tuple[int, ...]
    org_id: str
    kind = ActionKind.BEGIN


@dataclass(frozen=True, slots=True)
class Page:
    frame: PageFrame
    kind = ActionKind.PAGE


@dataclass(frozen=True, slots=True)
class Deliver:
    frame: ApplyFrame
    kind = ActionKind.DELIVERY


@dataclass(frozen=True, slots=True)
class Commit:
    frame: CommitFrame
    kind = ActionKind.COMMIT


@dataclass(frozen=True, slots=True)
class CloseGate:
    kind = ActionKind.CLOSE


@dataclass(frozen=True, slots=True)
class Restart:
    kind = ActionKind.RESTART


@dataclass(frozen=True, slots=True)
class Resume:
    """The value-store read of in-flight operation ``slot`` answers ``answer``."""

    slot: int
    answer: Answer
    kind = ActionKind.RESUME


@dataclass(frozen=True, slots=True)
class StoreOff:
    kind = ActionKind.STORE_OFF


Action = Union[Begin, Page, Deliver, Commit, CloseGate, Restart, Resume, StoreOff]

#: The gate trigger an action fires when it succeeds.
TRIGGER_OF = {
    ActionKind.BEGIN: Trigger.BEGIN,
    ActionKind.COMMIT: Trigger.COMPLETE,
    ActionKind.CLOSE: Trigger.CLOSE_GATE,
    ActionKind.RESTART: Trigger.RESTART,
}


def step(cfg: ModelConfig, st: State, action: Action):
    """Run ``action``; returns ``(next state, result)``. Errors become ``Failed`` results."""
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
    except ReplicaError as error:
        committed: Optional[State] = error.committed
        return (st if committed is None else committed), Failed(error.wire_type, error.message)
    raise TypeError(f"unknown action {action!r}")


def fired_trigger(action: Action, result) -> Optional[Trigger]:
    """The gate trigger ``action`` fired, given its result (refusals and errors fire none)."""
    trigger = TRIGGER_OF.get(action.kind)
    if trigger is None or not getattr(result, "ok", False):
        return None
    return trigger
