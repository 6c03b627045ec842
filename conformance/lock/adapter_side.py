"""The lock lockstep's real side behind an adapter: any implementation that speaks the lock adapter protocol
(docs/protocol.md, section 12), driven over JSON lines.

Models: ``AdapterShared``, what every example of one run shares (the adapter process, started once and ``reset``
between examples; its ``Declaration``; the bounds it is held to), and ``AdapterSide``, one example's real side
(``example.RealSide``): each move sent as its request, each answer read as the lockstep's ``Event``, ``observe``
after every move read as the ``Observation`` the model's is compared with.

The bounds: the lockstep's (``machine.BOUNDS``), those of a world the adapter cannot stage left out (``hello``'s
``world``), each with the tries the implementation fixes (``maxTries``: the seed's 80), its filesystem's inode
numbering (``inodes``: the seed compares inode numbers) and the design it declares:
a ``claim`` implementation is held to ``variant``'s steps, a ``seed`` one to the seed's steps (``model.lock``'s
``seed`` variant) under either variant; under ``fixed`` the model's properties (``spec.lock``) are checked on
every move both sides agreed on, so a seed that agrees step by step is caught where those steps break one.

An adapter that fails (it exits, stalls past the timeout, writes a line that is not a JSON object, answers another
id or an error, or an answer the harness cannot read) is broken for the rest of the run, never restarted; the
real side raises ``AdapterFailure`` naming the move (``move #3 (`step 0`) of example 1``), which stops the run at
once, and the command line answers exit 2 (as the migration's adapter side does).

Leaves out on purpose: what the adapter does to answer (its processes, files, kills): only its answers count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

from envreplica.conformance.external import AdapterError, AdapterFailure, AdapterTimeout, SubprocessDriver
from envreplica.conformance.lock import harness
from envreplica.conformance.lock import protocol
from envreplica.conformance.lock.machine import BOUNDS
from envreplica.model import lock as ml
from envreplica.spec.lock import Effect


class AdapterBroken(Exception):
    """The adapter failed or broke the protocol: nothing was judged (exit 2 from the command line).
    ``request``: the request to the adapter process it broke on (from 1; 0: it could not start)."""

    def __init__(self, why: str, request: int = 0, timed_out: bool = False) -> None:
        super().__init__(why)
        self.request = request
        self.timed_out = timed_out  # it did not answer within its timeout


def needs(cfg: ml.LockBounds) -> frozenset[str]:
    """What of the world an example of ``cfg`` stages (``protocol.WORLD``)."""
    out = set()
    if cfg.zombies:
        out.add("zombie")
    if cfg.namespaces:
        out.add("namespace")
    if cfg.reuses:
        out.add("reuse")
    if cfg.stale:
        out.add("stale")
    return frozenset(out)


def bounds_for(decl: protocol.Declaration, variant: ml.Variant,
               base: Sequence[ml.LockBounds] = BOUNDS) -> tuple[ml.LockBounds, ...]:
    """The lockstep's bounds for an implementation of ``decl`` held under ``variant`` (see the module)."""
    fixes = variant.fixes if decl.design == "claim" else frozenset()
    out = []
    for b in base:
        if not needs(b) <= decl.world:
            continue
        tries = b.max_tries if decl.max_tries is None else decl.max_tries
        inodes = b.inodes if decl.inodes is None else ml.Inodes(decl.inodes)
        out.append(replace(b, fixes=fixes, max_tries=tries, inodes=inodes))
    return tuple(out)


def missing_steps(decl: protocol.Declaration, cfg: ml.LockBounds) -> list[str]:
    """The model's steps under ``cfg`` taken as moves of their own (not silent) that the adapter does not pause at."""
    if decl.design == "claim":
        wanted = {s.value for s in harness.paused_at(cfg)}
    else:
        wanted = {pc.value for pc in protocol.SEED_STEPS - ml.silent_steps(cfg)}
    return sorted(wanted - decl.steps)


def move_words(request: dict[str, Any]) -> str:
    """A request as the messages name a move: its op and its values (``step 0``, ``kill 1 zombie``)."""
    words = [str(request.get("op"))]
    for key, value in request.items():
        if key in ("op", "id"):
            continue
        words.append((key if value else f"no {key}") if isinstance(value, bool) else str(value))
    return " ".join(words)


