"""Bounded frame generators and the model interface the checker, simulator and driver share.

Models: the environment of the replica. Two generators emit frames within
``Bounds``:

* ``cloud`` mode: a small model of the cloud that owns records, changes them
  only by reachable head moves (create, rotate, approve/epoch upgrade,
  withhold, delete, restore, relist), logs each change as the next delivery
  of its stream, snapshots its records page by page into an attempt, and
  commits with its true high-water mark and versions. It reads the replica's
  cursor and staging progress the way a real cloud learns them from
  acknowledgements. Consistent frames reach deep states cheaply.
* ``adversary`` mode: any frame whose fields come from the bounded domains
  (streams, attempts, projects, keys, record versions, sequences, a record
  alphabet that includes older and conflicting records, reconciliation ids,
  organisations, kept-epoch sets), whatever the replica's state.

In both modes a task may read the served view (a step that changes nothing:
the properties judge its answer), the replica may close, restart, lose its
value store, and any read in flight may answer with each answer class
(``model.store.answers``);
up to ``Bounds.inflight`` operations may be suspended at once (0 turns
interleavings off).

Crash points: with ``Bounds.restarts`` and ``Bounds.crash_points``, every
enabled page, delivery and resumed read is followed by ``CrashAfter(a, k)``
for each k from 1 to its number of write commits minus one (a crash after
the last one is ``a`` then ``Restart``, already explored), less those
``CrashPoints.DISTINCT`` shows add nothing. One run of ``a`` with its
commits recorded (``actions.run_recording_commits``) gives the count, the
plain successor and every crash successor; a one-state memo hands them to
``next_state``, so no operation runs twice.

The interface: ``init(bounds)``, ``enabled(bounds, world)``,
``next_state(bounds, world, action)``. Properties live in ``spec.properties``.

Leaves out on purpose: the cloud's own failure handling (it simply resends
what the replica's state says is next), and symmetry: the generators name
things concretely; ``model.symmetry`` gives the checker a representative per
state up to renaming, on request (``envreplica check --symmetry``).
"""

from __future__ import annotations

import enum
import itertools
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Union, cast

from envreplica.model import replica as replica_ops
from envreplica.model.actions import (
    CRASHABLE,
    Action,
    Begin,
    CloseGate,
    Commit,
    CrashAfter,
    Deliver,
    Page,
    Read,
    Restart,
    Resume,
    StoreOff,
    StepResult,
    run_recording_commits,
    step,
)
from envreplica.model.fmap import EMPTY, FMap
from envreplica.model.state import INITIAL, ModelConfig, State, Variant
from envreplica.model.store import answers
from envreplica.spec.domain import (
    ApplyFrame,
    BeginFrame,
    BindingState,
    BindOmit,
    BindWithhold,
    CommitFrame,
    Crashed,
    Cursor,
    Head,
    LegacyRef,
    PageFrame,
    ProjectVersion,
    StagedRef,
    ValueRef,
)
from envreplica.spec.frozen import Frozen, HashOnce, replace
from envreplica.spec.gate import Gate


class Mode(str, enum.Enum):
    """Where frames come from."""

    CLOUD = "cloud"
    ADVERSARY = "adversary"


class CrashPoints(str, enum.Enum):
    """Which ``CrashAfter(a, k)`` (k from 1 to a's write commits minus one) the generator enumerates.

    ``DISTINCT`` leaves out a crash point whose state (after the restart) is
    ``Restart``'s from the same state, or an earlier k's of the same action:
    the step it would add is an edge already explored with the same
    (pre, post) states, on which every property of ``spec.properties`` gives
    the same verdict (they read a crash step through ``Crashed`` and its
    action's frame only, and a crash that changes nothing durable is
    ``Restart``). That is most of them: a staged operation's writes are all
    purged by the restart. ``ALL`` enumerates every one (a test checks the
    two reach the same states and verdicts).
    """

    OFF = "off"  # none: a crash happens only between actions (Restart), or inside a read window
    DISTINCT = "distinct"  # each whose crash state is new for this state and action (the default)
    ALL = "all"  # every k


