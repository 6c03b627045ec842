"""Breadth-first model checking on several cores: states partitioned by fingerprint among worker processes.

Models: ``checker.bfs.check`` spread over ``workers`` processes the way
parallel Murphi and PReach spread it: every state has one owner, the worker
``fingerprint % workers``, which alone holds that state's entry in the visited
set (fingerprint -> (parent fingerprint, action)) and, while it waits to be
expanded, the state itself in its frontier. The search is level-synchronous:
at level ``d`` each worker expands its own frontier (``enabled``/``next``,
the step properties and the sometimes-step and sometimes-after properties on
every transition it takes, filtered per (action kind, result type) as in
``bfs``), keeps the successors it owns and sends the others to their owners
in batches (``batch`` successors pickled in one go by ``dumps_batch``, so
what successors share with their parent is written once per batch, and
frozen dataclasses as (class, fields), twice as fast as their default).
Owners drop
what they have seen, run the invariants, the sometimes-state properties and
``observe_state`` on each new state, and gather the next level. A worker
remembers which states it has offered and does not send them again (PReach's
cache): most transitions reach states seen before, and pickling, not the
pipe, is the main cost of a message. When every worker has the end-of-round
marker of every other, it reports to the coordinator (this process), which
counts, decides whether to go on, and starts the next round.

The same answers as ``bfs.check``, not just the same verdicts: each state
carries its rank in ``bfs``'s order (``Partition``), so the owners keep
``bfs``'s parent of every state, the first violation of each property in
``bfs``'s order, and ``bfs``'s sometimes-after marks. Hence the same distinct
states and transitions, the same violations with the same counterexamples
(rebuilt by asking each owner in turn for a fingerprint's parent, then
replayed from ``init()`` in the coordinator: ``NondeterministicModel`` if the
replay reaches another fingerprint), the same sometimes properties witnessed
at the same depths, and, through ``observe_state``/``observe_step`` in the
workers, the same coverage counts once merged (``extras``). A mark passed
between two states of one level (``bfs`` passes it when the first is
expanded before the second) costs extra rounds of that level (``remark``),
in which only the states whose mark changed are expanded again.

Fingerprints and processes: the default ``Model.fingerprint`` is Python's
``hash``. It is the same in the coordinator and every worker because the
workers are started with the ``fork`` start method: they inherit the
coordinator's hash secret (``str`` hashes) and its memory layout (before
Python 3.12, ``hash(None)``, and the hash of anything hashed by identity, is
derived from an address). A worker started any other way (``spawn``, or a
process on another machine: ``checker.ray_search``) needs one fixed
``PYTHONHASHSEED`` shared by every process that hashes states, and, before
Python 3.12, a fingerprint that does not hash None by address
(``ray_search.stable_fingerprint``). The model holds lambdas and is never
pickled here: each worker calls ``model_factory()`` after the fork (a
``functools.partial(build_model, bounds)`` is the usual one; under ``fork``
even a lambda does; ``checker.ray_search`` pickles it).

A worker runs the cyclic garbage collector at higher thresholds and not
while it unpickles (``WORKER_GC_THRESHOLD``, ``loads_batch``): at the
defaults, collections over the thousands of objects a batch makes (which
hold no cycles: states are immutable values) took a fifth of a worker's time.

Level granularity: ``stop_on_first`` and ``max_states`` are honoured at the
end of a level (``bfs`` stops mid-level), so such a run may count more states
than ``bfs`` stops at. The coordinator forks the workers, so create no
threads that hold locks the workers need before calling it.

Leaves out on purpose: work stealing (hashing spreads states evenly enough),
disk, and threads (the GIL).
"""

from __future__ import annotations

import copyreg
import dataclasses
import gc
import io
import multiprocessing as mp
import pickle
import queue
import time
import traceback
from multiprocessing.connection import Connection, wait
from multiprocessing.queues import Queue
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Optional, TypeVar, Union, cast

from envreplica.checker.bfs import (CheckedProperty, Model, Result, S, Step, StepView, Violation, after_of,
                                     fingerprint_function, path_to, replay_to, step_table, view_function)

if TYPE_CHECKING:
    from envreplica.model.fmap import FMap

