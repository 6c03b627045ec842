"""The paired writer migration and its explicitly selected recovery, as an executable model.

Models: the second seed's ``PreparedPairedWriterMigration`` (prepare, retain
parent first, apply under the installation lock: reconcile, maintenance
begun, drain observed, each backup, each apply, verify, evidence, the result
published, maintenance completed) and ``PreparedPairedWriterRecovery``
(prepare under the lock, then retain and apply under it: revalidate, the
recovery request published, the stores fenced for recovery, each restore or
check of an unchanged store, the recovery result published, admission
reopened). Each invocation is a process with a program counter (``Pc``) and
a memory; each of its steps is one action. Besides them: a second
invocation racing the first, a crash of any process between any two of its
steps (what it published and wrote stays; its memory and its lock go; the
next invocation starts from the files), and foreign writers of either
contract version, one connection at a time, that connects to either store,
writes and disconnects at any moment.

Where the seed calls a module it does not show, the model reads it one way
per ``Reading``: a child's ``backup()`` when a backup is already there
(keep it, overwrite it, refuse), a child's ``apply()`` on a store already
migrated (skip, migrate again), what a child's ``reconcile()`` calls
applied (the migration's receipt in the store, or its whole content), and
what ``acquireInstallationLock`` does while another invocation holds the
lock (wait, or refuse). ``Fix`` names each fix of what the checker finds in
the seed's steps, and the implementation's one deviation from their order;
``MigrationVariant`` is the seed (no fix) or every fix.

The environment's faults (``Fault``), each off unless the bounds turn it on
(the named suites of the safety check leave them off; the implementation's
lockstep, ``conformance.migration``, turns them all on): an invocation given
wrong input (no master key, another key than the stores were sealed with,
one store named twice), a foreign writer that holds a write transaction on a
store (``Lock``), a store file that cannot be written (``ReadOnly``), and a
publication or backup edited by hand (``Edit``); the operator undoes each
(``Unlock``, ``Writable``, ``Repair``). Each refusal they cause is the
implementation's contract (``spec.migration.EXIT_STATUS``): the seed shows
none of them.

Leaves out on purpose: everything the seed checks before its first step
(paths, identities, sizes, hashes of the request bytes) beyond those
faults, the schema bootstrap, physical owner processes beyond an open writer
connection (an owner is a process holding a store open), and the
installation lock's ownership checks between steps (the lock is one holder
at a time; a crashed holder's lock is free, as a stale lease is).

The properties are ``spec.migration``'s; ``model()`` packs this module into
the checker's narrow interface (``checker.bfs.Model``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Union, cast

from envreplica.spec.frozen import HashOnce, replace
from envreplica.spec.migration import (
    NEW_VERSION,
    OLD_VERSION,
    STORES,
    Admission,
    Base,
    Crashed,
    Data,
    Done,
    Image,
    Landed,
    Refusal,
    Refused,
    Status,
    image_of,
    migrated,
    reconcile,
    reconcile_child,
)


class BackupReading(enum.Enum):
    """What a child's ``backup()`` does when its backup file exists already (the seed does not show it)."""

    KEEP = "keep"  # keeps the backup there (a backup is written once): what the seed needs
    #: ``KEEP``, and a store no longer its prepared source (written after the request, before its fence) is not
    #: backed up but refused (``unknown_child_outcome``): the implementation's (its backups are checked against the
    #: request's source digests); the seed's stand-in backs up what is there
    KEEP_SOURCE = "keep-source"
    OVERWRITE = "overwrite"  # copies the store again over it
    REFUSE = "refuse"  # refuses (the rerun cannot go on; recovery must)


class ApplyReading(enum.Enum):
    """What a child's ``apply()`` does on a store already at the new version (the seed does not show it)."""

    SKIP = "skip"  # nothing: the child is applied (what the seed needs)
    AGAIN = "again"  # migrates the migrated data again


class ReconcileReading(enum.Enum):
    """What a child's ``reconcile()`` calls applied (the seed does not show it)."""

    #: the store records this migration (its source migrated, at the new version): writes of the new
    #: version that landed after it reopened do not matter (what the seed needs)
    RECEIPT = "receipt"
    EXACT = "exact"  # the store's whole content is its source migrated: any later write makes it unknown


class LockReading(enum.Enum):
    """What ``acquireInstallationLock`` does while another live invocation holds it (the seed does not show it)."""

    WAIT = "wait"  # the invocation waits (its step is not enabled until the lock is free)
    REFUSE = "refuse"  # the invocation is refused at once (``installation_lock_held``): the implementation's


class Fix(enum.Enum):
    """One fix of what the checker finds in the seed's steps (docs/findings.md), or a deviation from their order."""

    #: recovery refuses once a migration result is published (the seed plans and selects it regardless)
    RESULT_ENDS_RECOVERY = "result-ends-recovery"
    #: recovery counts a store as unchanged when the migration never applied it (the old version, and no
    #: backup: every apply comes after both backups), not only when it still equals its prepared source
    UNAPPLIED_IS_UNCHANGED = "unapplied-is-unchanged"
    #: a rerun of a recovery whose result is published only reopens the stores (the seed revalidates them)
    RESULT_ONLY_REOPENS = "result-only-reopens"
    #: a rerun after a published result checks the result's evidence (its custody and the backups it
    #: recorded) before it fences the stores, not after: a refused rerun leaves their admission as it was
    EVIDENCE_BEFORE_MAINTENANCE = "evidence-before-maintenance"
    #: recovery also refuses when a store holds its source migrated and is open to writers again: only a
    #: migration's completed maintenance reopens a migrated store, and it comes after the result, so the stores
    #: prove the migration completed even when its result file was moved away (``MoveAway``)
    STORES_PROVE_COMPLETION = "stores-prove-completion"


class MigrationVariant(enum.Enum):
    """The seed's own steps, or the seed with every ``Fix``."""

    SEED = "seed"  # paired-writer-migration.js as it is
    FIXED = "fixed"  # every Fix

    @property
    def fixes(self) -> frozenset[Fix]:
        return frozenset() if self is MigrationVariant.SEED else frozenset(Fix)


@dataclass(frozen=True)
class Reading:
    """One reading of the steps the seed leaves to modules it does not show."""

    backup: BackupReading = BackupReading.KEEP
    apply: ApplyReading = ApplyReading.SKIP
    reconcile: ReconcileReading = ReconcileReading.RECEIPT
    lock: LockReading = LockReading.WAIT

    def __str__(self) -> str:
        text = f"backup={self.backup.value}, apply={self.apply.value}, reconcile={self.reconcile.value}"
        return text + (f", lock={self.lock.value}" if self.lock is not LockReading.WAIT else "")


