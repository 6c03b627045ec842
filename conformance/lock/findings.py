"""The finding a lock lockstep divergence is (docs/findings.md), in one line.

Models: ``finding_of`` names it:

* under ``fixed``, an implementation of the CLAIM design that parts from the model: the fix whose absence makes
  the model answer as the implementation did, move by move (the recorded answers and observations replayed
  against the model of ``fixed`` less that one fix: ``RecordedSide``, ``agrees_without``), names the finding
  (``checker.lock.finding_of``);
* under ``fixed``, an implementation of the seed's design that agreed step by step until the model broke a
  property: the fix that, added to the seed's steps alone, takes the same moves without breaking it names the
  finding; when no one fix does (its steps differ), the findings that break that property are named as the
  candidates (``checker.lock.findings_breaking``).

Leaves out on purpose: a divergence under another variant, and one that needs two fixes left out at once (no one
finding explains it: None).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from envreplica.conformance.lock import harness
from envreplica.conformance.lock.example import Divergence, Example, Move, NotEnabled, Record
from envreplica.model import lock as ml
from envreplica.spec import lock as sl


class Unrecorded(Exception):
    """A replay asked the recorded side for more than the trace holds."""


class RecordedSide:
    """A real side that answers from a divergence's records (its events and observations), in order: the
    implementation's answers, replayed against another model."""

    def __init__(self, records: Sequence[Record], first: harness.Observation) -> None:
        self.records = list(records)
        self.first = first
        self.at = -1  # the move being answered (-1: before the first)

    def _event(self) -> harness.Event:
        self.at += 1
        if self.at >= len(self.records) or self.records[self.at].event is None:
            raise Unrecorded(f"move {self.at + 1} has no recorded event")
        return self.records[self.at].event  # type: ignore[return-value]

    def start(self, slot: int) -> harness.Event:
        return self._event()

    def step(self, slot: int, nonce: Optional[str]) -> harness.Event:
        return self._event()

    def leave(self, slot: int, effect: sl.Effect) -> harness.Event:
        return self._event()

    def kill(self, slot: int, ns: int, pid: int, zombie: bool) -> None:
        self.at += 1

    def reap(self, slot: int, ns: int, pid: int) -> None:
        self.at += 1

    def reuse(self, ns: int, pid: int) -> None:
        self.at += 1

    def observe(self) -> harness.Observation:
        if self.at < 0:
            return self.first
        if self.at >= len(self.records) or self.records[self.at].observed is None:
            raise Unrecorded(f"move {self.at + 1} has no recorded observation")
        return self.records[self.at].observed[1]  # type: ignore[index]

    def close(self) -> None:
        pass


def agrees_without(cfg: ml.LockBounds, divergence: Divergence) -> bool:
    """Whether the recorded implementation answers as the model of ``cfg`` on every move of ``divergence``."""
    from envreplica.conformance.lock.example import observe_model

    first = observe_model(cfg, ml.init(cfg))
    example = Example(cfg, lambda c, f, i: RecordedSide(divergence.records, first), properties=False)
    try:
        for move in divergence.moves:
            example.play(move)
    except (Divergence, NotEnabled, Unrecorded, AssertionError, KeyError, StopIteration):
        return False
    finally:
        example.close()
    return True


def _breaks_with(cfg: ml.LockBounds, moves: Sequence[Move], prop: str) -> Optional[bool]:
    """Whether the model of ``cfg`` breaks property ``prop`` on ``moves`` (None: it does not take them)."""
    st = ml.init(cfg)
    props = [p for p in (*sl.INVARIANTS, *sl.STEP_PROPERTIES) if p.name == prop]
    for move in moves:
        if not any(a == move.action for a in ml.enabled(cfg, st)):
            return None
        pre = st
        st, result = ml.next_state(cfg, st, move.action)
        for p in props:
            if p.kind == "invariant" and not p.check(st):
                return True
            if p.kind != "invariant" and (p.actions is None or move.action.kind in p.actions) and \
                    (p.results is None or isinstance(result, p.results)) and not p.check(pre, move.action, result, st):
                return True
    return False


def finding_of(divergence: Divergence, variant: ml.Variant) -> Optional[str]:
    """The finding ``divergence`` is, in one line (see the module); None when none explains it."""
    from envreplica.checker import lock as cl

    cfg = divergence.cfg
    if cfg is None or variant is not ml.Variant.FIXED:
        return None
    if divergence.key == "property" and not cfg.fixes:  # the seed's steps, a property broken on them
        named = []
        for fix in ml.Fix:
            if _breaks_with(replace(cfg, fixes=frozenset({fix})), divergence.moves, divergence.prop) is False:
                named.append(fix)
        if len(named) == 1:
            f = next(f for f in cl.FINDINGS if f.fix is named[0])
            return f"{f.id}: {f.title} (the seed's steps with {f.fix.value} take these moves without breaking " \
                   f"{divergence.prop}: docs/findings.md#{f.id.lower()})"
        candidates = cl.findings_breaking(divergence.prop)
        if len(candidates) == 1:
            f = candidates[0]
            return f"{f.id}: {f.title} (the one finding that breaks {divergence.prop}: " \
                   f"docs/findings.md#{f.id.lower()})"
        if candidates:
            return f"one of {', '.join(f.id for f in candidates)} (the findings that break {divergence.prop}; no " \
                   f"one fix alone takes these moves: docs/findings.md)"
        return None
    for fix in sorted(cfg.fixes, key=lambda f: f.value):
        if agrees_without(replace(cfg, fixes=cfg.fixes - {fix}), divergence):
            found = next((x for x in cl.FINDINGS if x.fix is fix), None)
            if found is not None:
                return f"{found.id}: {found.title} (the implementation answers as the model without {fix.value}: " \
                       f"docs/findings.md#{found.id.lower()})"
    return None


__all__ = ["RecordedSide", "agrees_without", "finding_of"]