#: Successors per message to another worker: thousands, so pickling and the pipe cost little per state.
BATCH = 4096
#: A worker forgets the fingerprints it has sent once it remembers this many (bounds its memory).
SENT_CACHE = 4_000_000
#: The cyclic garbage collector's thresholds in a worker. A worker unpickles thousands of objects at a
#: time and keeps them (the next level), and at the default thresholds (700, 10, 10) collections over
#: them took a fifth of its time on ``cloud``; states are immutable values, so they find no cycles.
WORKER_GC_THRESHOLD = (50_000, 20, 100)

K = TypeVar("K")
V = TypeVar("V")
#: What a model factory pairs with its model (e.g. the ``Coverage`` its hooks fill); the search only hands it back.
E = TypeVar("E")

#: A model factory (see ``build``): a ``Model``, or ``(Model, extra)``. ``Model[S]`` is quoted: this alias is
#: evaluated at import, and where mypyc compiled ``checker.bfs`` its ``Model`` is a native class, not a generic
#: one, so subscripting it raised ``TypeError`` (issue 41; ``tests/test_compiled.py`` runs the command line
#: compiled).
ModelFactory = Callable[[], Union["Model[S]", tuple["Model[S]", E]]]
#: A pickler's reducer for objects of one class (any object of it: the pickler's argument is dynamic).
Reducer = Callable[[Any], Union[str, tuple[Any, ...]]]
#: Sometimes-after marks a transition carries: (property name, the earlier step as views) each.
Marks = tuple[tuple[str, StepView], ...]
#: Per sometimes-after property name, fingerprint -> (key of the transition that brought it, earlier step).
MarkTable = dict[str, dict[int, tuple[int, StepView]]]
#: An item for a state's owner: (state, or None for marks alone; fingerprint; parent fingerprint; action;
#: key; marks or None).
Item = tuple[Optional[S], int, Optional[int], Any, int, Optional[Marks]]
#: A hand-off of one full batch of items to their owner: ``ship(owner, items)``.
Ship = Callable[[int, list[Item[S]]], None]
#: A violation found by a partition: (property name, key, fingerprint, last action or None).
Found = tuple[str, int, int, Any]
#: ``Partition.report()``: (distinct states, transitions, next level's size, violations, witnessed (name ->
#: depth), changed, tentative).
Report = tuple[int, int, int, list[Found], dict[str, int], int, tuple[str, ...]]
#: A visited entry: (parent fingerprint, action), or None for the initial state.
Parent = Optional[tuple[int, Any]]
#: A round on every partition: ``round_(op, depth, violated, witnessed)`` -> one report per partition.
Round = Callable[[str, int, tuple[str, ...], tuple[str, ...]], list[Report]]
#: A command from the coordinator to a worker: (op, its arguments...); see ``_worker``.
Command = tuple[Any, ...]
#: A worker's answer: ("ok", what the command asked for) or ("error", a traceback).
Answer = tuple[str, Any]


def _fmap(d: dict[K, V], h: Optional[int]) -> FMap[K, V]:
    """An ``FMap`` from its dict and cached hash (None: computed again when asked), without copying the dict."""
    from envreplica.model.fmap import FMap

    m = FMap.__new__(FMap)
    m._d, m._h = d, h
    return m


class _Reducers(dict[type, Reducer]):
    """A pickler's ``dispatch_table``, filled on first sight of each class.

    A frozen dataclass whose ``__init__`` takes exactly its fields (no
    ``__post_init__``, no init-less or keyword-only field) pickles as
    ``(class, field values)``: half the time of the default for slotted
    dataclasses, whose ``__getstate__``/``__setstate__`` are Python loops
    over ``fields()``. An ``FMap`` pickles its dict and, with ``keep_hash``,
    its cached hash (valid in a forked worker, not in another process: see
    ``checker.ray_search``). Anything else pickles as it would anyway.
    """

    def __init__(self, keep_hash: bool) -> None:
        super().__init__(copyreg.dispatch_table)
        self.keep_hash = keep_hash

    def __missing__(self, cls: type) -> Reducer:
        from envreplica.model.fmap import FMap

        if issubclass(cls, type):  # a class with a metaclass (an Enum class): the pickler saves it by name
            raise KeyError(cls)
        if cls is FMap:
            if self.keep_hash:
                def reducer(o: Any) -> Union[str, tuple[Any, ...]]:
                    return _fmap, (o._d, o._h)
            else:
                def reducer(o: Any) -> Union[str, tuple[Any, ...]]:
                    return _fmap, (o._d, None)
        # __dataclass_params__ (what @dataclass was given) is set on every dataclass, but typeshed's
        # DataclassInstance declares only __dataclass_fields__.
        elif (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.init  # type: ignore[attr-defined]
              and not hasattr(cls, "__post_init__") and not _pickles_itself(cls)
              and all(f.init and not f.kw_only for f in dataclasses.fields(cls))):
            names = [f.name for f in dataclasses.fields(cls)]
            if not names:
                def reducer(o: Any) -> Union[str, tuple[Any, ...]]:
                    return cls, ()
            elif len(names) == 1:
                get_one = attrgetter(names[0])

                def reducer(o: Any) -> Union[str, tuple[Any, ...]]:
                    return cls, (get_one(o),)
            else:
                get = attrgetter(*names)

                def reducer(o: Any) -> Union[str, tuple[Any, ...]]:
                    return cls, get(o)
        else:
            def reducer(o: Any) -> Union[str, tuple[Any, ...]]:
                reduced: Union[str, tuple[Any, ...]] = o.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
                return reduced
        self[cls] = reducer
        return reducer


