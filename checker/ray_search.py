"""The parallel search of ``checker.parallel`` with its owners as Ray actors: from many cores to many machines.

Models: the same level-synchronous, fingerprint-partitioned search as
``checker.parallel.check_parallel`` (the same ``Partition`` does the work),
with each partition a Ray actor instead of a forked process. A round of a
level runs in two Ray calls per actor: ``round`` expands (or, in a mark
round, re-expands) the actor's frontier and ``ray.put``s each batch of
successors for another owner into the object store, returning the object
references; the coordinator (this process, the Ray driver) hands each owner
the references addressed to it (``receive``), and the owner fetches them
straight from the object store of the node that made them. The batches never
pass through the driver, which sends only commands, references and small
reports. Ray is an optional dependency (``pip install 'envreplica[ray]'``):
only ``check_ray`` imports it.

Fingerprints across processes and machines: forked workers share the
parent's hash secret and memory layout, Ray's workers share neither, and
Python's ``hash`` depends on both: a ``str`` hashes under a secret each
process draws at start unless ``PYTHONHASHSEED`` fixes it, and before Python
3.12 ``hash(None)`` (and the hash of anything hashed by identity) is derived
from the object's address, which differs per process whatever the seed; the
states hold strings and None. So:

1. every actor runs with one fixed ``PYTHONHASHSEED`` (the ``runtime_env``'s
   ``env_vars``); ``check_ray`` asks each actor for the hash of a probe
   string, and for the initial state's fingerprint, and refuses to start if
   they disagree;
2. on Python before 3.12 the actors fingerprint states with
   ``stable_fingerprint`` (a structural hash: None a constant, everything
   else by value, strings under the shared seed), memoised per actor by the
   actor's own ``hash`` (``memoized_by_hash``), so it costs about 10% more a
   transition than ``hash`` instead of 30%; from 3.12 the model's own
   fingerprint (``fingerprint="auto"``);
3. the driver never hashes a state: the actors compute every fingerprint,
   the driver routes by ``fingerprint % workers`` (an int it is given),
   rebuilds a counterexample from the owners' parent pointers, has actor 0
   replay it and compare fingerprints (``NondeterministicModel`` if they
   differ), and replays it once more itself to hold the steps as its own
   objects. The driver's own ``PYTHONHASHSEED`` is therefore irrelevant;
4. batches between actors leave out the hash each ``FMap`` caches (it was
   computed under the sender's layout): the receiver recomputes it, so the
   model's own sets and dicts of states stay consistent in every actor.

Running on a cluster: ``ray start --head`` on one machine, ``ray start
--address HEAD:6379`` on the others, the same Python with ``envreplica``
installed on every node (or a ``runtime_env`` with ``py_modules``), then
``envreplica check --ray auto`` (on a node of the cluster) or ``--ray
HEAD:6379``. Actors are spread over the nodes (``SPREAD``), one CPU each.

Leaves out on purpose: fault tolerance (an actor that dies fails the run),
and overlap of expansion with receiving (``check_parallel`` receives while it
expands; here an owner receives after every owner has expanded).
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import os
import sys
import time
from collections.abc import Mapping
from operator import attrgetter
from typing import Any, Callable, Generic, Hashable, Optional, TypeVar, Union

from envreplica.checker.bfs import Model, Result, S, Step, replay, replay_to
from envreplica.checker.parallel import (BATCH, WORKER_GC_THRESHOLD, Coordinator, E, Item, ModelFactory, Parent,
                                         Partition, Report, build, dumps_batch, loads_batch)

#: The ``PYTHONHASHSEED`` every actor runs with (unless ``hash_seed`` says otherwise).
HASH_SEED = "0"
#: What each actor hashes to show it shares the others' hash secret.
_PROBE = "envreplica: one hash secret for every owner"

H = TypeVar("H", bound=Hashable)
#: A fingerprint of the objects of one type (``_hasher``): its argument is any object of that type.
Hasher = Callable[[Any], int]
#: A Ray object reference (``ray.ObjectRef``; ray is typed as Any, installed or not).
ObjectRef = Any
#: What the actors fingerprint states with: "auto", "stable", "model", or a function of a state.
FingerprintOption = Union[str, Callable[[S], int]]
#: ``Owner.hello()``: (hash of the probe, PYTHONHASHSEED, the initial state's fingerprint, host, the initial report).
Hello = tuple[int, Optional[str], int, str, Report]


# -- a fingerprint that does not depend on the process ----------------------------------------------

#: What ``stable_fingerprint`` gives None (Python's own hash of None is its address before 3.12).
_NONE = 0x2545F4914F6CDD1D
_hashers: dict[type, Hasher] = {}
#: id(node) -> (node, fingerprint) for tuples, mappings, sets and dataclasses: states share most of their
#: nodes with their parent. Holding the node keeps its id from being reused; emptied past _CACHE_SIZE.
_node_cache: dict[int, tuple[object, int]] = {}
_CACHE_SIZE = 200_000


def stable_fingerprint(obj: object) -> int:
    """A structural hash of ``obj`` that is the same in every process that shares ``PYTHONHASHSEED``.

    Python's ``hash`` is not, before 3.12: ``hash(None)`` (and the hash of
    anything hashed by identity) is derived from the object's address, which
    differs from one process to the next, and states hold None. This one
    hashes None as a constant, tuples, frozensets and mappings (order-free)
    by their elements' fingerprints, dataclasses by their fields', enum
    members by class and name, and strings and numbers with ``hash`` (which
    ``PYTHONHASHSEED`` fixes). Equal states get equal fingerprints. Each
    node's fingerprint is remembered by identity (``_node_cache``): a
    successor shares most of its nodes with its parent, so only the path to
    what changed is hashed again.
    """
    hasher = _hashers.get(type(obj))
    if hasher is None:
        hasher = _hasher(type(obj))
    return hasher(obj)


def _remembered(compute: Hasher) -> Hasher:
    cache = _node_cache

    def hasher(o: object) -> int:
        held = cache.get(id(o))
        if held is not None and held[0] is o:
            return held[1]
        value = compute(o)
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        cache[id(o)] = (o, value)
        return value

    return hasher


def _hasher(t: type) -> Hasher:
    sf = stable_fingerprint
    hasher: Hasher
    if t in (str, int, bool, bytes, float):
        hasher = hash
    elif t is type(None):
        def hasher(o: Any) -> int:
            return _NONE
    elif issubclass(t, enum.Enum):
        hasher = {m: hash((t.__qualname__, m._name_)) for m in t}.__getitem__
    elif issubclass(t, tuple) and not dataclasses.is_dataclass(t):
        hasher = _remembered(lambda o: hash(tuple(map(sf, o))))
    elif issubclass(t, (frozenset, set)):
        hasher = _remembered(lambda o: hash(frozenset(map(sf, o))))
    elif issubclass(t, Mapping) or issubclass(t, dict):
        hasher = _remembered(lambda o: hash(frozenset([(sf(k), sf(v)) for k, v in o.items()])))
    elif dataclasses.is_dataclass(t):
        names = [f.name for f in dataclasses.fields(t)]
        if not names:
            empty = hash(t.__qualname__)

            def hasher(o: Any) -> int:
                return empty
        elif len(names) == 1:
            get_one = attrgetter(names[0])
            hasher = _remembered(lambda o: hash((sf(get_one(o)),)))
        else:
            get = attrgetter(*names)
            hasher = _remembered(lambda o: hash(tuple(map(sf, get(o)))))
    elif t.__hash__ is object.__hash__ or t.__hash__ is None:
        raise TypeError(f"{t.__qualname__} is hashed by identity (or not at all): it has no fingerprint "
                        "that holds across processes")
    else:
        hasher = hash  # its own __hash__: trusted to depend on its value only
    _hashers[t] = hasher
    return hasher


def memoized_by_hash(fingerprint: Callable[[H], int], limit: int = 4_000_000) -> Callable[[H], int]:
    """``fingerprint``, remembered by the state's own ``hash`` in this process (about 1 us, cached tables).

    Most transitions reach a state the actor has seen, so ``stable_fingerprint``
    runs about once per distinct state (a fifth of its cost on ``adversary``).
    Two distinct states with one ``hash`` would share a fingerprint: a 64-bit
    collision, as likely as one in the visited set (``Result.collision_probability``).
    The memo holds ints only (no states; the collector never walks it).
    """
    memo: dict[int, int] = {}

    def memoized(st: H) -> int:
        h = hash(st)
        fp = memo.get(h)
        if fp is None:
            fp = fingerprint(st)
            if len(memo) >= limit:
                memo.clear()
            memo[h] = fp
        return fp

    return memoized


def _actor_fingerprint(model: Model[S], fingerprint: FingerprintOption[S]) -> Callable[[S], int]:
    if fingerprint == "stable":
        return memoized_by_hash(stable_fingerprint)
    if fingerprint == "model":
        return model.fingerprint
    if fingerprint == "auto":  # hash(None) is an address before 3.12
        return memoized_by_hash(stable_fingerprint) if sys.version_info < (3, 12) else model.fingerprint
    if callable(fingerprint):
        return fingerprint
    raise ValueError(f"fingerprint: 'auto', 'stable', 'model' or a function, not {fingerprint!r}")


class Owner(Generic[S, E]):
    """One partition of the search as a Ray actor (``check_ray`` wraps it with ``ray.remote``)."""

    def __init__(self, model_factory: ModelFactory[S, E], index: int, workers: int, batch: int,
                 fingerprint: FingerprintOption[S]) -> None:
        model, self.extra = build(model_factory)
        self.model = dataclasses.replace(model, fingerprint=_actor_fingerprint(model, fingerprint))
        # As in a forked worker; more so here: stable_fingerprint's cache keeps many nodes alive, and at the
        # default thresholds full collections over them cost a third more time on ``adversary``.
        gc.set_threshold(*WORKER_GC_THRESHOLD)
        self.workers = workers
        self.part = Partition(self.model, index, workers, batch)
        self.init_fp = self.part.seed()

    def hello(self) -> Hello:
        """(hash of the probe, PYTHONHASHSEED, the initial state's fingerprint, host, the initial report)."""
        import socket

        return (hash(_PROBE), os.environ.get("PYTHONHASHSEED"), self.init_fp, socket.gethostname(),
                self.part.report())

    def round(self, op: str, depth: int, violated: tuple[str, ...],
              witnessed: tuple[str, ...]) -> list[list[ObjectRef]]:
        """Expand (``"level"``) or re-expand for marks (``"remark"``); the batches' references, per owner."""
        import ray

        if op == "level":
            self.part.advance()
        self.part.learn(violated, witnessed)
        refs: list[list[ObjectRef]] = [[] for _ in range(self.workers)]

        def ship(owner: int, items: list[Item[S]]) -> None:
            refs[owner].append(ray.put(dumps_batch(items, keep_hash=False)))

        (self.part.expand if op == "level" else self.part.remark)(depth, ship)
        return refs

    def receive(self, depth: int, refs: list[ObjectRef]) -> Report:
        """The batches the others made for this owner in this round; then this owner's report."""
        import ray

        for data in ray.get(refs):
            self.part.receive(loads_batch(data), depth + 1)
        return self.part.report()

    def parent(self, fp: int) -> Parent:
        return self.part.parent(fp)

    def check_replay(self, actions: list[Any], fp: int) -> None:
        """``NondeterministicModel`` unless ``actions`` replayed from init reach ``fp`` (fingerprinted here)."""
        replay_to(self.model, self.part.fingerprint, actions, fp)

    def finish(self) -> Optional[E]:
        return self.extra


def check_ray(
    model_factory: ModelFactory[S, E],
    workers: Optional[int],
    address: Optional[str] = "auto",
    max_depth: Optional[int] = None,
    max_states: Optional[int] = None,
    stop_on_first: bool = False,
    progress: Optional[Callable[[Result], None]] = None,
    extras: Optional[list[E]] = None,
    batch: int = BATCH,
    runtime_env: Optional[dict[str, Any]] = None,
    hash_seed: str = HASH_SEED,
    fingerprint: FingerprintOption[S] = "auto",
    shutdown: bool = True,
) -> Result:
    """``bfs.check`` of ``model_factory()`` with ``workers`` Ray actors as the owners (see the module docstring).

    ``address``: ``"auto"`` (the cluster this machine belongs to), a
    cluster's address (``HOST:6379``, or ``ray://HOST:10001`` for Ray
    Client), or None (a Ray session already initialized in this process, else
    a local one started for this run: shut down after it, or with
    ``shutdown=False`` kept for the next call and shut down at exit).
    ``workers`` None: one actor per CPU of the cluster.
    ``model_factory`` is pickled (cloudpickle) to the actors, and must
    import on every node. ``runtime_env`` is merged into the actors' (their
    ``PYTHONHASHSEED`` is ``hash_seed``). ``fingerprint``: what the actors
    fingerprint states with: ``"stable"`` (``stable_fingerprint``, memoised by
    each actor's own ``hash``: ``memoized_by_hash``),
    ``"model"`` (``Model.fingerprint``), a function, or ``"auto"``
    (``stable_fingerprint`` on Python before 3.12, else the model's: which
    must not depend on the process beyond ``PYTHONHASHSEED``). Under
    symmetry it fingerprints each state's representative (``canonical``),
    which must not depend on the process either. ``extras`` as in
    ``check_parallel``.
    """
    try:
        import ray
    except ImportError as e:
        raise ImportError("checker.ray_search needs Ray: pip install 'envreplica[ray]'") from e

    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    model, _ = build(model_factory)  # the driver's own, for replaying counterexamples
    started_here = False
    if not ray.is_initialized():
        if address is None:
            ray.init(num_cpus=max(workers or 1, os.cpu_count() or 1), include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        started_here = shutdown
    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    env = dict(runtime_env or {})
    env["env_vars"] = {**env.get("env_vars", {}), "PYTHONHASHSEED": str(hash_seed)}
    actor_class = ray.remote(Owner).options(num_cpus=1, runtime_env=env, scheduling_strategy="SPREAD")
    actors = [actor_class.remote(model_factory, i, workers, batch, fingerprint) for i in range(workers)]
    try:
        hellos = ray.get([a.hello.remote() for a in actors])
        probes = {(probe, seed) for probe, seed, _, _, _ in hellos}
        if len(probes) != 1 or next(iter(probes))[1] != str(hash_seed):
            raise RuntimeError(
                f"the Ray actors do not share one hash secret ({sorted(probes, key=str)}): PYTHONHASHSEED "
                f"{hash_seed} did not reach them, so they would disagree on fingerprints")
        if len({hello[2] for hello in hellos}) != 1:
            raise RuntimeError(
                "the Ray actors fingerprint the initial state differently "
                f"({sorted({(hello[3], hex(hello[2])) for hello in hellos})}): the fingerprint depends on the "
                "process (an object hashed by its address?); use fingerprint='stable'")
        # Seconds count from here, the actors up: starting Ray and its workers is not search time.
        coordinator = Coordinator(model, max_depth, max_states, stop_on_first, progress, time.perf_counter())

        def round_(op: str, depth: int, violated: tuple[str, ...], witnessed: tuple[str, ...]) -> list[Report]:
            made = ray.get([a.round.remote(op, depth, violated, witnessed) for a in actors])
            reports: list[Report] = ray.get([actors[j].receive.remote(depth, [ref for refs in made for ref in refs[j]])
                                             for j in range(workers)])
            return reports

        coordinator.search([hello[4] for hello in hellos], round_)
        def steps_to(actions: list[Any], fp: int) -> list[Step]:
            """Checked by an actor (it fingerprints as the owners do), then replayed here: the driver's own steps."""
            ray.get(actors[0].check_replay.remote(actions, fp))
            return replay(model, actions)

        coordinator.violations(lambda fp: ray.get(actors[fp % workers].parent.remote(fp)), steps_to)
        if extras is not None:
            extras.extend(ray.get([a.finish.remote() for a in actors]))
        return coordinator.finish()
    finally:
        for a in actors:
            ray.kill(a)
        if started_here:
            ray.shutdown()
