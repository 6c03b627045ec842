"""One example of the lock lockstep: the model and the real processes, moved alike, compared after every move.

``Example(cfg)`` starts the model (``model.lock.init``) and the real side (``RealSide``): by default the harness's
threads (``threads.ThreadSide``: a fresh directory, on tmpfs when there is one, one ``processes.Process`` per model
process with the model's pid, start time and PID namespace, the harness's ``World`` holding them, and, for
``cfg.stale``, the dead process's lock written as it would have left it), processes forked from the harness on
the same terms (``forked.ProcessSide``), or an adapter speaking docs/protocol.md section 12
(``adapter_side.AdapterSide``). ``play(move)`` takes a move on both sides and compares:

* the step: the step a process stopped before is the model process's next step (``Pc``), the steps a move took
  are the model's step then only silent ones, and the call the model's step makes is the one the implementation
  made (where its side says: the threads' ``Calls``, each step's own call and no other);
* the answer: a call that ends, ends on both sides with the same ``Answer`` (a busy one naming the same process
  and whether it was judged);
* the observation (``observe``): who is inside the operation (live processes), the lock (its owner file's record:
  whose call, pid, start time, namespace), the tickets (seq, rank among their seq, whose call, identity), the
  temps, and nothing else in the directory (a grave left after a step, any name the model does not have);
* the model's own properties (``spec.lock``: invariants and step properties) on its transition (unless the
  example is told not to: ``--variant seed`` holds an implementation to the seed's steps, which break them).

The seed's design has no tickets and no temps; its lock is ``owner.json`` (a record of ``{pid, started_at}``,
empty, or none) and what a takeover moved aside (``moved``): ``observe_model`` says each design's state in the
observation's words (``harness.Observation``). Each move is kept (``records``: both sides' answers and
observations) for the trace.

Nonces map to the model's calls (``instances``): the harness gives each call its nonce when it takes its
TICKET_READDIR (``Move.draw``, drawn by the machine), so the place of a new ticket among the tickets of its seq
(the model's ``Step.choice``) is read from the real names when it is made.

Leaves out on purpose: time (a wait is a step: the processes' ``wait`` returns at once), and the bytes of a
temp's owner file (private: nobody reads it before its rename, and after it the owner file is compared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, cast

from envreplica.conformance.lock import harness
from envreplica.conformance.lock.harness import Observation
from envreplica.conformance.lock.threads import CallDivergence, ThreadSide
from envreplica.model import lock as ml
from envreplica.spec import lock as sl


class Divergence(AssertionError):
    """The implementation parted from the model (or the model broke a property) at the last move."""

    def __init__(self, key: str, reason: str, moves: tuple["Move", ...] = (),
                 cfg: Optional[ml.LockBounds] = None, records: tuple["Record", ...] = (), prop: str = "") -> None:
        super().__init__(reason)
        self.key = key  # what kind of difference: "step", "call", "answer", "state", "property", "model"
        self.reason = reason
        self.moves = moves  # the moves played, the last one the divergent
        self.cfg = cfg  # the example's bounds
        self.records = records  # each move's answers and observations (the last move's may be partial)
        self.prop = prop  # the property the model broke (key "property")


class NotEnabled(Exception):
    """A replayed move the model does not enable where it is played (``run.minimize`` deleted what it needs)."""


@dataclass(frozen=True)
class Move:
    """A model action, and for a TICKET_READDIR step the order draw of the nonce its call takes (``draw``)."""

    action: ml.Action
    draw: int = 0


@dataclass
class Record:
    """One move of an example, as its trace keeps it: the model's result, the real side's event (None for a move
    of the world), and both observations after it (model, implementation)."""

    model: Optional[ml.Result] = None
    event: Optional[harness.Event] = None
    observed: Optional[tuple[Observation, Observation]] = None


class RealSide(Protocol):
    """An example's real side, whatever runs the implementation (``threads.ThreadSide``: the harness's threads;
    ``forked.ProcessSide``: processes forked from the harness; ``adapter_side.AdapterSide``: an adapter over
    docs/protocol.md section 12)."""

    def start(self, slot: int) -> harness.Event: ...

    def step(self, slot: int, nonce: Optional[str]) -> harness.Event: ...

    def leave(self, slot: int, effect: sl.Effect) -> harness.Event: ...

    def kill(self, slot: int, ns: int, pid: int, zombie: bool) -> None: ...

    def reap(self, slot: int, ns: int, pid: int) -> None: ...

    def reuse(self, ns: int, pid: int) -> None: ...

    def observe(self) -> Observation: ...

    def close(self) -> None: ...


#: Makes an example's real side from its bounds, the model's first state and the example's nonce map.
SideFactory = Callable[[ml.LockBounds, ml.LockState, dict[str, sl.Instance]], RealSide]


def _claimed(cfg: ml.LockBounds) -> bool:
    """The owner file is ``owner-<nonce>.json``, its record names its call (the CLAIM design's); else the seed's
    ``owner.json``, a record of ``{pid, started_at}`` only."""
    return ml.Fix.CLAIMED_TAKEOVER in cfg.fixes or ml.Fix.CLAIMED_RELEASE in cfg.fixes


def _seen(cfg: ml.LockBounds, d: Optional[ml.LockDir]) -> Optional[tuple[object, ...]]:
    """A lock directory (at L or moved aside) as the observation says it (``harness.Observation.lock``)."""
    if d is None:
        return None
    record = d.owner.record if d.owner is not None else None
    if _claimed(cfg):
        return None if record is None else (record.instance, record.pid, record.start, record.ns)
    if d.owner is None:
        return harness.NO_OWNER
    if record is None:
        return harness.EMPTY_OWNER
    return (None, record.pid, record.start, record.ns)


def observe_model(cfg: ml.LockBounds, st: ml.LockState) -> Observation:
    """The model's state ``st`` under ``cfg`` in the observation's words."""
    inside = frozenset(p.slot for p in st.procs if p.inside and p.status is sl.Status.RUNNING)
    tickets = tuple(sorted(((t.seq, sum(1 for u in st.fs.tickets if u.seq == t.seq and u.rank < t.rank), t.slot,
                             t.pid, t.start, t.ns, t.instance) for t in st.fs.tickets), key=repr))
    moved = tuple(sorted((cast(tuple[object, ...], _seen(cfg, d)) for _, d in st.fs.moved), key=repr))
    return Observation(inside, _seen(cfg, st.fs.lock), tickets, frozenset(st.fs.temps), (), moved)


def differences(model: Observation, real: Observation) -> str:
    """What differs between two observations, field by field."""
    return "; ".join(f"{name}: model {getattr(model, name)!r}, implementation {getattr(real, name)!r}"
                     for name in Observation.__dataclass_fields__ if getattr(model, name) != getattr(real, name))


class Example:
    """Both sides of one example (see the module); ``close`` ends its real side.

    ``side``: how the real side is made (``sides.SideFactory``: the bounds, the model's first state and the
    example's nonce map); default the harness's threads (``threads.ThreadSide``). ``properties``: whether the
    model's properties (``spec.lock``) are checked on its moves (the ``fixed`` variant holds them; the seed's steps
    break them, and ``--variant seed`` holds an implementation to those steps, not to the properties)."""

    def __init__(self, cfg: ml.LockBounds, side: Optional[SideFactory] = None, properties: bool = True) -> None:
        self.cfg = cfg
        self.properties = properties
        self.state = ml.init(cfg)
        self.moves: list[Move] = []
        self.records: list[Record] = []  # per move: both sides' event and observation (the trace's)
        self.instances: dict[str, sl.Instance] = {}  # nonce -> the model's (slot, call)
        self.made = 0  # nonces given so far
        self.busy: dict[int, Optional[sl.Busy]] = {}  # slot -> the busy its current call decided (model side)
        self.took_over = False  # a takeover happened in this example (the "sometimes-after" of the spec)
        self.reached: list[str] = []  # what this example reached (coverage items, in order)
        self.silent = frozenset(pc.value for pc in ml.silent_steps(cfg))
        self.where: dict[int, Optional[harness.Event]] = {p.slot: None for p in self.state.procs}  # None: idle
        self.side: RealSide = (side or ThreadSide.of)(cfg, self.state, self.instances)
        self._compare_state()

    # the thread side's parts, as the tests read them
    @property
    def procs(self) -> list[Any]:
        return cast(Any, self.side).procs

    @property
    def directory(self) -> str:
        return cast(Any, self.side).directory

    @property
    def lock_path(self) -> str:
        return cast(Any, self.side).lock_path

    def observe_real(self) -> Observation:
        return self.side.observe()

    def close(self) -> None:
        self.side.close()

    # -- one move

    def enabled(self) -> list[ml.Action]:
        """The model's enabled actions, a ticket's ``mkdir`` once (its place follows from the real nonces)."""
        out: list[ml.Action] = []
        for action in ml.enabled(self.cfg, self.state):
            if isinstance(action, ml.Step) and action.choice:
                continue
            out.append(action)
        return out

    def play(self, move: Move) -> None:
        """Take ``move`` on both sides and compare (a ``Divergence`` carrying the moves played, the last the one
        that parted; a ticket's ``mkdir`` with the choice read from the real nonces)."""
        if not any(_same(move.action, a) for a in ml.enabled(self.cfg, self.state)):
            raise NotEnabled(f"{move.action} is not enabled")
        self.moves.append(move)
        self.records.append(Record())
        try:
            self._play(move)
        except CallDivergence as c:
            raise Divergence("call", str(c), tuple(self.moves), self.cfg, tuple(self.records)) from None
        except Divergence as d:
            self._observe_after(d)
            raise Divergence(d.key, d.reason, tuple(self.moves), self.cfg, tuple(self.records), d.prop) from None

    def _observe_after(self, d: Divergence) -> None:
        """The implementation's observation after a move whose answers parted (kept for the trace, and for the
        finding the divergence is: ``findings.finding_of``); none when the side took no move."""
        record = self.records[-1]
        if record.observed is not None or (record.event is None and d.key in ("step", "call")):
            return
        try:
            record.observed = (self.observe_model(), self.side.observe())
        except Exception:  # noqa: BLE001 - the divergence stands; what could not be observed is left out
            pass

    def _play(self, move: Move) -> None:
        action = move.action
        pre = self.state
        if isinstance(action, ml.Step) and pre.procs[action.slot].pc is ml.Pc.TICKET_MKDIR:
            action = ml.Step(action.slot, self._place(action.slot))
            self.moves[-1] = Move(action, move.draw)
        post, result = ml.next_state(self.cfg, pre, action)
        record = self.records[-1]
        record.model = result
        self._cover(pre, action, result)
        self.state = post
        event: Optional[harness.Event] = None
        if isinstance(action, ml.Start):
            event = self.side.start(action.slot)
            self._check_steps(action.slot, None, event, result)
        elif isinstance(action, ml.Step):
            event = self._step(pre, action, result, move.draw)
        elif isinstance(action, ml.Leave):
            event = self.side.leave(action.slot, action.effect)
            self._check_steps(action.slot, ml.Pc.LEAVE, event, result)
        elif isinstance(action, ml.Crash):
            p = pre.procs[action.slot]
            self.side.kill(action.slot, p.ns, p.pid, self.cfg.zombies)
            self.where[action.slot] = None
        elif isinstance(action, ml.Reap):
            p = pre.procs[action.slot]
            self.side.reap(action.slot, p.ns, p.pid)
        else:
            assert isinstance(action, ml.Reuse)
            self.side.reuse(action.ns, action.pid)
        record.event = event
        if event is not None:
            self.where[getattr(action, "slot")] = event if event.at is not None else None
            self._answered(getattr(action, "slot"), event, result)
        self._compare_state()
        if self.properties:  # on a move both sides took alike: a break is the implementation's as much as the model's
            self._properties(pre, action, result, post)

    def _place(self, slot: int) -> int:
        """The model's ``choice`` for the ticket ``slot`` is about to make: the one that puts it after exactly the
        tickets of its seq whose nonces order before its own (the real order). The model's ranks keep the gaps a
        removed ticket leaves, so that choice is one more than the rank of the last ticket it follows; a choice
        the model does not offer (``model.lock.ticket_places``) is an order the model cannot take: a divergence
        of the model's ("model")."""
        paused = self.where[slot]
        if paused is None or paused.at != ml.Pc.TICKET_MKDIR.value or not paused.path:
            raise Divergence("step", f"p{slot}: the model makes its ticket; the implementation is at {_where(paused)}")
        proc = self.state.procs[slot]
        seq, nonce = _ticket_key(paused.path)
        if seq != proc.seq:
            raise Divergence("step", f"p{slot} makes a ticket of seq {seq}; the model's seq is {proc.seq}")
        nonces = {i: n for n, i in self.instances.items()}
        before = [t.rank for t in self.state.fs.tickets if t.seq == seq and nonces[t.instance] < nonce]
        choice = max(before) + 1 if before else 0
        places = ml.ticket_places(self.state, proc)
        if choice >= places:
            ranks = sorted((t.rank, nonces[t.instance]) for t in self.state.fs.tickets if t.seq == seq)
            raise Divergence("model", f"p{slot}'s ticket orders after {len(before)} of the tickets of seq {seq} "
                                      f"(ranks and nonces {ranks}; its nonce {nonce}): that takes choice {choice}, "
                                      f"and the model offers choices 0..{places - 1} (a removed ticket left a gap "
                                      f"in the ranks)")
        return choice

    def _step(self, pre: ml.LockState, action: ml.Step, result: ml.Result, draw: int) -> harness.Event:
        slot = action.slot
        pc = pre.procs[slot].pc
        paused = self.where[slot]
        if paused is None or paused.at != pc.value:
            raise Divergence("step", f"p{slot}: the model's next step is {pc.value!r}; the implementation is at "
                                     f"{_where(paused)}")
        nonce = None
        if pc is ml.Pc.TICKET_READDIR:
            nonce = harness.nonce_for(draw, self.made)
            self.made += 1
            self.instances[nonce] = (slot, pre.procs[slot].call)
        event = self.side.step(slot, nonce)
        self._check_steps(slot, pc, event, result)
        return event

    def _check_steps(self, slot: int, pc: Optional[ml.Pc], event: harness.Event, result: ml.Result) -> None:
        """The steps of a move: the model's step first (``pc``; None for a call's start, which takes only silent
        ones), then silent ones; the call the model's step makes (where the side says which)."""
        taken = event.taken
        if pc is None:
            loud = [t for t in taken if t not in self.silent]
            if loud:
                raise Divergence("step", f"p{slot} took {loud} before its first step")
            return
        if not taken or taken[0] != pc.value:
            raise Divergence("step", f"p{slot} took {list(taken)} for the model's {pc.value!r}")
        loud = [t for t in taken[1:] if t not in self.silent]
        if loud:
            raise Divergence("step", f"p{slot} took {list(taken)} in one move: the model takes {loud} as moves "
                                     f"of their own")
        expected = getattr(result, "call", None)
        index = len(taken) - 1 if isinstance(result, sl.Ended) else 0
        made = event.calls[index] if index < len(event.calls) else None
        if expected is not None and made is not None and made != expected.value:
            raise Divergence("call", f"p{slot}'s {taken[index]!r} is a {made}; the model's step makes a "
                                     f"{expected.value}")

    def _answered(self, slot: int, event: harness.Event, result: ml.Result) -> None:
        """The process's event after a move matches the model's process and the move's result."""
        busy = getattr(result, "busy", None)
        if busy is not None:
            self.busy[slot] = busy
        proc = self.state.procs[slot]
        if event.ended is not None:
            if not isinstance(result, sl.Ended):
                raise Divergence("answer", f"p{slot}'s call ended ({_answer(event.ended)}); the model's goes on at "
                                           f"{proc.pc.value!r}")
            self._same_answer(slot, event.ended, result)
            return
        if isinstance(result, sl.Ended):
            raise Divergence("answer", f"p{slot}'s call ends in the model ({result.answer.value}); the implementation "
                                       f"is at {_where(event)}")
        if event.at == harness.INSIDE:
            if proc.pc is not ml.Pc.LEAVE:
                raise Divergence("step", f"p{slot} is inside the operation; the model's is at {proc.pc.value!r}")
            return
        if event.at != proc.pc.value:
            raise Divergence("step", f"p{slot} stopped before {event.at!r}; the model's next step is "
                                     f"{proc.pc.value!r}")

    def _same_answer(self, slot: int, report: harness.Ended, result: sl.Ended) -> None:
        if report.answer is not result.answer:
            raise Divergence("answer", f"p{slot}'s call answered {_answer(report)}; the model's "
                                       f"{result.answer.value}")
        if result.answer is sl.Answer.BUSY and report.busy_named:
            busy = self.busy.get(slot)
            named = self.instances.get(report.busy_nonce or "", (None, 0))[0]
            if busy is None or busy.slot != named or busy.provable != report.busy_judged:
                raise Divergence("answer", f"p{slot} busy, naming p{named} (judged: {report.busy_judged}); the "
                                           f"model's names {busy}")
        self.busy.pop(slot, None)

    # -- the state

    def observe_model(self) -> Observation:
        return observe_model(self.cfg, self.state)

    def _compare_state(self) -> None:
        model, real = self.observe_model(), self.side.observe()
        if self.records:
            self.records[-1].observed = (model, real)
        if model == real:
            return
        raise Divergence("state", differences(model, real))

    def _properties(self, pre: ml.LockState, action: ml.Action, result: ml.Result, post: ml.LockState) -> None:
        for prop in sl.INVARIANTS:
            if not prop.check(post):
                raise Divergence("property", f"the model broke {prop.name}: {prop.statement}", prop=prop.name)
        for prop in sl.STEP_PROPERTIES:
            if prop.actions is not None and action.kind not in prop.actions:
                continue
            if prop.results is not None and not isinstance(result, prop.results):
                continue
            if not prop.check(pre, action, result, post):
                raise Divergence("property", f"the model broke {prop.name}: {prop.statement}", prop=prop.name)

    def _cover(self, pre: ml.LockState, action: ml.Action, result: ml.Result) -> None:
        for prop in sl.SOMETIMES:
            if prop.kind == "sometimes-after":
                if self.took_over and prop.check(None, pre, action, result, None):
                    self.reached.append(prop.name)
            elif (prop.actions is None or action.kind in prop.actions) and \
                    (prop.results is None or isinstance(result, prop.results)) and prop.check(pre, action, result,
                                                                                              None):
                self.reached.append(prop.name)
                if prop.name == "sometimes_takeover":
                    self.took_over = True
        if isinstance(action, ml.Step):
            proc = pre.procs[action.slot]
            self.reached.append(f"step:{proc.pc.value}")
            judged = proc.ahead if proc.pc is ml.Pc.QUEUE_PROC else proc.read if proc.pc is ml.Pc.PROC else None
            if judged is not None:
                seen = next((o for o in pre.os.occupants if o.ns == proc.ns and o.pid == judged.pid), None)
                if seen is not None and seen.zombie:
                    self.reached.append("zombie judged")
                elif seen is not None and seen.start != judged.start:
                    self.reached.append("reused pid judged")
        if isinstance(result, sl.Ended):
            self.reached.append(f"answer:{result.answer.value}")


def _same(a: ml.Action, b: ml.Action) -> bool:
    """The same action, a ticket's place aside (the real nonces decide it)."""
    if isinstance(a, ml.Step) and isinstance(b, ml.Step):
        return a.slot == b.slot
    return a == b


def _ticket_key(name: str) -> tuple[int, str]:
    match = harness.TICKET.match(name)
    if match is None:
        raise Divergence("step", f"the implementation makes a ticket named {name!r}, which is no ticket's name")
    return int(match.group(1)), match.group(2)


def _where(event: Optional[harness.Event]) -> str:
    if event is None:
        return "idle"
    if event.at == harness.INSIDE:
        return "inside the operation"
    if event.at is None:
        return f"the end of its call ({_answer(event.ended) if event.ended else '?'})"
    return repr(event.at)


def _answer(report: harness.Ended) -> str:
    return report.answer.value if report.answer is not None else report.error


def describe(move: Move, st: ml.LockState) -> str:
    """One line for a trace: the move as the model names it, with the nonce's draw where one is drawn."""
    text = ml.describe_action(move.action, st)
    if isinstance(move.action, ml.Step) and st.procs[move.action.slot].pc is ml.Pc.TICKET_READDIR:
        text += f" (nonce draw {move.draw})"
    return text