def _pickles_itself(cls: type) -> bool:
    """Whether ``cls`` (or a base short of ``object``) says how to pickle it (beyond what dataclasses generate)."""
    for base in cls.__mro__[:-1]:
        own = vars(base)
        if "__reduce__" in own or "__reduce_ex__" in own:
            return True
        if "__setstate__" in own and getattr(own["__setstate__"], "__name__", "") != "_dataclass_setstate":
            return True
    return False


_REDUCERS = {True: _Reducers(keep_hash=True), False: _Reducers(keep_hash=False)}


def dumps_batch(items: object, keep_hash: bool = True) -> bytes:
    """Pickle a batch of items in one go (what successors share is written once) with ``_Reducers``."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _REDUCERS[keep_hash]
    pickler.dump(items)
    return buf.getvalue()


def loads_batch(data: bytes) -> Any:
    """Unpickle a batch with the cyclic collector off (it would only walk the new objects, finding no cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(data)
    finally:
        if enabled:
            gc.enable()


def build(model_factory: ModelFactory[S, E]) -> tuple[Model[S], Optional[E]]:
    """``model_factory()`` as (model, extra): a factory may return a ``Model`` or ``(Model, extra)``."""
    made = model_factory()
    if isinstance(made, tuple):
        model, extra = made
        return model, extra
    return made, None


#: A state's rank in ``bfs.check``'s order is ``parent rank * RANK_RADIX + action index`` (see ``Partition``).
RANK_RADIX = 1 << 20


class Partition(Generic[S]):
    """One owner's share of the search: its visited set, its frontier, and the work of one level.

    Transport-free: ``expand`` (and ``remark``) hand each full batch of
    items for another owner to ``ship(owner, items)``; whatever carries it
    calls ``receive`` at the owner. Used by the worker processes here and by
    the actors of ``checker.ray_search``.

    Ranks reproduce ``bfs.check``'s order. ``bfs`` expands a level in the
    order its states were first reached, so a state's place in that order is
    the smallest (parent's place, index of the action in ``enabled``) over
    the transitions reaching it from the level before, written here as the
    integer ``parent rank * RANK_RADIX + index`` (the initial state's rank
    is 0). An item carries that key; the owner keeps the smallest one it
    receives for a state, and with it that transition as the state's parent
    (``bfs``'s first parent). Each partition expands its frontier in rank
    order, so the first time it offers a state is its best offer, and it need
    not offer it again (``sent``). The key of a transition also orders
    violations (``bfs`` keeps the first of each property) and
    sometimes-after marks: ``bfs`` gives a state the mark of the first
    transition that reaches it with one, from the level before or from a
    state of its own level expanded before it. The first kind arrives with
    the successors (``early``, kept by smallest key); the second cannot be
    known until the whole level is expanded, so a level may take extra
    rounds (``remark``): each state whose same-level mark changed is
    expanded again for its marks alone, until no mark changes. A witness
    found with a mark from the level before is final; one found in a round
    counts only if its state's mark did not change after it (``tentative``).
    """

    def __init__(self, model: Model[S], index: int, workers: int, batch: int = BATCH) -> None:
        self.model = model
        self.index = index
        self.workers = workers
        self.batch = batch
        self.fingerprint = fingerprint_function(model)
        self.view = view_function(model)
        self.for_step = step_table(model)  # (action, result) -> the step properties that can fail there
        #: fingerprint -> (parent fingerprint, action), or None for the initial state
        self.visited: dict[int, Optional[tuple[Optional[int], Any]]] = {}
        self.frontier: dict[int, S] = {}  # fingerprint -> state: this level, in rank order
        self.rank: dict[int, int] = {}  # fingerprint -> rank, of this level's states
        self.next: dict[int, S] = {}  # fingerprint -> state: the next level, being gathered
        self.next_rank: dict[int, int] = {}
        self.invariants = list(model.invariants)
        self.state_sometimes = [p for p in model.sometimes if p.kind == "sometimes-state"]
        self.after_sometimes = [p for p in model.sometimes if p.kind == "sometimes-after"]
        self.after_step = {p.name: after_of(p) for p in self.after_sometimes}
        #: per sometimes-after property, fingerprint -> (key, earlier step (pre, action, result, post) as views):
        self.early = self._marks()  # this level's states: the mark of the first transition from the level before
        self.same = self._marks()  # this level's states without an early mark: the first from this level
        self.next_early = self._marks()  # the next level's states
        self.changed: set[int] = set()  # this level's states whose same-level mark changed since they were expanded
        #: witnessed by a re-expansion
        self.tentative: dict[str, set[int]] = {p.name: set() for p in self.after_sometimes}
        self.violated: set[str] = set()  # property names violated at an earlier level (not evaluated again)
        self.witnessed: set[str] = set()
        #: step property name -> (key, fingerprint, action): this level's first
        self.step_found: dict[str, tuple[int, int, Any]] = {}
        #: invariant name -> [fingerprint, ...] of the next level's states
        self.invariant_found: dict[str, list[int]] = {}
        self.found_witnessed: dict[str, int] = {}  # name -> depth, since the last report
        self.transitions = 0
        self.sent: set[int] = set()  # fingerprints already offered to their owners (this one included)
        self.out: list[list[Item[S]]] = [[] for _ in range(workers)]

    def _marks(self) -> MarkTable:
        return {p.name: {} for p in self.after_sometimes}

    # -- the initial state -------------------------------------------------------------------------

    def seed(self) -> int:
        """Take the initial state if this partition owns it (as the next level); returns its fingerprint."""
        init = self.model.init()
        fp = self.fingerprint(init)
        if fp % self.workers == self.index:
            self.accept(init, fp, None, None, 0, None, 0)
            self.visited[fp] = None
        return fp

    # -- one level ---------------------------------------------------------------------------------

    def learn(self, violated: Iterable[str], witnessed: Iterable[str]) -> None:
        """What the other partitions found: stop evaluating those properties here too."""
        self.violated.update(violated)
        self.witnessed.update(witnessed)
        for name in witnessed:
            if name in self.early:
                for marks in (self.early, self.same, self.next_early, self.tentative):
                    marks[name].clear()

    def advance(self) -> None:
        """The next level becomes this one, in rank order."""
        rank = self.next_rank
        self.frontier = dict(sorted(self.next.items(), key=lambda item: rank[item[0]]))
        self.rank, self.next, self.next_rank = rank, {}, {}
        self.early, self.same, self.next_early = self.next_early, self._marks(), self._marks()
        self.changed = set()
        self.tentative = {name: set() for name in self.tentative}
        self.step_found = {}

    def _on_new_state(self, st: S, fp: int, depth: int) -> None:
        model = self.model
        if model.observe_state is not None:
            model.observe_state(st)
        seen = self.view(st)
        for prop in self.invariants:
            if prop.name not in self.violated and not prop.check(seen):
                self.invariant_found.setdefault(prop.name, []).append(fp)
        for prop in self.state_sometimes:
            if prop.name not in self.witnessed and prop.check(seen):
                self.witnessed.add(prop.name)
                self.found_witnessed[prop.name] = depth

    def accept(self, st: Optional[S], fp: int, parent_fp: Optional[int], action: Any, key: int,
               marks: Optional[Marks], depth: int) -> None:
        """An item for a state owned here, reached at ``depth`` by the transition ``key``.

        ``st`` None: a mark proposal only (the sender offered the state before).
        """
        if st is not None:
            best = self.next_rank.get(fp)
            if best is None:
                if fp not in self.visited:
                    self.visited[fp] = (parent_fp, action)
                    self.next[fp] = st
                    self.next_rank[fp] = key
                    self._on_new_state(st, fp, depth)
            elif key < best:  # reached earlier in bfs's order: that is its parent, and the state kept
                self.next_rank[fp] = key
                self.visited[fp] = (parent_fp, action)
                self.next[fp] = st  # under symmetry, another state of its orbit (bfs keeps the first reached)
        if marks:
            self._propose(fp, key, marks)

    def _propose(self, fp: int, key: int, marks: Marks) -> None:
        """Marks carried by transition ``key`` to state ``fp``: kept if first in bfs's order."""
        witnessed = self.witnessed
        if fp in self.next_rank:
            for name, earlier in marks:
                if name not in witnessed:
                    kept = self.next_early[name]
                    best = kept.get(fp)
                    if best is None or key <= best[0]:  # equal: the same transition, re-expanded
                        kept[fp] = (key, earlier)
        else:
            rank = self.rank.get(fp)
            if rank is None or key >= rank * RANK_RADIX:  # an earlier level, or expanded before its sender
                return
            for name, earlier in marks:
                if name in witnessed or fp in self.early[name]:
                    continue
                kept = self.same[name]
                best = kept.get(fp)
                if best is None or key < best[0] or (key == best[0] and best[1] != earlier):
                    kept[fp] = (key, earlier)
                    self.changed.add(fp)

    def receive(self, items: Iterable[Item[S]], depth: int) -> None:
        """A batch from another worker: (state or None, fingerprint, parent fingerprint, action, key, marks) each."""
        accept = self.accept
        for st, fp, parent_fp, action, key, marks in items:
            accept(st, fp, parent_fp, action, key, marks, depth)

    def _send(self, owner: int, item: Item[S], ship: Ship[S]) -> None:
        buf = self.out[owner]
        buf.append(item)
        if len(buf) >= self.batch:
            self.out[owner] = []
            ship(owner, buf)

    def _flush(self, ship: Ship[S]) -> None:
        for owner, buf in enumerate(self.out):
            if buf:
                self.out[owner] = []
                ship(owner, buf)

    def expand(self, depth: int, ship: Ship[S]) -> None:
        """Expand this level's frontier; successors owned elsewhere go to ``ship`` in batches (all by return)."""
        model = self.model
        enabled, nxt_of, view, fingerprint = model.enabled, model.next, self.view, self.fingerprint
        observe_step = model.observe_step
        violated, witnessed, step_found = self.violated, self.witnessed, self.step_found
        found_witnessed = self.found_witnessed
        after_sometimes, after_step, early = self.after_sometimes, self.after_step, self.early
        visited, next_rank, sent = self.visited, self.next_rank, self.sent
        workers, index, rank_of = self.workers, self.index, self.rank
        accept, for_step, send = self.accept, self.for_step, self._send
        child = depth + 1
        transitions = 0
        for fp, st in self.frontier.items():
            base = rank_of[fp] * RANK_RADIX
            pending_after = [(p, early[p.name].get(fp)) for p in after_sometimes if p.name not in witnessed]
            pre = view(st)
            key = base - 1
            for action in enabled(st):
                key += 1
                nxt, res = nxt_of(st, action)
                transitions += 1
                if observe_step is not None:
                    observe_step(st, action, res, nxt)
                nxt_fp = fingerprint(nxt)
                post = view(nxt)
                props, sometimes = for_step(action, res)
                for prop in props:
                    if prop.name not in violated and not prop.check(pre, action, res, post):
                        violated.add(prop.name)  # this partition's first, in rank order
                        step_found[prop.name] = (key, fp, action)
                for prop in sometimes:
                    if prop.name not in witnessed and prop.check(pre, action, res, post):
                        witnessed.add(prop.name)
                        found_witnessed[prop.name] = child
                marks: Optional[Marks] = None
                for prop, mark in pending_after:
                    if prop.name in witnessed:
                        continue
                    if mark is None:
                        if after_step[prop.name].check(pre, action, res, post):
                            marks = (marks or ()) + ((prop.name, (pre, action, res, post)),)
                    elif prop.check(mark[1], pre, action, res, post):
                        witnessed.add(prop.name)
                        found_witnessed[prop.name] = child
                    else:
                        marks = (marks or ()) + ((prop.name, mark[1]),)
                if nxt_fp in sent:
                    if marks is not None:
                        owner = nxt_fp % workers
                        if owner == index:
                            self._propose(nxt_fp, key, marks)
                        else:
                            send(owner, (None, nxt_fp, None, None, key, marks), ship)
                    continue
                owner = nxt_fp % workers
                if owner == index:
                    if nxt_fp in visited and nxt_fp not in next_rank:  # an earlier level, or this one
                        if marks is not None:
                            self._propose(nxt_fp, key, marks)
                        continue
                    accept(nxt, nxt_fp, fp, action, key, marks, child)
                else:
                    send(owner, (nxt, nxt_fp, fp, action, key, marks), ship)
                if len(sent) >= SENT_CACHE:
                    sent.clear()
                sent.add(nxt_fp)
            if key - base >= RANK_RADIX:
                raise ValueError(f"a state with more than {RANK_RADIX} enabled actions: raise RANK_RADIX")
            self.transitions += transitions
            transitions = 0
        self._flush(ship)

    def remark(self, depth: int, ship: Ship[S]) -> None:
        """Expand again, for their marks alone, the states whose same-level mark changed (see the class)."""
        model, view, fingerprint = self.model, self.view, self.fingerprint
        workers, index, tentative = self.workers, self.index, self.tentative
        todo, self.changed = self.changed, set()
        for fp in sorted(todo, key=self.rank.__getitem__):
            for held in tentative.values():
                held.discard(fp)
            proposed = [(p, self.same[p.name].get(fp)) for p in self.after_sometimes
                        if p.name not in self.witnessed and fp not in self.early[p.name]]
            pending = [(p, mark) for p, mark in proposed if mark is not None]
            if not pending:
                continue
            st = self.frontier[fp]
            pre = view(st)
            key = self.rank[fp] * RANK_RADIX - 1
            for action in model.enabled(st):
                key += 1
                nxt, res = model.next(st, action)
                post = view(nxt)
                marks: Optional[Marks] = None
                for prop, mark in pending:
                    if prop.check(mark[1], pre, action, res, post):
                        tentative[prop.name].add(fp)
                    else:
                        marks = (marks or ()) + ((prop.name, mark[1]),)
                if marks is not None:
                    nxt_fp = fingerprint(nxt)
                    owner = nxt_fp % workers
                    if owner == index:
                        self._propose(nxt_fp, key, marks)
                    else:
                        self._send(owner, (None, nxt_fp, None, None, key, marks), ship)
        self._flush(ship)

    def report(self) -> Report:
        """(distinct states, transitions, next level's size, violations, witnessed, changed, tentative).

        Violations are (name, key, fingerprint, last action or None), this
        partition's first of each property in bfs's order, and (like the
        witnessed properties) reported once; ``changed`` counts the states
        ``remark`` would expand again, and ``tentative`` names the
        sometimes-after properties a re-expansion witnessed.
        """
        found = [(name, key, fp, action) for name, (key, fp, action) in self.step_found.items()]
        for name, fps in self.invariant_found.items():
            fp = min(fps, key=self.next_rank.__getitem__)
            found.append((name, self.next_rank[fp], fp, None))
            self.violated.add(name)
        self.step_found, self.invariant_found = {}, {}
        witnessed, self.found_witnessed = self.found_witnessed, {}
        tentative = tuple(name for name, held in self.tentative.items() if held)
        return len(self.visited), self.transitions, len(self.next), found, witnessed, len(self.changed), tentative

    def parent(self, fp: int) -> Parent:
        """The visited entry of ``fp``: (parent fingerprint, action), or None for the initial state."""
        # Only the initial state's entry lacks a parent fingerprint (seed overwrites it with None): every
        # other entry was set from an item for a new state, which carries its parent's.
        return cast(Parent, self.visited[fp])


# -- the coordinator's side, shared with checker.ray_search ----------------------------------------


class Coordinator(Generic[S]):
    """Merges the partitions' reports into one ``Result`` and drives the levels (and their mark rounds)."""

    def __init__(self, model: Model[S], max_depth: Optional[int], max_states: Optional[int], stop_on_first: bool,
                 progress: Optional[Callable[[Result], None]], started: float) -> None:
        self.model = model
        self.max_depth, self.max_states = max_depth, max_states
        self.stop_on_first, self.progress = stop_on_first, progress
        self.started = started
        self.result = Result(fingerprints=True)
        self.pending: dict[str, tuple[int, int, Any]] = {}  # property name -> (depth, fingerprint, last action or None)
        self.frontier = 0  # states in the next level
        self.changed = 0  # states a mark round would expand again
        self.tentative: set[str] = set()  # sometimes-after properties witnessed in the last mark round
        self.props = {p.name: p for p in (*model.invariants, *model.step_properties)}
        self.after = [p.name for p in model.sometimes if p.kind == "sometimes-after"]

    def search(self, seed_reports: list[Report], round_: Round) -> None:
        """Level by level: ``round_(op, depth, violated, witnessed)`` runs one round on every partition.

        ``op`` is ``"level"`` (advance to level ``depth`` and expand it) or
        ``"remark"`` (a mark round of that level); it returns one report per
        partition, in partition order.
        """
        self.merge(seed_reports, 0)
        depth = 0
        while self.go_on(depth):
            self.merge(round_("level", depth, *self.known()), depth + 1)
            while self.changed and any(name not in self.result.witnessed for name in self.after):
                self.merge(round_("remark", depth, *self.known()), depth + 1)
            for name in self.tentative:
                self.result.witnessed.setdefault(name, depth + 1)
            self.report_progress()
            depth += 1

    def merge(self, reports: list[Report], depth: int) -> None:
        """One report per partition: sums, and each property's first violation and witness in bfs's order."""
        r = self.result
        r.states = sum(rep[0] for rep in reports)
        r.transitions = sum(rep[1] for rep in reports)
        self.frontier = sum(rep[2] for rep in reports)
        first: dict[str, tuple[int, int, Any]] = {}
        for rep in reports:
            for name, key, fp, action in rep[3]:
                if name not in self.pending and (name not in first or key < first[name][0]):
                    first[name] = (key, fp, action)
            for name, seen_at in rep[4].items():
                if name not in r.witnessed or seen_at < r.witnessed[name]:
                    r.witnessed[name] = seen_at
        for name, (_, fp, action) in first.items():
            self.pending[name] = (depth, fp, action)
        self.changed = sum(rep[5] for rep in reports)
        self.tentative = {name for rep in reports for name in rep[6]}
        r.seconds = time.perf_counter() - self.started
        if self.max_states is not None and r.states >= self.max_states and self.frontier:
            r.complete = False

    def go_on(self, depth: int) -> bool:
        """Whether to expand level ``depth`` (``bfs.check``'s stopping rules, at the end of a level)."""
        r = self.result
        if not self.frontier:
            return False
        if self.stop_on_first and self.pending:
            return False
        if not r.complete:  # max_states reached
            return False
        r.depth = depth
        if self.max_depth is not None and depth >= self.max_depth:
            r.complete = False
            return False
        return True

    def known(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The properties violated and witnessed so far (the partitions stop evaluating them)."""
        return tuple(self.pending), tuple(self.result.witnessed)

    def report_progress(self) -> None:
        if self.progress is not None:
            self.result.seconds = time.perf_counter() - self.started
            self.progress(self.result)

    def violations(self, parent_of: Callable[[int], Parent], steps_to: Callable[[list[Any], int], list[Step]]) -> None:
        """Rebuild each violation's counterexample: parent pointers from the owners, then a replay from init.

        ``steps_to(actions, fingerprint)`` replays ``actions`` in this process
        and raises ``NondeterministicModel`` unless the run reaches
        ``fingerprint`` (``bfs.replay_to``, or a check by a process that
        fingerprints as the owners do).
        """
        for name, (depth, fp, action) in sorted(self.pending.items()):
            steps = steps_to(path_to(parent_of, fp), fp)
            if action is not None:
                st, res = self.model.next(steps[-1].state, action)
                steps.append(Step(action, res, st))
            if len(steps) - 1 != depth:
                raise RuntimeError(f"{name}: a counterexample of {len(steps) - 1} steps found at depth {depth}")
            self.result.violations[name] = Violation(self.props[name], steps)

    def finish(self) -> Result:
        self.result.seconds = time.perf_counter() - self.started
        return self.result


# -- worker processes ------------------------------------------------------------------------------


def _worker(model_factory: ModelFactory[S, E], index: int, workers: int, inboxes: list[Queue[Union[bytes, int]]],
            conn: Connection[Answer, Command], batch: int) -> None:
    """One worker process: a ``Partition`` driven by the coordinator's commands on ``conn``."""
    try:
        gc.set_threshold(*WORKER_GC_THRESHOLD)
        model, extra = build(model_factory)
        part = Partition(model, index, workers, batch)
        part.seed()
        conn.send(("ok", part.report()))
        inbox = inboxes[index]
        dumps, loads = dumps_batch, loads_batch
        while True:
            msg = conn.recv()
            op = msg[0]
            if op in ("level", "remark"):
                _, depth, violated, witnessed = msg
                if op == "level":
                    part.advance()
                part.learn(violated, witnessed)
                ends = 0

                def drain(block: bool) -> None:
                    nonlocal ends
                    while ends < workers - 1:
                        try:
                            data = inbox.get() if block else inbox.get_nowait()
                        except queue.Empty:
                            return
                        if isinstance(data, int):  # another worker is done with this round
                            ends += 1
                        else:
                            part.receive(loads(data), depth + 1)

                def ship(owner: int, items: list[Item[S]]) -> None:
                    inboxes[owner].put(dumps(items))
                    drain(False)

                (part.expand if op == "level" else part.remark)(depth, ship)
                for owner in range(workers):
                    if owner != index:
                        inboxes[owner].put(index)
                drain(True)
                conn.send(("ok", part.report()))
            elif op == "parent":
                conn.send(("ok", part.parent(msg[1])))
            elif op == "stop":
                conn.send(("ok", extra))
                return
    except BaseException:  # noqa: BLE001 - reported to the coordinator, which raises it
        for q in inboxes:
            q.cancel_join_thread()
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:  # noqa: BLE001
            pass


class WorkerFailed(RuntimeError):
    """A worker process raised (its traceback is the message) or died."""


def _answer(conn: Connection[Command, Answer], index: int) -> Any:
    try:
        status, payload = conn.recv()
    except EOFError:
        raise WorkerFailed(f"worker {index} died") from None
    if status == "error":
        raise WorkerFailed(f"worker {index} failed:\n{payload}")
    return payload


def _gather(conns: list[Connection[Command, Answer]]) -> list[Any]:
    """One answer from each worker, in worker order; raises as soon as any fails."""
    answers: dict[int, Any] = {}
    index_of = {id(c): i for i, c in enumerate(conns)}
    waiting = list(conns)
    while waiting:
        for conn in cast("list[Connection[Command, Answer]]", wait(waiting)):  # some of those it was given
            answers[index_of[id(conn)]] = _answer(conn, index_of[id(conn)])
            waiting.remove(conn)
    return [answers[i] for i in range(len(conns))]


def check_parallel(
    model_factory: ModelFactory[S, E],
    workers: int,
    max_depth: Optional[int] = None,
    max_states: Optional[int] = None,
    stop_on_first: bool = False,
    progress: Optional[Callable[[Result], None]] = None,
    extras: Optional[list[E]] = None,
    batch: int = BATCH,
) -> Result:
    """``bfs.check`` of ``model_factory()`` on ``workers`` forked processes (see the module docstring).

    ``model_factory()`` returns a ``Model`` or ``(Model, extra)``; it is called
    once in this process (for replaying counterexamples) and once in each
    worker. With ``extras`` (a list), each worker's ``extra`` at the end of the
    search (e.g. the ``Coverage`` its model's observe hooks filled) is appended
    to it, in worker order.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    started = time.perf_counter()
    model, _ = build(model_factory)
    coordinator = Coordinator(model, max_depth, max_states, stop_on_first, progress, started)
    ctx = mp.get_context("fork")
    inboxes = [ctx.Queue() for _ in range(workers)]
    pipes = [ctx.Pipe() for _ in range(workers)]
    procs = [ctx.Process(target=_worker, args=(model_factory, i, workers, inboxes, pipes[i][1], batch),
                         name=f"envreplica-check-{i}", daemon=True) for i in range(workers)]
    for proc in procs:
        proc.start()
    for _, child in pipes:
        child.close()
    conns = [parent for parent, _ in pipes]
    stopped = False
    try:
        def round_(op: str, depth: int, violated: tuple[str, ...], witnessed: tuple[str, ...]) -> list[Report]:
            for conn in conns:
                conn.send((op, depth, violated, witnessed))
            return _gather(conns)

        coordinator.search(_gather(conns), round_)
        fingerprint = fingerprint_function(model)

        def parent_of(fp: int) -> Parent:
            conn = conns[fp % workers]
            conn.send(("parent", fp))
            entry: Parent = _answer(conn, fp % workers)  # the owner's Partition.parent(fp)
            return entry

        coordinator.violations(parent_of, lambda actions, fp: replay_to(model, fingerprint, actions, fp))
        for conn in conns:
            conn.send(("stop",))
        gathered = _gather(conns)
        stopped = True
        if extras is not None:
            extras.extend(gathered)
    finally:
        for proc in procs:
            proc.join(timeout=5 if stopped else 0)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for q in inboxes:
            q.close()
            q.cancel_join_thread()
        for conn in conns:
            conn.close()
    return coordinator.finish()

