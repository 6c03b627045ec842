"""A migration lockstep trace as data: each move, both sides' outcomes and observations, as JSON lines and ITF.

Models: nothing of the protocol. ``move_to_json`` / ``move_from_json`` write a move (an action of
``model.migration`` and its ``Mode``) so that a trace replays (``run.replay_moves``); ``write_trace`` writes a
divergence's moves, one JSON object per line, each with what the model and the implementation answered and,
for the last move, both observations and their differences; given the run's shared part (``world``), it
writes the same trace as ITF beside it (``NAME.itf.json``: ``write_itf``), each state the model's after the
move (``checker.migration``'s variables), the move as ``mbt::actionTaken`` and ``mbt::nondetPicks`` (its
mode among them), both sides' answers, and the observations where they differ. ``format_moves`` is the
readable form a report prints.

Leaves out on purpose: the implementation's standard error beyond the last move's (it is in the outcome's
refusal code), and the implementation's own states (its observation says what is compared).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from envreplica.checker import itf
from envreplica.checker import migration as cm
from envreplica.conformance.migration.example import describe
from envreplica.conformance.migration.invocations import Mode
from envreplica.conformance.migration.sides import ModelSide, Move
from envreplica.model import migration as mm

def move_to_json(move: Move) -> dict[str, Any]:
    out = cm.action_json(move.action)
    if isinstance(move.action, mm.Invoke):
        out["mode"] = move.mode.value
    return out


def move_from_json(data: dict[str, Any]) -> Move:
    return Move(cm.action_from_json(data), Mode(data.get("mode", Mode.THREAD.value)))


def format_moves(moves: Sequence[Move], lines: Sequence[str], reason: str, header: str) -> str:
    """The readable trace: ``header``, one numbered line per move (``lines``: each move and what it answered),
    the reason."""
    out = [header]
    for i, line in enumerate(lines, 1):
        out.append(f"  #{i} {line}")
    out.append(f"  divergence: {reason}")
    return "\n".join(out)


def write_trace(out_dir: Path, name: str, moves: Sequence[Move], records: Sequence[dict[str, Any]],
                reason: str, meta: Optional[dict[str, Any]] = None, world: Any = None) -> Path:
    """``out_dir/name.jsonl``: a header line, then one line per move (the move, and ``records[i]``); with
    ``world`` (the run's shared part: its bounds, silent steps, what it allows), ``out_dir/name.itf.json`` too
    (``write_itf``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"trace": "envreplica migration lockstep", "reason": reason, **(meta or {})}) + "\n")
        for move, record in zip(moves, records):
            f.write(json.dumps({"move": move_to_json(move), **record}, sort_keys=True) + "\n")
    if world is not None:
        write_itf(itf_path_of(path), moves, records, reason, world, meta)
    return path


def itf_path_of(jsonl: Path) -> Path:
    """The ITF trace written beside a lockstep ``NAME.jsonl``: ``NAME.itf.json``."""
    return jsonl.with_name(jsonl.name[: -len(".jsonl")] + ".itf.json")


def write_itf(path: Path, moves: Sequence[Move], records: Sequence[dict[str, Any]], reason: str, world: Any,
              meta: Optional[dict[str, Any]] = None) -> Path:
    """The divergence as an ITF trace of protocol ``migration`` (``checker.itf``): state 0 the model's initial
    state, state i the model's after move i (taken again on a ``ModelSide`` of ``world``'s bounds, its silent
    steps with the step before them), with what each side answered (``model``, ``implementation``, ``agree``),
    the move (``mbt::actionTaken``, ``mbt::nondetPicks``; ``#meta.action``, ``#meta.step``) and, where the files
    differ, both observations (``#meta.modelObservation``, ``#meta.implementationObservation``)."""
    model = ModelSide(world.cfg, silent=world.silent, allows=getattr(world, "allows", None))
    none = itf.nondet_picks(cm.MIGRATION_PICKS, {})
    states: list[dict[str, Any]] = [{"#meta": {"index": 0}, **cm.state_vars(model.st), "model": "",
                                     "implementation": "", "agree": True, itf.ACTION_TAKEN: "init",
                                     itf.NONDET_PICKS: none}]
    for i, (move, record) in enumerate(zip(moves, records), 1):
        step = describe(move, model.st)
        model.apply(move.action)
        picks = cm.action_picks(move.action)
        if isinstance(move.action, mm.Invoke):
            picks["mode"] = move.mode.value
        smeta: dict[str, Any] = {"index": i, "action": move_to_json(move), "step": step}
        if record.get("model_state") is not None:
            smeta.update(modelObservation=record["model_state"], implementationObservation=record.get(
                "implementation_state"))
        states.append({"#meta": smeta, **cm.state_vars(model.st), "model": str(record.get("model", "")),
                       "implementation": str(record.get("implementation", "")),
                       "agree": record.get("model") == record.get("implementation") and "model_state" not in record,
                       itf.ACTION_TAKEN: move.action.kind,
                       itf.NONDET_PICKS: itf.nondet_picks(cm.MIGRATION_PICKS, picks)})
    doc = itf.document(cm.PROTOCOL, (*cm.MIGRATION_VARS, "model", "implementation", "agree"), states,
                          f"migration lockstep divergence: {reason}",
                          {"variant": getattr(getattr(world, "variant", None), "value", "fixed"),  # impl.paired's: fixed
                           "cfg": world.cfg.name, "fixes": sorted(f.value for f in world.cfg.fixes), **(meta or {})},
                          source="envreplica.conformance.migration")
    return itf.save(path, doc)


def read_moves(path: Path) -> list[Move]:
    """The moves of a trace ``write_trace`` wrote."""
    moves = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        if "move" in data:
            moves.append(move_from_json(data["move"]))
    return moves
