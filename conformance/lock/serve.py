"""The project's own lock adapters: ``envreplica adapter --protocol lock --impl lock|model``.

Models: the server side of the lock adapter protocol (docs/protocol.md, section 12) for two implementations:
``lock``, the project's (``impl.lock``, the CLAIM design: the lockstep's threads, ``threads.ThreadSide``, or with
``--side processes`` its forked processes, ``forked.ProcessSide``, on a real directory, paused at every step, the
harness's world of pids answering the probes), and ``model``, the lock model
itself under a variant, optionally less one fix (``ModelServer``: for testing the harness, as the reference
answer of every op, and to show which finding a divergence is). Each reads JSON lines on standard input and
answers each on standard output, in order, until end of input.

Errors (docs/protocol.md, 12.5): a line that is not one JSON object with an integer ``id`` is ``invalid`` with
``"id": null``; an ``op`` that is no string ``invalid``, a string that is no op ``unsupported``; a malformed field
``invalid``; a move the model does not enable where the moves since ``reset`` left it (a step of a process that is
idle or dead, a ``leave`` of one not inside, a ``reap`` of one not a zombie, a ``reuse-pid`` of a pid not free)
``invalid``; ``internal`` is the adapter's own failure (a traceback on standard error, the loop goes on).

Leaves out on purpose: ``reset`` of a lock the model does not start from (an owner that is alive, an empty or
garbage ``owner.json``, a left-over ``L.stale-*``): ``unsupported`` here (the JavaScript kit stages them).
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import replace
from typing import IO, Any, Optional, Union, cast

from envreplica.conformance.lock import harness
from envreplica.conformance.lock import protocol
from envreplica.conformance.lock.example import observe_model
from envreplica.conformance.lock.sides import Side
from envreplica.conformance.lock.threads import ThreadSide
from envreplica.conformance.migration.protocol import MISSING, shown
from envreplica.conformance.migration.serve import _error, _lines, _read
from envreplica.impl import lock as il
from envreplica.model import lock as ml
from envreplica.spec import lock as sl

#: How many calls, kills and reused pids the model adapter takes: more than any session asks.
ADAPTER_COUNT = 1_000_000


class InvalidRequest(ValueError):
    """A request that breaks section 12's rules (a malformed field, a move out of order): answered ``invalid``."""


class Unsupported(Exception):
    """An op, or a first state, this adapter does not offer: answered ``unsupported``."""


def _int(request: dict[str, Any], key: str, low: int = 0) -> int:
    value = request.get(key, MISSING)
    if type(value) is not int or value < low:
        raise InvalidRequest(f"{request.get('op')}: {key!r} must be an integer >= {low}, not "
                             f"{'absent' if value is MISSING else shown(value)}")
    return value


def _slot(request: dict[str, Any], processes: int) -> int:
    slot = _int(request, "process")
    if slot >= processes:
        raise InvalidRequest(f"{request.get('op')}: 'process' {slot} names no process (reset made {processes})")
    return slot


def _reset_fields(request: dict[str, Any]) -> tuple[list[tuple[int, int, int]], int, Optional[dict[str, Any]]]:
    """``reset``'s processes ((pid, start, ns) each), tries, and its lock (None: absent)."""
    procs = request.get("processes", MISSING)
    if not isinstance(procs, list) or not procs:
        raise InvalidRequest(f"reset: 'processes' must be a non-empty list of {{pid, start, ns}}, not "
                             f"{'absent' if procs is MISSING else shown(procs)}")
    out = []
    for p in procs:
        if not isinstance(p, dict):
            raise InvalidRequest(f"reset: each process is {{pid, start, ns}}, not {shown(p)}")
        out.append((_int({**p, "op": "reset"}, "pid", 1), _int({**p, "op": "reset"}, "start", 1),
                    _int({**p, "op": "reset"}, "ns")))
    tries = _int(request, "maxTries")
    lock = request.get("lock", {"state": "absent"})
    if not isinstance(lock, dict) or lock.get("state") not in ("absent", "owner", "empty-dir", "empty-owner",
                                                               "garbage-owner", "left-over"):
        raise InvalidRequest(f"reset: 'lock' must be {{state: absent | owner | empty-dir | empty-owner | "
                             f"garbage-owner | left-over, ...}}, not {shown(lock)}")
    if lock["state"] == "absent":
        return out, tries, None
    if lock["state"] != "owner":
        raise Unsupported(f"reset: a lock {lock['state']!r} is no first state of the model (the JavaScript kit "
                          f"stages it; this adapter starts from an absent lock or a dead owner's)")
    for key in ("pid", "start", "ns"):
        _int({**lock, "op": "reset"}, key, 1 if key != "ns" else 0)
    return out, tries, lock


