"""Counterexamples as ITF traces (the Apalache/Quint Informal Trace Format), and their replay.

Models: a run as ``{"#meta", "vars", "states"}``. Each state holds the
replica's tables as ITF values (records, ``#map``, ``#set``, ``#bigint``,
variants ``{"tag", "value"}``), the gate as a plain string under ``gate`` (what
``envreplica diagram --trace`` reads), the action's kind under
``mbt::actionTaken`` (Quint's convention), and, in the state's ``#meta``, the
action and its result as wire JSON. Replay parses those actions back with
``spec.wire`` and reruns them on the model: no state decoder is needed,
because replay compares re-encoded states.

Leaves out on purpose: ``#unserializable`` values (there are none) and the
cloud model's own state on replay (cloud changes do not touch the replica).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from envreplica.checker.bfs import Step as CheckerStep
from envreplica.model.actions import (
    CRASHABLE,
    Action,
    Begin,
    CloseGate,
    Commit,
    CrashAfter,
    Deliver,
    Page,
    Read,
    Restart,
    Resume,
    StoreOff,
    step,
)
from envreplica.model.fmap import FMap
from envreplica.model.generate import CloudChange, Move, World
from envreplica.model.state import INITIAL, DeliveryInFlight, ModelConfig, PageInFlight, State, Variant
from envreplica.model.store import Found, Missing, Raises
from envreplica.spec import wire
from envreplica.spec.domain import BindOmit, BindWithhold, LegacyRef, StagedRef

FORMAT = "ITF"
#: Union members, encoded as variants so a reader can tell them apart.
VARIANTS = (StagedRef, LegacyRef, BindOmit, BindWithhold, PageInFlight, DeliveryInFlight, Found, Missing, Raises)
SAFE = 2**53 - 1
REPLICA_VARS = ("authority", "projects", "records", "values", "stage_projects", "stage_records",
                "stage_values", "receipts", "inflight", "store_on")

#: A JSON object as ``json`` parses it (its values are any JSON).
JsonObject = dict[str, Any]
#: What a trace's step may hold: a replica action, or a cloud change (the model's only other action).
TraceAction = Union[Action, CloudChange]


def to_itf(value: Any) -> Any:
    """One Python value of the model as an ITF value."""
    if value is None:
        return {"tag": "None", "value": {"#tup": []}}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -SAFE <= value <= SAFE else {"#bigint": str(value)}
    if isinstance(value, (FMap, dict)):
        items = sorted(value.items(), key=lambda kv: repr(kv[0]))
        return {"#map": [[to_itf(k), to_itf(v)] for k, v in items]}
    if isinstance(value, (frozenset, set)):
        return {"#set": sorted((to_itf(v) for v in value), key=repr)}
    if isinstance(value, (tuple, list)):
        return [to_itf(v) for v in value]
    if dataclasses.is_dataclass(value):
        record = {f.name: to_itf(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, VARIANTS):
            return {"tag": type(value).__name__, "value": record}
        return record
    raise TypeError(f"no ITF encoding for {type(value).__name__}")


def action_json(action: TraceAction) -> JsonObject:
    """An action as wire JSON (the adapter's request shapes, plus model-only ops).

    A ``CrashAfter`` is its action's request with ``crashAfterCommit``
    (docs/protocol.md section 6), also on a ``resume``.
    """
    if isinstance(action, CrashAfter):
        return {**action_json(action.action), "crashAfterCommit": action.commit}
    if isinstance(action, Begin):
        return {"op": "begin", "frame": wire.encode(action.frame),
                "keptPolicyEpochs": list(action.kept_epochs), "orgId": action.org_id}
    if isinstance(action, Page):
        return {"op": "page", "frame": wire.encode(action.frame)}
    if isinstance(action, Deliver):
        return {"op": "delivery", "frame": wire.encode(action.frame)}
    if isinstance(action, Commit):
        return {"op": "commit", "frame": wire.encode(action.frame)}
    if isinstance(action, CloseGate):
        return {"op": "close"}
    if isinstance(action, Restart):
        return {"op": "restart"}
    if isinstance(action, StoreOff):
        return {"op": "store.off"}
    if isinstance(action, Read):
        return {"op": "snapshot", "projectIds": list(action.project_ids)}
    if isinstance(action, Resume):
        a = action.answer
        answer = ({"found": a.raw, "version": a.version} if isinstance(a, Found)
                  else {"missing": True} if isinstance(a, Missing) else {"raises": True})
        return {"op": "resume", "slot": action.slot, "answer": answer}
    if isinstance(action, CloudChange):
        return {"op": "cloud.change", "projectId": action.project, "key": action.key, "move": action.move.value}
    raise TypeError(f"unknown action {action!r}")


def parse_action(data: JsonObject) -> TraceAction:
    """The inverse of ``action_json``."""
    if "crashAfterCommit" in data:
        inner = {k: v for k, v in data.items() if k != "crashAfterCommit"}
        cut = parse_action(inner)
        if not isinstance(cut, CRASHABLE):  # what CrashAfter itself raises
            raise TypeError(f"only a page, delivery or resume can crash after a commit, not {cut!r}")
        return CrashAfter(cut, data["crashAfterCommit"])
    op = data.get("op")
    if op == "begin":
        return Begin(wire.parse_begin(data["frame"]), wire.parse_policy_epochs(data["keptPolicyEpochs"]),
                     wire.parse_org_id(data["orgId"]))
    if op == "page":
        return Page(wire.parse_page(data["frame"]))
    if op == "delivery":
        return Deliver(wire.parse_apply(data["frame"]))
    if op == "commit":
        return Commit(wire.parse_commit(data["frame"]))
    if op == "close":
        return CloseGate()
    if op == "restart":
        return Restart()
    if op == "store.off":
        return StoreOff()
    if op == "snapshot":
        return Read(wire.parse_project_ids(data["projectIds"]))
    if op == "resume":
        a = data["answer"]
        answer = Found(a["found"], a.get("version")) if "found" in a else Missing() if a.get("missing") else Raises()
        return Resume(int(data["slot"]), answer)
    if op == "cloud.change":
        return CloudChange(data["projectId"], data["key"], Move(data["move"]))
    raise ValueError(f"trace action has unknown op {op!r}")


def result_json(result: object) -> Any:
    return None if result is None else wire.encode(result)


def state_vars(world: Union[World, State]) -> JsonObject:
    replica = world.replica if isinstance(world, World) else world
    out: JsonObject = {"gate": replica.authority.gate.value}
    out.update({name: to_itf(getattr(replica, name)) for name in REPLICA_VARS})
    return out


def write(path: Path, steps: Iterable[CheckerStep], description: str, meta: Optional[JsonObject] = None) -> Path:
    """Write ``steps`` (checker ``Step`` values) as an ITF trace."""
    states: list[JsonObject] = []
    for i, s in enumerate(steps):
        state: JsonObject = {"#meta": {"index": i}}
        if s.action is not None:
            state["#meta"]["action"] = action_json(s.action)
            state["#meta"]["result"] = result_json(s.result)
            state["mbt::actionTaken"] = getattr(s.action.kind, "value", s.action.kind)
        else:
            state["mbt::actionTaken"] = "init"
        state.update(state_vars(s.state))
        states.append(state)
    doc = {
        "#meta": {"format": FORMAT, "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
                  "source": "envreplica", "description": description, **(meta or {})},
        "vars": ["gate", *REPLICA_VARS, "mbt::actionTaken"],
        "states": states,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load(path: Path) -> JsonObject:
    """The ITF document at ``path``; ``ValueError`` naming the path and what is wrong (not UTF-8, not JSON,
    not a trace)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(doc, dict) or "states" not in doc:
        raise ValueError(f"{path}: not an ITF trace (no 'states'); write one with `envreplica check`")
    if not isinstance(doc["states"], list) or not doc["states"] or not all(isinstance(s, dict) for s in doc["states"]):
        raise ValueError(f"{path}: not an ITF trace ('states' is not a non-empty list of objects)")
    return doc


@dataclasses.dataclass
class Replayed:
    """The outcome of replaying a trace on the model."""

    steps: list[tuple[Optional[TraceAction], object, State]]  # (action, result, state) per step, as replayed
    diverged_at: Optional[int]  # the first state index whose replayed state or result differs, or None
    differing_vars: list[str]  # what differs there: variable names, "result", or "missing <var>"


def replay(doc: JsonObject, cfg: Optional[ModelConfig] = None) -> Replayed:
    """Rerun a trace's actions on the model; report the first state that differs from the trace."""
    meta = doc.get("#meta", {})
    cfg = cfg or ModelConfig(variant=Variant(meta.get("variant", Variant.FIXED.value)),
                             ack_page_bytes=int(meta.get("ackPageBytes", ModelConfig().ack_page_bytes)))
    st = INITIAL
    steps: list[tuple[Optional[TraceAction], object, State]] = []
    diverged: Optional[int] = None
    differing: list[str] = []
    for i, recorded in enumerate(doc["states"]):
        action_data = recorded.get("#meta", {}).get("action")
        result: object = None
        action: Optional[TraceAction] = None
        if action_data is not None:
            action = parse_action(action_data)
            if not isinstance(action, CloudChange):
                st, result = step(cfg, st, action)
        steps.append((action, result, st))
        if diverged is None:
            mine = state_vars(st)
            differing = [f"missing {k}" if k not in recorded else k
                         for k, v in mine.items() if recorded.get(k) != v]
            if action_data is not None and recorded.get("#meta", {}).get("result") != result_json(result):
                differing.append("result")
            if differing:
                diverged = i
    return Replayed(steps, diverged, differing)