class Move(str, enum.Enum):
    """The cloud's record changes: each one reachable head move (``isReachableRecordAdvance``)."""

    CREATE = "create"  # first save: revision 1, generation 1
    CREATE_TOMBSTONE = "create_tombstone"  # a fence: revision 1, generation 0, tombstone
    ROTATE = "rotate"  # a new value: generation + 1
    UPGRADE = "upgrade"  # approve under the next policy epoch: revision + 1
    WITHHOLD = "withhold"  # approve with a withholding binding: revision + 1
    DELETE = "delete"  # revision + 1, generation + 1, tombstone
    RESTORE = "restore"  # save after delete: revision + 1, generation + 1
    RELIST = "relist"  # listing generation + 1 only


@dataclass(frozen=True)
class Bounds(Frozen):
    """The finite domains of one model-checking run (configuration, never state)."""

    name: str  # how the CLI names these bounds
    mode: Mode  # cloud model or adversary
    variant: Variant = Variant.FIXED  # the protocol variant under check
    projects: tuple[str, ...] = ("p1",)  # project ids
    keys: tuple[str, ...] = ("A",)  # env keys; a key that is not a Segment (``_K``) has no legacy name
    legacy_keys: tuple[str, ...] = ()  # keys whose values the cloud keeps as legacy SSM versions
    streams: tuple[str, ...] = ("s1", "s2")  # delivery stream ids
    attempts: tuple[str, ...] = ("a1", "a2")  # attempt ids (the adversary may reuse them)
    orgs: tuple[str, ...] = ("org",)  # organisations begin may name
    epoch_sets: tuple[tuple[int, ...], ...] = ((1, 2),)  # kept policy epochs begin may send
    record_epochs: tuple[int, ...] = (1, 2)  # policy epochs records are approved under
    moves: frozenset[Move] = frozenset(Move)  # the cloud's record changes
    max_counter: int = 2  # revision / generation limit
    max_record_version: int = 2  # project record version limit
    max_sequence: int = 2  # delivery sequence limit per stream
    page_size: int = 1  # records per page
    values: tuple[str, ...] = ("v",)  # plaintexts a store may hold
    inflight: int = 1  # operations that may start while others are suspended (0: interleavings off)
    store_off: bool = False  # the value store may go away
    restarts: bool = True  # the replica may crash and restart
    crash_points: CrashPoints = CrashPoints.DISTINCT  # with restarts: crash after write commits (CrashPoints)
    alphabet_extra: bool = True  # adversary: add older/conflicting records to the alphabet
    alphabet_omit: bool = False  # adversary: add a record whose binding omits the key
    ack_page_bytes: int = 262144  # acknowledgement size bound
    max_depth: Optional[int] = None  # stop exploring beyond this depth (None: exhaustive)

    def model_config(self) -> ModelConfig:
        return ModelConfig(variant=self.variant, ack_page_bytes=self.ack_page_bytes)


@dataclass(frozen=True, slots=True, eq=False)
class Cloud(HashOnce):
    """The cloud's side in ``cloud`` mode."""

    records: FMap[tuple[str, str], BindingState] = EMPTY  # (projectId, key) -> BindingState: the cloud's truth
    versions: FMap[str, int] = EMPTY  # projectId -> record version
    log: tuple[tuple[str, int, BindingState], ...] = ()  # (projectId, recordVersion, state) deltas on the current stream
    stream: int = -1  # index of the current stream in Bounds.streams (-1: none yet)
    attempts: int = 0  # attempts begun; the current one is Bounds.attempts[attempts - 1]


@dataclass(frozen=True, slots=True, eq=False)
class World(HashOnce):
    """One state of the checker: the replica, and the cloud (None in adversary mode)."""

    replica: State  # the replica under check
    cloud: Optional[Cloud]  # the cloud model, when frames come from it


# ---------------------------------------------------------------------------
# Records: the cloud's moves, and the adversary's alphabet
# ---------------------------------------------------------------------------


def _ref(bounds: Bounds, key: str, generation: int) -> ValueRef:
    if key in bounds.legacy_keys:
        return LegacyRef(generation)
    return StagedRef(f"00000000-0000-4000-8000-{generation:012x}")