class _Server:
    """The ops on one implementation's side; made afresh by ``reset``."""

    decl: protocol.Declaration

    def handle(self, request: dict[str, Any]) -> Any:
        op = request["op"]
        if op == "hello":
            asked = request.get("protocol", MISSING)
            if asked != protocol.PROTOCOL:
                raise InvalidRequest(f"hello: 'protocol' must be {json.dumps(protocol.PROTOCOL)}, not "
                                     f"{'absent' if asked is MISSING else shown(asked)}")
            return protocol.hello_of(self.decl)
        if op == "reset":
            self.reset(*_reset_fields(request))
            return {}
        if not self.ready():
            raise InvalidRequest(f"{op}: send reset first")
        return self.move(op, request)

    def ready(self) -> bool:
        raise NotImplementedError

    def reset(self, procs: list[tuple[int, int, int]], tries: int, lock: Optional[dict[str, Any]]) -> None:
        raise NotImplementedError

    def move(self, op: str, request: dict[str, Any]) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ModelServer(_Server):
    """The lock model under ``fixes`` (a variant's, or a variant's less some) as an adapter."""

    def __init__(self, fixes: frozenset[ml.Fix], name: str) -> None:
        claimed = ml.Fix.CLAIMED_TAKEOVER in fixes or ml.Fix.CLAIMED_RELEASE in fixes
        self.fixes = fixes
        cfg = ml.LockBounds("adapter", fixes=fixes)
        design = "claim" if claimed else "seed"
        silent = ml.silent_steps(cfg)
        steps = {pc.value for pc in (ml.Pc if claimed else protocol.SEED_STEPS)
                 if pc not in silent | {ml.Pc.IDLE, ml.Pc.LEAVE}}
        self.decl = protocol.Declaration(f"envreplica model.lock ({name})", design, frozenset(steps), None,
                                         frozenset(protocol.WORLD), claimed)
        self.cfg: Optional[ml.LockBounds] = None
        self.st: Optional[ml.LockState] = None
        self.nonces: dict[tuple[int, int], str] = {}  # instance -> nonce
        self.busy: dict[int, Optional[sl.Busy]] = {}

    def ready(self) -> bool:
        return self.st is not None

    def reset(self, procs: list[tuple[int, int, int]], tries: int, lock: Optional[dict[str, Any]]) -> None:
        namespaces = procs[-1][2] == 1 and len(procs) > 1
        cfg = ml.LockBounds("adapter", processes=len(procs), calls=ADAPTER_COUNT, crashes=ADAPTER_COUNT,
                            reuses=ADAPTER_COUNT, zombies=False, namespaces=namespaces, max_tries=tries,
                            effects=frozenset(sl.Effect), stale=lock is not None, fixes=self.fixes)
        first = ml.init(cfg)
        want = [(p.pid, p.start, p.ns) for p in first.procs]
        if want != procs:
            raise Unsupported(f"reset: the model's processes are {want} (pid, start, ns), not {procs}")
        if lock is not None and (lock["pid"], lock["start"], lock["ns"]) != (ml.GONE_PID, 1, 0):
            raise Unsupported(f"reset: the model's dead owner is pid {ml.GONE_PID}, start 1, namespace 0")
        self.cfg, self.st, self.busy = cfg, first, {}
        self.nonces = {(ml.GONE, 0): str(lock.get("nonce", protocol.GONE_NONCE))} if lock is not None else {}

    def _enabled(self, action: ml.Action, request: dict[str, Any]) -> None:
        assert self.cfg is not None and self.st is not None
        if isinstance(action, ml.Step):
            ok = any(isinstance(a, ml.Step) and a.slot == action.slot for a in ml.enabled(self.cfg, self.st))
        else:
            ok = action in set(ml.enabled(self.cfg, self.st))
        if not ok:
            raise InvalidRequest(f"{request['op']}: out of order: {ml.describe_action(action)} is not a move the "
                                 f"model takes now ({ml.describe_state(self.st)})")

    def move(self, op: str, request: dict[str, Any]) -> Any:
        cfg, st = self.cfg, self.st
        assert cfg is not None and st is not None
        if op == "observe":
            return protocol.observation_json(observe_model(cfg, st), self.nonces)
        n = len(st.procs)
        action: ml.Action
        if op == "spawn":
            action = ml.Start(_slot(request, n))
        elif op == "step":
            slot = _slot(request, n)
            action = ml.Step(slot, self._choice(st, slot))
            if st.procs[slot].pc is ml.Pc.TICKET_READDIR:
                nonce = request.get("nonce")
                if not isinstance(nonce, str):
                    raise InvalidRequest(f"step: process {slot} draws its nonce now: 'nonce' must be a string, not "
                                         f"{shown(nonce)}")
                self.nonces[(slot, st.procs[slot].call)] = nonce
        elif op == "leave":
            try:
                action = ml.Leave(_slot(request, n), protocol.effect_of(request.get("effect")))
            except protocol.ProtocolError as error:
                raise InvalidRequest(f"leave: {error}") from None
        elif op == "kill":
            zombie = request.get("zombie", False)
            if not isinstance(zombie, bool):
                raise InvalidRequest(f"kill: 'zombie' must be a boolean, not {shown(zombie)}")
            action = ml.Crash(_slot(request, n))
            cfg = replace(cfg, zombies=zombie)
        elif op == "reap":
            action = ml.Reap(_slot(request, n))
        elif op == "reuse-pid":
            action = ml.Reuse(_int(request, "ns"), _int(request, "pid", 1))
        else:
            raise Unsupported(f"unknown op {shown(op)} (the ops: {', '.join(protocol.OPS)})")
        if not isinstance(action, ml.Crash):
            self._enabled(action, request)
        if isinstance(action, ml.Crash) and st.procs[action.slot].status is not sl.Status.RUNNING:
            raise InvalidRequest(f"kill: process {action.slot} is not running")
        if isinstance(action, ml.Crash) and st.procs[action.slot].pc is ml.Pc.IDLE:
            raise InvalidRequest(f"kill: process {action.slot} is between calls (the model kills a process inside "
                                 f"a call)")
        pc = st.procs[action.slot].pc if isinstance(action, ml.Step) else None
        post, result = ml.next_state(cfg, st, action)
        self.st = post
        if isinstance(action, (ml.Crash, ml.Reap, ml.Reuse)):
            return {}
        return protocol.event_json(self._event(action, pc, result))

    def _choice(self, st: ml.LockState, slot: int) -> int:
        """A ticket's place among its seq: after the tickets whose nonces order before its own."""
        proc = st.procs[slot]
        if proc.pc is not ml.Pc.TICKET_MKDIR:
            return 0
        mine = self.nonces.get((slot, proc.call), "")
        before = [t.rank for t in st.fs.tickets if t.seq == proc.seq and self.nonces.get(t.instance, "") < mine]
        return min(max(before) + 1 if before else 0, ml.ticket_places(st, proc) - 1)

    def _event(self, action: ml.Action, pc: Optional[ml.Pc], result: ml.Result) -> harness.Event:
        assert self.st is not None
        slot = getattr(action, "slot")
        busy = getattr(result, "busy", None)
        if busy is not None:
            self.busy[slot] = busy
        taken: tuple[str, ...] = ()
        calls: tuple[Optional[str], ...] = ()
        if isinstance(action, ml.Step) and pc is not None:
            taken, calls = (pc.value,), (getattr(result, "call").value,)
        elif isinstance(action, ml.Leave):
            taken, calls = (ml.Pc.LEAVE.value,), (sl.Call.LEAVE.value,)
        proc = self.st.procs[slot]
        if isinstance(result, sl.Ended):
            decided = self.busy.pop(slot, None)
            nonce = None
            if result.answer is sl.Answer.BUSY and decided is not None and decided.slot is not None:
                holder = decided.slot
                call = 0 if holder == ml.GONE else self.st.procs[holder].call
                nonce = self.nonces.get((holder, call))
            ended = harness.Ended(result.answer, busy_nonce=nonce,
                                  busy_judged=decided.provable if decided is not None else True,
                                  busy_named=self.decl.busy_names)
            return harness.Event(taken, calls, None, ended)
        if proc.pc is ml.Pc.LEAVE:
            return harness.Event(taken, calls, harness.INSIDE)
        path = None
        if proc.pc is ml.Pc.TICKET_MKDIR:
            nonce = self.nonces.get((slot, proc.call), "")
            path = f"lock.t.{proc.seq:08d}.{nonce}.{proc.pid}.{proc.start}.{harness.PIDNS_BASE + proc.ns}"
        return harness.Event(taken, calls, proc.pc.value, path=path)


