"""A concurrent history: what each process was asked, when, and what it answered.

Models: one run of a scenario on one replica file. ``setup`` is sent in order
before anything runs at once (one process; value-store requests to every
process), then the ``ops`` of the batch run at once on several processes, each
op timestamped at its call and its return on the machine's monotonic clock
(``time.monotonic_ns``: ``CLOCK_MONOTONIC``, one clock for every process), and
finally the replica's tables are read back (``final_state``, receipts carrying
their MACs). ``Response`` is an adapter response as the linearizability check
compares it: ``ok`` and the result as canonical JSON, or the error type (ids
and error messages are not compared, as in the lockstep).

Leaves out on purpose: ``duringFetch`` (a batch op's await windows are real
here: other processes run inside them) and ids (the harness numbers requests
itself).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from envreplica.conformance.replica.traces import describe_request, describe_response
from envreplica.model.state import State

__all__ = [
    "BATCH_OPS",
    "BROADCAST_OPS",
    "PROCESS_OPS",
    "History",
    "OpKind",
    "Op",
    "Response",
    "canonical",
    "format_history",
    "history_to_json",
    "interleaved",
    "outcome_of",
]


class OpKind(str, enum.Enum):
    """The adapter ops a concurrent batch may hold (docs/protocol.md section 5)."""

    BEGIN = "begin"
    PAGE = "page"
    DELIVERY = "delivery"
    COMMIT = "commit"
    CLOSE = "close"
    STATUS = "status"
    SNAPSHOT = "snapshot"
    RECEIPTS = "receipts"
    READY = "ready"  # awaitProjectEnvReplicaReady with a timeout: true once ready, false at the deadline
    DIAGNOSTICS = "diagnostics"  # why a snapshot of these projects would fail closed (compared by reason)

    @property
    def read_only(self) -> bool:
        """Changes nothing (one read transaction): dropping it from a history leaves a history of the same run."""
        return self in (OpKind.STATUS, OpKind.SNAPSHOT, OpKind.RECEIPTS, OpKind.READY, OpKind.DIAGNOSTICS)


#: Ops a batch may hold. ``reset``, ``restart`` and the ``store.*`` ops act on one
#: process's own handle or value store, which the model (one replica, one store) cannot
#: tell apart; they belong in the setup.
BATCH_OPS = frozenset(k.value for k in OpKind)
#: Setup ops sent to every process, so every process's value store answers alike.
BROADCAST_OPS = frozenset({"store.put", "store.fail"})
#: Ops that change one process only (its store, its connection): neither batch nor setup may hold
#: them (``reset`` is the harness's own, before each setup).
PROCESS_OPS = frozenset({"store.off", "reset"})


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compared_result(result: Any) -> Any:
    """A result as compared: a diagnosis by its reason class (its message is free text for people)."""
    if isinstance(result, dict) and set(result) == {"reason", "message"}:
        return {"reason": result["reason"]}
    return result


@dataclass(frozen=True)
class Response:
    """An adapter response as compared: ``body`` is the canonical result JSON, or the error type."""

    ok: bool
    body: str

    @classmethod
    def of(cls, response: Any) -> "Response":
        """The compared part of an adapter response (``{"ok": true, "result"}`` / ``{"ok": false, "error"}``)."""
        if isinstance(response, dict) and response.get("ok") is True and "result" in response:
            return cls(True, canonical(compared_result(response["result"])))
        if isinstance(response, dict) and response.get("ok") is False and isinstance(response.get("error"), dict):
            return cls(False, str(response["error"].get("type")))
        return cls(False, f"<not an adapter response: {str(response)[:80]}>")

    def text(self) -> str:
        """One line for people."""
        if self.ok:
            return describe_response({"ok": True, "result": json.loads(self.body)})
        return f"ERROR {self.body}"


@dataclass(frozen=True)
class Op:
    """One op of the batch: which process ran it, its request, its call and return times, its response."""

    index: int  # position in the batch (stable across shrinking: the name in messages)
    process: int  # the worker process that ran it
    request: dict  # the adapter request (no id)
    response: dict  # the adapter response as the implementation gave it
    call_ns: int  # monotonic clock just before the request was handed to the driver
    return_ns: int  # monotonic clock just after the response came back

    @property
    def kind(self) -> OpKind:
        return OpKind(self.request["op"])

    def precedes(self, other: "Op") -> bool:
        """Real-time order: this op returned before ``other`` was called."""
        return self.return_ns < other.call_ns


@dataclass(frozen=True)
class History:
    """Setup, the concurrent batch, and the replica read back after it."""

    variant: str
    scenario: str  # the scenario kind that generated it (for reports)
    setup: tuple[dict, ...]  # requests applied in order before the batch
    setup_responses: Optional[tuple[dict, ...]]  # the implementation's answers to them (None: not recorded)
    ops: tuple[Op, ...]
    final_state: Optional[State]  # the tables read back after the batch (receipts with MACs)
    readback_error: Optional[str] = None  # why the tables could not be read back
    processes: int = 0  # worker processes of the run
    earlier: int = 0  # histories the same processes ran on the same file before this one
    notes: tuple[str, ...] = field(default=())
    unit: str = "process"  # who ran each op: a "process" (own connection) or a "thread" (one shared replica)

    def without(self, indices) -> "History":
        """The history without the ops whose ``index`` is in ``indices`` (read-only ones: see ``OpKind``)."""
        drop = set(indices)
        return History(self.variant, self.scenario, self.setup, self.setup_responses,
                       tuple(op for op in self.ops if op.index not in drop), self.final_state,
                       self.readback_error, self.processes, self.earlier, self.notes, self.unit)

    @property
    def overlapping(self) -> bool:
        """Some two ops ran at once (neither returned before the other was called)."""
        return any(not a.precedes(b) and not b.precedes(a)
                   for i, a in enumerate(self.ops) for b in self.ops[i + 1:])


def outcome_of(op: Op) -> str:
    """The class of an op's answer, for coverage: ``delivery ok``, ``delivery replayed``, ``commit refused CODE``."""
    r = op.response
    name = op.kind.value
    if not isinstance(r, dict) or r.get("ok") is not True:
        error = r.get("error") if isinstance(r, dict) else None
        return f"{name} error {error.get('type') if isinstance(error, dict) else '?'}"
    result = r.get("result")
    if isinstance(result, dict) and result.get("ok") is False:
        return f"{name} refused {result.get('code')}"
    if isinstance(result, dict) and result.get("replayed") is True:
        return f"{name} replayed"
    if op.kind is OpKind.SNAPSHOT:
        return f"{name} {'null' if result is None else 'served'}"
    if op.kind is OpKind.READY and isinstance(result, dict):
        return f"{name} {'true' if result.get('ready') else 'false'}"
    if op.kind is OpKind.DIAGNOSTICS:
        return f"{name} {'serves' if result is None else result.get('reason') if isinstance(result, dict) else '?'}"
    return f"{name} ok"


