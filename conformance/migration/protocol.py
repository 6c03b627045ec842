"""The migration adapter protocol (docs/protocol.md, section 11): its words, and the moves and answers in them.

Models: what an adapter declares in ``hello`` (``Declaration``: the steps it pauses at, its readings of the
modules the seed does not show, the order of a rerun's evidence check, the faults and input faults it sets
up, whether its exit statuses are the contract's, how it runs an invocation), how the lockstep's bounds
follow from it and a variant (``bounds_for``), each move as a request (``request_of``), and each answer as the
lockstep's ``Outcome`` and ``Observation`` (``outcome_of``, ``observation_of``). The client is
``adapter_side``; the project's own servers are ``serve``.

Leaves out on purpose: the transport (``conformance.external``'s JSON lines, shared with the replica's
protocol), and anything an adapter says beyond these fields (ignored, so that an adapter may say more).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from envreplica.conformance.migration.observe import Observation, Outcome, StoreView
from envreplica.model import migration as mm
from envreplica.spec.migration import STORES

PROTOCOL = "envreplica-migration/1"
#: The store names of the protocol, by index.
STORE_NAMES = tuple(s.name.lower() for s in STORES)
#: Every step name, in the order a run takes them (``model.migration.Pc``).
ALL_STEPS = tuple(pc.value for pc in mm.Pc)
#: The findings F4 to F6 (``--variant fixed`` fixes them all), and the fixes that together keep each away: F4 by
#: the published result and, once a result can be moved away, by the stores' own proof of completion
#: (docs/migration.md, "The stores prove completion")
FINDING_FIXES: dict[str, frozenset[mm.Fix]] = {
    "F4": frozenset({mm.Fix.RESULT_ENDS_RECOVERY, mm.Fix.STORES_PROVE_COMPLETION}),
    "F5": frozenset({mm.Fix.UNAPPLIED_IS_UNCHANGED}),
    "F6": frozenset({mm.Fix.RESULT_ONLY_REOPENS}),
}
#: What each finding is (docs/migration.md, "Findings in the reference steps").
FINDING_TITLES = {
    "F4": "a recovery can be selected after the migration's result is published",
    "F5": "a write between the recovery's revalidation and its fence leaves both stores fenced for good",
    "F6": "a recovery that crashes between reopening the two stores cannot be finished once a writer writes",
}
#: A declared order of a rerun's evidence check: the seed's, or the project's (``Fix.EVIDENCE_BEFORE_MAINTENANCE``).
EVIDENCE_ORDERS = ("after-maintenance", "before-maintenance")


class ProtocolError(Exception):
    """An adapter broke the protocol (a malformed answer, an undeclared word): the harness's failure, not a verdict."""


class InvalidRequest(ValueError):
    """A request that breaks section 11's rules (a malformed field, a move out of order): answered ``invalid``."""


#: The most of a value an error message shows (docs/protocol.md, 11.6).
SHOWN_CHARACTERS = 40


def shown(value: Any) -> str:
    """``value`` for an error message: as JSON, its first ``SHOWN_CHARACTERS`` characters and its size when longer."""
    if isinstance(value, str) and len(value) > SHOWN_CHARACTERS:
        return f"{json.dumps(value[:SHOWN_CHARACTERS], ensure_ascii=False)[:SHOWN_CHARACTERS + 1]}... " \
               f"({len(value)} characters)"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # not JSON, or nested deeper than the encoder goes
        return f"a {type(value).__name__} nested too deep to show"
    if len(text) <= SHOWN_CHARACTERS + 2:
        return text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters as JSON)"


@dataclass(frozen=True)
class Declaration:
    """What an adapter declares in ``hello`` (docs/protocol.md, 11.3)."""

    implementation: str  # free text: what answers
    steps: frozenset[mm.Pc]  # the model steps it pauses at
    reading: mm.Reading  # its readings of the modules the seed does not show
    evidence_first: bool  # a rerun checks the result's evidence before it fences (the project's order)
    faults: frozenset[mm.Fault]  # the environment's faults it sets up
    input_faults: frozenset[mm.InputFault]  # the input faults ``invoke`` takes
    exit_status: bool  # its exit statuses are the contract's (compared)
    modes: tuple[str, ...]  # how it runs an invocation; the first is its default
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # the answer as sent

    @property
    def silent(self) -> frozenset[mm.Pc]:
        """The model's steps this adapter does not pause at (taken with the step before them)."""
        return frozenset(mm.Pc) - self.steps


