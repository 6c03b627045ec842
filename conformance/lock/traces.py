"""A lock lockstep divergence as data: JSON lines and ITF.

Models: ``write_trace`` writes a divergence's moves, one JSON object per line (the move, what the model and the
implementation answered, both observations when they differ), and the same trace as ITF beside it
(``NAME.itf.json``, protocol ``lock``: each state the model's after the move in ``checker.lock``'s variables, the
move as ``mbt::actionTaken`` and ``mbt::nondetPicks``, ``model``, ``implementation`` and ``agree``, as
``report.lock`` reads a lockstep divergence); ``read_moves`` reads the moves back. The finding a divergence is:
``findings``.

Leaves out on purpose: the implementation's own states (its observation says what is compared).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from envreplica.conformance.lock import harness
from envreplica.conformance.lock import protocol
from envreplica.conformance.lock.example import Divergence, Move, describe
from envreplica.model import lock as ml
from envreplica.spec import lock as sl


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


__all__ = ["read_moves", "write_trace"]
