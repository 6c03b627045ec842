"""A migration lockstep trace as data: each move, both sides' outcomes and observations, as JSON lines.

Models: nothing of the protocol. ``move_to_json`` / ``move_from_json`` write a move (an action of
``model.migration`` and its ``Mode``) so that a trace replays (``run.replay_moves``); ``write_trace`` writes a
divergence's moves, one JSON object per line, each with what the model and the implementation answered and,
for the last move, both observations and their differences; ``format_moves`` is the readable form a report
prints.

Leaves out on purpose: the implementation's standard error beyond the last move's (it is in the outcome's
refusal code), and the model's full state (its observation says what is compared).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from envreplica.conformance.migration.invocations import Mode
from envreplica.conformance.migration.sides import Move
from envreplica.model import migration as mm

_ACTIONS: dict[str, type] = {cls.kind: cls for cls in (
    mm.Invoke, mm.Step, mm.Crash, mm.Connect, mm.Write, mm.Disconnect, mm.Lock, mm.Unlock, mm.ReadOnly,
    mm.Writable, mm.Edit, mm.MoveAway, mm.Repair)}


def move_to_json(move: Move) -> dict[str, Any]:
    a = move.action
    out: dict[str, Any] = {"kind": a.kind}
    for name, value in vars(a).items():
        out[name] = value.value if hasattr(value, "value") else value
    if isinstance(a, mm.Invoke):
        out["mode"] = move.mode.value
    return out


def move_from_json(data: dict[str, Any]) -> Move:
    cls = _ACTIONS[data["kind"]]
    args: dict[str, Any] = {}
    for name, value in data.items():
        if name in ("kind", "mode"):
            continue
        if name == "role":
            value = mm.Role(value)
        elif name == "fault":
            value = mm.InputFault(value)
        elif name == "doc":
            value = mm.Doc(value)
        args[name] = value
    return Move(cls(**args), Mode(data.get("mode", Mode.THREAD.value)))


def format_moves(moves: Sequence[Move], lines: Sequence[str], reason: str, header: str) -> str:
    """The readable trace: ``header``, one numbered line per move (``lines``: each move and what it answered),
    the reason."""
    out = [header]
    for i, line in enumerate(lines, 1):
        out.append(f"  #{i} {line}")
    out.append(f"  divergence: {reason}")
    return "\n".join(out)


def write_trace(out_dir: Path, name: str, moves: Sequence[Move], records: Sequence[dict[str, Any]],
                reason: str, meta: Optional[dict[str, Any]] = None) -> Path:
    """``out_dir/name.jsonl``: a header line, then one line per move (the move, and ``records[i]``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"trace": "envreplica migration lockstep", "reason": reason, **(meta or {})}) + "\n")
        for move, record in zip(moves, records):
            f.write(json.dumps({"move": move_to_json(move), **record}, sort_keys=True) + "\n")
    return path


def read_moves(path: Path) -> list[Move]:
    """The moves of a trace ``write_trace`` wrote."""
    moves = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        if "move" in data:
            moves.append(move_from_json(data["move"]))
    return moves
