"""The migration lockstep's real side behind an adapter: any implementation that speaks the migration adapter
protocol (docs/protocol.md, section 11), driven over JSON lines.

Models: ``AdapterShared``, what every example of one run shares (the adapter process, started once and
``reset`` between examples; its ``Declaration``; the bounds it is held to under a variant), and
``AdapterSide``, one example's real side: each move sent as its request (``protocol.request_of``), each answer
read as the lockstep's ``Outcome``, ``observe`` after every move read as the ``Observation`` the model's is
compared with. The numbers of the live invocations and the last step each took are the harness's own (from
the events), as ``RealSide`` keeps them.

An adapter that fails (it exits, stalls past the timeout, writes a line that is not a JSON object, answers
another id or an error, or an answer the harness cannot read) is broken for the rest of the run, never
restarted; the real side raises ``AdapterFailure`` naming the move (``move #3 (`invoke migrate`) of example
1``), which stops the run at once: Hypothesis does not shrink it, minimization does not replay it
(``run.run_migration_lockstep``), and the command line answers exit 2.

Leaves out on purpose: what the adapter does to answer (its files, processes, kills): only its answers count.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from envreplica.conformance.external import AdapterError, AdapterFailure, AdapterTimeout, SubprocessDriver
from envreplica.conformance.migration.coverage import required_for
from envreplica.conformance.migration.invocations import HarnessError
from envreplica.conformance.migration.observe import Observation, Outcome
from envreplica.conformance.migration.protocol import (
    PROTOCOL,
    Declaration,
    ProtocolError,
    bounds_for,
    observation_of,
    outcome_of,
    parse_hello,
    request_of,
)
from envreplica.conformance.migration.invocations import Mode
from envreplica.conformance.migration.sides import LOCKSTEP_BOUNDS, Move
from envreplica.model import migration as mm

#: The swarm's kinds of environment (``machine.SWARM``) and the declared fault each needs.
_SWARM_FAULTS = {"input": mm.Fault.INPUT, "lock": mm.Fault.LOCK, "read-only": mm.Fault.READ_ONLY,
                 "edit": mm.Fault.EDIT, "move-away": mm.Fault.MOVE_AWAY}


class AdapterBroken(HarnessError):
    """The adapter failed or broke the protocol: nothing was judged (exit 2 from the command line).
    ``request``: the request to the adapter process it broke on (from 1; 0: it could not start)."""

    def __init__(self, why: str, request: int = 0, timed_out: bool = False) -> None:
        super().__init__(why)
        self.request = request
        self.timed_out = timed_out  # it did not answer within its timeout


def move_words(request: dict[str, Any]) -> str:
    """A request as the messages name a move: its op and its values (``invoke migrate``, ``step 0``,
    ``write 1``, ``readOnly run on``, ``edit backup run``)."""
    words = [str(request.get("op"))]
    for key, value in request.items():
        if key in ("op", "id", "mode"):
            continue
        words.append(("on" if value else "off") if isinstance(value, bool) else str(value))
    return " ".join(words)


class AdapterShared:
    """The adapter of ``command`` for a whole run (see the module)."""

    def __init__(self, command: str, variant: mm.MigrationVariant = mm.MigrationVariant.FIXED, *,
                 timeout: float = 120.0, base: mm.MigrationBounds = LOCKSTEP_BOUNDS,
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
        self.broken: Optional[AdapterBroken] = None  # once broken, the run's every request fails so
        self.examples = 0
        self.decl = self._hello()
        self.cfg = bounds_for(self.decl, variant, base)
        self.silent = self.decl.silent
        self.compare_status = self.decl.exit_status
        #: the model's properties are checked on its moves under ``fixed`` only: the seed's steps break them
        #: (F4 to F6), and ``--variant seed`` holds an implementation to those steps, not to the properties
        self.check_properties = variant is mm.MigrationVariant.FIXED
        self.read_only_problem: Optional[str] = None
        self.unavailable: list[str] = []
        known = [Mode(m) for m in self.decl.modes if m in {x.value for x in Mode}] or [Mode.PROCESS]
        #: how the run's invocations run (``run._Run.mode``): the declared modes alike
        self.modes = tuple((m, 100 // len(known)) for m in known)
        #: the mode minimization prefers (the simplest to read), when declared
        self.simplest_mode: Optional[Mode] = Mode.THREAD if Mode.THREAD in known else None
        #: what a ``ci`` run must reach of this implementation (``coverage.required_for``)
        self.required = required_for(self.cfg, self.decl.steps, [m.value for m in known], self.decl.input_faults)

    # -- the process ------------------------------------------------------------------------------------------

    def _start(self) -> SubprocessDriver:
        try:
            self.driver = SubprocessDriver(self.command, timeout=self.timeout, start_timeout=self.start_timeout,
                                           waiting=self.waiting)
        except AdapterError as error:
            raise self._broke(str(error)) from None
        return self.driver

    def _broke(self, why: str, request: Optional[int] = None, timed_out: bool = False) -> "AdapterBroken":
        """The adapter is broken for the rest of the run (never restarted: what it answers then would be judged
        against a world it does not have), so every later request fails the same way. ``request``: the request
        it broke on (default: the last one sent); ``timed_out``: it did not answer in time."""
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
            raise self._broke(str(error), error.request or self.ids, isinstance(error, AdapterTimeout)) from None
        if response.get("id") != self.ids:
            raise self._broke(f"the adapter answered id {response.get('id')!r} to request {self.ids} "
                              f"({request.get('op')})")
        if response.get("ok") is not True:
            said = response.get("error") or {}
            raise self._broke(f"the adapter answered {request.get('op')} with an error "
                              f"({said.get('type', '?')}): {said.get('message', response)}")
        return response.get("result")

    def _hello(self) -> Declaration:
        try:
            return parse_hello(self.ask({"op": "hello", "protocol": PROTOCOL}))
        except ProtocolError as error:
            raise self._broke(str(error)) from None

    # -- what the examples share ------------------------------------------------------------------------------

    def swarm_available(self, kind: str) -> bool:
        fault = _SWARM_FAULTS.get(kind)
        return fault is None or fault in self.decl.faults

    def allows(self, action: mm.Action) -> bool:
        """Whether the adapter can take ``action`` (an input fault it did not declare: no)."""
        if isinstance(action, mm.Invoke) and action.fault is not mm.InputFault.NONE:
            return action.fault in self.decl.input_faults
        return True

    def mode_name(self, mode: Mode) -> str:
        """How an invocation of ``mode`` runs behind this adapter: the mode, if declared; else its default."""
        return mode.value if mode.value in self.decl.modes else self.decl.modes[0]

    def real_side(self, read_only: bool) -> "AdapterSide":
        self.examples += 1
        return AdapterSide(self)

    def close(self) -> None:
        if self.driver is not None:
            self.driver.close()
            self.driver = None


class AdapterSide:
    """One example's real side: the adapter, reset (see the module)."""

    def __init__(self, shared: AdapterShared) -> None:
        self.shared = shared
        self.last: dict[int, str] = {}
        self.started = 0
        self.messages: dict[int, str] = {}
        self.example = shared.examples  # this example's number in the run (from 1)
        self.moves = 0  # moves sent so far
        self.named = ""  # the last move, as the messages name it
        self._ask({"op": "reset"}, f"the `reset` that starts example {self.example}")

    def _ask(self, request: dict[str, Any], where: str) -> Any:
        """``shared.ask(request)``; a broken adapter is ``AdapterFailure`` naming ``where`` (the run stops)."""
        try:
            return self.shared.ask(request)
        except AdapterBroken as broken:
            raise AdapterFailure(where, str(broken), broken.request) from None

    def _unreadable(self, error: ProtocolError, where: str) -> AdapterFailure:
        broken = self.shared._broke(str(error))
        return AdapterFailure(where, str(broken), broken.request)

    def apply(self, move: Move) -> Outcome:
        action = move.action
        mode = self.shared.mode_name(move.mode) if isinstance(action, mm.Invoke) else None
        request = request_of(action, mode)
        self.moves += 1
        self.named = f"move #{self.moves} (`{move_words(request)}`) of example {self.example}"
        answer = self._ask(request, self.named)
        try:
            outcome, message = outcome_of(request, answer)
        except ProtocolError as error:
            raise self._unreadable(error, self.named) from None
        if isinstance(action, mm.Invoke):
            self.last[self.started] = ""
            self.started += 1
        elif isinstance(action, mm.Crash):
            self.last.pop(action.pid, None)
        elif isinstance(action, mm.Step):
            if outcome.kind == "exit":
                self.last.pop(action.pid, None)
                self.messages[action.pid] = message
            else:
                self.last[action.pid] = outcome.step or ""
        return outcome

    def message(self, pid: int) -> str:
        return self.messages.get(pid, "")

    def observe(self) -> Observation:
        where = f"the `observe` after {self.named}"
        answer = self._ask({"op": "observe"}, where)
        try:
            return observation_of(answer, tuple(sorted(self.last.items())))
        except ProtocolError as error:
            raise self._unreadable(error, where) from None

    def close(self) -> None:
        pass  # the next example's reset starts afresh; the run closes the adapter


__all__ = ["AdapterBroken", "AdapterShared", "AdapterSide", "move_words"]