def _choice(value: Any, enum: type, what: str) -> Any:
    try:
        return _value(enum, value, f"hello: {what}")
    except ValueError as error:
        raise ProtocolError(str(error)) from None


def parse_hello(result: Any) -> Declaration:
    """The declaration in ``hello``'s result, or ``ProtocolError`` saying which field is wrong."""
    if not isinstance(result, dict):
        raise ProtocolError(f"hello: the result must be an object, not {result!r}")
    if result.get("protocol") != PROTOCOL:
        raise ProtocolError(f"hello: the adapter speaks {result.get('protocol')!r}; this harness speaks {PROTOCOL!r}")
    steps = result.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ProtocolError("hello: 'steps' must be a non-empty list of the model's step names")
    unknown = [s for s in steps if s not in ALL_STEPS]
    if unknown:
        raise ProtocolError(f"hello: unknown steps {unknown} (the model's: {', '.join(ALL_STEPS)})")
    readings = result.get("readings") or {}
    if not isinstance(readings, dict):
        raise ProtocolError("hello: 'readings' must be an object")
    reading = mm.Reading(
        backup=_choice(readings.get("backup", "keep"), mm.BackupReading, "readings.backup"),
        apply=_choice(readings.get("apply", "skip"), mm.ApplyReading, "readings.apply"),
        reconcile=_choice(readings.get("reconcile", "receipt"), mm.ReconcileReading, "readings.reconcile"),
        lock=_choice(readings.get("lock", "wait"), mm.LockReading, "readings.lock"))
    evidence = result.get("evidence", "after-maintenance")
    if evidence not in EVIDENCE_ORDERS:
        raise ProtocolError(f"hello: 'evidence' {evidence!r} is not one of {', '.join(EVIDENCE_ORDERS)}")
    faults = frozenset(_choice(f, mm.Fault, "fault") for f in result.get("faults", []))
    inputs = frozenset(_choice(f, mm.InputFault, "input fault") for f in result.get("inputFaults", []))
    inputs -= {mm.InputFault.NONE}
    if inputs and mm.Fault.INPUT not in faults:
        faults |= {mm.Fault.INPUT}
    modes = result.get("modes") or ["process"]
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise ProtocolError("hello: 'modes' must be a list of strings")
    return Declaration(
        implementation=str(result.get("implementation", "unnamed")),
        steps=frozenset(mm.Pc(s) for s in steps), reading=reading, evidence_first=evidence == "before-maintenance",
        faults=faults, input_faults=inputs, exit_status=bool(result.get("exitStatus", False)),
        modes=tuple(modes), raw=dict(result))


def hello_of(decl: Declaration) -> dict[str, Any]:
    """``decl`` as a ``hello`` result (the project's servers answer with it)."""
    return {"protocol": PROTOCOL, "implementation": decl.implementation,
            "steps": [pc.value for pc in mm.Pc if pc in decl.steps],
            "readings": {"backup": decl.reading.backup.value, "apply": decl.reading.apply.value,
                         "reconcile": decl.reading.reconcile.value, "lock": decl.reading.lock.value},
            "evidence": EVIDENCE_ORDERS[decl.evidence_first],
            "faults": sorted(f.value for f in decl.faults), "inputFaults": sorted(f.value for f in decl.input_faults),
            "exitStatus": decl.exit_status, "modes": list(decl.modes)}


def fixes_for(decl: Declaration, variant: mm.MigrationVariant) -> frozenset[mm.Fix]:
    """The model's fixes an implementation is held to: the variant's findings fixed (``fixed``: F4 to F6), and
    the declared order of a rerun's evidence check."""
    fixes = frozenset().union(*FINDING_FIXES.values()) if variant is mm.MigrationVariant.FIXED else frozenset()
    return fixes | ({mm.Fix.EVIDENCE_BEFORE_MAINTENANCE} if decl.evidence_first else frozenset())


def bounds_for(decl: Declaration, variant: mm.MigrationVariant, base: mm.MigrationBounds) -> mm.MigrationBounds:
    """The lockstep's bounds for an adapter: ``base``'s sizes, its declared readings and faults, the variant's
    fixes."""
    faults = frozenset(decl.faults)
    return mm.MigrationBounds(
        f"{base.name} ({variant.value})", migrations=base.migrations, recoveries=base.recoveries,
        crashes=base.crashes, writes=base.writes, fixes=fixes_for(decl, variant), reading=decl.reading,
        faults=faults, fault_actions=base.fault_actions if faults else 0)