def moves(bounds: Bounds, key: str, current: Optional[BindingState]) -> Iterator[tuple[Move, BindingState]]:
    """Each record the cloud can move ``current`` to in one record-version step."""
    limit = bounds.max_counter
    first_epoch = bounds.record_epochs[0]
    if current is None:
        if Move.CREATE in bounds.moves:
            yield Move.CREATE, BindingState(key, Head(1, 1, False, _ref(bounds, key, 1)), None, first_epoch, 0)
        if Move.CREATE_TOMBSTONE in bounds.moves:
            yield Move.CREATE_TOMBSTONE, BindingState(key, Head(1, 0, True, None), None, first_epoch, 0)
        return
    h = current.head
    if not h.tombstone:
        if Move.ROTATE in bounds.moves and h.generation < limit:
            yield Move.ROTATE, replace(current, head=Head(h.revision, h.generation + 1, False, _ref(bounds, key, h.generation + 1)))
        if h.revision < limit:
            later = [e for e in bounds.record_epochs if current.policy_epoch is not None and e > current.policy_epoch]
            if Move.UPGRADE in bounds.moves and later:
                yield Move.UPGRADE, replace(current, head=replace(h, revision=h.revision + 1), policy_epoch=later[0])
            if Move.WITHHOLD in bounds.moves and current.binding is None:
                yield Move.WITHHOLD, replace(current, head=replace(h, revision=h.revision + 1), binding=BindWithhold("held"))
        if Move.DELETE in bounds.moves and h.revision < limit and h.generation < limit:
            yield Move.DELETE, replace(current, head=Head(h.revision + 1, h.generation + 1, True, None))
    elif Move.RESTORE in bounds.moves and h.revision < limit and h.generation < limit:
        yield Move.RESTORE, replace(current, head=Head(h.revision + 1, h.generation + 1, False, _ref(bounds, key, h.generation + 1)))
    if Move.RELIST in bounds.moves and current.listing_generation < 1:
        yield Move.RELIST, replace(current, listing_generation=current.listing_generation + 1)


def alphabet(bounds: Bounds, key: str) -> tuple[BindingState, ...]:
    """The adversary's records for ``key``: every record the cloud can reach, plus odd ones."""
    seen: list[BindingState] = []
    frontier: list[Optional[BindingState]] = [None]
    while frontier:
        nxt: list[Optional[BindingState]] = []
        for current in frontier:
            for _, state in moves(bounds, key, current):
                if state not in seen:
                    seen.append(state)
                    nxt.append(state)
        frontier = nxt
    if bounds.alphabet_extra and seen:
        first = seen[0]
        # Same counters, another binding: a conflict with the first record.
        seen.append(replace(first, binding=BindWithhold("odd")))
        # Same counters, an epoch no begin keeps: policy_epoch_unknown.
        seen.append(replace(first, policy_epoch=None))
        if bounds.alphabet_omit:
            # Same counters, a binding that omits the key: binding_omits.
            seen.append(replace(first, binding=BindOmit()))
    return tuple(seen)


# ---------------------------------------------------------------------------
# Frames common to both modes: a task's read, close, restart, store off, resume
# ---------------------------------------------------------------------------


def _environment_actions(bounds: Bounds, st: State) -> Iterator[Action]:
    yield Read(tuple(sorted(st.projects)))  # a task reads at any moment (a step that changes nothing)
    yield CloseGate()
    if bounds.restarts:
        yield Restart()
    if bounds.store_off and st.store_on:
        yield StoreOff()
    for slot, op in enumerate(st.inflight):
        read = op.read
        for answer in answers(read.org_id, read.project_id, read.before, read.request, bounds.values):
            yield Resume(slot, answer)


def _may_start(bounds: Bounds, st: State) -> bool:
    """A page or delivery may start only while a suspended slot is free."""
    return len(st.inflight) <= bounds.inflight


# ---------------------------------------------------------------------------
# The cloud
# ---------------------------------------------------------------------------


