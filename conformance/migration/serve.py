"""The project's own migration adapters: ``envreplica adapter --protocol migration --impl paired|model``.

Models: the server side of the migration adapter protocol (docs/protocol.md, section 11) for two
implementations: ``paired``, the project's implementation (``impl.paired``: real stores on disk, real
``migrate`` and ``recover`` invocations paused at every step, a real foreign writer process: the lockstep's
``RealSide``), and ``model``, the migration model itself under a variant (``ModelSide``: for testing the
harness, and as the reference answer of every op). Each reads JSON lines on standard input and answers each
on standard output, in order, until end of input.

Errors (docs/protocol.md, 11.6): a line that is not one JSON object in UTF-8 (nested deeper than the parser
goes included), or without an integer ``id`` (a boolean is not one), is ``invalid`` with ``"id": null``; an
``op`` that is no string is ``invalid``, a string that is no op ``unsupported``; a malformed field is
``invalid`` (``protocol.action_of``), and so is a move out of order (``out_of_order``: the same rules on the
model's state and on the files, so that both servers answer every line alike), while a move that has nothing
to undo (``disconnect`` with no writer, ``unlock`` with no transaction) is ``{}`` and does nothing. Every
message names the field or the rule and shows the value it got, bounded (``protocol.shown``, ``MAX_MESSAGE``).
``internal`` is left for the adapter's own failures (a traceback on standard error, the loop goes on).

Leaves out on purpose: ``reset`` with other stores than the model's first state (the model starts from two
version-1 stores, open, nothing published; every other state is reached by moves), and the faults and modes
an implementation did not declare (answered ``unsupported``). The model adapter is not bounded as the
lockstep is (``ADAPTER_COUNT`` invocations, crashes, writes and faults), so that it refuses no move
``impl.paired`` takes.
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import dataclass
from typing import IO, Any, Iterable, Optional, Union

from envreplica.conformance.migration.observe import Outcome
from envreplica.conformance.migration.protocol import (
    MISSING,
    PROTOCOL,
    STORE_NAMES,
    Declaration,
    InvalidRequest,
    action_of,
    event_of,
    hello_of,
    observation_json,
    shown,
)
from envreplica.conformance.migration.sides import LOCKSTEP_BOUNDS, SILENT, ModelSide, Move
from envreplica.model import migration as mm
from envreplica.spec.migration import Base, Data, Image

#: The ops a server knows (docs/protocol.md, 11.2).
OPS = frozenset({"hello", "reset", "invoke", "step", "crash", "connect", "write", "disconnect", "lock", "unlock",
                 "readOnly", "edit", "repair", "moveAway", "observe"})


#: The longest error message an answer carries (a longer one is cut): docs/protocol.md, 11.6.
MAX_MESSAGE = 200
#: What a foreign write may come to (section 11.2).
WRITE_WORDS = ("landed", "fence", "read-only")
#: How many invocations, crashes, writes and faults the model adapter takes: more than any session asks.
ADAPTER_COUNT = 1_000_000


class Unsupported(Exception):
    """An op, a fault or a mode this adapter does not offer."""


def paired_declaration(modes: tuple[str, ...] = ("thread", "fork"), read_only: bool = True) -> Declaration:
    """What ``impl.paired`` declares: the lockstep's readings and faults (``read-only`` only where a store can be
    made so: ``read_only``), its own order, its exit statuses."""
    cfg = LOCKSTEP_BOUNDS
    faults = frozenset(mm.Fault) - (frozenset() if read_only else {mm.Fault.READ_ONLY})
    return Declaration(
        implementation="envreplica impl.paired", steps=frozenset(mm.Pc) - SILENT, reading=cfg.reading,
        evidence_first=True, faults=faults, input_faults=frozenset(mm.InputFault) - {mm.InputFault.NONE},
        exit_status=True, modes=modes)


def model_declaration(variant: mm.MigrationVariant, silent: frozenset[mm.Pc] = frozenset()) -> Declaration:
    """What the model declares: every step but ``silent`` ones, the lockstep's readings and faults (the fixed
    order under ``fixed``)."""
    cfg = LOCKSTEP_BOUNDS
    return Declaration(
        implementation=f"envreplica model.migration (variant {variant.value})", steps=frozenset(mm.Pc) - silent,
        reading=cfg.reading, evidence_first=variant is mm.MigrationVariant.FIXED, faults=frozenset(mm.Fault),
        input_faults=frozenset(mm.InputFault) - {mm.InputFault.NONE}, exit_status=True, modes=("process",))


@dataclass(frozen=True)
class Situation:
    """What the order of the moves depends on, in an adapter's world (docs/protocol.md, 11.6): the same facts of
    the model's state (``ModelServer``) and of the files and processes (``PairedServer``)."""

    running: frozenset[int]  # the invocations started and not ended
    writer: Optional[int]  # the store the foreign writer is connected to (None: not connected)
    locked: bool  # it holds a write transaction
    read_only: frozenset[int]  # the stores made read-only
    backups: frozenset[int]  # the stores that have a backup file
    edited_backups: frozenset[int]  # ... edited by hand (not yet put back)
    published: frozenset[mm.Doc]  # the publications there (request, result, recovery), edited or not
    edited: frozenset[mm.Doc]  # ... edited by hand (not yet put back)