class Fault(enum.Enum):
    """A class of the environment's faults the bounds may turn on (each off by default)."""

    INPUT = "input"  # migrate invoked with no master key, a wrong one, or one store named twice; a copy named
    LOCK = "lock"  # a connected foreign writer holds a write transaction on its store
    READ_ONLY = "read-only"  # a store file cannot be written
    EDIT = "edit"  # a published request, result, recovery request or a backup is edited by hand
    MOVE_AWAY = "move-away"  # the published result is moved away from beside the request (and not put back)


class InputFault(enum.Enum):
    """What is wrong with an invocation's input (``Fault.INPUT``): the implementation refuses it at its first step."""

    NONE = "none"  # nothing
    NO_KEY = "no-key"  # no master key given
    WRONG_KEY = "wrong-key"  # a key the stores were not sealed with
    SAME_PATH = "same-path"  # the second --db names the first store's path, spelled another way
    SYMLINK = "symlink"  # the second --db is a symlink to the first store
    HARDLINK = "hardlink"  # the second --db is a hard link to the first store (another path, the same file)
    COPY = "copy"  # --request names a copy of the published request kept elsewhere (migrate or recover)


#: The input faults that name one store twice.
ALIASES = frozenset({InputFault.SAME_PATH, InputFault.SYMLINK, InputFault.HARDLINK})


class Doc(enum.Enum):
    """A publication an edit (``Fault.EDIT``) can change; a backup is edited through ``Edit(Doc.BACKUP, i)``; the
    result can also be moved away (``MoveAway``)."""

    REQUEST = "request"  # REQUEST
    RESULT = "result"  # REQUEST.result.json
    RECOVERY = "recovery"  # REQUEST.recovery.json
    BACKUP = "backup"  # store i's backup file


@dataclass(frozen=True)
class MigrationBounds:
    """Configuration: how far the checker explores (never part of a state)."""

    name: str
    migrations: int = 2  # migrate invocations in all (a rerun after a crash, a racing second one)
    recoveries: int = 1  # recover invocations in all
    crashes: int = 1  # crashes in all
    writes: int = 1  # foreign writes that may land on the stores' data at once (a restore takes them back)
    fixes: frozenset[Fix] = frozenset(Fix)  # the fixes applied (none: the seed's steps)
    reading: Reading = Reading()
    max_depth: Optional[int] = None  # None: to the end of the state space
    faults: frozenset[Fault] = frozenset()  # the environment's faults that may happen (none: the seed's world)
    fault_actions: int = 0  # faults that may be set in all (a lock, a read-only store, an edit; undoing is free)


#: Named bounds suites (``envreplica check --bounds NAME``). Each suite is checked bounds by bounds; its
#: "sometimes" properties must each be witnessed in one of them. ``migration`` is what ``envreplica
#: check`` runs beside the replica's model check: a rerun racing a crashed migration (``rerun``), and a
#: migration racing a recovery with a crash and a foreign writer (``writers``).
RERUN = MigrationBounds("rerun", migrations=2, recoveries=0, crashes=1, writes=0)
WRITERS = MigrationBounds("writers", migrations=1, recoveries=1, crashes=1, writes=1)
CRASH = MigrationBounds("crash", migrations=2, recoveries=1, crashes=1, writes=0)
RACE = MigrationBounds("race", migrations=2, recoveries=1, crashes=1, writes=1)
#: The environment's faults (``Fault``), each class at bounds of its own, with the implementation's reading of the
#: lock (a second invocation refused while one holds it): safety and recoverability hold under each, the
#: operator undoing the fault (``Unlock``, ``Writable``, ``Repair``) on the way out.
_REFUSE = Reading(lock=LockReading.REFUSE)
FAULTS_INPUT = MigrationBounds("input", migrations=2, recoveries=1, crashes=0, writes=0, reading=_REFUSE,
                               faults=frozenset({Fault.INPUT, Fault.READ_ONLY}), fault_actions=1)
FAULTS_LOCK = MigrationBounds("lock", migrations=1, recoveries=1, crashes=1, writes=1, reading=_REFUSE,
                              faults=frozenset({Fault.LOCK}), fault_actions=1)
FAULTS_EDIT = MigrationBounds("edit", migrations=2, recoveries=1, crashes=1, writes=0, reading=_REFUSE,
                              faults=frozenset({Fault.EDIT, Fault.MOVE_AWAY}), fault_actions=1)
LOCK_REFUSED = MigrationBounds("lock-refused", migrations=2, recoveries=1, crashes=1, writes=0, reading=_REFUSE)
PRESETS: dict[str, tuple[MigrationBounds, ...]] = {
    "migration": (RERUN, WRITERS),
    "migration-deep": (CRASH, RACE),  # two migrations and a recovery with a crash, then with a writer too
    "migration-faults": (FAULTS_INPUT, FAULTS_LOCK, FAULTS_EDIT, LOCK_REFUSED),
}


class UnknownMigrationBounds(ValueError):
    """A bounds name that is not one of ``PRESETS``."""


def suite(name: str, variant: MigrationVariant = MigrationVariant.FIXED, reading: Reading = Reading(),
          fixes: Optional[Iterable[Fix]] = None) -> tuple[MigrationBounds, ...]:
    """The bounds suite ``name`` under ``variant`` (or exactly ``fixes``) and ``reading``."""
    try:
        chosen = PRESETS[name]
    except KeyError:
        raise UnknownMigrationBounds(f"unknown migration bounds {name!r}: choose one of {', '.join(PRESETS)}") \
            from None
    fixes = variant.fixes if fixes is None else frozenset(fixes)
    # a suite's own reading of the lock stays (the faults' suite is the implementation's)
    return tuple(replace(b, fixes=fixes, reading=replace(reading, lock=b.reading.lock)) for b in chosen)


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class StoreState(HashOnce):
    """One store, as its database file and its import guard hold it."""

    version: int  # the writer contract version it records
    data: Data  # its tables
    admission: Admission  # who may change it
    backup: Optional[Image]  # the migration's backup file of it, once written
    writer: bool  # a foreign writer holds a connection to it (drained() refuses while one does)
    locked: bool = False  # that writer holds a write transaction on it (Fault.LOCK): a step that writes it is refused
    read_only: bool = False  # its file cannot be written (Fault.READ_ONLY)
    backup_edited: bool = False  # its backup file was edited by hand since written (Fault.EDIT): not ``backup``


@dataclass(frozen=True, slots=True, eq=False)
class Intent(HashOnce):
    """The published migration request: whose it is (its permit id) and each child's source."""

    permit: int  # the invocation that prepared it (the seed's random permit_id: two requests differ)
    sources: tuple[Image, ...]  # each store as prepared (the child inputs' source facts)


