"""Is a concurrent history linearizable against the model? A Wing-Gong search over the model's steps.

Models: a history (``history.History``) is linearizable when some order of
the model's steps of its ops (``steps.ModelOp``: one or more steps per op, at
the chosen ``Granularity``)

* puts every step of an op between that op's call and its return: an op that
  returned before another was called has all its steps before any of the
  other's (real-time order; ops of one process are ordered by it too), and
  an op's steps keep their own order;
* gives every op the answer the implementation gave (``history.Response``:
  the result as JSON, or the error type; ids and messages not compared);
* leaves the model in the state the implementation's tables were read back
  in (``final_state``; receipts compared by MAC: ``expected_state``).

The setup is run first on a ``ModelDriver`` and must agree answer by answer
(a sequential divergence is reported as such, not as a concurrency bug).

The search is depth-first over (model state, each op's progress), trying the
enabled ops in order of their call, with a memo of the nodes already found to
lead nowhere (Wing and Gong's algorithm with Lowe's memoisation, as in
porcupine and knossos, here over a model whose ops are several steps). No
ready-made checker fits: porcupine (Go) and knossos (Clojure) take atomic ops
over their own models, and nothing on PyPI checks linearizability. A
history of 5 ops with up to 5 steps each is a few hundred nodes.

Leaves out on purpose: partial-order reduction (not needed at these sizes:
``max_nodes`` caps the search and an exhausted budget is ``UNDECIDED``, never
a pass) and the values themselves in messages (a failure names tables and
keys; ``lockstep.compare.state_difference`` shows values by length only).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

from envreplica.conformance.concurrent.history import History, Response, format_history
from envreplica.conformance.concurrent.steps import Finished, Granularity, ModelOp, StoreAnswers, Suspended
from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.replica.compare import broken_invariant, state_difference
from envreplica.conformance.replica.traces import describe_request
from envreplica.model.state import State
from envreplica.spec.variants import Variant

__all__ = ["Verdict", "Check", "check_history", "impl_state", "expected_state", "DEFAULT_MAX_NODES"]

#: Search nodes (model steps tried) before a history is declared ``UNDECIDED``.
DEFAULT_MAX_NODES = 200_000


# ---------------------------------------------------------------------------
# The implementation's state, read back into the model's shape
# ---------------------------------------------------------------------------


def impl_state(replica) -> State:
    """The implementation's tables read back into the model's ``State`` (receipts carry their MAC).

    The one place that reads an implementation back (``conformance.readback``).
    """
    from envreplica.conformance.readback import impl_model_state

    return impl_model_state(replica)


def expected_state(state: State, sealer) -> State:
    """``state`` as the implementation should hold it: each receipt's request replaced by its MAC.

    The one place that MACs the model's receipts (``conformance.readback``).
    """
    from envreplica.conformance.readback import mac_of, with_macs

    return with_macs(state, mac_of(sealer))


# ---------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------


class Verdict(str, enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    SETUP_DIVERGED = "setup diverged"  # a sequential divergence before the batch (the lockstep's kind of bug)
    UNREADABLE = "final state unreadable"  # the tables did not read back (tamper, corruption)
    INVARIANT = "invariant broken"  # the tables read back break a safety invariant
    UNDECIDED = "undecided"  # the search budget ran out (a harness limit, never a pass)

    @property
    def passed(self) -> bool:
        return self is Verdict.LINEARIZABLE


@dataclass(frozen=True)
class Check:
    """The outcome of ``check_history``."""

    verdict: Verdict
    reason: str = ""  # why not, for people (empty when linearizable)
    witness: tuple[str, ...] = ()  # the model's steps in an order explaining the history
    nodes: int = 0  # model steps tried by the search
    leaves: int = 0  # complete orders reached whose every answer matched
    memo_hits: int = 0  # nodes cut by the memo

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    def message(self, history: History) -> str:
        """The verdict, the reason and the history, for people."""
        head = f"{self.verdict.value.upper()}: {self.reason}" if self.reason else self.verdict.value
        title = ("witness (the model's steps in an order that explains every answer)" if self.passed else
                 "the longest order of the model's steps whose answers all matched")
        return f"{head}\n{format_history(history, witness=list(self.witness) or None, witness_title=title)}"


_NOT_STARTED = 0
_DONE = 1


@dataclass
class _Search:
    """One search's bookkeeping (mutable on purpose: it counts and remembers while it runs)."""

    ops: list[ModelOp]
    want: list[Response]
    preds: list[frozenset]
    order: list[int]
    final_ok: Callable[[State], Optional[str]]
    max_nodes: int
    nodes: int = 0
    leaves: int = 0
    memo_hits: int = 0
    failed: set = field(default_factory=set)
    seen: list = field(default_factory=list)  # per op: the model's answers met at its last step
    deepest: tuple = ()  # the longest path of steps whose answers all matched
    state_mismatch: Optional[str] = None  # the first complete order whose answers matched but state did not
    exhausted: bool = False

    def run(self, st: State) -> Optional[list[str]]:
        self.seen = [dict() for _ in self.ops]
        progress = tuple(_NOT_STARTED for _ in self.ops)
        return self._dfs(st, progress, [])

    def _dfs(self, st: State, progress: tuple, path: list) -> Optional[list[str]]:
        if all(p is _DONE for p in progress):
            self.leaves += 1
            problem = self.final_ok(st)
            if problem is None:
                return list(path)
            if self.state_mismatch is None:
                self.state_mismatch = problem
            return None
        key = (st, progress)
        if key in self.failed:
            self.memo_hits += 1
            return None
        for i in self.order:
            p = progress[i]
            if p is _DONE:
                continue
            if p is _NOT_STARTED and any(progress[j] is not _DONE for j in self.preds[i]):
                continue
            if self.nodes >= self.max_nodes:
                self.exhausted = True
                return None
            self.nodes += 1
            op = self.ops[i]
            if p is _NOT_STARTED:
                st2, outcome, label = op.first(st)
            else:
                st2, outcome, label = op.next(st, p)
            new: Hashable  # the op's progress after this step: _DONE, or its continuation
            if isinstance(outcome, Finished):
                self.seen[i][outcome.response] = self.seen[i].get(outcome.response, 0) + 1
                if outcome.response != self.want[i]:
                    continue
                step_text = f"op{i} {op.kind.value}: {label} -> {outcome.response.text()}"
                new = _DONE
            else:
                assert isinstance(outcome, Suspended)
                step_text = f"op{i} {op.kind.value}: {label}"
                new = outcome.cont
            path.append(step_text)
            if len(path) > len(self.deepest):
                self.deepest = tuple(path)
            found = self._dfs(st2, progress[:i] + (new,) + progress[i + 1:], path)
            if found is not None:
                return found
            path.pop()
            if self.exhausted:
                return None
        self.failed.add(key)
        return None