def nothing_to_undo(action: mm.Action, world: Situation) -> bool:
    """A ``disconnect`` with no writer connected, an ``unlock`` with no transaction held: ``{}``, nothing done."""
    return (isinstance(action, mm.Disconnect) and world.writer is None) or \
        (isinstance(action, mm.Unlock) and not world.locked)


def out_of_order(action: mm.Action, world: Situation) -> Optional[str]:
    """Why ``action`` cannot be taken in ``world`` (``None``: it can): the model's ``enabled`` and the lockstep's
    ``allowed``, without their bounds, in the protocol's words."""
    if isinstance(action, (mm.Step, mm.Crash)):
        if action.pid not in world.running:
            running = ", ".join(str(n) for n in sorted(world.running)) or "none"
            return f"{action.kind}: invocation {action.pid} is not running (running: {running})"
        return None
    if isinstance(action, (mm.Connect, mm.Write, mm.Lock)):
        return _writer_out_of_order(action, world)
    if isinstance(action, (mm.ReadOnly, mm.Writable)):
        name, on = STORE_NAMES[action.store], action.store in world.read_only
        if isinstance(action, mm.ReadOnly) and on:
            return f"readOnly: {name} is read-only already"
        if isinstance(action, mm.Writable) and not on:
            return f"readOnly: {name} is not read-only (nothing to undo)"
        return None
    if isinstance(action, (mm.Edit, mm.Repair)):
        return _edit_out_of_order(action, world)
    if isinstance(action, mm.MoveAway) and mm.Doc.RESULT not in world.published:
        return "moveAway: the result is not published (nothing to move away)"
    if isinstance(action, mm.Invoke) and action.fault is mm.InputFault.COPY \
            and mm.Doc.REQUEST not in world.published:
        return f"invoke: a {action.role.value} naming a copy of the request needs the request published (nothing " \
               f"to copy)"
    return None


def _writer_out_of_order(action: Union[mm.Connect, mm.Write, mm.Lock], world: Situation) -> Optional[str]:
    op = action.kind
    if isinstance(action, mm.Connect):
        if world.writer is not None:
            return f"connect: the writer is already connected to {STORE_NAMES[world.writer]} (disconnect first)"
        at = action.store
    else:
        if world.writer is None:
            return f"{op}: no writer is connected (connect first)"
        if world.locked:
            return f"{op}: the writer holds a write transaction already (unlock first)"
        at = world.writer
    if at in world.read_only:
        return f"{op}: {STORE_NAMES[at]} is read-only: a connection there writes nothing (readOnly off first)"
    return None


def _edit_out_of_order(action: Union[mm.Edit, mm.Repair], world: Situation) -> Optional[str]:
    op = "edit" if isinstance(action, mm.Edit) else "repair"
    if action.doc is mm.Doc.BACKUP:
        assert action.store is not None
        what, there = f"{STORE_NAMES[action.store]}'s backup", action.store in world.backups
        edited = action.store in world.edited_backups
        missing = f"{op}: {STORE_NAMES[action.store]} has no backup"
    else:
        what, there, edited = f"the {action.doc.value}", action.doc in world.published, action.doc in world.edited
        missing = f"{op}: {what} is not published"
    if isinstance(action, mm.Repair):
        return None if edited else f"repair: {what} is not edited (nothing to put back)"
    if not there:
        return f"{missing} (nothing to edit)"
    return f"edit: {what} is edited already (repair it first)" if edited else None


