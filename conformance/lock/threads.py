"""The lock lockstep's in-process real side: ``impl.lock`` in threads of the harness, on a real directory.

Models: ``ThreadSide``, one example's real side as the lockstep has always run it (``processes``: one thread per
lock user, paused at every step, the harness's ``World`` answering the probes), behind the interface every real
side offers the example (``sides.RealSide``): a call started, a step taken, the operation left, a kill, a reap, a
pid reused, and the observation in the model's words. Each move's steps are checked here to have made their own
call and no other (the ``Calls`` methods each ran: a divergence "call"), as before; what the example compares
(steps, answers, the observation) comes back as a ``harness.Event``.

The same directory, world, observation and checks serve the real-process side (``forked.ProcessSide``, a
subclass that makes each lock user a forked ``Child`` instead of a thread: ``_user``).

Leaves out on purpose: any wire format (the adapter side, ``adapter_side``, is the one that speaks
docs/protocol.md section 12); and everything ``processes`` leaves out.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional, Sequence

from envreplica.conformance.lock import harness
from envreplica.conformance.lock.processes import HarnessError, LockUser, Process, World, lock_path_in
from envreplica.conformance.lock.protocol import GONE_NONCE
from envreplica.impl import lock as il
from envreplica.model import lock as ml
from envreplica.spec.lock import Effect

SCRATCH_PREFIX = "envreplica-lock-lockstep-"


def scratch_root() -> Optional[str]:
    """Where the examples' directories go: tmpfs when there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class CallDivergence(AssertionError):
    """A step ran another call than its own (the example turns it into a ``Divergence`` "call")."""


class ThreadSide:
    """``impl.lock`` in the harness's threads (see the module); ``instances``: the example's nonce -> the model's
    (slot, call), shared with it."""

    def __init__(self, identities: Sequence[tuple[int, int, int, int]], max_tries: int,
                 pause: frozenset[il.Step], stale: Optional[il.Owner], instances: dict[str, tuple[int, int]]) -> None:
        """``identities``: each lock user's (slot, pid, start, ns); ``stale``: the owner of a lock a dead process
        left in L before the first move (its nonce is put in ``instances`` as ``model.lock.GONE``'s call)."""
        self.instances = instances
        self.directory = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=scratch_root())
        self.lock_path = lock_path_in(self.directory)
        self.base = os.path.basename(self.lock_path)
        self.world = World()
        self.procs: list[LockUser] = []
        for slot, pid, start, ns in identities:
            self.world.born(ns, pid, start)
            self.procs.append(self._user(slot, pid, start, ns, max_tries, pause))
        if stale is not None:
            self._plant_stale(stale)

    def _user(self, slot: int, pid: int, start: int, ns: int, max_tries: int, pause: frozenset[il.Step]) -> LockUser:
        """The lock user of model slot ``slot`` (here a thread of the harness; ``forked.ProcessSide``'s a child)."""
        return Process(slot, pid, start, ns, self.lock_path, max_tries, pause, self.world)

    @classmethod
    def of(cls, cfg: ml.LockBounds, first: ml.LockState, instances: dict[str, tuple[int, int]]) -> "ThreadSide":
        """The side of an example of ``cfg`` (``example.SideFactory``)."""
        stale = il.Owner(ml.GONE_PID, 1, harness.PIDNS_BASE, GONE_NONCE) if cfg.stale else None
        return cls([(p.slot, p.pid, p.start, p.ns) for p in first.procs], cfg.max_tries, harness.paused_at(cfg), stale,
                   instances)

    def _plant_stale(self, gone: il.Owner) -> None:
        """The lock a process dead before the first state left (``model.lock.GONE``): its owner file in L."""
        self.world.starts[(gone.pidns - harness.PIDNS_BASE, gone.pid)] = gone.started_at
        self.instances[gone.nonce] = (ml.GONE, 0)
        temp = os.path.join(self.directory, f"{self.base}.n.{gone.nonce}")
        os.mkdir(temp)
        with open(os.path.join(temp, f"owner-{gone.nonce}.json"), "wb") as f:
            f.write(gone.record())
        os.rename(temp, self.lock_path)

    # -- moves

    def start(self, slot: int) -> harness.Event:
        return self._event(slot, self.procs[slot].order(harness.START))

    def step(self, slot: int, nonce: Optional[str]) -> harness.Event:
        return self._event(slot, self.procs[slot].order(harness.Go(nonce)))

    def leave(self, slot: int, effect: Effect) -> harness.Event:
        return self._event(slot, self.procs[slot].order(harness.Leave(effect)))

    def kill(self, slot: int, ns: int, pid: int, zombie: bool) -> None:
        report = self.procs[slot].order(harness.DIE)
        if not isinstance(report, harness.Killed):
            raise HarnessError(f"p{slot} was killed and reported {report}")
        self.world.killed(ns, pid, zombie)

    def reap(self, slot: int, ns: int, pid: int) -> None:
        self.world.reaped(ns, pid)

    def reuse(self, ns: int, pid: int) -> None:
        self.world.reused(ns, pid)

    def _event(self, slot: int, report: harness.Report) -> harness.Event:
        every = self.procs[slot].steps_taken()
        for t in every:
            own = () if t.step in (il.Step.ENTER, il.Step.LEAVE) else (t.step.call.value,)
            if t.calls != own:
                raise CallDivergence(f"p{slot}'s step {t.step.value!r} ran {list(t.calls)}, not {list(own)}")
        taken = [t for t in every if t.step not in harness.NOT_MODELLED]
        names = tuple(t.step.value for t in taken)
        calls = tuple(t.step.call.value for t in taken)
        if isinstance(report, harness.Paused):
            path = os.path.basename(str(report.args[0])) if report.step is il.Step.TICKET_MKDIR else None
            return harness.Event(names, calls, report.step.value, path=path)
        if isinstance(report, harness.Inside):
            return harness.Event(names, calls, harness.INSIDE)
        if isinstance(report, harness.Ended):
            return harness.Event(names, calls, None, report)
        raise HarnessError(f"p{slot} reported {report}")

    # -- the observation

    def observe(self) -> harness.Observation:
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
            elif name.startswith(self.base + ".t.") and harness.TICKET.match(name):
                seq, nonce, pid, start, ns = harness.TICKET.match(name).groups()  # type: ignore[union-attr]
                tickets.append((int(seq), nonce, int(pid), int(start), int(ns) - harness.PIDNS_BASE))
            elif name.startswith(self.base + ".n.") and name[len(self.base) + 3:] in self.instances:
                temps.add(self.instances[name[len(self.base) + 3:]])
            else:
                others.append(name)
        return harness.Observation(inside, lock, harness.ranked(tickets, self.instances), frozenset(temps),
                                   tuple(others))

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
        return (instance, owner.pid, owner.started_at, owner.pidns - harness.PIDNS_BASE), []

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["CallDivergence", "GONE_NONCE", "SCRATCH_PREFIX", "ThreadSide", "scratch_root"]
