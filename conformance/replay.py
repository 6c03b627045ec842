"""A saved ITF trace replayed through an adapter: its actions read from ``mbt::actionTaken`` and ``mbt::nondetPicks``.

Models: what a quint-connect-style driver does with a trace of Quint's (``checker.itf.nondet_picks``): each state
names the action taken to reach it and that action's nondeterministic choices; the driver takes the same
action on an implementation and compares. Here the implementation is an adapter (docs/protocol.md section 5 for
the replica, section 11 for the paired writer migration) and the judge is the model, as in the lockstep: each
action goes to both, and the first answer or state that differs is the divergence.

* The replica's traces (``#meta.protocol`` ``replica``, or none): a lockstep trace
  (``conformance.replica.traces.write_trace``) holds one adapter request per state (its op as
  ``mbt::actionTaken``, its fields as the picks); a model-checker counterexample (``checker.itf.write``) holds
  the model's actions, each a request but a ``resume`` (a read the model suspended, which the adapter protocol
  cannot hold open: such a trace is refused with the step that needs it) and a cloud change (not the replica's:
  skipped). ``replay_steps`` of the lockstep replays the requests.
* The migration's traces (``migration``): a lockstep divergence (``conformance.migration.traces.write_itf``) or
  a counterexample (``checker.migration.write_trace``) holds the model's moves; the lockstep's ``replay_moves``
  plays them through ``AdapterShared``, skipping a move its model does not enable there (the adapter's declared
  readings may differ from the checker's bounds) and a step the adapter does not pause at (it is taken with
  the step before it).

Leaves out on purpose: the trace's recorded states as the judge (the model's answers now are; a trace of
another model version replays as this model says), and the lock's protocol until it exists (a trace of a
protocol not in ``REPLAYERS`` is refused, naming those there are).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from envreplica.checker import itf


class TraceNotReplayable(ValueError):
    """A trace this replay cannot take through an adapter (the message says which step and why)."""


@dataclass
class ReplayResult:
    """The outcome of replaying one trace through an adapter."""

    protocol: str
    variant: str
    actions: int  # actions in the trace (its states but the initial one)
    replayed: int  # actions taken on both sides
    skipped: list[str]  # the actions not taken, and why
    divergence: Optional[str]  # the first difference, or None when the adapter agrees with the model throughout
    text: str  # the replayed steps, readable, with the divergence

    @property
    def ok(self) -> bool:
        return self.divergence is None


def load(path: Path) -> dict:
    """The ITF document at ``path`` (``TraceNotReplayable`` when it is not one)."""
    try:
        return itf.load(Path(path))
    except ValueError as error:
        raise TraceNotReplayable(str(error)) from None


def protocol_of(doc: dict) -> str:
    return str(itf.meta_of(doc).get(itf.PROTOCOL, itf.REPLICA))


def _actions(doc: dict) -> list[tuple[int, str, dict[str, Any]]]:
    """(state index, ``mbt::actionTaken``, the picks as JSON) of each state but an ``init``."""
    out = []
    for i, state in enumerate(doc["states"]):
        kind = state.get(itf.ACTION_TAKEN)
        if not isinstance(kind, str) or not isinstance(state.get(itf.NONDET_PICKS), dict):
            raise TraceNotReplayable(f"state #{i} has no mbt::actionTaken or mbt::nondetPicks: a trace written before "
                                     f"envreplica wrote Quint's mbt variables; write it again (envreplica check / "
                                     f"conformance --out)")
        if kind == "init":
            continue
        out.append((i, kind, {k: itf.itf_to_json(v) for k, v in itf.picks_of(state).items()}))
    return out


# ---------------------------------------------------------------------------
# The replica's
# ---------------------------------------------------------------------------


def replica_requests(doc: dict) -> tuple[list[dict], list[str]]:
    """The adapter requests a replica trace's actions are, and the actions skipped (why)."""
    meta = itf.meta_of(doc)
    lockstep = "request" in (doc.get("vars") or [])
    requests: list[dict] = []
    skipped: list[str] = []
    if not lockstep:  # a counterexample starts from a fresh replica
        config = {"ackPageBytes": int(meta["ackPageBytes"])} if "ackPageBytes" in meta else {}
        requests.append({"id": 1, "op": "reset", "config": config})
    for i, kind, picks in _actions(doc):
        if lockstep:
            op = kind
        elif kind == "cloud_change":
            skipped.append(f"#{i} cloud_change (the cloud's move, not the replica's: none of its requests)")
            continue
        elif kind == "crash_after":
            inner = str(picks.pop("action", ""))
            op = itf.OP_OF_KIND.get(inner, "")
            if op not in ("page", "delivery"):
                raise TraceNotReplayable(f"state #{i}: a crash after a commit of {inner or 'an unnamed action'}, "
                                         f"which no adapter request asks for (a page's or a delivery's can)")
        elif kind in itf.OP_OF_KIND:
            op = itf.OP_OF_KIND[kind]
        else:
            raise TraceNotReplayable(f"state #{i}: a {kind} (mbt::actionTaken), which the adapter protocol cannot "
                                     f"ask for (a resume is a value-store read the model held open; the lockstep's "
                                     f"traces, written by `envreplica conformance --out`, replay through any "
                                     f"adapter)")
        requests.append({"id": len(requests) + 1, "op": op, **picks})
    return requests, skipped


