"""One example of the lock lockstep: the model and the real processes, moved alike, compared after every move.

``Example(cfg)`` starts the model (``model.lock.init``) and the real side: a fresh directory (on tmpfs when there
is one), one ``processes.Process`` per model process with the model's pid, start time and PID namespace, the
harness's ``World`` holding them, and, for ``cfg.stale``, the dead process's lock written as it would have left
it. ``play(move)`` takes a move on both sides and compares:

* the step: the step a process stopped before is the model process's next step (``Pc``), and the ``Calls`` it
  ran are the call the model's step makes (and each step's own call, silent ones too);
* the answer: a call that ends, ends on both sides with the same ``Answer`` (a busy one naming the same process
  and whether it was judged);
* the observation (``observe``): who is inside the operation (live processes), the lock (its owner file's record:
  whose call, pid, start time, namespace), the tickets (seq, rank among their seq, whose call, identity), the
  temps, and nothing else in the directory (a grave left after a step, any name the model does not have);
* the model's own properties (``spec.lock``: invariants and step properties) on its transition.

Nonces map to the model's calls (``instances``): the harness gives each call its nonce when it takes its
TICKET_READDIR (``Move.draw``, drawn by the machine), so the place of a new ticket among the tickets of its seq
(the model's ``Step.choice``) is read from the real names when it is made.

Leaves out on purpose: time (a wait is a step: the processes' ``wait`` returns at once), and the bytes of a
temp's owner file (private: nobody reads it before its rename, and after it the owner file is compared).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Optional, Union

from envreplica.conformance.lock import protocol as pr
from envreplica.conformance.lock.processes import HarnessError, Process, World, lock_path_in
from envreplica.impl import lock as il
from envreplica.model import lock as ml
from envreplica.spec import lock as sl


class Divergence(AssertionError):
    """The implementation parted from the model (or the model broke a property) at the last move."""

    def __init__(self, key: str, reason: str, moves: tuple["Move", ...] = (),
                 cfg: Optional[ml.LockBounds] = None) -> None:
        super().__init__(reason)
        self.key = key  # what kind of difference: "step", "call", "answer", "state", "property", "model"
        self.reason = reason
        self.moves = moves  # the moves played, the last one the divergent
        self.cfg = cfg  # the example's bounds


class NotEnabled(Exception):
    """A replayed move the model does not enable where it is played (``run.minimize`` deleted what it needs)."""


@dataclass(frozen=True)
class Move:
    """A model action, and for a TICKET_READDIR step the order draw of the nonce its call takes (``draw``)."""

    action: ml.Action
    draw: int = 0


@dataclass(frozen=True)
class Observation:
    """What both sides show after a move (see the module)."""

    inside: frozenset[int]
    lock: Optional[tuple[object, ...]]  # (instance, pid, start, ns) of the owner file's record
    tickets: tuple[tuple[object, ...], ...]  # (seq, place among its seq, slot, pid, start, ns, instance), sorted
    temps: frozenset[object]
    others: tuple[str, ...]  # names the model has no word for


def _scratch_root() -> Optional[str]:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


SCRATCH_PREFIX = "envreplica-lock-lockstep-"
GONE_NONCE = "ffffffffffffffff"


class Example:
    """Both sides of one example (see the module); ``close`` ends its processes and removes its directory."""

    def __init__(self, cfg: ml.LockBounds) -> None:
        self.cfg = cfg
        self.state = ml.init(cfg)
        self.moves: list[Move] = []
        self.directory = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=_scratch_root())
        self.lock_path = lock_path_in(self.directory)
        self.base = os.path.basename(self.lock_path)
        self.world = World()
        self.instances: dict[str, sl.Instance] = {}  # nonce -> the model's (slot, call)
        self.made = 0  # nonces given so far
        self.busy: dict[int, Optional[sl.Busy]] = {}  # slot -> the busy its current call decided (model side)
        self.took_over = False  # a takeover happened in this example (the "sometimes-after" of the spec)
        self.reached: list[str] = []  # what this example reached (coverage items, in order)
        pause = pr.paused_at(cfg)
        self.procs: list[Process] = []
        for p in self.state.procs:
            self.world.born(p.ns, p.pid, p.start)
            self.procs.append(Process(p.slot, p.pid, p.start, p.ns, self.lock_path, cfg.max_tries, pause,
                                      self.world))
        self.where: dict[int, Union[pr.Report, None]] = {p.slot: None for p in self.state.procs}  # None: idle
        if cfg.stale:
            self._plant_stale()
        self._compare_state()

    def _plant_stale(self) -> None:
        """The lock the process dead before the first state left (``model.lock.GONE``): its owner file in L."""
        gone = il.Owner(ml.GONE_PID, 1, pr.PIDNS_BASE, GONE_NONCE)
        self.world.starts[(0, ml.GONE_PID)] = 1
        self.instances[GONE_NONCE] = (ml.GONE, 0)
        temp = os.path.join(self.directory, f"{self.base}.n.{GONE_NONCE}")
        os.mkdir(temp)
        with open(os.path.join(temp, f"owner-{GONE_NONCE}.json"), "wb") as f:
            f.write(gone.record())
        os.rename(temp, self.lock_path)

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

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
        try:
            self._play(move)
        except Divergence as d:
            raise Divergence(d.key, d.reason, tuple(self.moves), self.cfg) from None

    def _play(self, move: Move) -> None:
        action = move.action
        pre = self.state
        if isinstance(action, ml.Step) and pre.procs[action.slot].pc is ml.Pc.TICKET_MKDIR:
            action = ml.Step(action.slot, self._place(action.slot))
            self.moves[-1] = Move(action, move.draw)
        post, result = ml.next_state(self.cfg, pre, action)
        self._properties(pre, action, result, post)
        self._cover(pre, action, result)
        self.state = post
        if isinstance(action, ml.Start):
            report = self._order(action.slot, pr.START)
            self._check_calls(action.slot, None, self._drain(action.slot), result)
            self._answered(action.slot, report, result)
        elif isinstance(action, ml.Step):
            self._step(pre, action, result, move.draw)
        elif isinstance(action, ml.Leave):
            report = self._order(action.slot, pr.Leave(action.effect))
            self._check_calls(action.slot, ml.Pc.LEAVE, self._drain(action.slot), result)
            self._answered(action.slot, report, result)
        elif isinstance(action, ml.Crash):
            report = self._order(action.slot, pr.DIE)
            if not isinstance(report, pr.Killed):
                raise HarnessError(f"p{action.slot} was killed and reported {report}")
            p = pre.procs[action.slot]
            self.world.killed(p.ns, p.pid, self.cfg.zombies)
        elif isinstance(action, ml.Reap):
            p = pre.procs[action.slot]
            self.world.reaped(p.ns, p.pid)
        else:
            assert isinstance(action, ml.Reuse)
            self.world.reused(action.ns, action.pid)
        self._compare_state()

    def _order(self, slot: int, order: pr.Order) -> pr.Report:
        report = self.procs[slot].order(order)
        self.where[slot] = report if isinstance(report, (pr.Paused, pr.Inside)) else None
        return report

    def _place(self, slot: int) -> int:
        """The model's ``choice`` for the ticket ``slot`` is about to make: the one that puts it after exactly the
        tickets of its seq whose nonces order before its own (the real order). The model's ranks keep the gaps a
        removed ticket leaves, so that choice is one more than the rank of the last ticket it follows; a choice
        the model does not offer (``model.lock.ticket_places``) is an order the model cannot take: a divergence
        of the model's ("model")."""
        paused = self.where[slot]
        if not isinstance(paused, pr.Paused) or paused.step is not il.Step.TICKET_MKDIR:
            raise Divergence("step", f"p{slot}: the model makes its ticket; the implementation is at {_where(paused)}")
        proc = self.state.procs[slot]
        seq, nonce = _ticket_key(os.path.basename(str(paused.args[0])), self.base)
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

    def _step(self, pre: ml.LockState, action: ml.Step, result: ml.Result, draw: int) -> None:
        slot = action.slot
        pc = pre.procs[slot].pc
        paused = self.where[slot]
        if not isinstance(paused, pr.Paused) or paused.step.value != pc.value:
            raise Divergence("step", f"p{slot}: the model's next step is {pc.value!r}; the implementation is at "
                                     f"{_where(paused)}")
        nonce = None
        if pc is ml.Pc.TICKET_READDIR:
            nonce = pr.nonce_for(draw, self.made)
            self.made += 1
            self.instances[nonce] = (slot, pre.procs[slot].call)
        report = self._order(slot, pr.Go(nonce))
        self._check_calls(slot, pc, self._drain(slot), result)
        self._answered(slot, report, result)

    def _drain(self, slot: int) -> list[pr.Taken]:
        """The steps ``slot`` took in this move, each having run its own call and no other."""
        taken = self.procs[slot].steps_taken()
        for t in taken:
            own = () if t.step in (il.Step.ENTER, il.Step.LEAVE) else (t.step.call.value,)
            if t.calls != own:
                raise Divergence("call", f"p{slot}'s step {t.step.value!r} ran {list(t.calls)}, not {list(own)}")
        return taken

    def _check_calls(self, slot: int, pc: Optional[ml.Pc], taken: list[pr.Taken], result: ml.Result) -> None:
        """The steps of a move: the model's step first (``pc``; None for a call's start, which takes only what
        the model leaves out), then silent ones; the call the model's step makes."""
        if pc is None:
            if any(t.step not in pr.NOT_MODELLED for t in taken):
                raise Divergence("step", f"p{slot} took {[t.step.value for t in taken]} before its first step")
            return
        if not taken or taken[0].step.value != pc.value:
            raise Divergence("step", f"p{slot} took {[t.step.value for t in taken]} for the model's {pc.value!r}")
        expected = getattr(result, "call", None)
        made = taken[-1] if isinstance(result, sl.Ended) else taken[0]
        if expected is not None and pr.call_of(made.step) is not expected:
            raise Divergence("call", f"p{slot}'s {made.step.value!r} is a {made.step.call.value}; the model's step "
                                     f"makes a {expected.value}")

    def _answered(self, slot: int, report: pr.Report, result: ml.Result) -> None:
        """The process's report after a move matches the model's process and the move's result."""
        busy = getattr(result, "busy", None)
        if busy is not None:
            self.busy[slot] = busy
        proc = self.state.procs[slot]
        if isinstance(report, pr.Ended):
            if not isinstance(result, sl.Ended):
                raise Divergence("answer", f"p{slot}'s call ended ({_answer(report)}); the model's goes on at "
                                           f"{proc.pc.value!r}")
            self._same_answer(slot, report, result)
            return
        if isinstance(result, sl.Ended):
            raise Divergence("answer", f"p{slot}'s call ends in the model ({result.answer.value}); the implementation "
                                       f"is at {_where(report)}")
        if isinstance(report, pr.Inside):
            if proc.pc is not ml.Pc.LEAVE:
                raise Divergence("step", f"p{slot} is inside the operation; the model's is at {proc.pc.value!r}")
            return
        if isinstance(report, pr.Paused):
            if report.step.value != proc.pc.value:
                raise Divergence("step", f"p{slot} stopped before {report.step.value!r}; the model's next step is "
                                         f"{proc.pc.value!r}")
            return
        raise HarnessError(f"p{slot} reported {report}")

    def _same_answer(self, slot: int, report: pr.Ended, result: sl.Ended) -> None:
        if report.answer is not result.answer:
            raise Divergence("answer", f"p{slot}'s call answered {_answer(report)}; the model's "
                                       f"{result.answer.value}")
        if result.answer is sl.Answer.BUSY:
            busy = self.busy.get(slot)
            named = self.instances.get(report.busy_nonce or "", (None, 0))[0]
            if busy is None or busy.slot != named or busy.provable != report.busy_judged:
                raise Divergence("answer", f"p{slot} busy, naming p{named} (judged: {report.busy_judged}); the "
                                           f"model's names {busy}")
        self.busy.pop(slot, None)

    # -- the state

    def observe_model(self) -> Observation:
        st = self.state
        inside = frozenset(p.slot for p in st.procs if p.inside and p.status is sl.Status.RUNNING)
        lock = st.fs.lock
        record = lock.owner.record if lock is not None and lock.owner is not None else None
        seen = None if record is None else (record.instance, record.pid, record.start, record.ns)
        tickets = tuple(sorted(((t.seq, sum(1 for u in st.fs.tickets if u.seq == t.seq and u.rank < t.rank), t.slot,
                                 t.pid, t.start, t.ns, t.instance) for t in st.fs.tickets), key=repr))
        return Observation(inside, seen, tickets, frozenset(st.fs.temps), ())

    def observe_real(self) -> Observation:
        inside = frozenset(p.slot for p in self.procs if p.inside and not p.dead)
        lock: Optional[tuple[object, ...]] = None
        tickets = []
        temps = set()
        others = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if name == self.base:
                lock, odd = self._observe_lock(path)
                others += odd
            elif _TICKET.match(name) and name.startswith(self.base + ".t."):
                seq, nonce, pid, start, ns = _TICKET.match(name).groups()  # type: ignore[union-attr]
                tickets.append((int(seq), nonce, int(pid), int(start), int(ns) - pr.PIDNS_BASE))
            elif name.startswith(self.base + ".n.") and name[len(self.base) + 3:] in self.instances:
                temps.add(self.instances[name[len(self.base) + 3:]])
            else:
                others.append(name)
        ranked = []
        for seq, nonce, pid, start, ns in tickets:
            rank = sum(1 for s, n, *_ in tickets if s == seq and n < nonce)
            instance = self.instances.get(nonce, ("?", nonce))
            ranked.append((seq, rank, instance[0], pid, start, ns, instance))
        return Observation(inside, lock, tuple(sorted(ranked, key=repr)), frozenset(temps), tuple(others))

    def _observe_lock(self, path: str) -> tuple[Optional[tuple[object, ...]], list[str]]:
        entries = sorted(os.listdir(path))
        if not entries:
            return None, []  # an empty L is no lock (PUBLISH replaces it)
        match = il.OWNER_FILE.fullmatch(entries[0])
        if len(entries) != 1 or match is None:
            return None, [f"{self.base}/{e}" for e in entries]
        with open(os.path.join(path, entries[0]), "rb") as f:
            owner = il.parse_record(f.read(), where=os.path.join(path, entries[0]))
        if owner.nonce != match.group(1):
            return None, [f"{self.base}/{entries[0]} (record of {owner.nonce})"]
        instance = self.instances.get(owner.nonce, ("?", owner.nonce))
        return (instance, owner.pid, owner.started_at, owner.pidns - pr.PIDNS_BASE), []

    def _compare_state(self) -> None:
        model, real = self.observe_model(), self.observe_real()
        if model == real:
            return
        diffs = [f"{name}: model {getattr(model, name)!r}, implementation {getattr(real, name)!r}"
                 for name in Observation.__dataclass_fields__ if getattr(model, name) != getattr(real, name)]
        raise Divergence("state", "; ".join(diffs))

    def _properties(self, pre: ml.LockState, action: ml.Action, result: ml.Result, post: ml.LockState) -> None:
        for prop in sl.INVARIANTS:
            if not prop.check(post):
                raise Divergence("property", f"the model broke {prop.name}: {prop.statement}")
        for prop in sl.STEP_PROPERTIES:
            if prop.actions is not None and action.kind not in prop.actions:
                continue
            if prop.results is not None and not isinstance(result, prop.results):
                continue
            if not prop.check(pre, action, result, post):
                raise Divergence("property", f"the model broke {prop.name}: {prop.statement}")

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


_TICKET = re.compile(r".*\.t\.(\d{8,})\.([0-9a-f]{16})\.(\d+)\.(\d+)\.(\d+)")


def _ticket_key(name: str, base: str) -> tuple[int, str]:
    match = _TICKET.match(name)
    if match is None:
        raise HarnessError(f"{name} is not a ticket")
    return int(match.group(1)), match.group(2)


def _where(report: object) -> str:
    if isinstance(report, pr.Paused):
        return f"{report.step.value!r}"
    if isinstance(report, pr.Inside):
        return "inside the operation"
    if report is None:
        return "idle"
    return repr(report)


def _answer(report: pr.Ended) -> str:
    return report.answer.value if report.answer is not None else report.error


def describe(move: Move, st: ml.LockState) -> str:
    """One line for a trace: the move as the model names it, with the nonce's draw where one is drawn."""
    text = ml.describe_action(move.action, st)
    if isinstance(move.action, ml.Step) and st.procs[move.action.slot].pc is ml.Pc.TICKET_READDIR:
        text += f" (nonce draw {move.draw})"
    return text