class ImplServer(_Server):
    """``impl.lock`` (the CLAIM design) as an adapter: its lock users the harness's threads, or processes forked
    from it (``side``: ``sides.Side``)."""

    def __init__(self, side: Side = Side.THREADS) -> None:
        cfg = ml.LockBounds("adapter")
        self.pause = harness.paused_at(cfg)
        self.kind = side.kind
        named = "" if side is Side.THREADS else f", lock users in {side.value}"
        self.decl = protocol.Declaration(f"envreplica impl.lock (the CLAIM design{named})", "claim",
                                         frozenset(s.value for s in self.pause), None, frozenset(protocol.WORLD), True)
        self.side: Optional[ThreadSide] = None
        self.procs: list[tuple[int, int, int]] = []
        self.state: dict[int, str] = {}  # slot -> "idle", "running", "inside", "dead"
        self.instances: dict[str, tuple[int, int]] = {}

    def ready(self) -> bool:
        return self.side is not None

    def reset(self, procs: list[tuple[int, int, int]], tries: int, lock: Optional[dict[str, Any]]) -> None:
        self.close()
        self.instances = {}
        stale = None
        if lock is not None:
            stale = il.Owner(lock["pid"], lock["start"], harness.PIDNS_BASE + lock["ns"],
                             str(lock.get("nonce", protocol.GONE_NONCE)))
        self.procs = procs
        self.side = self.kind([(slot, *p) for slot, p in enumerate(procs)], tries, self.pause, stale,
                              self.instances)
        self.state = {slot: "idle" for slot in range(len(procs))}
        if stale is not None:  # the harness names the stale lock's nonce itself: the observation shows the nonce
            self.instances.pop(stale.nonce, None)

    def move(self, op: str, request: dict[str, Any]) -> Any:
        side = self.side
        assert side is not None
        if op == "observe":
            return protocol.observation_json(side.observe(), {})
        n = len(self.procs)
        if op == "reuse-pid":
            ns, pid = _int(request, "ns"), _int(request, "pid", 1)
            if (ns, pid) in side.world.occupants:
                raise InvalidRequest(f"reuse-pid: pid {pid} of namespace {ns} is not free")
            side.reuse(ns, pid)
            return {}
        slot = _slot(request, n)
        pid, start, ns = self.procs[slot]
        now = self.state[slot]
        if op == "spawn":
            self._need(now, ("idle",), op, slot)
            return self._event(slot, side.start(slot))
        if op == "step":
            self._need(now, ("running",), op, slot)
            nonce = request.get("nonce")
            if nonce is not None and not isinstance(nonce, str):
                raise InvalidRequest(f"step: 'nonce' must be a string, not {shown(nonce)}")
            if nonce is not None:  # the observation shows the names it makes by their nonces
                self.instances[nonce] = cast(tuple[int, int], ("?", nonce))
            return self._event(slot, side.step(slot, nonce))
        if op == "leave":
            self._need(now, ("inside",), op, slot)
            try:
                effect = protocol.effect_of(request.get("effect"))
            except protocol.ProtocolError as error:
                raise InvalidRequest(f"leave: {error}") from None
            return self._event(slot, side.leave(slot, effect))
        if op == "kill":
            zombie = request.get("zombie", False)
            if not isinstance(zombie, bool):
                raise InvalidRequest(f"kill: 'zombie' must be a boolean, not {shown(zombie)}")
            self._need(now, ("running", "inside"), op, slot)
            side.kill(slot, ns, pid, zombie)
            self.state[slot] = "dead"
            return {}
        if op == "reap":
            if side.world.occupants.get((ns, pid), (0, False))[1] is not True or now != "dead":
                raise InvalidRequest(f"reap: out of order: process {slot} is not a zombie")
            side.reap(slot, ns, pid)
            return {}
        raise Unsupported(f"unknown op {shown(op)} (the ops: {', '.join(protocol.OPS)})")

    @staticmethod
    def _need(now: str, allowed: tuple[str, ...], op: str, slot: int) -> None:
        if now not in allowed:
            raise InvalidRequest(f"{op}: out of order: process {slot} is {now}")

    def _event(self, slot: int, event: harness.Event) -> Any:
        self.state[slot] = "idle" if event.at is None else "inside" if event.at == harness.INSIDE else "running"
        return protocol.event_json(event)

    def close(self) -> None:
        if self.side is not None:
            self.side.close()
            self.side = None


