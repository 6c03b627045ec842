"""The project's own migration adapters: ``envreplica adapter --protocol migration --impl paired|model``.

Models: the server side of the migration adapter protocol (docs/protocol.md, section 11) for two
implementations: ``paired``, the project's implementation (``impl.paired``: real stores on disk, real
``migrate`` and ``recover`` invocations paused at every step, a real foreign writer process: the lockstep's
``RealSide``), and ``model``, the migration model itself under a variant (``ModelSide``: for testing the
harness, and as the reference answer of every op). Each reads JSON lines on standard input and answers each
on standard output, in order, until end of input.

Leaves out on purpose: ``reset`` with other stores than the model's first state (the model starts from two
version-1 stores, open, nothing published; every other state is reached by moves), and the faults and modes
an implementation did not declare (answered ``unsupported``).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import IO, Any, Optional

from envreplica.conformance.migration.observe import Outcome
from envreplica.conformance.migration.protocol import (
    PROTOCOL,
    Declaration,
    action_of,
    event_of,
    hello_of,
    observation_json,
)
from envreplica.conformance.migration.sides import LOCKSTEP_BOUNDS, SILENT, ModelSide, Move
from envreplica.model import migration as mm
from envreplica.spec.migration import Base, Data, Image

#: The ops a server knows (docs/protocol.md, 11.2).
OPS = frozenset({"hello", "reset", "invoke", "step", "crash", "connect", "write", "disconnect", "lock", "unlock",
                 "readOnly", "edit", "repair", "moveAway", "observe"})


class Unsupported(Exception):
    """An op, a fault or a mode this adapter does not offer."""


def paired_declaration(modes: tuple[str, ...] = ("thread", "fork")) -> Declaration:
    """What ``impl.paired`` declares: the lockstep's readings and faults, its own order, its exit statuses."""
    cfg = LOCKSTEP_BOUNDS
    return Declaration(
        implementation="envreplica impl.paired", steps=frozenset(mm.Pc) - SILENT, reading=cfg.reading,
        evidence_first=True, faults=frozenset(mm.Fault), input_faults=frozenset(mm.InputFault) - {mm.InputFault.NONE},
        exit_status=True, modes=modes)


def model_declaration(variant: mm.MigrationVariant) -> Declaration:
    """What the model declares: every step, the lockstep's readings and faults (the fixed order under ``fixed``)."""
    cfg = LOCKSTEP_BOUNDS
    return Declaration(
        implementation=f"envreplica model.migration (variant {variant.value})", steps=frozenset(mm.Pc),
        reading=cfg.reading, evidence_first=variant is mm.MigrationVariant.FIXED, faults=frozenset(mm.Fault),
        input_faults=frozenset(mm.InputFault) - {mm.InputFault.NONE}, exit_status=True, modes=("process",))