@dataclass(frozen=True, slots=True, eq=False)
class Evidence(HashOnce):
    """The migration result's evidence: the backups it recorded (storage-backup), per store."""

    backups: tuple[Optional[Image], ...]  # what each backup held when recorded


@dataclass(frozen=True, slots=True, eq=False)
class RecoveryRequest(HashOnce):
    """The published recovery request: whose, and per store whether it restores (else: unchanged)."""

    recovery: int  # the invocation that prepared it
    restores: tuple[bool, ...]  # store i: restore from its backup (True) or check it is untouched


@dataclass(frozen=True, slots=True, eq=False)
class Files(HashOnce):
    """What the invocations published next to the request file (immutable once written)."""

    intent: Optional[Intent] = None  # REQUEST
    inputs: tuple[bool, ...] = (False, False)  # REQUEST.run.json, REQUEST.resource.json
    result: Optional[Evidence] = None  # REQUEST.result.json (moved away by ``MoveAway``: None again)
    recovery: Optional[RecoveryRequest] = None  # REQUEST.recovery.json
    recovery_result: bool = False  # REQUEST.recovery.json.result.json
    edited: frozenset[Doc] = frozenset()  # the publications edited by hand since published (Fault.EDIT)


class Role(enum.Enum):
    """What an invocation runs."""

    MIGRATE = "migrate"
    RECOVER = "recover"


class Pc(enum.Enum):
    """Where an invocation is: the step it takes next (the seed's names)."""

    # migrate
    PREPARE = "prepare"  # prepare a request (or restore the published one)
    RETAIN_PARENT = "retain parent"  # publish the request: parent first
    RETAIN_RUN = "retain run"  # publish the run child's input
    RETAIN_RESOURCE = "retain resource"  # publish the resource child's input
    LOCK = "lock"  # acquire the installation lock
    RECONCILE = "reconcile"  # no recovery selected; retain again; reconcile; check against a result
    MAINTENANCE_RUN = "maintenance run"  # beginStorageMaintenance(run home)
    MAINTENANCE_RESOURCE = "maintenance resource"
    DRAIN = "drain"  # the drain observation recorded as evidence
    BACKUP_RUN = "backup run"  # drained(); child.backup()
    BACKUP_RESOURCE = "backup resource"
    APPLY_RUN = "apply run"  # drained(); child.apply()
    APPLY_RESOURCE = "apply resource"
    VERIFY = "verify"  # verifyAppliedData; reconcile must be applied; the evidence
    READ_EVIDENCE = "read evidence"  # a result exists: its evidence, checked against the backups
    PUBLISH_RESULT = "publish result"  # reconcile again; publish the result
    COMPLETE_RUN = "complete run"  # completeStorageMaintenance(run home)
    COMPLETE_RESOURCE = "complete resource"
    # recover
    RECOVER = "recover"  # restore the migration request; prepare a recovery or restore the published one
    LOCK_PREPARE = "lock prepare"
    PLAN = "plan"  # under the lock: judge each store original or changed
    LOCK_APPLY = "lock apply"
    REVALIDATE = "revalidate"  # retainLocked: retain, drained, revalidate each store
    PUBLISH_RECOVERY = "publish recovery"  # publish the recovery request
    FENCE_RUN = "fence run"  # beginStorageRecovery(run home)
    FENCE_RESOURCE = "fence resource"
    RESTORE_RUN = "restore run"  # drained(); restore the store, or check it is untouched
    RESTORE_RESOURCE = "restore resource"
    PUBLISH_RECOVERY_RESULT = "publish recovery result"
    REOPEN_RUN = "reopen run"  # completeStorageMaintenance(run home)
    REOPEN_RESOURCE = "reopen resource"


@dataclass(frozen=True, slots=True, eq=False)
class Proc(HashOnce):
    """One invocation of migrate or recover: what a crash loses."""

    pid: int  # its number (also its permit id)
    role: Role  # migrate or recover
    pc: Pc  # the step it takes next
    lock: bool = False  # it holds the installation lock
    intent: Optional[Intent] = None  # the request it prepared or restored
    backups: Optional[tuple[Optional[Image], ...]] = None  # migrate: the backup facts it recorded
    evidence: Optional[Evidence] = None  # migrate: the evidence it will publish
    plan: Optional[RecoveryRequest] = None  # recover: the request it prepared or restored
    before: Optional[Status] = None  # migrate: what its reconcile found (the seed's ``before``)
    fault: InputFault = InputFault.NONE  # what is wrong with its input (Fault.INPUT)


@dataclass(frozen=True, slots=True, eq=False)
class MigrationState(HashOnce):
    """Everything that is: two stores, the published files, the running invocations, and counters."""

    stores: tuple[StoreState, ...]  # run, resource
    files: Files  # what has been published
    procs: tuple[Proc, ...]  # the invocations alive, by pid
    migrations: int = 0  # migrate invocations started
    recoveries: int = 0  # recover invocations started
    crashes: int = 0  # crashes so far
    original: tuple[Optional[Image], ...] = (None, None)  # ghost: each store as first fenced (either fence)
    faults: int = 0  # faults set so far (a lock, a read-only store, an edit)


# ---------------------------------------------------------------------------
# Actions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Invoke:
    """The operator runs the migration, or selects its recovery (the seed's ``apply`` and ``recover`` entry points);
    ``fault`` is what is wrong with its input (``Fault.INPUT``; recover's only fault is ``InputFault.COPY``)."""

    role: Role
    fault: InputFault = InputFault.NONE
    kind = "invoke"


@dataclass(frozen=True)
class Step:
    """Invocation ``pid`` takes its next step."""

    pid: int
    kind = "step"


@dataclass(frozen=True)
class Crash:
    """Invocation ``pid`` dies (kill -9, power loss) between two of its steps."""

    pid: int
    kind = "crash"


@dataclass(frozen=True)
class Connect:
    """A foreign writer opens a connection to store ``store``."""

    store: int
    kind = "connect"


@dataclass(frozen=True)
class Write:
    """A foreign writer of contract version ``version`` writes to store ``store`` through its connection."""

    store: int
    version: int
    kind = "write"


@dataclass(frozen=True)
class Disconnect:
    """A foreign writer closes its connection to store ``store``."""

    store: int
    kind = "disconnect"


@dataclass(frozen=True)
class Lock:
    """The foreign writer connected to store ``store`` begins a write transaction and holds it (``Fault.LOCK``)."""

    store: int
    kind = "lock"


