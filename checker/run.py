"""Run a bounds suite through the checker with the spec's properties and coverage.

Models: the glue between ``model.generate`` (the interface), ``spec.properties``
(what must hold) and ``checker.bfs`` (the search): one ``SuiteRun`` per
``Bounds``, the properties lifted from replica states to checker worlds.

``run(..., workers=N)`` and ``run(..., ray=ADDRESS)`` search in parallel
(``checker.parallel``, ``checker.ray_search``) with the same results; each
worker's model fills its own ``Coverage`` (``coverage_model``), merged after.

Leaves out on purpose: printing (``cli``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, TypedDict, Unpack

from envreplica.checker.bfs import Model, Result, StepView, check
from envreplica.checker.coverage import Coverage
from envreplica.model.generate import Bounds, World, enabled, init, next_state
from envreplica.model.state import State
from envreplica.model.symmetry import symmetry as symmetry_of
from envreplica.spec import properties as P


def _lift_state(prop: P.Property) -> P.Property:
    f = prop.check
    return P.Property(prop.name, lambda w: f(w.replica), prop.kind, prop.statement)


def _lift_step(prop: P.Property) -> P.Property:
    f = prop.check
    return P.Property(prop.name, lambda a, x, r, b: f(a.replica, x, r, b.replica), prop.kind, prop.statement)


def _lift_after(prop: P.Property) -> P.Property:
    f = prop.check
    if prop.after is None:
        raise ValueError(f"{prop.name}: a sometimes-after property without the step that must come first")

    def check(earlier: StepView, a: World, x: Any, r: Any, b: World) -> bool:
        pre, action, result, post = earlier
        return f((pre.replica, action, result, post.replica), a.replica, x, r, b.replica)

    return P.Property(prop.name, check, prop.kind, prop.statement, after=_lift_step(prop.after))


def lift(props: Iterable[P.Property]) -> tuple[P.Property, ...]:
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


def _replica(world: World) -> State:
    """What the properties read of a checker world: the replica."""
    return world.replica


def build_model(bounds: Bounds, coverage: Optional[Coverage] = None,
                invariants: Optional[Iterable[P.Property]] = None,
                step_properties: Optional[Iterable[P.Property]] = None,
                sometimes: Optional[Iterable[P.Property]] = None,
                lifted: bool = False, symmetry: bool = False) -> Model[World]:
    """The checker's model of ``bounds``: the spec's properties (or those given) read each world's replica.

    ``symmetry``: the visited set is keyed by each world's representative up to renaming of
    interchangeable names (``model.symmetry``; none when the bounds have no two such names).

    ``lifted``: each property wrapped to take worlds itself, for ``checker.reference.check_reference``
    (which has no ``Model.view``); ``check`` takes the spec's properties as they are.
    """
    coverage = coverage if coverage is not None else Coverage()
    cfg = bounds.model_config()
    wrap = lift if lifted else tuple
    sym = symmetry_of(bounds, cfg.prefix) if symmetry else None
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
        fingerprint=hash if sym is None else sym.fingerprint,
        canonical=None if sym is None else sym.canonical,
    )


def coverage_model(bounds: Bounds, symmetry: bool = False) -> tuple[Model[World], Coverage]:
    """The model of ``bounds`` and the ``Coverage`` its hooks fill: a worker's model in a parallel search."""
    coverage = Coverage()
    return build_model(bounds, coverage, symmetry=symmetry), coverage


class SearchOptions(TypedDict, total=False):
    """What ``run`` passes on to the search (``bfs.check``, ``check_parallel``, ``check_ray``)."""

    max_states: Optional[int]
    stop_on_first: bool


def run(bounds: Bounds, progress: Optional[Callable[[Result], None]] = None, symmetry: bool = False,
        workers: Optional[int] = None, ray: Optional[str] = None, **kwargs: Unpack[SearchOptions]) -> SuiteRun:
    """Check ``bounds``: ``checker.bfs`` in this process, or a parallel search with the same answers.

    ``workers`` > 1: ``checker.parallel`` on that many forked processes.
    ``ray``: ``checker.ray_search`` with ``workers`` actors (default: one per
    CPU of the cluster) on the Ray cluster at that address (``"auto"``,
    ``HOST:PORT``), or ``"local"`` for a Ray started in this process (kept for
    the next run, shut down at exit). The workers' coverage is merged into one.
    """
    if ray is None and (workers is None or workers <= 1):
        model, coverage = coverage_model(bounds, symmetry)
        result = check(model, max_depth=bounds.max_depth, progress=progress, **kwargs)
        return SuiteRun(bounds, result, coverage)
    factory = functools.partial(coverage_model, bounds, symmetry)
    coverages: list[Coverage] = []
    if ray is not None:
        from envreplica.checker.ray_search import check_ray

        result = check_ray(factory, workers, address=None if ray == "local" else ray, max_depth=bounds.max_depth,
                           progress=progress, extras=coverages, shutdown=False, **kwargs)
    else:
        from envreplica.checker.parallel import check_parallel

        assert workers is not None  # ray is None: past the early return, workers > 1
        result = check_parallel(factory, workers, max_depth=bounds.max_depth, progress=progress, extras=coverages,
                                **kwargs)
    coverage = Coverage()
    for part in coverages:
        coverage.merge(part)
    return SuiteRun(bounds, result, coverage)
