"""The Hypothesis state machine of the lock lockstep: it draws each move from what the model enables.

Models: the generation. Each example begins with its bounds (``BOUNDS``: which processes, how many calls each,
kills, zombies, reused pids, another PID namespace, a stale lock, the operation's outcomes, the tries), the
simplest first (where shrinking goes); then each rule call draws one move among the model's enabled actions, by
whom it moves (a process, or the world) then which of its moves by ``WEIGHTS`` (steps first: where
shrinking goes, and what reaches deep states; a draw that still means the same move when shrinking deletes other
processes' moves before it), and for a TICKET_READDIR the order
draw of its call's nonce (``NONCE_DRAWS``: few values, so that tickets of one seq tie often and their order, the
order they were made, is tried both ways). ``Example.play`` takes it on both sides and compares.

An adapter that breaks (``external.AdapterFailure``, raised by the real side) stops the example, and the machine
keeps the break (``broken``, set by ``run``) before it passes on: Hypothesis may put its own verdict over an
example that stopped where an earlier one went on (``FlakyStrategyDefinition``: "the second run stopped drawing
earlier"), and the run reports the first break kept, never that verdict.

Leaves out on purpose: moves the model does not enable (never drawn).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from envreplica.conformance.external import AdapterFailure
from envreplica.conformance.lock.coverage import LockCoverage
from envreplica.conformance.lock.example import Example, Move, SideFactory
from envreplica.model import lock as ml
from envreplica.spec.lock import Effect

#: The bounds an example draws from, simplest first: the gate's suite (``model.lock.PRESETS["lock"]``), the
#: world at once, and a stale lock whose dead owner's pid is taken by another process.
BOUNDS: tuple[ml.LockBounds, ...] = (
    ml.FAIR, ml.RACE, ml.CRASH, ml.NAMESPACE, ml.ANSWERS, ml.WORLD,
    ml.LockBounds("stale-reuse", processes=2, calls=1, crashes=1, reuses=1, zombies=True, stale=True,
                  max_tries=1, effects=frozenset(Effect)),
)
#: How often each kind of a process's moves is drawn, among those enabled (a world move: the last "process"); a
#: kill inside the operation ``INSIDE_KILL`` (where a kill bites hardest, and the rarest state to be in).
WEIGHTS = {"step": 12, "start": 6, "leave": 4, "crash": 2, "reap": 1, "reuse": 2}
INSIDE_KILL = 8
#: The order draws of nonces (``harness.nonce_for``).
NONCE_DRAWS = 4


def by_actor(st: ml.LockState, actions: list[ml.Action]) -> list[list[ml.Action]]:
    """The enabled ``actions`` by whom they move: each process's (its step, start or leave first, then its kill and
    its reap), then the world's (pids reused); each repeated by its weight."""
    actors: list[list[ml.Action]] = [[] for _ in range(len(st.procs) + 1)]
    for action in sorted(actions, key=lambda a: -WEIGHTS[a.kind]):
        slot = getattr(action, "slot", len(st.procs))
        weight = INSIDE_KILL if action.kind == "crash" and st.procs[slot].inside else WEIGHTS[action.kind]
        actors[slot].extend([action] * weight)
    return actors


class LockMachine(RuleBasedStateMachine):
    """One example: bounds drawn, then moves (see the module). ``coverage``: where each example's reach is
    counted (set by ``run``); ``bounds``: the bounds drawn from (``BOUNDS`` unless ``run`` narrows it)."""

    coverage: ClassVar[Optional[LockCoverage]] = None
    bounds: ClassVar[tuple[ml.LockBounds, ...]] = BOUNDS
    side: ClassVar[Optional[SideFactory]] = None  # the real side (None: the harness's threads)
    properties: ClassVar[bool] = True  # the model's properties checked on its moves
    #: told the examples and moves after each example (``checker.progress``; set by ``run``; a tuple, so that a
    #: function here stays a function, not a method)
    progress: ClassVar[tuple[Callable[[int, int], None], ...]] = ()
    broken: ClassVar[Optional[list[AdapterFailure]]] = None  # where an adapter's breaks are kept (set by ``run``)

    def __init__(self) -> None:
        super().__init__()
        self.example: Optional[Example] = None

    @initialize(data=st.data())
    def begin(self, data: Any) -> None:
        which = data.draw(st.sampled_from(range(len(self.bounds))), label="bounds")
        self.example = self._kept(lambda: Example(self.bounds[which], type(self).side, type(self).properties))

    @rule(data=st.data())
    def move(self, data: Any) -> None:
        """Whom to move (a process, or the world), then which of its moves: a draw that means the same move when
        shrinking deletes the others' moves before it. An actor with nothing to do passes the turn to the next."""
        example = self.example
        assert example is not None
        actors = by_actor(example.state, example.enabled())
        if not any(actors):
            return
        first = data.draw(st.integers(0, len(actors) - 1), label="actor")
        actor = next(actors[(first + k) % len(actors)] for k in range(len(actors)) if actors[(first + k) % len(actors)])
        action = actor[data.draw(st.integers(0, len(actor) - 1), label="move")]
        draw = 0
        if isinstance(action, ml.Step) and example.state.procs[action.slot].pc is ml.Pc.TICKET_READDIR:
            draw = data.draw(st.integers(0, NONCE_DRAWS - 1), label="nonce")
        self._kept(lambda: example.play(Move(action, draw)))

    def _kept(self, do: Callable[[], Any]) -> Any:
        """``do()``; an ``AdapterFailure`` it raises is kept in ``broken`` first, then passed on."""
        try:
            return do()
        except AdapterFailure as failure:
            if self.broken is not None:
                self.broken.append(failure)
            raise

    def teardown(self) -> None:
        if self.example is None:
            return
        if self.coverage is not None:
            self.coverage.add(self.example.reached, len(self.example.moves))
            for tell in self.progress:
                tell(self.coverage.examples, self.coverage.moves)
        self.example.close()