class _Server:
    """The ops on one implementation's side; ``side`` is made afresh by ``reset``."""

    def __init__(self, decl: Declaration) -> None:
        self.decl = decl
        self.side: Any = None

    def new_side(self, images: Optional[tuple[Image, ...]] = None) -> Any:
        """A fresh side: the model's first state, or two open stores holding ``images``."""
        raise NotImplementedError

    def world(self) -> Situation:
        """What the order of the moves depends on, now."""
        raise NotImplementedError

    def handle(self, request: dict[str, Any]) -> Any:
        """The result of a request whose ``id`` and ``op`` are checked (``respond``); ``InvalidRequest`` or
        ``Unsupported`` for one this adapter does not take."""
        op = request["op"]
        if op == "hello":
            protocol = request.get("protocol", MISSING)
            if protocol != PROTOCOL:
                raise InvalidRequest(f"hello: 'protocol' must be {json.dumps(PROTOCOL)} (the one this adapter speaks), "
                                     f"not {'absent' if protocol is MISSING else shown(protocol)}")
            return hello_of(self.decl)
        if op == "reset":
            images = images_of(request.get("stores"))
            self.close()
            self.side = self.new_side(images)
            return {}
        if self.side is None:
            raise InvalidRequest(f"{op}: send reset first")
        if op == "observe":
            return observation_json(self.side.observe())
        action = action_of(request)
        self._check_declared(action, request)
        world = self.world()
        if nothing_to_undo(action, world):
            return {}
        problem = out_of_order(action, world)
        if problem is not None:
            raise InvalidRequest(problem)
        if isinstance(action, mm.Write):  # the writer's moves name no store: the one it is connected to
            action = mm.Write(world.writer or 0, action.version)
        elif isinstance(action, (mm.Disconnect, mm.Lock, mm.Unlock)):
            action = type(action)(world.writer or 0)
        outcome, message = self.take(action, request.get("mode"))
        if outcome.kind == "started":
            return {"invocation": self.started() - 1}
        if outcome.kind == "write":
            if outcome.code not in WRITE_WORDS:  # the writer failed: no answer of the protocol's
                raise RuntimeError(f"write: the foreign writer could not write ({outcome.code})")
            return {"write": outcome.code}
        if outcome.kind in ("step", "exit"):
            return event_of(outcome, message)
        return {}

    def _check_declared(self, action: mm.Action, request: dict[str, Any]) -> None:
        fault = {mm.Lock: mm.Fault.LOCK, mm.Unlock: mm.Fault.LOCK, mm.ReadOnly: mm.Fault.READ_ONLY,
                 mm.Writable: mm.Fault.READ_ONLY, mm.Edit: mm.Fault.EDIT, mm.Repair: mm.Fault.EDIT,
                 mm.MoveAway: mm.Fault.MOVE_AWAY}.get(type(action))
        if fault is not None and fault not in self.decl.faults:
            raise Unsupported(f"{request['op']}: fault {shown(fault.value)} is not declared")
        if isinstance(action, mm.Invoke):
            if action.fault is not mm.InputFault.NONE and action.fault not in self.decl.input_faults:
                raise Unsupported(f"invoke: input fault {shown(action.fault.value)} is not declared")
            mode = request.get("mode", MISSING)
            if mode is not MISSING and not isinstance(mode, str):
                raise InvalidRequest(f"invoke: 'mode' must be a string (one of {', '.join(self.decl.modes)}), "
                                     f"not {shown(mode)}")
            if mode is not MISSING and mode not in self.decl.modes:
                raise Unsupported(f"invoke: 'mode' {shown(mode)} is not one of {', '.join(self.decl.modes)}")

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
        from envreplica.conformance.migration.example import Shared

        self.shared = Shared()
        super().__init__(paired_declaration(modes, read_only=self.shared.read_only_problem is None))
        self._writer: Optional[int] = None  # the store the foreign writer is connected to
        self._locked = False  # it holds a write transaction

    def new_side(self, images: Optional[tuple[Image, ...]] = None) -> Any:
        self._writer, self._locked = None, False
        side = self.shared.real_side(read_only=True)
        if images is not None:
            try:
                for i, image in enumerate(images):
                    side.disk.set_store(i, image)
            except ValueError as error:
                side.close()
                raise Unsupported(str(error)) from None
        return side

    def world(self) -> Situation:
        disk = self.side.disk
        docs = {mm.Doc.REQUEST: disk.request, mm.Doc.RESULT: disk.result, mm.Doc.RECOVERY: disk.recovery}
        backups = [disk.backup_path(i) for i in range(len(disk.stores))]
        return Situation(
            running=frozenset(self.side.invocations), writer=self._writer, locked=self._locked,
            read_only=frozenset(i for i, p in enumerate(disk.stores) if p in disk.read_only),
            backups=frozenset(i for i, p in enumerate(backups) if p.exists()),
            edited_backups=frozenset(i for i, p in enumerate(backups) if p in disk.saved),
            published=frozenset(d for d, p in docs.items() if p.exists()),
            edited=frozenset(d for d, p in docs.items() if p in disk.saved))

    def take(self, action: mm.Action, mode: Optional[str]) -> tuple[Outcome, str]:
        from envreplica.conformance.migration.invocations import Mode

        side = self.side
        outcome = side.apply(Move(action, Mode(mode or self.decl.modes[0])))
        # The files are read after every move, as the lockstep reads them: what they are in the model's words is
        # learnt from what was seen (the published request's id, the data digests), so that an observe sent
        # after many moves answers as one sent after each.
        side.observe()
        if isinstance(action, (mm.Connect, mm.Disconnect)):
            self._writer, self._locked = (action.store if isinstance(action, mm.Connect) else None), False
        elif isinstance(action, (mm.Lock, mm.Unlock)):
            self._locked = isinstance(action, mm.Lock)
        message = side.message(action.pid) if isinstance(action, mm.Step) and outcome.kind == "exit" else ""
        return outcome, message

    def started(self) -> int:
        return int(self.side.started)

    def shutdown(self) -> None:
        self.close()
        self.shared.close()


