"""Counterexamples as ITF traces (the Apalache/Quint Informal Trace Format), and their replay.

Models: a run as ``{"#meta", "vars", "states"}``, for any protocol of the project (the replica's here, the paired
writer migration's in ``checker.migration``, and any next one the same way: an ``Encoder``). ``#meta.protocol``
names the protocol (``report`` and ``conformance.replay`` read it; a trace without one is the replica's). Each
state holds the protocol's variables as ITF values (records, ``#map``, ``#set``, ``#bigint``, variants
``{"tag", "value"}``), the action's kind under ``mbt::actionTaken`` and its arguments under
``mbt::nondetPicks`` (Quint's conventions for model-based testing: ``nondet_picks``), and, in the state's
``#meta``, the action and its result as JSON.

The replica's states also hold the gate as a plain string under ``gate`` (what ``envreplica diagram --trace``
reads), its actions are wire JSON (``action_json``), and replay parses them back with ``spec.wire`` and reruns
them on the model: no state decoder is needed, because replay compares re-encoded states.

Leaves out on purpose: ``#unserializable`` values (there are none) and the cloud model's own state on replay
(cloud changes do not touch the replica).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Union

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
FORMAT_DESCRIPTION = "https://apalache-mc.org/docs/adr/015adr-trace.html"
#: The ``#meta`` field naming a trace's protocol, and the protocols' names (a trace without it is the replica's).
PROTOCOL = "protocol"
REPLICA = "replica"
#: Quint's model-based-testing variables: the action that led to a state, and its nondeterministic choices.
ACTION_TAKEN = "mbt::actionTaken"
NONDET_PICKS = "mbt::nondetPicks"
#: Quint's ``None`` as an ITF variant (an ``Option`` with no value).
NONE: dict[str, Any] = {"tag": "None", "value": {"#tup": []}}
#: Union members, encoded as variants so a reader can tell them apart.
VARIANTS = (StagedRef, LegacyRef, BindOmit, BindWithhold, PageInFlight, DeliveryInFlight, Found, Missing, Raises)
SAFE = 2**53 - 1
REPLICA_VARS = ("authority", "projects", "records", "values", "stage_projects", "stage_records",
                "stage_values", "receipts", "inflight", "store_on")

#: A JSON object as ``json`` parses it (its values are any JSON).
JsonObject = dict[str, Any]
#: What a trace's step may hold: a replica action, or a cloud change (the model's only other action).
TraceAction = Union[Action, CloudChange]


# ---------------------------------------------------------------------------
# Any protocol: values, Quint's mbt variables, the document
# ---------------------------------------------------------------------------


def to_itf(value: Any) -> Any:
    """One Python value of a model as an ITF value."""
    if value is None:
        return dict(NONE)
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


def json_to_itf(value: Any) -> Any:
    """A JSON value (wire JSON: an adapter's request or answer) as an ITF value: ``null`` as Quint's ``None``, an
    integer beyond 2^53 - 1 as ``#bigint``, objects as records (``itf_to_json`` is its inverse)."""
    if value is None:
        return dict(NONE)
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -SAFE <= value <= SAFE else {"#bigint": str(value)}
    if isinstance(value, dict):
        return {str(k): json_to_itf(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_to_itf(v) for v in value]
    return repr(value)


def itf_to_json(value: Any) -> Any:
    """An ITF value ``json_to_itf`` wrote, back as JSON."""
    if isinstance(value, dict):
        if value == NONE:
            return None
        if set(value) == {"#bigint"}:
            return int(value["#bigint"])
        return {k: itf_to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [itf_to_json(v) for v in value]
    return value


def nondet_picks(names: Iterable[str], picked: Mapping[str, Any]) -> JsonObject:
    """Quint's ``mbt::nondetPicks`` of one state: every name of ``names`` (the protocol's nondeterministic choices,
    the same names at every state), each an ``Option`` as an ITF variant, ``{"tag": "Some", "value": V}`` for
    those ``picked`` (already ITF values) and ``{"tag": "None", "value": {"#tup": []}}`` for the rest.

    The format is Quint's: its simulator writes, in each state of ``quint run --mbt --out-itf``, a record of
    every ``nondet`` name the spec declares, ``mkVariant('Some', value)`` when the step picked it and
    ``mkVariant('None', mkTuple([]))`` otherwise (informalsystems/quint, ``quint/src/runtime/impl/VarStorage.ts``,
    ``asRecord``; the names ``mbt::actionTaken`` / ``mbt::nondetPicks`` are ``ACTION_TAKEN`` / ``NONDET_PICKS``
    in ``quint/src/itf.ts``), and a driver reads each pick as an ``Option``
    (``docs/content/docs/model-based-testing.mdx``: ``As::<de::Option::<_>>`` of itf-rs; quint-connect's
    drivers do the same).
    """
    names = list(names)
    unknown = [name for name in picked if name not in names]
    if unknown:  # a new argument of an action: add it to the protocol's names
        raise ValueError(f"nondetPicks: {unknown} are not among the protocol's names {names}")
    return {name: {"tag": "Some", "value": picked[name]} if name in picked else dict(NONE) for name in names}


def meta_of(doc: Mapping[str, Any]) -> JsonObject:
    """A document's ``#meta`` (an empty one when it has none, or one that is not an object)."""
    meta = doc.get("#meta")
    return meta if isinstance(meta, dict) else {}


def picks_of(state: Mapping[str, Any]) -> JsonObject:
    """The values a state's ``mbt::nondetPicks`` holds (its ``Some`` picks, still ITF values)."""
    picks = state.get(NONDET_PICKS)
    if not isinstance(picks, dict):
        return {}
    return {name: v["value"] for name, v in picks.items() if isinstance(v, dict) and v.get("tag") == "Some"}


@dataclasses.dataclass(frozen=True)
class Encoder:
    """What one protocol gives the ITF writer (``write_steps``): how its states, actions and results are written.

    ``variables`` are the state's variables (``state`` gives them as ITF values); ``pick_names`` every argument
    an action may have (``picks`` gives an action's, as ITF values: ``mbt::nondetPicks``); ``kind`` an action's
    name (``mbt::actionTaken``); ``action_json`` / ``result_json`` an action and its result as JSON (the state's
    ``#meta``); ``describe`` (optional) one line for a step from the state before it (``#meta.step``).
    """

    protocol: str
    variables: tuple[str, ...]
    pick_names: tuple[str, ...]
    state: Callable[[Any], JsonObject]
    kind: Callable[[Any], str]
    picks: Callable[[Any], JsonObject]
    action_json: Callable[[Any], JsonObject]
    result_json: Callable[[Any], Any]
    describe: Optional[Callable[[Any, Any], str]] = None


def document(protocol: str, variables: Iterable[str], states: list[JsonObject], description: str,
             meta: Optional[JsonObject] = None, source: str = "envreplica") -> JsonObject:
    """An ITF document of ``protocol``: ``#meta`` (the format, ``protocol``, ``description``, then ``meta``),
    ``vars`` (``variables`` and Quint's two) and ``states``."""
    return {
        "#meta": {"format": FORMAT, "format-description": FORMAT_DESCRIPTION, "source": source, PROTOCOL: protocol,
                  "description": description, **(meta or {})},
        "vars": [*variables, ACTION_TAKEN, NONDET_PICKS],
        "states": states,
    }


def save(path: Path, doc: JsonObject) -> Path:
    """Write ``doc`` to ``path`` (its folder made); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def write_steps(path: Path, encoder: Encoder, steps: Iterable[CheckerStep], description: str,
                meta: Optional[JsonObject] = None) -> Path:
    """Write ``steps`` (checker ``Step`` values: the first the initial state) as an ITF trace of ``encoder``'s
    protocol."""
    states: list[JsonObject] = []
    before = None
    for i, s in enumerate(steps):
        state: JsonObject = {"#meta": {"index": i}}
        if s.action is not None:
            state["#meta"]["action"] = encoder.action_json(s.action)
            state["#meta"]["result"] = encoder.result_json(s.result)
            if encoder.describe is not None:
                state["#meta"]["step"] = encoder.describe(s.action, before)
            state[ACTION_TAKEN] = encoder.kind(s.action)
            state[NONDET_PICKS] = nondet_picks(encoder.pick_names, encoder.picks(s.action))
        else:
            state[ACTION_TAKEN] = "init"
            state[NONDET_PICKS] = nondet_picks(encoder.pick_names, {})
        state.update(encoder.state(s.state))
        states.append(state)
        before = s.state
    return save(path, document(encoder.protocol, encoder.variables, states, description, meta))


# ---------------------------------------------------------------------------
# The replica's
# ---------------------------------------------------------------------------


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


#: The arguments a replica action may have (``mbt::nondetPicks``): its request's fields as the adapter protocol
#: names them (docs/protocol.md section 5), ``action`` the kind of a crashed action, and a cloud change's.
REPLICA_PICKS = ("frame", "keptPolicyEpochs", "orgId", "projectIds", "slot", "answer", "crashAfterCommit", "action",
                 "projectId", "key", "move")
#: The adapter op of each action kind (``mbt::actionTaken``) a request can ask for (a ``resume``, a crash's
#: read answering, and a cloud change have none).
OP_OF_KIND = {"begin": "begin", "apply_page": "page", "apply_delivery": "delivery", "complete": "commit",
              "close_gate": "close", "restart": "restart", "store_off": "store.off", "read_snapshot": "snapshot"}


def action_kind(action: TraceAction) -> str:
    """A replica action's kind (``mbt::actionTaken``)."""
    return str(getattr(action.kind, "value", action.kind))


def action_picks(action: TraceAction) -> JsonObject:
    """A replica action's arguments as ITF values (``mbt::nondetPicks``): its wire JSON's fields, and for a
    crash the kind of the action it cut (``action``)."""
    data = action_json(action)
    data.pop("op")
    if isinstance(action, CrashAfter):
        data["action"] = action_kind(action.action)
    return {name: json_to_itf(value) for name, value in data.items()}


def action_of(kind: str, picks: Mapping[str, Any]) -> TraceAction:
    """The replica action of ``mbt::actionTaken`` ``kind`` with ``picks`` (its ``Some`` picks as JSON:
    ``itf_to_json`` of ``picks_of``): the inverse of ``action_kind`` and ``action_picks``."""
    data = dict(picks)
    if kind == "crash_after":
        inner = str(data.pop("action", ""))
        if inner not in OP_OF_KIND:
            raise ValueError(f"a crash_after of {inner!r}, which is not an action kind of the replica")
        return parse_action({"op": OP_OF_KIND[inner], **data})
    ops = {**OP_OF_KIND, "resume": "resume", "cloud_change": "cloud.change"}
    if kind not in ops:
        raise ValueError(f"mbt::actionTaken {kind!r} is not an action of the replica's model ({', '.join(ops)})")
    return parse_action({"op": ops[kind], **data})


#: The replica's ITF writing (``write``; ``Encoder``).
REPLICA_ENCODER = Encoder(REPLICA, ("gate", *REPLICA_VARS), REPLICA_PICKS, state_vars, action_kind, action_picks,
                          action_json, result_json)


def write(path: Path, steps: Iterable[CheckerStep], description: str, meta: Optional[JsonObject] = None) -> Path:
    """Write ``steps`` (checker ``Step`` values of the replica's model) as an ITF trace."""
    return write_steps(path, REPLICA_ENCODER, steps, description, meta)


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
