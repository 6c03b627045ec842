"""The generic BFS checker on a toy whose answers are known by hand.

The toy is a two-process lock with a check-then-act race: a process may
``check`` that the lock is free (pc 0 -> 1), ``enter`` the critical section
(pc 1 -> 2, lock := 1) and ``exit`` it (pc 2 -> 0, lock := 0). In the buggy
variant ``enter`` does not look at the lock again, so both processes can pass
the check before either enters. The fixed variant makes ``enter`` require the
lock to be free.

State: ``(pc0, pc1, lock)``. Hand-computed reachable states of the buggy toy,
by BFS depth::

    0: (0,0,0)
    1: (1,0,0) (0,1,0)
    2: (2,0,1) (1,1,0) (0,2,1)
    3: (2,1,1) (1,2,1)
    4: (2,2,1)                      <- mutual exclusion broken
    5: (0,2,0) (2,0,0)              (an exit releases the lock under the other)
    6: (1,2,0) (2,1,0)

13 states, 24 transitions (each state has two enabled actions except
(2,0,1) and (0,2,1), which have one). The fixed toy reaches only the first
four levels minus (2,2,1): 8 states, 12 transitions.
"""

from __future__ import annotations

import pytest

from envreplica.checker.bfs import Model, Step, check
from envreplica.spec.properties import Property

INIT = (0, 0, 0)
BAD = (2, 2, 1)


def _enabled(st, fixed: bool, reverse: bool = False):
    pcs, lock = st[:2], st[2]
    out = []
    for i in (0, 1):
        if pcs[i] == 0 and lock == 0:
            out.append(("check", i))
        if pcs[i] == 1 and (lock == 0 or not fixed):
            out.append(("enter", i))
        if pcs[i] == 2:
            out.append(("exit", i))
    return list(reversed(out)) if reverse else out


def _next(st, action):
    op, i = action
    pcs = list(st[:2])
    lock = st[2]
    if op == "check":
        pcs[i] = 1
    elif op == "enter":
        pcs[i] = 2
        lock = 1
    elif op == "exit":
        pcs[i] = 0
        lock = 0
    else:  # pragma: no cover
        raise AssertionError(action)
    return (pcs[0], pcs[1], lock), f"{op}{i}"


def mutex(st) -> bool:
    """At most one process is in the critical section."""
    return not (st[0] == 2 and st[1] == 2)


def enter_needs_free_lock(pre, action, result, post) -> bool:
    """A process enters only while the lock is free."""
    return action[0] != "enter" or pre[2] == 0


def someone_critical(st) -> bool:
    """Some process is in the critical section."""
    return 2 in st[:2]


def never(st) -> bool:
    """Both processes have checked and the lock is held (unreachable in both toys)."""
    return st == (1, 1, 1)


def an_exit(pre, action, result, post) -> bool:
    """Some process leaves the critical section."""
    return action[0] == "exit"


MUTEX = Property("mutex", mutex, "invariant")
ENTER = Property("enter_needs_free_lock", enter_needs_free_lock, "step")
SOMEONE = Property("someone_critical", someone_critical, "sometimes-state")
NEVER = Property("never", never, "sometimes-state")
EXIT = Property("an_exit", an_exit, "sometimes-step")


def toy(fixed: bool = False, reverse: bool = False, invariants=(MUTEX,), step_properties=(ENTER,),
        sometimes=(SOMEONE, NEVER, EXIT)) -> Model:
    return Model(
        init=lambda: INIT,
        enabled=lambda st: _enabled(st, fixed, reverse),
        next=_next,
        invariants=invariants,
        step_properties=step_properties,
        sometimes=sometimes,
    )


def _replay(steps):
    """Rerun a counterexample's actions from init; returns the states reached."""
    assert steps[0].action is None and steps[0].result is None
    st = steps[0].state
    assert st == INIT
    seen = [st]
    for s in steps[1:]:
        assert s.action in _enabled(st, fixed=False), (st, s.action)
        st, res = _next(st, s.action)
        assert res == s.result
        assert st == s.state
        seen.append(st)
    return seen


def _run(actions, fixed=False):
    st = INIT
    for a in actions:
        assert a in _enabled(st, fixed), (st, a)
        st, _ = _next(st, a)
    return st


# ---------------------------------------------------------------------------


def test_hand_counts_of_the_buggy_toy():
    r = check(toy())
    assert r.states == 13
    assert r.transitions == 24
    assert r.depth == 6
    assert r.complete is True
    assert not r.ok


def test_invariant_violation_is_the_shortest_one():
    # A longer run reaches the same bad state too (lock taken and released once first).
    longer = [("check", 0), ("enter", 0), ("exit", 0), ("check", 0), ("check", 1), ("enter", 0), ("enter", 1)]
    assert _run(longer) == BAD
    for reverse in (False, True):  # whatever the action order, BFS returns a shortest run
        r = check(toy(reverse=reverse))
        v = r.violations["mutex"]
        assert v.prop is MUTEX
        assert v.length == 4 == len(v.steps) - 1
        states = _replay(v.steps)
        assert states[-1] == BAD
        assert not mutex(states[-1])
        assert all(mutex(s) for s in states[:-1])
        assert sorted(a for a, _ in (s.action for s in v.steps[1:])) == ["check", "check", "enter", "enter"]