def request_of(action: mm.Action, mode: Optional[str] = None) -> dict[str, Any]:
    """The request of one move (without ``id``)."""
    if isinstance(action, mm.Invoke):
        out: dict[str, Any] = {"op": "invoke", "role": action.role.value}
        if action.fault is not mm.InputFault.NONE:
            out["fault"] = action.fault.value
        if mode is not None:
            out["mode"] = mode
        return out
    if isinstance(action, mm.Step):
        return {"op": "step", "invocation": action.pid}
    if isinstance(action, mm.Crash):
        return {"op": "crash", "invocation": action.pid}
    if isinstance(action, mm.Connect):
        return {"op": "connect", "store": STORE_NAMES[action.store]}
    if isinstance(action, mm.Write):
        return {"op": "write", "version": action.version}
    if isinstance(action, (mm.Disconnect, mm.Lock, mm.Unlock)):
        return {"op": action.kind}
    if isinstance(action, (mm.ReadOnly, mm.Writable)):
        return {"op": "readOnly", "store": STORE_NAMES[action.store], "on": isinstance(action, mm.ReadOnly)}
    if isinstance(action, mm.MoveAway):
        return {"op": "moveAway", "doc": action.doc.value}
    if isinstance(action, (mm.Edit, mm.Repair)):
        out = {"op": action.kind, "doc": action.doc.value}
        if action.store is not None:
            out["store"] = STORE_NAMES[action.store]
        return out
    raise ValueError(f"no request for {action!r}")


def action_of(request: dict[str, Any]) -> mm.Action:
    """The move a request asks for (the servers' side of ``request_of``); ``InvalidRequest`` (a ``ValueError``)
    for a malformed one, naming the field and showing its value (``shown``)."""
    op = request.get("op")

    def store(key: str = "store") -> int:
        name = request.get(key, MISSING)
        if not isinstance(name, str) or name not in STORE_NAMES:
            raise InvalidRequest(f"{op}: '{key}' must be one of {', '.join(STORE_NAMES)}, not {_given(name)}")
        return STORE_NAMES.index(name)

    def invocation() -> int:
        n = request.get("invocation", MISSING)
        if type(n) is not int or n < 0:
            raise InvalidRequest(f"{op}: 'invocation' must be the number invoke answered, not {_given(n)}")
        return n

    if op == "invoke":
        role = _value(mm.Role, request.get("role", MISSING), "invoke: 'role'")
        fault = _value(mm.InputFault, request.get("fault", "none"), "invoke: 'fault'")
        if role is mm.Role.RECOVER and fault not in (mm.InputFault.NONE, mm.InputFault.COPY):
            raise InvalidRequest(f"invoke: a recover takes no input fault but \"copy\" (it is given the request "
                                 f"alone), not {shown(fault.value)}")
        return mm.Invoke(role, fault)
    if op == "step":
        return mm.Step(invocation())
    if op == "crash":
        return mm.Crash(invocation())
    if op == "connect":
        return mm.Connect(store())
    if op == "write":
        version = request.get("version", MISSING)
        if type(version) is not int or version not in (1, 2):
            raise InvalidRequest(f"write: 'version' must be 1 or 2, not {_given(version)}")
        return mm.Write(0, version)  # the store is the connection's: the server fills it in
    if op == "disconnect":
        return mm.Disconnect(0)
    if op in ("lock", "unlock"):
        return (mm.Lock if op == "lock" else mm.Unlock)(0)
    if op == "readOnly":
        on = request.get("on", MISSING)
        if not isinstance(on, bool):
            raise InvalidRequest(f"readOnly: 'on' must be true or false, not {_given(on)}")
        return (mm.ReadOnly if on else mm.Writable)(store())
    if op in ("edit", "repair"):
        doc = _value(mm.Doc, request.get("doc", MISSING), f"{op}: 'doc'")
        at = store() if doc is mm.Doc.BACKUP else None
        return (mm.Edit if op == "edit" else mm.Repair)(doc, at)
    if op == "moveAway":
        if request.get("doc", MISSING) != mm.Doc.RESULT.value:
            raise InvalidRequest(f"moveAway: 'doc' must be \"result\", not {_given(request.get('doc', MISSING))}")
        return mm.MoveAway(mm.Doc.RESULT)
    raise InvalidRequest(f"unknown op {shown(op)}")