class _Server:
    """The ops on one implementation's side; ``side`` is made afresh by ``reset``."""

    def __init__(self, decl: Declaration) -> None:
        self.decl = decl
        self.side: Any = None

    def new_side(self, images: Optional[tuple[Image, ...]] = None) -> Any:
        """A fresh side: the model's first state, or two open stores holding ``images``."""
        raise NotImplementedError

    def connected(self) -> int:
        """The store the foreign writer is connected to (0 when none: the op is then a no-op or refused)."""
        return 0

    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "hello":
            if request.get("protocol") != PROTOCOL:
                raise ValueError(f"hello: this adapter speaks {PROTOCOL!r}, not {request.get('protocol')!r}")
            return hello_of(self.decl)
        if op == "reset":
            images = images_of(request.get("stores"))
            self.close()
            self.side = self.new_side(images)
            return {}
        if self.side is None:
            raise ValueError(f"{op}: send reset first")
        if op == "observe":
            return observation_json(self.side.observe())
        action = action_of(request)
        self._check_declared(action, request)
        if isinstance(action, mm.Write):
            action = mm.Write(self.connected(), action.version)
        elif isinstance(action, (mm.Disconnect, mm.Lock, mm.Unlock)):
            action = type(action)(self.connected())
        outcome, message = self.take(action, request.get("mode"))
        if outcome.kind == "started":
            return {"invocation": self.started() - 1}
        if outcome.kind == "write":
            return {"write": outcome.code}
        if outcome.kind in ("step", "exit"):
            return event_of(outcome, message)
        return {}

    def _check_declared(self, action: mm.Action, request: dict[str, Any]) -> None:
        fault = {mm.Lock: mm.Fault.LOCK, mm.Unlock: mm.Fault.LOCK, mm.ReadOnly: mm.Fault.READ_ONLY,
                 mm.Writable: mm.Fault.READ_ONLY, mm.Edit: mm.Fault.EDIT, mm.Repair: mm.Fault.EDIT,
                 mm.MoveAway: mm.Fault.MOVE_AWAY}.get(type(action))
        if fault is not None and fault not in self.decl.faults:
            raise Unsupported(f"{request['op']}: fault {fault.value!r} is not declared")
        if isinstance(action, mm.Invoke):
            if action.fault is not mm.InputFault.NONE and action.fault not in self.decl.input_faults:
                raise Unsupported(f"invoke: input fault {action.fault.value!r} is not declared")
            mode = request.get("mode")
            if mode is not None and mode not in self.decl.modes:
                raise Unsupported(f"invoke: mode {mode!r} is not one of {', '.join(self.decl.modes)}")

    def take(self, action: mm.Action, mode: Optional[str]) -> tuple[Outcome, str]:
        raise NotImplementedError

    def started(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        if self.side is not None:
            self.side.close()
            self.side = None


class PairedServer(_Server):
    """``impl.paired`` for real (the lockstep's ``RealSide``, one ``Shared`` for the adapter's life)."""

    def __init__(self, modes: tuple[str, ...] = ("thread", "fork")) -> None:
        super().__init__(paired_declaration(modes))
        from envreplica.conformance.migration.example import Shared

        self.shared = Shared()

        self._connected = 0  # the store the foreign writer last connected to

    def new_side(self, images: Optional[tuple[Image, ...]] = None) -> Any:
        self._connected = 0
        side = self.shared.real_side(read_only=True)
        if images is not None:
            try:
                for i, image in enumerate(images):
                    side.disk.set_store(i, image)
            except ValueError as error:
                side.close()
                raise Unsupported(str(error)) from None
        return side

    def connected(self) -> int:
        return self._connected

    def take(self, action: mm.Action, mode: Optional[str]) -> tuple[Outcome, str]:
        from envreplica.conformance.migration.invocations import Mode

        if isinstance(action, mm.Connect):
            self._connected = action.store
        side = self.side
        if isinstance(action, mm.Step) and action.pid not in side.invocations:
            raise ValueError(f"step: invocation {action.pid} is not running")
        if isinstance(action, mm.Crash) and action.pid not in side.invocations:
            raise ValueError(f"crash: invocation {action.pid} is not running")
        outcome = side.apply(Move(action, Mode(mode or self.decl.modes[0])))
        message = side.message(action.pid) if isinstance(action, mm.Step) and outcome.kind == "exit" else ""
        return outcome, message

    def started(self) -> int:
        return int(self.side.started)

    def shutdown(self) -> None:
        self.close()
        self.shared.close()


class ModelServer(_Server):
    """The model itself, under a variant: every move checked enabled first."""

    def __init__(self, variant: mm.MigrationVariant) -> None:
        super().__init__(model_declaration(variant))
        fixes = frozenset(mm.Fix) if variant is mm.MigrationVariant.FIXED else frozenset()
        self.cfg = mm.MigrationBounds(f"adapter ({variant.value})", migrations=LOCKSTEP_BOUNDS.migrations,
                                      recoveries=LOCKSTEP_BOUNDS.recoveries, crashes=LOCKSTEP_BOUNDS.crashes,
                                      writes=LOCKSTEP_BOUNDS.writes, fixes=fixes, reading=LOCKSTEP_BOUNDS.reading,
                                      faults=LOCKSTEP_BOUNDS.faults, fault_actions=LOCKSTEP_BOUNDS.fault_actions)
        self.count = 0

    def new_side(self, images: Optional[tuple[Image, ...]] = None) -> Any:
        self.count = 0
        side = ModelSide(self.cfg, silent=frozenset())
        if images is not None:
            side.st = mm.init_with(self.cfg, images)
        return side

    def connected(self) -> int:
        return next((i for i, s in enumerate(self.side.st.stores) if s.writer), 0)

    def take(self, action: mm.Action, mode: Optional[str]) -> tuple[Outcome, str]:
        if isinstance(action, (mm.Disconnect, mm.Unlock)) and not self.side.is_enabled(action):
            return Outcome("ok"), ""  # nothing to undo: nothing happens (as for real)
        if not self.side.is_enabled(action):
            raise ValueError(f"{mm.describe_action(action, self.side.st)}: not possible in this state "
                             f"({mm.describe_state(self.side.st)})")
        if isinstance(action, mm.Invoke):
            self.count += 1
        return self.side.apply(action), ""

    def started(self) -> int:
        return self.count

    def close(self) -> None:
        self.side = None

    def shutdown(self) -> None:
        self.close()


def images_of(stores: Any) -> Optional[tuple[Image, ...]]:
    """``reset``'s ``stores`` (two ``{"version", "data"}``) as the model's images; None when not given."""
    if stores is None:
        return None
    if not isinstance(stores, list) or len(stores) != 2:
        raise ValueError("reset: 'stores' must be two stores (run, resource), each {\"version\", \"data\"}")
    out = []
    for s in stores:
        if not isinstance(s, dict) or set(s) != {"version", "data"} or s["version"] not in (1, 2) \
                or s["data"] not in ("original", "migrated"):
            raise ValueError(f"reset: a store is {{\"version\": 1 or 2, \"data\": \"original\" or \"migrated\"}}, "
                             f"not {s!r}")
        out.append(Image(s["version"], Data(Base(s["data"]))))
    return tuple(out)


def serve(server: _Server, stdin: IO[str], stdout: IO[str]) -> int:
    """Answer each request line of ``stdin`` on ``stdout`` until end of input; 0."""
    try:
        for line in stdin:
            if not line.strip():
                continue
            rid: Any = None
            try:
                request = json.loads(line)
                if not isinstance(request, dict) or not isinstance(request.get("id"), int):
                    raise ValueError("a request is a JSON object with an integer id")
                rid = request["id"]
                if request.get("op") not in OPS:
                    raise Unsupported(f"unknown op {request.get('op')!r} (the ops: {', '.join(sorted(OPS))})")
                response = {"id": rid, "ok": True, "result": server.handle(request)}
            except Unsupported as error:
                response = {"id": rid, "ok": False, "error": {"type": "unsupported", "message": str(error)}}
            except (ValueError, KeyError) as error:
                response = {"id": rid, "ok": False, "error": {"type": "invalid", "message": str(error)}}
            except Exception as error:  # the adapter's own failure: said, and the loop goes on
                traceback.print_exc(file=sys.stderr)
                response = {"id": rid, "ok": False,
                            "error": {"type": "internal", "message": f"{type(error).__name__}: {error}"}}
            stdout.write(json.dumps(response) + "\n")
            stdout.flush()
    finally:
        getattr(server, "shutdown", server.close)()
    return 0