@dataclass(frozen=True)
class Unlock:
    """That writer ends its transaction (it wrote nothing)."""

    store: int
    kind = "unlock"


@dataclass(frozen=True)
class ReadOnly:
    """Store ``store``'s file becomes read-only (``Fault.READ_ONLY``: a mode, an immutable flag, a read-only mount)."""

    store: int
    kind = "read-only"


@dataclass(frozen=True)
class Writable:
    """Store ``store``'s file can be written again."""

    store: int
    kind = "writable"


@dataclass(frozen=True)
class Edit:
    """Someone edits a publication, or store ``store``'s backup (``doc`` is ``Doc.BACKUP``), by hand (``Fault.EDIT``)."""

    doc: Doc
    store: Optional[int] = None
    kind = "edit"


@dataclass(frozen=True)
class MoveAway:
    """Someone moves the published result away from beside the request (``Fault.MOVE_AWAY``; ``doc`` is
    ``Doc.RESULT``). Nobody puts it back: a result moved away is no longer published, and only a rerun of the
    migration publishes it again. What the stores hold is unchanged: they still prove the migration
    completed once its maintenance reopened them (``Fix.STORES_PROVE_COMPLETION``)."""

    doc: Doc = Doc.RESULT
    kind = "move-away"


@dataclass(frozen=True)
class Repair:
    """The operator puts the edited file back as it was published (or written)."""

    doc: Doc
    store: Optional[int] = None
    kind = "repair"


Action = Union[Invoke, Step, Crash, Connect, Write, Disconnect, Lock, Unlock, ReadOnly, Writable, Edit, MoveAway,
               Repair]
#: The environment's fault actions and the operator's undoing of them.
FAULT_ACTIONS = (Lock, ReadOnly, Edit, MoveAway)
REPAIR_ACTIONS = (Unlock, Writable, Repair)
Result = Union[Done, Refused, Landed, Crashed]


def init(cfg: MigrationBounds) -> MigrationState:
    """Both stores at the old version with their original data, open, no backup; nothing published."""
    store = StoreState(OLD_VERSION, Data(Base.ORIGINAL), Admission.OPEN, None, False)
    return MigrationState(stores=(store, store), files=Files(), procs=())