#: A field absent from a request (``_given`` says so).
MISSING = object()


def _given(value: Any) -> str:
    return "absent" if value is MISSING else shown(value)


def _value(enum: type, value: Any, what: str) -> Any:
    if isinstance(value, str):
        try:
            return enum(value)
        except ValueError:
            pass
    raise InvalidRequest(f"{what} must be one of {', '.join(json.dumps(e.value) for e in enum)}, "  # type: ignore
                         f"not {_given(value)}")


def event_of(outcome: Outcome, message: str = "") -> dict[str, Any]:
    """A step's answer (11.4) for ``outcome``."""
    if outcome.kind == "step":
        return {"event": "step", "step": outcome.step}
    if outcome.kind == "exit":
        return {"event": "exit", "status": outcome.status, "refusal": outcome.code, "after": outcome.step,
                "message": message}
    raise ValueError(f"not a step's outcome: {outcome}")


def outcome_of(request: dict[str, Any], result: Any) -> tuple[Outcome, str]:
    """The lockstep's outcome of an answered request, and the answer's message (free text)."""
    op = request["op"]
    if not isinstance(result, dict):
        raise ProtocolError(f"{op}: the result must be an object, not {result!r}")
    if op == "invoke":
        return Outcome("started"), ""
    if op == "crash":
        return Outcome("crashed"), ""
    if op == "write":
        word = result.get("write")
        if word not in ("landed", "fence", "read-only"):
            raise ProtocolError(f"write: 'write' must be landed, fence or read-only, not {word!r}")
        return Outcome("write", code=word), ""
    if op != "step":
        return Outcome("ok"), ""
    event = result.get("event")
    if event == "step":
        step = result.get("step")
        if step not in ALL_STEPS:
            raise ProtocolError(f"step: {step!r} is not one of the model's steps")
        return Outcome("step", step=step), ""
    if event == "exit":
        status = result.get("status")
        if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
            raise ProtocolError(f"step: an exit's 'status' must be an integer or null, not {status!r}")
        refusal, after = result.get("refusal"), result.get("after")
        if refusal is not None and not isinstance(refusal, str):
            raise ProtocolError(f"step: 'refusal' must be a string or null, not {refusal!r}")
        if after is not None and after not in ALL_STEPS:
            raise ProtocolError(f"step: 'after' {after!r} is not one of the model's steps")
        return Outcome("exit", step=after, status=status, code=refusal), str(result.get("message") or "")
    raise ProtocolError(f"step: 'event' must be step or exit, not {event!r}")


def observation_json(obs: Observation) -> dict[str, Any]:
    """``obs`` as ``observe`` answers it (11.5; the invocations are the harness's, not the adapter's)."""
    doc = obs.to_json()
    doc.pop("invocations", None)
    doc["recoveryResult"] = doc.pop("recovery_result")
    return _lists(doc)


def _lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


def observation_of(result: Any, invocations: tuple[tuple[int, str], ...]) -> Observation:
    """The observation an adapter answered ``observe`` with, and the harness's own ``invocations``."""
    if not isinstance(result, dict):
        raise ProtocolError(f"observe: the result must be an object, not {result!r}")
    try:
        stores = tuple(StoreView(int(s["version"]), str(s["data"]), str(s["admission"]),
                                 None if s.get("backup") is None else str(s["backup"]))
                       for s in result["stores"])
        if len(stores) != 2:
            raise ProtocolError(f"observe: 'stores' must hold two stores (run, resource), not {len(stores)}")

        def strings(key: str) -> Optional[tuple[Optional[str], ...]]:
            value = result.get(key)
            return None if value is None else tuple(None if v is None else str(v) for v in value)

        plan, sources = result.get("plan"), result.get("sources")
        return Observation(
            stores=stores, request=result.get("request"),
            sources=None if sources is None else tuple(str(s) for s in sources), result=result.get("result"),
            evidence=strings("evidence"), recovery=result.get("recovery"),
            plan=None if plan is None else tuple(bool(p) for p in plan),
            recovery_result=bool(result.get("recoveryResult", False)), lock=bool(result.get("lock", False)),
            invocations=invocations)
    except (KeyError, TypeError, ValueError) as error:
        raise ProtocolError(f"observe: malformed observation ({type(error).__name__}: {error}): {result!r}") from None