class ModelServer(_Server):
    """The model itself, under a variant: every move checked enabled first. ``silent``: the steps it takes
    together with the one before, as an implementation that does not pause there (``impl.paired``'s ``SILENT``:
    then it answers every line as ``PairedServer`` does, a tester's reference)."""

    def __init__(self, variant: mm.MigrationVariant, silent: frozenset[mm.Pc] = frozenset()) -> None:
        super().__init__(model_declaration(variant, silent))
        self.silent = silent
        fixes = frozenset(mm.Fix) if variant is mm.MigrationVariant.FIXED else frozenset()
        self.cfg = mm.MigrationBounds(f"adapter ({variant.value})", migrations=ADAPTER_COUNT,
                                      recoveries=ADAPTER_COUNT, crashes=ADAPTER_COUNT, writes=ADAPTER_COUNT,
                                      fixes=fixes, reading=LOCKSTEP_BOUNDS.reading, faults=LOCKSTEP_BOUNDS.faults,
                                      fault_actions=ADAPTER_COUNT)
        self.count = 0

    def new_side(self, images: Optional[tuple[Image, ...]] = None) -> Any:
        self.count = 0
        side = ModelSide(self.cfg, silent=self.silent)
        if images is not None:
            side.st = mm.init_with(self.cfg, images)
        return side

    def world(self) -> Situation:
        st = self.side.st
        files = st.files
        there = {mm.Doc.REQUEST: files.intent, mm.Doc.RESULT: files.result, mm.Doc.RECOVERY: files.recovery}
        return Situation(
            running=frozenset(p.pid for p in st.procs),
            writer=next((i for i, s in enumerate(st.stores) if s.writer), None),
            locked=any(s.locked for s in st.stores),
            read_only=frozenset(i for i, s in enumerate(st.stores) if s.read_only),
            backups=frozenset(i for i, s in enumerate(st.stores) if s.backup is not None),
            edited_backups=frozenset(i for i, s in enumerate(st.stores) if s.backup_edited),
            published=frozenset(d for d, f in there.items() if f is not None), edited=frozenset(files.edited))

    def take(self, action: mm.Action, mode: Optional[str]) -> tuple[Outcome, str]:
        if not self.side.is_enabled(action):  # past out_of_order: a rule it does not state (a bug of ours)
            raise RuntimeError(f"{mm.describe_action(action, self.side.st)}: not enabled in the model, though no "
                               f"rule of out_of_order refuses it ({mm.describe_state(self.side.st)})")
        if isinstance(action, mm.Invoke):
            self.count += 1
        return self.side.apply(action), ""

    def started(self) -> int:
        return self.count

    def close(self) -> None:
        self.side = None

    def shutdown(self) -> None:
        self.close()