def init_with(cfg: MigrationBounds, images: tuple[Image, ...]) -> MigrationState:
    """``init``, with each store's version and data as ``images`` says (the adapter protocol's ``reset``)."""
    return MigrationState(stores=tuple(StoreState(i.version, i.data, Admission.OPEN, None, False) for i in images),
                          files=Files(), procs=())


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _reconcile(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> Status:
    """The pair's outcome against ``proc``'s request, as ``cfg.reading.reconcile`` reads a child's."""
    return reconcile(_intent(proc).sources, _images(st), cfg.reading.reconcile is ReconcileReading.RECEIPT)


def _intent(proc: Proc) -> Intent:
    """The request ``proc`` prepared or restored: its first step sets it, before any step that reads it."""
    return cast(Intent, proc.intent)


def _plan(proc: Proc) -> RecoveryRequest:
    """The recovery request ``proc`` prepared or restored: set (by ``plan`` or ``recover``) before it is read."""
    return cast(RecoveryRequest, proc.plan)


def _lock_free(st: MigrationState) -> bool:
    return not any(p.lock for p in st.procs)


def _drained(st: MigrationState) -> bool:
    """The seed's ``drained(stores)``: no writer holds a connection to either store."""
    return not any(s.writer for s in st.stores)


def _images(st: MigrationState) -> tuple[Image, ...]:
    return tuple(image_of(s) for s in st.stores)


def _with_proc(st: MigrationState, proc: Proc) -> MigrationState:
    return replace(st, procs=tuple(proc if p.pid == proc.pid else p for p in st.procs))


def _end(st: MigrationState, proc: Proc) -> MigrationState:
    """``proc`` returns or refuses: it is gone, and so is its lock (withStoreCleanup releases it)."""
    return replace(st, procs=tuple(p for p in st.procs if p.pid != proc.pid))


def _refuse(st: MigrationState, proc: Proc, code: Refusal) -> tuple[MigrationState, Result]:
    return _end(st, proc), Refused(code)


def _store(st: MigrationState, i: int, **changes: object) -> MigrationState:
    stores = list(st.stores)
    stores[i] = replace(stores[i], **changes)
    return replace(st, stores=tuple(stores))


def _go(st: MigrationState, proc: Proc, pc: Pc, note: str = "", **changes: object) -> tuple[MigrationState, Result]:
    return _with_proc(st, replace(proc, pc=pc, **changes)), Done(note)


def _original_now(cfg: MigrationBounds, st: MigrationState, intent: Intent, i: int) -> bool:
    """The seed's ``assertOriginal``: the store is still exactly its prepared source. Fixed: or the migration
    never applied it (still the old version, and no backup: every apply comes after both backups)."""
    store = st.stores[i]
    if image_of(store) == intent.sources[i]:
        return True
    return Fix.UNAPPLIED_IS_UNCHANGED in cfg.fixes and store.version == OLD_VERSION and store.backup is None


def _completed_in_stores(cfg: MigrationBounds, st: MigrationState, intent: Intent) -> bool:
    """Fixed (``Fix.STORES_PROVE_COMPLETION``): a store holds its source migrated (its receipt of this request)
    and is open to writers again. Only a migration's completed maintenance reopens a migrated store, after its
    result was published: that is proof of completion no file beside the request can outweigh."""
    return Fix.STORES_PROVE_COMPLETION in cfg.fixes and any(
        s.admission is Admission.OPEN and reconcile_child(intent.sources[i], image_of(s), True) is Status.APPLIED
        for i, s in enumerate(st.stores))


def _unwritable(st: MigrationState, i: int) -> Optional[Refusal]:
    """Why a step cannot write store ``i`` now (``None``: it can): its file is read-only, or a foreign writer
    holds a write transaction on it (the step waits its busy timeout, then is refused)."""
    store = st.stores[i]
    if store.read_only:
        return Refusal.STORE_READ_ONLY
    if store.locked:
        return Refusal.STORE_BUSY
    return None


def _backup_problem(store: StoreState) -> Optional[Refusal]:
    """Why store's backup cannot be restored (``None``: it can): there is none, or it was edited since written."""
    if store.backup is None:
        return Refusal.CHANGED_STORE_HAS_NO_BACKUP
    if store.backup_edited:
        return Refusal.BACKUP_CHANGED
    return None


def _evidence_problem(st: MigrationState) -> Optional[Refusal]:
    """``readEvidence``'s custody checks: the published result as published, and the backups it recorded."""
    result = cast(Evidence, st.files.result)  # read only where a result is published (it stays published)
    if Doc.RESULT in st.files.edited:
        return Refusal.EVIDENCE_CUSTODY_CHANGED
    if tuple(s.backup for s in st.stores) != result.backups or any(s.backup_edited for s in st.stores):
        return Refusal.BACKUP_EVIDENCE_CHANGED
    return None


def _fenced(st: MigrationState, i: int, admission: Admission) -> MigrationState:
    """Store ``i`` under ``admission``; the ghost keeps the store as it was when first fenced."""
    original = tuple(image_of(st.stores[i]) if j == i and o is None else o for j, o in enumerate(st.original))
    return replace(_store(st, i, admission=admission), original=original)


# ---------------------------------------------------------------------------
# migrate: PreparedPairedWriterMigration
# ---------------------------------------------------------------------------


def _opened(st: MigrationState, proc: Proc, i: int, then: Pc, done: str) -> tuple[MigrationState, Result]:
    """``completeStorageMaintenance`` on store ``i`` (the migration's last steps, and the recovery's): open to
    writers again; after the first store, ``then``; after the second, the invocation returns ``done``."""
    if st.stores[i].admission is not Admission.OPEN and (problem := _unwritable(st, i)) is not None:
        return _refuse(st, proc, problem)
    st = _store(st, i, admission=Admission.OPEN)
    if i == 0:
        return _go(st, proc, then)
    return _end(st, proc), Done(done)


def prepare(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """``prepare`` (no request published yet) or ``restore`` (rerun: the published request, from its file).
    First the input and the environment (the implementation's contract; no fault, no refusal): one store named
    twice, no key, a read-only store; then a published request as published; the key proven on the stores."""
    if proc.fault is InputFault.COPY:  # read first: it names the stores (enabled once a request is published)
        return _refuse(st, proc, Refusal.REQUEST_NOT_AT_HOME)
    if proc.fault in ALIASES:
        return _refuse(st, proc, Refusal.SAME_STORE)
    if proc.fault is InputFault.NO_KEY:
        return _refuse(st, proc, Refusal.MASTER_KEY_MISSING)
    if any(s.read_only for s in st.stores):
        return _refuse(st, proc, Refusal.STORE_READ_ONLY)
    if st.files.intent is not None:
        if Doc.REQUEST in st.files.edited:
            return _refuse(st, proc, Refusal.REQUEST_CHANGED)
        if proc.fault is InputFault.WRONG_KEY:
            return _refuse(st, proc, Refusal.MASTER_KEY_WRONG)
        return _go(st, proc, Pc.LOCK, "restored", intent=st.files.intent)
    if all(s.version == NEW_VERSION for s in st.stores):  # the seed's order: before it observes the drain
        return _refuse(st, proc, Refusal.CONTENT_ONLY_ROUTE)
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    if proc.fault is InputFault.WRONG_KEY:
        return _refuse(st, proc, Refusal.MASTER_KEY_WRONG)
    return _go(st, proc, Pc.RETAIN_PARENT, "prepared", intent=Intent(proc.pid, _images(st)))


def retain_parent(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """Publish the request (immutable: the same bytes again are fine, other bytes conflict)."""
    if st.files.intent is not None and (st.files.intent != proc.intent or Doc.REQUEST in st.files.edited):
        return _refuse(st, proc, Refusal.REQUEST_CONFLICT)  # other bytes there (an edited file's are other)
    st = replace(st, files=replace(st.files, intent=proc.intent))
    return _go(st, proc, Pc.RETAIN_RUN)


def retain_child(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """Publish child ``i``'s input (derived from the request: the same bytes whoever publishes them)."""
    inputs = tuple(True if j == i else x for j, x in enumerate(st.files.inputs))
    st = replace(st, files=replace(st.files, inputs=inputs))
    return _go(st, proc, Pc.RETAIN_RESOURCE if i == 0 else Pc.LOCK)


def lock(cfg: MigrationBounds, st: MigrationState, proc: Proc, then: Pc) -> tuple[MigrationState, Result]:
    """``acquireInstallationLock``: enabled only while no live invocation holds it (``LockReading.WAIT``), or
    refused while one does (``LockReading.REFUSE``)."""
    if not _lock_free(st):
        return _refuse(st, proc, Refusal.LOCK_HELD)
    return _go(st, proc, then, lock=True)


def reconcile_before(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """``applyLocked``'s head: refuse if recovery is selected; retain again; reconcile; check a result."""
    if st.files.recovery is not None:
        return _refuse(st, proc, Refusal.RECOVERY_SELECTED)
    st = replace(st, files=replace(st.files, inputs=(True, True)))
    before = _reconcile(cfg, st, proc)
    if before is Status.UNKNOWN:
        return _refuse(st, proc, Refusal.UNKNOWN_CHILD_OUTCOME)
    if st.files.result is not None and before is not Status.APPLIED:
        return _refuse(st, proc, Refusal.COMPLETED_MIGRATION_CHANGED)
    if st.files.result is not None and Fix.EVIDENCE_BEFORE_MAINTENANCE in cfg.fixes:
        problem = _evidence_problem(st)
        if problem is not None:
            return _refuse(st, proc, problem)
    return _go(st, proc, Pc.MAINTENANCE_RUN, before.value, before=before)


def begin_maintenance(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``beginStorageMaintenance``: writers are refused from now on; the ghost keeps the store as it was."""
    store = st.stores[i]
    if store.admission is Admission.RECOVERY:
        return _refuse(st, proc, Refusal.STORE_UNDER_RECOVERY)
    if store.admission is Admission.OPEN and (problem := _unwritable(st, i)) is not None:
        return _refuse(st, proc, problem)  # the fence is written only on an open store
    st = _fenced(st, i, Admission.MAINTENANCE)
    if i == 0:
        return _go(st, proc, Pc.MAINTENANCE_RESOURCE)
    return _go(st, proc, Pc.READ_EVIDENCE if st.files.result is not None else Pc.DRAIN)


def observe_drain(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """The drain observation the evidence records."""
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    return _go(st, proc, Pc.BACKUP_RUN)


def backup(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``drained()``, then child ``i``'s ``backup()`` as ``cfg.reading.backup`` reads it."""
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    store = st.stores[i]
    if store.backup is None and cfg.reading.backup is BackupReading.KEEP_SOURCE \
            and image_of(store) != _intent(proc).sources[i]:
        return _refuse(st, proc, Refusal.UNKNOWN_CHILD_OUTCOME)
    if store.backup is None or cfg.reading.backup is BackupReading.OVERWRITE:
        st = _store(st, i, backup=image_of(store), backup_edited=False)
    elif cfg.reading.backup is BackupReading.REFUSE:
        return _refuse(st, proc, Refusal.BACKUP_EXISTS)
    elif store.backup_edited:  # kept only when it still holds what was written
        return _refuse(st, proc, Refusal.BACKUP_CONFLICT)
    if i == 0:
        return _go(st, proc, Pc.BACKUP_RESOURCE)
    return _go(st, proc, Pc.APPLY_RUN, backups=tuple(s.backup for s in st.stores))


def apply_child(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``drained()``, then child ``i``'s ``apply()`` as ``cfg.reading.apply`` reads it."""
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    store = st.stores[i]
    if store.version != NEW_VERSION or cfg.reading.apply is ApplyReading.AGAIN:
        if (problem := _unwritable(st, i)) is not None:
            return _refuse(st, proc, problem)
        after = migrated(image_of(store))
        st = _store(st, i, version=after.version, data=after.data)
    return _go(st, proc, Pc.APPLY_RESOURCE if i == 0 else Pc.VERIFY)


def verify(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """``verifyAppliedData``; the pair must reconcile as applied; the evidence names the recorded backups."""
    if _reconcile(cfg, st, proc) is not Status.APPLIED:
        return _refuse(st, proc, Refusal.VERIFICATION_INCOMPLETE)
    backups = cast(tuple[Optional[Image], ...], proc.backups)  # recorded by its second backup step, before verify
    return _go(st, proc, Pc.PUBLISH_RESULT, evidence=Evidence(backups))


def read_evidence(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """``readEvidence``: the published result's evidence, if the stores and backups still match it."""
    if _reconcile(cfg, st, proc) is not Status.APPLIED:
        return _refuse(st, proc, Refusal.VERIFICATION_INCOMPLETE)
    if Fix.EVIDENCE_BEFORE_MAINTENANCE not in cfg.fixes and (problem := _evidence_problem(st)) is not None:
        return _refuse(st, proc, problem)
    return _go(st, proc, Pc.PUBLISH_RESULT, evidence=st.files.result)


def publish_result(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """Reconcile once more, then publish the result (immutable)."""
    if _reconcile(cfg, st, proc) is not Status.APPLIED:
        return _refuse(st, proc, Refusal.VERIFICATION_INCOMPLETE)
    if st.files.result is not None and (st.files.result != proc.evidence or Doc.RESULT in st.files.edited):
        return _refuse(st, proc, Refusal.RESULT_CONFLICT)  # other bytes there (an edited file's are other)
    st = replace(st, files=replace(st.files, result=proc.evidence))
    return _go(st, proc, Pc.COMPLETE_RUN)


def complete_maintenance(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``completeStorageMaintenance``: the store is open to writers again; after the second, it returns."""
    return _opened(st, proc, i, Pc.COMPLETE_RESOURCE, "migrated")


# ---------------------------------------------------------------------------
# recover: PreparedPairedWriterRecovery
# ---------------------------------------------------------------------------


def recover(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """Restore the migration request from its file; prepare a recovery, or restore the published one. The request
    read as published names the stores; then the environment (a read-only store); then a published recovery
    request read as published."""
    if proc.fault is InputFault.COPY:  # a copy's home is the published request: its files are there, not here
        return _refuse(st, proc, Refusal.REQUEST_NOT_AT_HOME)
    if st.files.intent is None:
        return _refuse(st, proc, Refusal.NO_MIGRATION)
    if Doc.REQUEST in st.files.edited:
        return _refuse(st, proc, Refusal.REQUEST_CHANGED)
    if any(s.read_only for s in st.stores):
        return _refuse(st, proc, Refusal.STORE_READ_ONLY)
    if st.files.recovery is not None:
        if Doc.RECOVERY in st.files.edited:
            return _refuse(st, proc, Refusal.INVALID_RECOVERY_INTENT)
        return _go(st, proc, Pc.LOCK_APPLY, "restored", intent=st.files.intent, plan=st.files.recovery)
    return _go(st, proc, Pc.LOCK_PREPARE, "prepare", intent=st.files.intent)


def plan(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """``PreparedPairedWriterRecovery.prepare`` under the lock: each store original (unchanged) or restored
    from its backup; then the lock is released (prepare returns)."""
    if st.files.recovery is not None or st.files.recovery_result:
        return _refuse(st, proc, Refusal.RESTORE_ORIGINAL_RECOVERY)
    if Fix.RESULT_ENDS_RECOVERY in cfg.fixes and st.files.result is not None:
        return _refuse(st, proc, Refusal.MIGRATION_COMPLETED)
    if _completed_in_stores(cfg, st, _intent(proc)):
        return _refuse(st, proc, Refusal.MIGRATION_COMPLETED)
    st = replace(st, files=replace(st.files, inputs=(True, True)))  # migration.retain()
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    restores = []
    for i, store in enumerate(st.stores):
        if _original_now(cfg, st, _intent(proc), i):
            restores.append(False)
        elif (problem := _backup_problem(store)) is not None:
            return _refuse(st, proc, problem)
        else:
            restores.append(True)
    return _go(st, proc, Pc.LOCK_APPLY, lock=False, plan=RecoveryRequest(proc.pid, tuple(restores)))


def revalidate(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """``retainLocked``'s head: retain the migration, ``drained()``, revalidate each store as planned."""
    if Fix.RESULT_ENDS_RECOVERY in cfg.fixes and st.files.result is not None:
        return _refuse(st, proc, Refusal.MIGRATION_COMPLETED)
    if _completed_in_stores(cfg, st, _intent(proc)):
        return _refuse(st, proc, Refusal.MIGRATION_COMPLETED)
    if Fix.RESULT_ONLY_REOPENS in cfg.fixes and st.files.recovery_result:
        return _go(st, proc, Pc.REOPEN_RUN, "completed")  # the result is the proof: only admission is left
    st = replace(st, files=replace(st.files, inputs=(True, True)))
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    for i, restores in enumerate(_plan(proc).restores):
        if restores and (problem := _backup_problem(st.stores[i])) is not None:
            return _refuse(st, proc, problem)
        if not restores and not _original_now(cfg, st, _intent(proc), i):
            return _refuse(st, proc, Refusal.STORE_NOT_ORIGINAL)
    return _go(st, proc, Pc.PUBLISH_RECOVERY)


def publish_recovery(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """Publish the recovery request (immutable)."""
    if st.files.recovery is not None and (st.files.recovery != proc.plan or Doc.RECOVERY in st.files.edited):
        return _refuse(st, proc, Refusal.RECOVERY_REQUEST_CONFLICT)  # other bytes there (an edited file's are other)
    st = replace(st, files=replace(st.files, recovery=proc.plan))
    return _go(st, proc, Pc.FENCE_RUN)


def fence(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``beginStorageRecovery``: writers are refused from now on."""
    if st.stores[i].admission is not Admission.RECOVERY and (problem := _unwritable(st, i)) is not None:
        return _refuse(st, proc, problem)
    st = _fenced(st, i, Admission.RECOVERY)
    return _go(st, proc, Pc.FENCE_RESOURCE if i == 0 else Pc.RESTORE_RUN)


def restore_child(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``drained()``; store ``i`` restored from its backup and read back, or checked untouched."""
    if not _drained(st):
        return _refuse(st, proc, Refusal.DRAIN)
    if _plan(proc).restores[i]:
        if st.stores[i].backup_edited:  # the backup is read back against the original before it is restored
            return _refuse(st, proc, Refusal.BACKUP_CHANGED)
        if (problem := _unwritable(st, i)) is not None:
            return _refuse(st, proc, problem)
        b = cast(Image, st.stores[i].backup)  # a store planned for a restore has a backup (revalidated, never removed)
        st = _store(st, i, version=b.version, data=b.data)
    elif not _original_now(cfg, st, _intent(proc), i):
        return _refuse(st, proc, Refusal.STORE_NOT_ORIGINAL)
    return _go(st, proc, Pc.RESTORE_RESOURCE if i == 0 else Pc.PUBLISH_RECOVERY_RESULT)


def publish_recovery_result(cfg: MigrationBounds, st: MigrationState, proc: Proc) -> tuple[MigrationState, Result]:
    """Publish the recovery result."""
    st = replace(st, files=replace(st.files, recovery_result=True))
    return _go(st, proc, Pc.REOPEN_RUN)


def reopen(cfg: MigrationBounds, st: MigrationState, proc: Proc, i: int) -> tuple[MigrationState, Result]:
    """``completeStorageMaintenance`` after the recovery: the store is open again; after the second, it returns."""
    return _opened(st, proc, i, Pc.REOPEN_RESOURCE, "recovered")


#: Each program counter's step: (function, extra arguments).
STEPS: dict[Pc, tuple[Callable[..., tuple[MigrationState, Result]], tuple[Union[int, Pc], ...]]] = {
    Pc.PREPARE: (prepare, ()),
    Pc.RETAIN_PARENT: (retain_parent, ()),
    Pc.RETAIN_RUN: (retain_child, (0,)),
    Pc.RETAIN_RESOURCE: (retain_child, (1,)),
    Pc.LOCK: (lock, (Pc.RECONCILE,)),
    Pc.RECONCILE: (reconcile_before, ()),
    Pc.MAINTENANCE_RUN: (begin_maintenance, (0,)),
    Pc.MAINTENANCE_RESOURCE: (begin_maintenance, (1,)),
    Pc.DRAIN: (observe_drain, ()),
    Pc.BACKUP_RUN: (backup, (0,)),
    Pc.BACKUP_RESOURCE: (backup, (1,)),
    Pc.APPLY_RUN: (apply_child, (0,)),
    Pc.APPLY_RESOURCE: (apply_child, (1,)),
    Pc.VERIFY: (verify, ()),
    Pc.READ_EVIDENCE: (read_evidence, ()),
    Pc.PUBLISH_RESULT: (publish_result, ()),
    Pc.COMPLETE_RUN: (complete_maintenance, (0,)),
    Pc.COMPLETE_RESOURCE: (complete_maintenance, (1,)),
    Pc.RECOVER: (recover, ()),
    Pc.LOCK_PREPARE: (lock, (Pc.PLAN,)),
    Pc.PLAN: (plan, ()),
    Pc.LOCK_APPLY: (lock, (Pc.REVALIDATE,)),
    Pc.REVALIDATE: (revalidate, ()),
    Pc.PUBLISH_RECOVERY: (publish_recovery, ()),
    Pc.FENCE_RUN: (fence, (0,)),
    Pc.FENCE_RESOURCE: (fence, (1,)),
    Pc.RESTORE_RUN: (restore_child, (0,)),
    Pc.RESTORE_RESOURCE: (restore_child, (1,)),
    Pc.PUBLISH_RECOVERY_RESULT: (publish_recovery_result, ()),
    Pc.REOPEN_RUN: (reopen, (0,)),
    Pc.REOPEN_RESOURCE: (reopen, (1,)),
}
#: The steps that wait for the installation lock.
LOCKING = frozenset({Pc.LOCK, Pc.LOCK_PREPARE, Pc.LOCK_APPLY})


# ---------------------------------------------------------------------------
# The narrow interface: enabled actions and next
# ---------------------------------------------------------------------------


#: The input faults of a migrate invocation (``Fault.INPUT``), besides none.
INPUT_FAULTS = (InputFault.NO_KEY, InputFault.WRONG_KEY, InputFault.SAME_PATH, InputFault.SYMLINK,
                InputFault.HARDLINK)


def enabled(cfg: MigrationBounds, st: MigrationState, environment: bool = True,
            invocations: Optional[tuple[int, int]] = None) -> Iterator[Action]:
    """The actions enabled in ``st``. Without ``environment``: the operator's alone (no crash, no
    connect, no write, no fault; writers may still disconnect, and the operator undoes the faults: it
    unlocks, makes a store writable, repairs an edited file), for the liveness check; ``invocations``
    overrides the bounds on (migrate, recover) invocations there."""
    migrations, recoveries = invocations or (cfg.migrations, cfg.recoveries)
    if environment or not st.procs:  # the operator alone runs one invocation at a time
        inputs = environment and Fault.INPUT in cfg.faults
        copy = inputs and st.files.intent is not None  # a copy of the published request, kept elsewhere
        if st.migrations < migrations:
            yield Invoke(Role.MIGRATE)
            if inputs:
                for fault in INPUT_FAULTS:
                    yield Invoke(Role.MIGRATE, fault)
            if copy:
                yield Invoke(Role.MIGRATE, InputFault.COPY)
        if st.recoveries < recoveries:
            yield Invoke(Role.RECOVER)
            if copy:
                yield Invoke(Role.RECOVER, InputFault.COPY)
    free = _lock_free(st)
    waits = cfg.reading.lock is LockReading.WAIT
    for proc in st.procs:
        if proc.pc not in LOCKING or free or not waits:
            yield Step(proc.pid)
        if environment and st.crashes < cfg.crashes:
            yield Crash(proc.pid)
    connected = any(s.writer for s in st.stores)  # one foreign writer, on one store at a time
    writes = sum(s.data.writes for s in st.stores)
    faulting = environment and st.faults < cfg.fault_actions
    for i in range(len(STORES)):
        store = st.stores[i]
        if store.writer:
            yield Disconnect(i)
        if store.locked:
            yield Unlock(i)
        if store.read_only:
            yield Writable(i)
        if store.backup_edited:
            yield Repair(Doc.BACKUP, i)
        if faulting:
            if Fault.LOCK in cfg.faults and store.writer and not store.locked:
                yield Lock(i)
            if Fault.READ_ONLY in cfg.faults and not store.read_only:
                yield ReadOnly(i)
            if Fault.EDIT in cfg.faults and store.backup is not None and not store.backup_edited:
                yield Edit(Doc.BACKUP, i)
        if not environment:
            continue
        if not connected:
            yield Connect(i)
        elif store.writer and not store.locked and writes < cfg.writes:
            for version in (OLD_VERSION, NEW_VERSION):
                yield Write(i, version)
    for doc in (Doc.REQUEST, Doc.RESULT, Doc.RECOVERY):
        if doc in st.files.edited:
            yield Repair(doc)
        elif faulting and Fault.EDIT in cfg.faults and _published(st.files, doc):
            yield Edit(doc)
    if faulting and Fault.MOVE_AWAY in cfg.faults and st.files.result is not None:
        yield MoveAway(Doc.RESULT)


def _published(files: Files, doc: Doc) -> bool:
    return (files.intent if doc is Doc.REQUEST else files.result if doc is Doc.RESULT else files.recovery) is not None


def next_state(cfg: MigrationBounds, st: MigrationState, action: Action) -> tuple[MigrationState, Result]:
    """The state after ``action``, and its result. Deterministic."""
    if isinstance(action, Invoke):
        pid = st.migrations + st.recoveries
        first = Pc.PREPARE if action.role is Role.MIGRATE else Pc.RECOVER
        counted = dict(migrations=st.migrations + 1) if action.role is Role.MIGRATE \
            else dict(recoveries=st.recoveries + 1)
        proc = Proc(pid, action.role, first, fault=action.fault)
        return replace(st, procs=st.procs + (proc,), **counted), Done(action.role.value)
    if isinstance(action, Step):
        proc = next(p for p in st.procs if p.pid == action.pid)
        fn, extra = STEPS[proc.pc]
        return fn(cfg, st, proc, *extra)
    if isinstance(action, Crash):
        proc = next(p for p in st.procs if p.pid == action.pid)
        return replace(_end(st, proc), crashes=st.crashes + 1), Crashed()
    if isinstance(action, Connect):
        return _store(st, action.store, writer=True), Done("connected")
    if isinstance(action, Disconnect):  # its transaction, if it held one, is rolled back
        return _store(st, action.store, writer=False, locked=False), Done("disconnected")
    if isinstance(action, (Lock, ReadOnly, Edit, MoveAway, Unlock, Writable, Repair)):
        return _fault(st, action), Done(action.kind)
    store = st.stores[action.store]
    if store.read_only:
        return st, Refused(Refusal.STORE_READ_ONLY)
    if store.admission is not Admission.OPEN:
        return st, Refused(Refusal.ADMISSION_CLOSED)
    if action.version != store.version:
        return st, Refused(Refusal.WRITER_INCOMPATIBLE)
    return _store(st, action.store, data=replace(store.data, writes=store.data.writes + 1)), Landed()


def _fault(st: MigrationState, action: Action) -> MigrationState:
    """A fault set (counted against ``fault_actions``), or undone."""
    counted = replace(st, faults=st.faults + 1) if isinstance(action, FAULT_ACTIONS) else st
    if isinstance(action, (Lock, Unlock)):
        return _store(counted, action.store, locked=isinstance(action, Lock))
    if isinstance(action, (ReadOnly, Writable)):
        return _store(counted, action.store, read_only=isinstance(action, ReadOnly))
    if isinstance(action, MoveAway):  # moved away, edited or not: no longer published
        return replace(counted, files=replace(st.files, result=None, edited=st.files.edited - {Doc.RESULT}))
    assert isinstance(action, (Edit, Repair))
    edit = isinstance(action, Edit)
    if action.doc is Doc.BACKUP:
        return _store(counted, cast(int, action.store), backup_edited=edit)
    edited = st.files.edited | {action.doc} if edit else st.files.edited - {action.doc}
    return replace(counted, files=replace(st.files, edited=edited))


def describe_action(action: Action, st: Optional[MigrationState] = None) -> str:
    """One line for a trace: the invocation and its step, or the writer's move."""
    if isinstance(action, Invoke):
        return f"invoke {action.role.value}" + (f" ({action.fault.value})" if action.fault is not InputFault.NONE else "")
    if isinstance(action, MoveAway):
        return f"move the {action.doc.value} away"
    if isinstance(action, (Edit, Repair)):
        what = f"{STORES[action.store].name.lower()}'s backup" if action.store is not None else action.doc.value
        return f"{'edit' if isinstance(action, Edit) else 'repair'} {what}"
    if isinstance(action, (Lock, Unlock, ReadOnly, Writable)):
        return f"{action.kind} {STORES[action.store].name.lower()}"
    if isinstance(action, (Step, Crash)):
        proc = next((p for p in st.procs if p.pid == action.pid), None) if st is not None else None
        where = f"{proc.role.value}#{proc.pid} {proc.pc.value}" if proc is not None else f"#{action.pid}"
        return f"crash {where}" if isinstance(action, Crash) else where
    store = STORES[action.store].name.lower()
    if isinstance(action, Write):
        return f"writer v{action.version} writes {store}"
    return f"writer {'connects to' if isinstance(action, Connect) else 'disconnects from'} {store}"


def describe_state(st: MigrationState) -> str:
    """One line: each store (version, data, admission, backup) and the files published."""
    stores = ", ".join(f"{STORES[i].name.lower()} v{s.version} {s.data} {s.admission.value}"
                       f"{' backup ' + str(s.backup) if s.backup else ''}{' (edited)' if s.backup_edited else ''}"
                       f"{' writer' if s.writer else ''}{' locked' if s.locked else ''}"
                       f"{' read-only' if s.read_only else ''}"
                       for i, s in enumerate(st.stores))
    files = [name + (" (edited)" if doc in st.files.edited else "")
             for name, there, doc in (("request", st.files.intent, Doc.REQUEST), ("result", st.files.result, Doc.RESULT),
                                      ("recovery", st.files.recovery, Doc.RECOVERY),
                                      ("recovery result", st.files.recovery_result, None)) if there]
    return f"{stores}; files: {', '.join(files) or 'none'}"
