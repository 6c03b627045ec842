"""Where a counterexample's property breaks: the step a reviewer should see first.

Models: the trace's actions replayed on the model (``checker.itf.replay``)
and the violated property (``#meta.violated``, a ``spec.properties`` name)
evaluated along the replayed states. An invariant breaks at the first state
that violates it; a step property at the first transition that violates it
(the step whose row enters that state). The step is found, not assumed: a
trace that goes on past the violation is still marked where it first fails.

Leaves out on purpose: traces the model does not reproduce (another model
version, an edited file) and properties that are not the replica's (a
"sometimes" property, an unknown name). Those are left unmarked, and the
note says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

#: What a property kind breaks at, as the page says it.
INVARIANT = "invariant"
STEP = "step"


@dataclass(frozen=True)
class Break:
    """The step at which the trace's property first fails."""

    step: int  # the trace's state index: the row of the step that enters the violating state (or takes the transition)
    prop: str  # the property's name
    kind: str  # INVARIANT or STEP
    note: str  # the sentence shown above the steps


@dataclass(frozen=True)
class Unmarked:
    """Why no step is marked."""

    note: str  # the sentence shown above the steps


def find(doc: dict[str, Any], meta: dict[str, Any]) -> Union[Break, Unmarked, None]:
    """The step at which ``#meta.violated`` first fails along ``doc``; None when the trace names no property."""
    from envreplica.checker import itf
    from envreplica.spec import properties as P

    name = meta.get("violated")
    if not isinstance(name, str) or not name:
        return None
    try:
        prop = P.by_name(name)
    except KeyError:
        return Unmarked(f"{name} is not one of this model's properties: no step is marked")
    if prop.kind not in (INVARIANT, STEP):
        return Unmarked(f"{name} is a {prop.kind} property, which no single step breaks: no step is marked")
    try:
        replayed = itf.replay(doc)
    except (KeyError, TypeError, ValueError) as error:
        return Unmarked(f"the trace's actions could not be replayed on the model ({type(error).__name__}: "
                        f"{error}): no step is marked")
    if replayed.diverged_at is not None:
        return Unmarked(f"replayed on this model, the trace's state #{replayed.diverged_at} differs "
                        f"({', '.join(replayed.differing_vars)}): no step is marked")
    at = _first_failure(prop, replayed.steps)
    if at is None:
        return Unmarked(f"replayed on this model, no step of the trace breaks {name}: no step is marked")
    statement = prop.statement
    if prop.kind == INVARIANT:
        where = "the initial state violates" if at == 0 else f"the state after step #{at} is the first to violate"
        return Break(at, name, INVARIANT, f"{where} the invariant {name}: {statement}")
    action = replayed.steps[at][0]
    kind = getattr(getattr(action, "kind", None), "value", type(action).__name__)
    return Break(at, name, STEP, f"step #{at} ({kind}) breaks the step property {name}: {statement}")


def _first_failure(prop: Any, steps: list[tuple[Any, Any, Any]]) -> Optional[int]:
    """The first state index (an invariant) or transition (a step property) along ``steps`` where ``prop`` fails."""
    if prop.kind == INVARIANT:
        return next((i for i, (_, _, state) in enumerate(steps) if not prop.check(state)), None)
    for i in range(1, len(steps)):
        action, result, post = steps[i]
        if action is not None and not prop.check(steps[i - 1][2], action, result, post):
            return i
    return None
