"""Run a bounds suite through the checker with the spec's properties and coverage.

Models: the glue between ``model.generate`` (the interface), ``spec.properties``
(what must hold) and ``checker.bfs`` (the search): one ``SuiteRun`` per
``Bounds``, the properties lifted from replica states to checker worlds.

Leaves out on purpose: printing (``cli``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from envreplica.checker.bfs import Model, Result, check
from envreplica.checker.coverage import Coverage
from envreplica.model.generate import Bounds, enabled, init, next_state
from envreplica.spec import properties as P


def _lift_state(prop: P.Property) -> P.Property:
    f = prop.check
    return P.Property(prop.name, lambda w: f(w.replica), prop.kind, prop.statement)


def _lift_step(prop: P.Property) -> P.Property:
    f = prop.check
    return P.Property(prop.name, lambda a, x, r, b: f(a.replica, x, r, b.replica), prop.kind, prop.statement)


def _lift_after(prop: P.Property) -> P.Property:
    f = prop.check

    def check(earlier, a, x, r, b):
        pre, action, result, post = earlier
        return f((pre.replica, action, result, post.replica), a.replica, x, r, b.replica)

    return P.Property(prop.name, check, prop.kind, prop.statement, after=_lift_step(prop.after))


def lift(props):
    return tuple(
        _lift_after(p) if p.kind == "sometimes-after"
        else _lift_step(p) if p.kind in ("step", "sometimes-step")
        else _lift_state(p)
        for p in props
    )


@dataclass
class SuiteRun:
    bounds: Bounds
    result: Result
    coverage: Coverage


def _replica(world):
    """What the properties read of a checker world: the replica."""
    return world.replica


def build_model(bounds: Bounds, coverage: Optional[Coverage] = None, invariants=None, step_properties=None,
                sometimes=None, lifted: bool = False) -> Model:
    """The checker's model of ``bounds``: the spec's properties (or those given) read each world's replica.

    ``lifted``: each property wrapped to take worlds itself, for ``checker.reference.check_reference``
    (which has no ``Model.view``); ``check`` takes the spec's properties as they are.
    """
    coverage = coverage if coverage is not None else Coverage()
    cfg = bounds.model_config()
    wrap = lift if lifted else tuple
    return Model(
        init=lambda: init(bounds),
        enabled=lambda w: enabled(bounds, w, cfg),
        next=lambda w, a: next_state(bounds, w, a, cfg),
        invariants=wrap(P.INVARIANTS if invariants is None else invariants),
        step_properties=wrap(P.STEP_PROPERTIES if step_properties is None else step_properties),
        sometimes=wrap(P.SOMETIMES if sometimes is None else sometimes),
        observe_state=lambda w: coverage.observe_state(w.replica),
        observe_step=lambda a, x, r, b: coverage.observe_step(a.replica, x, r, b.replica),
        view=None if lifted else _replica,
    )


def run(bounds: Bounds, progress: Optional[Callable[[Result], None]] = None, **kwargs) -> SuiteRun:
    coverage = Coverage()
    model = build_model(bounds, coverage)
    result = check(model, max_depth=bounds.max_depth, progress=progress, **kwargs)
    return SuiteRun(bounds, result, coverage)