class AdapterShared:
    """The adapter of ``command`` for a whole run (see the module)."""

    def __init__(self, command: str, variant: ml.Variant = ml.Variant.FIXED, *, timeout: float = 120.0,
                 start_timeout: Optional[float] = None,
                 waiting: Optional[Callable[[str, float, float], None]] = None) -> None:
        self.command = command
        self.variant = variant
        self.timeout = timeout
        #: the first answer's bound, and what is told while it is awaited (``external.SubprocessDriver``'s)
        self.start_timeout = start_timeout
        self.waiting = waiting
        self.ids = 0
        self.driver: Optional[SubprocessDriver] = None
        self.broken: Optional[AdapterBroken] = None
        self.examples = 0
        self.decl = self._hello()
        self.bounds = bounds_for(self.decl, variant)
        if not self.bounds:
            raise self._broke(f"the adapter stages none of the world the lockstep's bounds need (hello's world "
                              f"{sorted(self.decl.world)}; the bounds need some of {', '.join(protocol.WORLD)})")
        missing = missing_steps(self.decl, self.bounds[0])
        if missing:
            raise self._broke(f"hello's steps leave out steps the model takes as moves of their own under the "
                              f"{self.decl.design} design: {missing}")
        #: the model's properties are checked under ``fixed`` only (``example.Example.properties``)
        self.properties = variant is ml.Variant.FIXED

    def _start(self) -> SubprocessDriver:
        try:
            self.driver = SubprocessDriver(self.command, timeout=self.timeout, start_timeout=self.start_timeout,
                                           waiting=self.waiting)
        except AdapterError as error:
            raise self._broke(str(error)) from None
        return self.driver

    def _broke(self, why: str, request: Optional[int] = None, timed_out: bool = False) -> AdapterBroken:
        """The adapter is broken for the rest of the run (never restarted); ``timed_out``: it did not answer in
        time."""
        self.broken = AdapterBroken(why, self.ids if request is None else request, timed_out)
        if self.driver is not None:
            self.driver.close()
            self.driver = None
        return self.broken

    def ask(self, request: dict[str, Any]) -> Any:
        """Send ``request``; its result, or ``AdapterBroken`` (an error answer, a dead or silent adapter)."""
        if self.broken is not None:
            raise self.broken
        driver = self.driver or self._start()
        self.ids += 1
        try:
            response = driver.handle({"id": self.ids, **request})
        except AdapterError as error:
            raise self._broke(str(error), getattr(error, "request", 0) or self.ids,
                              isinstance(error, AdapterTimeout)) from None
        if response.get("id") != self.ids:
            raise self._broke(f"the adapter answered id {response.get('id')!r} to request {self.ids} "
                              f"({request.get('op')})")
        if response.get("ok") is not True:
            said = response.get("error") or {}
            raise self._broke(f"the adapter answered {request.get('op')} with an error "
                              f"({said.get('type', '?')}): {said.get('message', response)}")
        return response.get("result")

    def _hello(self) -> protocol.Declaration:
        try:
            return protocol.parse_hello(self.ask({"op": "hello", "protocol": protocol.PROTOCOL}))
        except protocol.ProtocolError as error:
            raise self._broke(str(error)) from None

    def side(self, cfg: ml.LockBounds, first: ml.LockState, instances: dict[str, tuple[int, int]]) -> "AdapterSide":
        """An example's real side (``example.SideFactory``)."""
        self.examples += 1
        return AdapterSide(self, cfg, first, instances)

    def close(self) -> None:
        if self.driver is not None:
            self.driver.close()
            self.driver = None


class AdapterSide:
    """One example's real side: the adapter, reset (see the module)."""

    def __init__(self, shared: AdapterShared, cfg: ml.LockBounds, first: ml.LockState,
                 instances: dict[str, tuple[int, int]]) -> None:
        self.shared = shared
        self.cfg = cfg
        self.instances = instances
        self.claimed = ml.Fix.CLAIMED_TAKEOVER in cfg.fixes or ml.Fix.CLAIMED_RELEASE in cfg.fixes
        self.example = shared.examples
        self.moves = 0
        self.named = ""
        if cfg.stale:
            instances[protocol.GONE_NONCE] = (ml.GONE, 0)
        self._ask(protocol.reset_of(cfg, first), f"the `reset` that starts example {self.example}")

    def _ask(self, request: dict[str, Any], where: str) -> Any:
        try:
            return self.shared.ask(request)
        except AdapterBroken as broken:
            raise AdapterFailure(where, str(broken), broken.request) from None

    def _unreadable(self, error: protocol.ProtocolError, where: str) -> AdapterFailure:
        broken = self.shared._broke(str(error))
        return AdapterFailure(where, str(broken), broken.request)

    def _move(self, request: dict[str, Any]) -> Any:
        self.moves += 1
        self.named = f"move #{self.moves} (`{move_words(request)}`) of example {self.example}"
        return self._ask(request, self.named)

    def _event(self, request: dict[str, Any]) -> harness.Event:
        answer = self._move(request)
        try:
            return protocol.event_of(answer, request["op"])
        except protocol.ProtocolError as error:
            raise self._unreadable(error, self.named) from None

    def start(self, slot: int) -> harness.Event:
        return self._event({"op": "spawn", "process": slot})

    def step(self, slot: int, nonce: Optional[str]) -> harness.Event:
        request: dict[str, Any] = {"op": "step", "process": slot}
        if nonce is not None:
            request["nonce"] = nonce
        return self._event(request)

    def leave(self, slot: int, effect: Effect) -> harness.Event:
        return self._event({"op": "leave", "process": slot, "effect": effect.value})

    def kill(self, slot: int, ns: int, pid: int, zombie: bool) -> None:
        self._move({"op": "kill", "process": slot, "zombie": zombie})

    def reap(self, slot: int, ns: int, pid: int) -> None:
        self._move({"op": "reap", "process": slot})

    def reuse(self, ns: int, pid: int) -> None:
        self._move({"op": "reuse-pid", "ns": ns, "pid": pid})

    def observe(self) -> harness.Observation:
        where = f"the `observe` after {self.named}" if self.named else f"the first `observe` of example {self.example}"
        answer = self._ask({"op": "observe"}, where)
        try:
            return protocol.observation_of(answer, self.claimed, self.instances)
        except protocol.ProtocolError as error:
            raise self._unreadable(error, where) from None

    def close(self) -> None:
        pass  # the next example's reset starts afresh; the run closes the adapter


__all__ = ["AdapterBroken", "AdapterShared", "AdapterSide", "bounds_for", "move_words", "needs"]