def _cloud_actions(bounds: Bounds, world: World) -> Iterator[WorldAction]:
    cloud, st = cast(Cloud, world.cloud), world.replica  # cloud mode: the world has its cloud
    a = st.authority
    stream = bounds.streams[cloud.stream] if cloud.stream >= 0 else None
    attempt = bounds.attempts[cloud.attempts - 1] if cloud.attempts else None
    # begin: a new attempt, on this stream or the next one
    if cloud.attempts < len(bounds.attempts):
        new_attempt = bounds.attempts[cloud.attempts]
        choices = []
        if stream is not None:
            choices.append(stream)
        if cloud.stream + 1 < len(bounds.streams):
            choices.append(bounds.streams[cloud.stream + 1])
        for s in choices:
            for epochs in bounds.epoch_sets:
                yield Begin(BeginFrame(s, new_attempt, bounds.projects), epochs, bounds.orgs[0])
    staging = attempt is not None and a.attempt_id == attempt and a.gate is Gate.STAGING
    if staging and _may_start(bounds, st):
        assert attempt is not None  # staging names it
        for project in bounds.projects:
            page = _next_page(bounds, cloud, st, attempt, project)
            if page is not None:
                yield Page(page)
    if staging:
        assert attempt is not None and stream is not None  # an attempt is begun on a stream
        versions = tuple(ProjectVersion(p, cloud.versions.get(p, 0)) for p in sorted(bounds.projects))
        yield Commit(CommitFrame(attempt, Cursor(stream, len(cloud.log)), versions))
    # deliveries: the next one, and a replay of the last consumed one
    if a.gate.activated and stream is not None and a.stream_id == stream and _may_start(bounds, st):
        recon = a.attempt_id if a.attempt_id is not None and a.attempt_id == attempt else None
        for sequence in (a.applied_sequence + 1, a.applied_sequence):
            if 1 <= sequence <= len(cloud.log):
                project, version, state = cloud.log[sequence - 1]
                yield Deliver(ApplyFrame("op", project, version, state, Cursor(stream, sequence), recon))
    # record changes
    if stream is not None and len(cloud.log) < bounds.max_sequence:
        for project in bounds.projects:
            if cloud.versions.get(project, 0) >= bounds.max_record_version:
                continue
            for key in bounds.keys:
                for move, _ in moves(bounds, key, cloud.records.get((project, key))):
                    yield CloudChange(project, key, move)


@dataclass(frozen=True, slots=True, eq=False)
class CloudChange(HashOnce):
    """A cloud-side record change (not a replica action: the replica sees it as a delivery later)."""

    project: str
    key: str
    move: Move

    @property
    def kind(self) -> str:
        return "cloud_change"


#: What the checker's environment does: a replica action, or (cloud mode) a cloud-side record change.
WorldAction = Union[Action, CloudChange]


def _next_page(bounds: Bounds, cloud: Cloud, st: State, attempt: str, project: str) -> Optional[PageFrame]:
    version = cloud.versions.get(project, 0)
    staged = st.stage_projects.get((attempt, project))
    if staged is None:
        return None
    keys = sorted(k for (p, k) in cloud.records if p == project)
    if staged.record_version == version and staged.complete:
        return None
    if staged.record_version == version and staged.last_key is not None:
        after = staged.last_key
    else:
        after = None
    rest = [k for k in keys if after is None or k > after]
    chunk = rest[: bounds.page_size]
    records = tuple(cloud.records[(project, k)] for k in chunk)
    return PageFrame("op", attempt, project, after, version, records, len(rest) <= bounds.page_size)


def _cloud_next(bounds: Bounds, world: World, action: WorldAction) -> World:
    cloud = cast(Cloud, world.cloud)  # called in cloud mode only
    if isinstance(action, CloudChange):
        state = dict(moves(bounds, action.key, cloud.records.get((action.project, action.key))))[action.move]
        version = cloud.versions.get(action.project, 0) + 1
        cloud = replace(
            cloud,
            records=cloud.records.set((action.project, action.key), state),
            versions=cloud.versions.set(action.project, version),
            log=cloud.log + ((action.project, version, state),),
        )
    elif isinstance(action, Begin):
        index = bounds.streams.index(action.frame.stream_id)
        if index != cloud.stream:
            cloud = replace(cloud, stream=index, log=())
        cloud = replace(cloud, attempts=cloud.attempts + 1)
    return replace(world, cloud=cloud)


# ---------------------------------------------------------------------------
# The adversary
# ---------------------------------------------------------------------------


_Frames = tuple[tuple[Begin, ...], tuple[Page, ...], tuple[Deliver, ...], tuple[Commit, ...]]