_STORE_SHAPE = '{"version": 1 or 2, "data": "original" or "migrated"}'


def images_of(stores: Any) -> Optional[tuple[Image, ...]]:
    """``reset``'s ``stores`` (two ``{"version", "data"}``) as the model's images; None when not given."""
    if stores is None:
        return None
    if not isinstance(stores, list) or len(stores) != 2:
        raise InvalidRequest(f"reset: 'stores' must be null or two stores (run, resource), not {shown(stores)}")
    out = []
    for s in stores:
        if not isinstance(s, dict) or set(s) != {"version", "data"} or type(s["version"]) is not int \
                or s["version"] not in (1, 2) or s["data"] not in ("original", "migrated"):
            raise InvalidRequest(f"reset: each of 'stores' must be {_STORE_SHAPE}, not {shown(s)}")
        out.append(Image(s["version"], Data(Base(s["data"]))))
    return tuple(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _error(rid: Optional[int], kind: str, message: str) -> dict[str, Any]:
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 3] + "..."
    return {"id": rid, "ok": False, "error": {"type": kind, "message": message}}


def _read(line: Union[bytes, str]) -> tuple[Any, Optional[str]]:
    """The JSON value of a line, or why it has none."""
    try:
        return json.loads(line.decode("utf-8") if isinstance(line, bytes) else line,
                          parse_constant=_reject_constant), None
    except UnicodeDecodeError:
        return None, "the line is not UTF-8: send one JSON object per line, in UTF-8"
    except RecursionError:
        return None, ("the line nests arrays or objects deeper than this adapter's JSON parser goes, so not even "
                      "its id could be read")
    except ValueError as error:  # JSONDecodeError, NaN and Infinity, an integer of too many digits
        return None, f"the line is not JSON ({error}): send one JSON object per line"


def respond(server: _Server, line: Union[bytes, str]) -> dict[str, Any]:
    """The answer to one request line (docs/protocol.md, 11.6): a result, or an error; never raises."""
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
    if op not in OPS:
        return _error(rid, "unsupported", f"unknown op {shown(op)} (the ops: {', '.join(sorted(OPS))})")
    try:
        result = server.handle(request)
        json.dumps(result)  # a result that is not JSON is the adapter's failure, said below
    except Unsupported as error:
        return _error(rid, "unsupported", str(error))
    except InvalidRequest as error:
        return _error(rid, "invalid", str(error))
    except Exception as error:  # the adapter's own failure: said, and the loop goes on
        traceback.print_exc(file=sys.stderr)
        return _error(rid, "internal", f"{type(error).__name__}: {error}")
    return {"id": rid, "ok": True, "result": result}


def _lines(stdin: Iterable[Union[bytes, str]]) -> Iterable[Union[bytes, str]]:
    """Each line of ``stdin`` without its end (a final newline, then one carriage return); blank ones skipped."""
    for line in stdin:
        if isinstance(line, bytes):
            line = line[:-1] if line.endswith(b"\n") else line
            line = line[:-1] if line.endswith(b"\r") else line
        else:
            line = line[:-1] if line.endswith("\n") else line
            line = line[:-1] if line.endswith("\r") else line
        if line.strip():
            yield line


def serve(server: _Server, stdin: IO[Any], stdout: IO[str]) -> int:
    """Answer each request line of ``stdin`` (bytes or text) on ``stdout`` until end of input; 0."""
    try:
        for line in _lines(stdin):
            stdout.write(json.dumps(respond(server, line)) + "\n")
            stdout.flush()
    finally:
        getattr(server, "shutdown", server.close)()
    return 0