def check_history(history: History, *, granularity: Granularity = Granularity.TRANSACTION, sealer=None,
                  max_nodes: int = DEFAULT_MAX_NODES) -> Check:
    """Whether ``history`` is linearizable against the model of ``history.variant`` (see the module docstring).

    ``sealer`` MACs the model's receipts for the comparison with
    ``history.final_state`` (the test key's ``Sealer`` when None).
    """
    variant = Variant(history.variant)
    granularity = Granularity(granularity)
    model = ModelDriver(variant)
    for n, request in enumerate(history.setup):
        response = model.handle(dict(request, id=n))
        if history.setup_responses is not None:
            got = Response.of(history.setup_responses[n])
            if got != Response.of(response):
                return Check(Verdict.SETUP_DIVERGED,
                             f"setup step s{n + 1} ({describe_request(request)}): the implementation answered "
                             f"{got.text()}, the model {Response.of(response).text()} (one process, nothing "
                             f"concurrent yet: the single-process lockstep's kind of divergence)")
    if history.readback_error is not None:
        return Check(Verdict.UNREADABLE, f"the replica's tables did not read back after the batch: "
                                         f"{history.readback_error}")
    broken = None if history.final_state is None else broken_invariant(history.final_state, variant)
    if broken is not None:
        return Check(Verdict.INVARIANT, f"the tables read back break invariant {broken.name}: {broken.statement}")
    if sealer is None:
        from envreplica.conformance.drivers import TEST_MASTER_KEY
        from envreplica.impl.sealing import Sealer

        sealer = Sealer(TEST_MASTER_KEY)
    answers = StoreAnswers(model.store)
    ops = [ModelOp(op.request, model.cfg, answers, granularity) for op in history.ops]
    impl_final = history.final_state
    expected_cache: dict = {}

    def final_ok(st: State) -> Optional[str]:
        if impl_final is None:
            return None
        if st not in expected_cache:
            expected_cache[st] = expected_state(st, sealer)
        expected = expected_cache[st]
        return None if expected == impl_final else state_difference(expected, impl_final)

    n = len(history.ops)
    search = _Search(
        ops=ops,
        want=[Response.of(op.response) for op in history.ops],
        preds=[frozenset(j for j in range(n) if history.ops[j].precedes(history.ops[i])) for i in range(n)],
        order=sorted(range(n), key=lambda i: (history.ops[i].call_ns, i)),
        final_ok=final_ok,
        max_nodes=max_nodes,
    )
    witness = search.run(model.state)
    stats = dict(nodes=search.nodes, leaves=search.leaves, memo_hits=search.memo_hits)
    if witness is not None:
        named = [_name_step(step, history) for step in witness]
        return Check(Verdict.LINEARIZABLE, "", tuple(named), **stats)
    if search.exhausted:
        return Check(Verdict.UNDECIDED, f"the search stopped after {search.nodes} model steps (max_nodes) without "
                                        f"deciding; raise max_nodes or shrink the batch", (), **stats)
    return Check(Verdict.NOT_LINEARIZABLE, _why_not(history, search, granularity),
                 tuple(_name_step(s, history) for s in search.deepest), **stats)


def _name_step(step: str, history: History) -> str:
    """``op2 ...`` with the op's batch index (the history's names survive shrinking)."""
    head, _, rest = step.partition(" ")
    position = int(head[2:])
    return f"op{history.ops[position].index} {rest}"


def _why_not(history: History, search: _Search, granularity: Granularity) -> str:
    unit = "transactions" if granularity is Granularity.TRANSACTION else "await-split steps"
    lines = [f"no order of the model's {unit} that respects real time explains this history"]
    never = []
    for i, op in enumerate(history.ops):
        want = search.want[i]
        if want not in search.seen[i]:
            options = " | ".join(r.text() for r in search.seen[i]) or "(never reached: earlier answers never matched)"
            never.append(f"op{op.index} ({describe_request(op.request)}) answered {want.text()}; in every order "
                         f"tried the model answers: {options}")
    if never:
        lines.append("answers the model never gives here:")
        lines.extend(f"  {text}" for text in never)
    elif search.state_mismatch is not None:
        lines.append("every answer is explained by some order, but none of those orders leaves the tables the "
                     f"implementation holds: {search.state_mismatch}")
    else:
        lines.append("each answer occurs in some order, but no one order gives them all")
    if search.deepest:
        lines.append(f"the longest order whose answers all matched ran {len(search.deepest)} steps (below)")
    return "\n".join(lines)