def _adversary_frames(bounds: Bounds) -> _Frames:
    """Every frame within the bounds, computed once per bounds (the domain, not the state)."""
    versions = range(0, bounds.max_record_version + 1)
    records_by_key = {k: alphabet(bounds, k) for k in bounds.keys}
    begins = []
    for s, att, org, epochs in itertools.product(bounds.streams, bounds.attempts, bounds.orgs, bounds.epoch_sets):
        for n in range(len(bounds.projects) + 1):
            for projects in itertools.combinations(bounds.projects, n):
                begins.append(Begin(BeginFrame(s, att, projects), epochs, org))
    pages = []
    for att, project, version, complete in itertools.product(bounds.attempts, bounds.projects, versions, (False, True)):
        for after in (None,) + bounds.keys:
            later = [k for k in bounds.keys if after is None or k > after]
            for n in range(0, bounds.page_size + 1):
                for keys in itertools.combinations(later, n):
                    for states in itertools.product(*(records_by_key[k] for k in keys)):
                        pages.append(Page(PageFrame("op", att, project, after, version, tuple(states), complete)))
    deliveries = []
    for s, seq, project, version, recon in itertools.product(
        bounds.streams, range(1, bounds.max_sequence + 1), bounds.projects,
        range(1, bounds.max_record_version + 1), (None,) + bounds.attempts,
    ):
        for key in bounds.keys:
            for state in records_by_key[key]:
                deliveries.append(Deliver(ApplyFrame("op", project, version, state, Cursor(s, seq), recon)))
    commits = []
    for att, s, seq in itertools.product(bounds.attempts, bounds.streams, range(0, bounds.max_sequence + 1)):
        for n in range(len(bounds.projects) + 1):
            for projects in itertools.combinations(sorted(bounds.projects), n):
                for vs in itertools.product(versions, repeat=n):
                    commits.append(Commit(CommitFrame(att, Cursor(s, seq), tuple(
                        ProjectVersion(p, v) for p, v in zip(projects, vs)))))
    return tuple(begins), tuple(pages), tuple(deliveries), tuple(commits)


_FRAMES: dict[Bounds, _Frames] = {}


def _adversary_actions(bounds: Bounds, world: World) -> Iterator[Action]:
    frames = _FRAMES.get(bounds)
    if frames is None:
        frames = _FRAMES[bounds] = _adversary_frames(bounds)
    begins, pages, deliveries, commits = frames
    st = world.replica
    yield from begins
    yield from commits
    if _may_start(bounds, st):
        yield from pages
        yield from deliveries


# ---------------------------------------------------------------------------
# The interface
# ---------------------------------------------------------------------------


def init(bounds: Bounds) -> World:
    """The initial world: an empty replica (and an empty cloud in cloud mode)."""
    return World(INITIAL, Cloud() if bounds.mode is Mode.CLOUD else None)


class _Run:
    """One recorded run of a page, delivery or resume from one state, and its crash successors."""

    __slots__ = ("action", "next", "result", "prefixes", "crashed")

    def __init__(self, cfg: ModelConfig, st: State, action: Union[Page, Deliver, Resume]) -> None:
        self.action = action
        self.next, self.result, self.prefixes = run_recording_commits(cfg, st, action)
        self.crashed: dict[int, State] = {}  # k -> restart of the state after commit k

    def crash(self, cfg: ModelConfig, k: int) -> State:
        after = self.crashed.get(k)
        if after is None:
            after = self.crashed[k] = replica_ops.restart(cfg, self.prefixes[k - 1])[0]
        return after


class _Runs:
    """A memo of one replica state's recorded runs (``_Run``), for ``enabled`` and ``next_state`` to share.

    Holds the state and the actions themselves and compares them by identity
    (hashing a frame costs more than the lookup saves): ``enabled`` and
    ``next_state`` pass the same objects. A new state or config starts it
    afresh. A cache only: every entry is what ``run_recording_commits``
    returns for its action.
    """

    __slots__ = ("owner", "cfg", "runs", "restarted")

    def __init__(self) -> None:
        self.owner: Optional[State] = None
        self.cfg: Optional[ModelConfig] = None
        self.runs: dict[int, _Run] = {}  # id(action) -> _Run
        self.restarted: Optional[State] = None  # Restart's successor of the owner

    def get(self, cfg: ModelConfig, st: State, action: Union[Page, Deliver, Resume]) -> _Run:
        if self.owner is not st or (self.cfg is not cfg and self.cfg != cfg):
            self.owner, self.cfg, self.runs, self.restarted = st, cfg, {}, None
        run = self.runs.get(id(action))
        if run is None or run.action is not action:
            run = self.runs[id(action)] = _Run(cfg, st, action)
        return run

    def restart_of_owner(self) -> State:
        if self.restarted is None:
            assert self.cfg is not None and self.owner is not None  # get() came first
            self.restarted = replica_ops.restart(self.cfg, self.owner)[0]
        return self.restarted