def test_step_property_violation_ends_with_the_offending_step():
    r = check(toy())
    v = r.violations["enter_needs_free_lock"]
    assert v.prop is ENTER
    assert v.length == 4
    states = _replay(v.steps)
    last = v.steps[-1]
    pre = states[-2]
    assert isinstance(last, Step)
    assert last.action[0] == "enter"
    assert pre[2] == 1  # the lock was already held
    assert not enter_needs_free_lock(pre, last.action, last.result, last.state)
    assert all(enter_needs_free_lock(states[i], v.steps[i + 1].action, v.steps[i + 1].result, states[i + 1])
               for i in range(len(states) - 2))


def test_step_violation_into_an_already_seen_state_still_has_its_last_step():
    # "exit only from a state where the other process is not critical": broken first
    # by exit from (2,2,1) at depth 5, whose successors may already be known.
    def exit_alone(pre, action, result, post):
        return action[0] != "exit" or pre[1 - action[1]] != 2

    prop = Property("exit_alone", exit_alone, "step")
    r = check(toy(invariants=(), step_properties=(prop,), sometimes=()))
    v = r.violations["exit_alone"]
    assert v.length == 5
    states = _replay(v.steps)
    assert states[-2] == BAD
    assert v.steps[-1].action[0] == "exit"


def test_sometimes_properties_are_witnessed_at_their_first_depth():
    r = check(toy())
    assert r.witnessed == {"someone_critical": 2, "an_exit": 3}
    assert "never" not in r.witnessed


def test_fixed_toy_has_no_violation_and_is_complete():
    r = check(toy(fixed=True))
    assert r.ok
    assert r.violations == {}
    assert r.complete is True
    assert r.states == 8
    assert r.transitions == 12
    assert r.depth == 3
    assert r.witnessed == {"someone_critical": 2, "an_exit": 3}


@pytest.mark.parametrize(
    "max_depth, states, found",
    [(0, 1, False), (1, 3, False), (2, 6, False), (3, 8, False), (4, 9, True)],
)
def test_max_depth_stops_early(max_depth, states, found):
    r = check(toy(), max_depth=max_depth)
    assert r.complete is False
    assert r.states == states
    assert r.depth == max_depth
    assert ("mutex" in r.violations) is found


def test_max_depth_beyond_the_diameter_is_complete():
    # Nodes at depth 6 are expanded with max_depth=7; nothing lies at depth 7.
    assert check(toy(), max_depth=7).complete is True
    # With max_depth=6 the depth-6 states' transitions are not explored: not complete.
    r = check(toy(), max_depth=6)
    assert r.complete is False and r.states == 13 and r.transitions < 24


def test_max_states_stops_early():
    r = check(toy(), max_states=5)
    assert r.complete is False
    assert r.states == 5


def test_stop_on_first():
    r = check(toy(), stop_on_first=True)
    # Both break on the same transition (enter from (2,1,1)); the search stops after that state.
    assert set(r.violations) == {"mutex", "enter_needs_free_lock"}
    assert r.states == 9


def test_violation_at_init_has_length_zero():
    prop = Property("not_init", lambda st: st != INIT, "invariant")
    r = check(toy(invariants=(prop,), step_properties=(), sometimes=()))
    v = r.violations["not_init"]
    assert v.length == 0
    assert v.steps == [Step(None, None, INIT)]


# ---------------------------------------------------------------------------
# sometimes-after: a step that follows another on the same path
# ---------------------------------------------------------------------------


def _entered(pre, action, result, post) -> bool:
    """A process enters the critical section."""
    return action[0] == "enter"


def _other_exits(earlier, pre, action, result, post) -> bool:
    """After one process entered, the other leaves the critical section."""
    return action[0] == "exit" and action[1] != earlier[1][1]


ENTERED = Property("entered", _entered, "sometimes-step")
OTHER_EXITS = Property("other_exits_after_enter", _other_exits, "sometimes-after", after=ENTERED)


def test_sometimes_after_is_witnessed_on_one_path():
    # check0, check1, enter0, enter1 (the race), exit1: the earlier step is enter0, then exit1.
    r = check(toy(sometimes=(OTHER_EXITS,)))
    assert r.witnessed == {"other_exits_after_enter": 5}


def test_sometimes_after_needs_the_earlier_step_first():
    """An exit alone is no witness: the exit must follow another process's enter on its path."""
    lone_exit = Property("exit_after_check", lambda earlier, *step: step[1][0] == "exit",
                         "sometimes-after", after=Property("never_steps", lambda *step: False, "sometimes-step"))
    assert check(toy(sometimes=(lone_exit,))).witnessed == {}


def test_sometimes_after_under_approximates():
    """In the fixed toy the witness path (enter0, exit0, check1, enter1, exit1) passes through the initial
    state again, which was expanded unmarked: marks only go forward, so it is not found."""
    assert check(toy(fixed=True, sometimes=(OTHER_EXITS,))).witnessed == {}