def interleaved(witness: tuple[str, ...]) -> bool:
    """Whether a witness runs some op's steps apart (another op's step between two of them)."""
    runs: list[str] = []
    for step in witness:
        name = step.split(" ", 1)[0]
        if not runs or runs[-1] != name:
            runs.append(name)
    return len(runs) != len(set(runs))


def format_history(history: History, *, witness: Optional[list[str]] = None,
                   witness_title: str = "witness (the model's steps in an order that explains every answer)") -> str:
    """The history for people: setup, then each op with its process, times (µs from the first call) and answer."""
    unit = history.unit
    lines = [f"history: variant {history.variant}, scenario {history.scenario}, {len(history.ops)} ops on "
             f"{len({op.process for op in history.ops})} {unit}s"]
    if history.earlier:
        plural = "ies" if history.earlier > 1 else "y"
        kept = ("each keeps its connection and its objects, as a host's processes do" if unit == "process"
                else "one replica object, as a host process keeps it")
        lines.append(f"  (the {unit}s had run {history.earlier} earlier histor{plural} on this file, reset in "
                     f"between: {kept})")
    lines.extend(f"  note: {note}" for note in history.notes)
    lines.append("  setup (in order, process 0; store.* sent to every process):" if unit == "process"
                 else "  setup (in order, on the shared replica):")
    for n, request in enumerate(history.setup, 1):
        answer = ""
        if history.setup_responses is not None and n <= len(history.setup_responses):
            answer = f"  -> {describe_response(history.setup_responses[n - 1])}"
        lines.append(f"    s{n}. {describe_request(request)}{answer}")
    if history.ops:
        t0 = min(op.call_ns for op in history.ops)
        lines.append("  batch (µs from the first call: [call .. return]):")
        for op in sorted(history.ops, key=lambda o: o.call_ns):
            lines.append(f"    op{op.index} {unit} {op.process} [{(op.call_ns - t0) / 1000:8.1f} .. "
                         f"{(op.return_ns - t0) / 1000:8.1f}] {describe_request(op.request)}")
            lines.append(f"        -> {describe_response(op.response)}")
    if history.readback_error:
        lines.append(f"  final state: could not be read back: {history.readback_error}")
    if witness:
        lines.append(f"  {witness_title}:")
        lines.extend(f"    {step}" for step in witness)
    return "\n".join(lines)


def history_to_json(history: History) -> dict:
    """A JSON document of the history (the final state as its repr: it is for people and diffs)."""
    return {
        "variant": history.variant,
        "scenario": history.scenario,
        "processes": history.processes,
        "unit": history.unit,
        "earlier": history.earlier,
        "notes": list(history.notes),
        "setup": list(history.setup),
        "setupResponses": None if history.setup_responses is None else list(history.setup_responses),
        "ops": [{"index": op.index, "process": op.process, "request": op.request, "response": op.response,
                 "callNs": op.call_ns, "returnNs": op.return_ns} for op in history.ops],
        "readbackError": history.readback_error,
        "finalState": None if history.final_state is None else _state_doc(history.final_state),
    }


def _state_doc(state: State) -> Any:
    """The tables read back as the ``state`` document (docs/protocol.md section 6), values by length only."""
    from envreplica.conformance.readback import state_to_doc

    doc = state_to_doc(state, lambda mac: mac)  # receipts read back already carry their MAC
    for table in ("values", "stageValues"):
        for row in doc.get(table, []):
            row["value"] = f"<{len(row['value'])} characters>"
    return doc