class _PerThread(threading.local):
    runs: _Runs

    def __init__(self) -> None:
        self.runs = _Runs()


_LOCAL = _PerThread()  # one memo per thread: a checker in another thread never sees this one's runs


def _crashes(bounds: Bounds) -> bool:
    return bounds.restarts and bounds.crash_points is not CrashPoints.OFF


def _with_crash_points(
    bounds: Bounds, world: World, cfg: ModelConfig, actions: Iterable[WorldAction]
) -> Iterator[WorldAction]:
    """Each action, then (for a page, delivery or resume) its crash points (``CrashPoints``)."""
    every = bounds.crash_points is CrashPoints.ALL
    runs = _LOCAL.runs
    for action in actions:
        yield action
        if not isinstance(action, CRASHABLE):
            continue
        run = runs.get(cfg, world.replica, action)
        if every:
            for k in range(1, len(run.prefixes)):
                yield CrashAfter(action, k)
            continue
        st, seen = world.replica, None
        for k in range(1, len(run.prefixes)):
            if _durably_unchanged(st, run.prefixes[k - 1]):
                continue  # restart purges everything it wrote: Restart's own successor
            after = run.crash(cfg, k)
            if seen is None:
                seen = {runs.restart_of_owner()}
            if after not in seen:
                seen.add(after)
                yield CrashAfter(action, k)


def _durably_unchanged(st: State, prefix: State) -> bool:
    """``prefix`` keeps every table a restart keeps exactly as ``st`` has it (by identity: a cheap, sound test)."""
    return (
        prefix.records is st.records
        and prefix.values is st.values
        and prefix.projects is st.projects
        and prefix.receipts is st.receipts
        and prefix.authority is st.authority
        and prefix.store_on is st.store_on
    )


def enabled(bounds: Bounds, world: World, cfg: Optional[ModelConfig] = None) -> Iterator[WorldAction]:
    """Every action the environment may take next.

    With ``Bounds.inflight == 0`` interleavings are off: while a read is in
    flight, only its answer may come next, so every operation is atomic.
    With crash points on, each page, delivery and resume is followed by its
    ``CrashAfter`` actions (``cfg``, default the bounds', runs them to count).
    """
    actions: Iterator[WorldAction]
    if bounds.inflight == 0 and world.replica.inflight:
        actions = (a for a in _environment_actions(bounds, world.replica) if isinstance(a, Resume))
    elif bounds.mode is Mode.CLOUD:
        actions = itertools.chain(_cloud_actions(bounds, world), _environment_actions(bounds, world.replica))
    else:
        actions = itertools.chain(_adversary_actions(bounds, world), _environment_actions(bounds, world.replica))
    if _crashes(bounds):
        actions = _with_crash_points(bounds, world, cfg or bounds.model_config(), actions)
    yield from actions


def next_state(
    bounds: Bounds, world: World, action: WorldAction, cfg: Optional[ModelConfig] = None
) -> tuple[World, Optional[StepResult]]:
    """Take ``action``; returns (next world, result). Cloud-side changes have result None."""
    if isinstance(action, CloudChange):
        return _cloud_next(bounds, world, action), None
    cfg = cfg or bounds.model_config()
    if not _crashes(bounds):
        replica_next, result = step(cfg, world.replica, action)
    elif isinstance(action, CRASHABLE):  # the recorded run enabled() made
        run = _LOCAL.runs.get(cfg, world.replica, action)
        replica_next, result = run.next, run.result
    elif isinstance(action, CrashAfter):  # restart of the recorded prefix
        run = _LOCAL.runs.get(cfg, world.replica, action.action)
        if action.commit < len(run.prefixes):
            replica_next, result = run.crash(cfg, action.commit), Crashed(action.commit)
        else:
            replica_next, result = step(cfg, world.replica, action)
    else:
        replica_next, result = step(cfg, world.replica, action)
    # A step that leaves the replica as it was (a refusal that writes nothing) returns the world itself,
    # whose hash is already kept: the checker fingerprints it again at no cost.
    world2 = world if replica_next is world.replica else World(replica_next, world.cloud)
    if world.cloud is not None and isinstance(action, Begin) and getattr(result, "ok", False):
        world2 = _cloud_next(bounds, world2, action)
    return world2, result

