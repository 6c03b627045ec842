"""A lock lockstep divergence as data (JSON lines and ITF), and the finding it is.

Models: ``write_trace`` writes a divergence's moves, one JSON object per line (the move, what the model and the
implementation answered, both observations when they differ), and the same trace as ITF beside it
(``NAME.itf.json``, protocol ``lock``: each state the model's after the move in ``checker.lock``'s variables, the
move as ``mbt::actionTaken`` and ``mbt::nondetPicks``, ``model``, ``implementation`` and ``agree``, as
``report.lock`` reads a lockstep divergence). ``finding_of`` names the finding a divergence is:

* under ``fixed``, an implementation of the CLAIM design that parts from the model: the fix whose absence makes
  the model answer as the implementation did, move by move (the recorded answers and observations replayed
  against the model of ``fixed`` less that one fix: ``RecordedSide``), names the finding
  (``checker.lock.finding_of``);
* under ``fixed``, an implementation of the seed's design that agreed step by step until the model broke a
  property: the fix that, added to the seed's steps alone, takes the same moves without breaking it names the
  finding; when no one fix does (its steps differ), the findings that break that property are named as the
  candidates (``checker.lock.findings_breaking``).

Leaves out on purpose: the implementation's own states (its observation says what is compared).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence

from envreplica.conformance.lock import harness
from envreplica.conformance.lock import protocol
from envreplica.conformance.lock.example import Divergence, Example, Move, NotEnabled, Record, describe
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


# -- the trace


def _event_text(event: Optional[harness.Event]) -> str:
    if event is None:
        return ""
    taken = ", ".join(event.taken) or "no step"
    if event.ended is not None:
        e = event.ended
        return f"{taken}; the call answers {e.answer.value if e.answer is not None else e.error}"
    return f"{taken}; then {'inside the operation' if event.at == harness.INSIDE else 'at ' + repr(event.at)}"


def _model_text(st_after: ml.LockState, action: ml.Action, result: Optional[ml.Result], pc: Optional[ml.Pc]) -> str:
    if result is None:
        return ""
    if isinstance(result, (sl.Crashed, sl.EnvDone)):
        return ""
    slot = getattr(action, "slot", None)
    taken = pc.value if pc is not None else ("leave" if isinstance(action, ml.Leave) else "no step")
    if isinstance(result, sl.Ended):
        return f"{taken}; the call answers {result.answer.value}"
    proc = st_after.procs[slot] if slot is not None else None
    where = "inside the operation" if proc is not None and proc.pc is ml.Pc.LEAVE else \
        f"at {proc.pc.value!r}" if proc is not None else ""
    return f"{taken}; then {where}"


def _obs_json(obs: Optional[harness.Observation]) -> Any:
    return None if obs is None else protocol.observation_json(obs, {})


def write_trace(out_dir: Path, name: str, divergence: Divergence, meta: dict[str, Any]) -> tuple[Path, Path]:
    """``out_dir/name.jsonl`` and ``out_dir/name.itf.json`` (see the module); their paths."""
    from envreplica.checker import itf
    from envreplica.checker import lock as cl

    cfg = divergence.cfg
    assert cfg is not None
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{name}.jsonl"
    st = ml.init(cfg)
    none = itf.nondet_picks(cl.LOCK_PICKS, {})
    states: list[dict[str, Any]] = [{"#meta": {"index": 0}, **cl.state_vars(st), "model": "", "implementation": "",
                                     "agree": True, itf.ACTION_TAKEN: "init", itf.NONDET_PICKS: none}]
    lines = [json.dumps({"trace": "envreplica lock lockstep", "reason": divergence.reason, **meta})]
    last = len(divergence.moves)
    for i, (move, record) in enumerate(zip(divergence.moves, divergence.records), 1):
        step = describe(move, st)
        pc = st.procs[move.action.slot].pc if isinstance(move.action, ml.Step) else None
        try:
            st, _ = ml.next_state(cfg, st, move.action)
        except Exception:  # noqa: BLE001 - a move the model does not take from here: the trace stops there
            break
        model = _model_text(st, move.action, record.model, pc)
        impl = _event_text(record.event) if record.event is not None else (model if i < last else "")
        observed = record.observed
        agree = i < last
        smeta: dict[str, Any] = {"index": i, "action": cl.action_json(move.action), "step": step}
        line: dict[str, Any] = {"move": cl.action_json(move.action), "draw": move.draw, "step": step,
                                "model": model, "implementation": impl}
        if observed is not None and observed[0] != observed[1]:
            smeta.update(modelObservation=_obs_json(observed[0]), implementationObservation=_obs_json(observed[1]))
            line.update(model_state=_obs_json(observed[0]), implementation_state=_obs_json(observed[1]))
        if i == last:
            impl = impl or divergence.reason
            line["divergence"] = divergence.reason
        lines.append(json.dumps(line, sort_keys=True))
        states.append({"#meta": smeta, **cl.state_vars(st), "model": model, "implementation": impl, "agree": agree,
                       itf.ACTION_TAKEN: move.action.kind,
                       itf.NONDET_PICKS: itf.nondet_picks(cl.LOCK_PICKS, cl.action_picks(move.action))})
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = itf.document(cl.PROTOCOL, (*cl.LOCK_VARS, "model", "implementation", "agree"), states,
                       f"lock lockstep divergence: {divergence.reason}",
                       {"variant": meta.get("variant", "fixed"), "cfg": cfg.name, "bounds": cfg.name,
                        "fixes": sorted(f.value for f in cfg.fixes), **meta},
                       source="envreplica.conformance.lock")
    itf_path = itf.save(out_dir / f"{name}.itf.json", doc)
    return jsonl, itf_path


def read_moves(path: Path) -> list[Move]:
    """The moves of a trace ``write_trace`` wrote."""
    from envreplica.checker import lock as cl

    moves = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        if "move" in data:
            moves.append(Move(cl.action_from_json(data["move"]), int(data.get("draw", 0))))
    return moves


__all__ = ["RecordedSide", "agrees_without", "finding_of", "read_moves", "write_trace"]