def respond(server: _Server, line: Union[bytes, str]) -> dict[str, Any]:
    """The answer to one request line (docs/protocol.md, 12.5): a result, or an error; never raises."""
    request, unread = _read(line)
    if unread is not None:
        return _error(None, "invalid", unread)
    if not isinstance(request, dict):
        return _error(None, "invalid", f"a request is a JSON object with an integer 'id' and a string 'op', not "
                                       f"{shown(request)}")
    rid = request.get("id", MISSING)
    if type(rid) is not int:
        return _error(None, "invalid", f"'id' must be a JSON integer (not a boolean, a float or a string), not "
                                       f"{'absent' if rid is MISSING else shown(rid)}")
    op = request.get("op", MISSING)
    if not isinstance(op, str):
        return _error(rid, "invalid", f"'op' must be a string naming an op, not "
                                      f"{'absent' if op is MISSING else shown(op)}")
    if op not in protocol.OPS:
        return _error(rid, "unsupported", f"unknown op {shown(op)} (the ops: {', '.join(protocol.OPS)})")
    try:
        result = server.handle(request)
        json.dumps(result)
    except Unsupported as error:
        return _error(rid, "unsupported", str(error))
    except InvalidRequest as error:
        return _error(rid, "invalid", str(error))
    except Exception as error:  # the adapter's own failure: said, and the loop goes on
        traceback.print_exc(file=sys.stderr)
        return _error(rid, "internal", f"{type(error).__name__}: {error}")
    return {"id": rid, "ok": True, "result": result}


def serve(server: _Server, stdin: IO[Any], stdout: IO[str]) -> int:
    """Answer each request line of ``stdin`` (bytes or text) on ``stdout`` until end of input; 0."""
    try:
        for line in _lines(stdin):
            stdout.write(json.dumps(respond(server, line)) + "\n")
            stdout.flush()
    finally:
        server.close()
    return 0


__all__ = ["ImplServer", "InvalidRequest", "ModelServer", "Unsupported", "respond", "serve"]