def replay_replica(doc: dict, command: str, variant: str, timeout: float = 30.0) -> ReplayResult:
    """Replay a replica trace through the adapter ``command``, beside the model of ``variant``."""
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.external import SubprocessDriver
    from envreplica.conformance.replica import format_steps, replay_steps

    requests, skipped = replica_requests(doc)
    impl = SubprocessDriver(command, timeout=timeout)
    try:
        steps, divergence = replay_steps(requests, impl, ModelDriver(variant))
    finally:
        impl.close()
    reason = divergence["reason"] if divergence else None
    text = format_steps(steps, reason, header=f"replayed {len(steps)} of {len(requests)} requests through the "
                                              f"adapter beside the model (variant {variant}):")
    return ReplayResult(itf.REPLICA, variant, len(requests), len(steps), skipped, reason, text)


# ---------------------------------------------------------------------------
# The migration's
# ---------------------------------------------------------------------------


def migration_moves(doc: dict, silent: frozenset = frozenset()) -> tuple[list, list[str]]:
    """The moves of a migration trace (``conformance.migration.sides.Move``), without the steps the adapter does
    not pause at (``silent``: the model's ``Pc`` values; such a step is taken with the step before it), and
    those left out (why)."""
    from envreplica.checker import migration as cm
    from envreplica.conformance.migration.invocations import Mode
    from envreplica.conformance.migration.sides import Move
    from envreplica.model import migration as mm

    moves, skipped = [], []
    states = doc["states"]
    silent_steps = {pc.value for pc in silent}
    for i, kind, picks in _actions(doc):
        mode = Mode(picks.pop("mode", Mode.THREAD.value))
        try:
            action = cm.action_of(kind, picks)
        except (TypeError, ValueError) as error:
            raise TraceNotReplayable(f"state #{i}: {error}") from None
        if isinstance(action, mm.Step):
            before = states[i - 1].get("procs") or []
            pc = next((p.get("pc") for p in before if isinstance(p, dict) and p.get("pid") == action.pid), None)
            if pc in silent_steps:
                skipped.append(f"#{i} step {pc} of invocation {action.pid} (the adapter takes it with the step "
                               f"before it)")
                continue
        moves.append(Move(action, mode))
    return moves, skipped


def replay_migration(doc: dict, command: str, variant: str, timeout: float = 30.0) -> ReplayResult:
    """Replay a migration trace through the adapter ``command`` (docs/protocol.md section 11), beside the model
    of ``variant`` at the bounds the adapter's declaration gives (``AdapterShared``)."""
    from envreplica.conformance.migration.adapter_side import AdapterShared
    from envreplica.conformance.migration.run import replay_moves
    from envreplica.conformance.migration.traces import format_moves
    from envreplica.model.migration import MigrationVariant

    shared = AdapterShared(command, MigrationVariant(variant), timeout=timeout)
    try:
        moves, skipped = migration_moves(doc, shared.silent)
        found, example = replay_moves(shared, moves)
    finally:
        shared.close()
    taken = list(example.moves)
    if len(taken) < len(moves) and found is None:
        skipped.append(f"{len(moves) - len(taken)} moves the model does not enable at the adapter's bounds")
    reason = found.reason if found is not None else None
    text = format_moves(taken, example.lines, reason or "none: the adapter agrees with the model at every move",
                        header=f"replayed {len(taken)} of {len(moves)} moves through the adapter beside the model "
                               f"(variant {variant}):")
    return ReplayResult("migration", variant, len(moves), len(taken), skipped, reason, text)


#: Each protocol's replay through an adapter: ``function(doc, command, variant, timeout) -> ReplayResult``.
REPLAYERS: dict[str, Callable[..., ReplayResult]] = {"replica": replay_replica, "migration": replay_migration}


def replay(path: Path, command: str, variant: Optional[str] = None, timeout: float = 30.0,
           protocol: Optional[str] = None) -> ReplayResult:
    """Replay the trace at ``path`` through ``command`` under ``variant`` (default: the trace's ``#meta.variant``,
    else ``fixed``); ``protocol``, when given, is the one the adapter speaks (a trace of another is refused)."""
    doc = load(path)
    found = protocol_of(doc)
    if found not in REPLAYERS:
        raise TraceNotReplayable(f"{path}: a trace of protocol {found!r}, which no replay here speaks "
                                 f"({', '.join(REPLAYERS)})")
    if protocol is not None and found != protocol:
        raise TraceNotReplayable(f"{path}: a trace of the {found} protocol, but the adapter speaks the {protocol} "
                                 f"one (--envreplica-protocol {protocol})")
    return REPLAYERS[found](doc, command, str(variant or itf.meta_of(doc).get("variant") or "fixed"), timeout)


__all__ = ["REPLAYERS", "ReplayResult", "TraceNotReplayable", "load", "migration_moves", "replay",
           "replica_requests"]
