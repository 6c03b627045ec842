"""The paired writer migration: its domain and its safety properties, one named predicate each.

Models: two stores (the seed's ``run`` and ``resource`` databases) that move
from writer contract version 1 to version 2 together, or are restored
together; the files a migration and its recovery publish (the request, the
children's inputs, the result with its evidence, the recovery request and its
result); each store's admission (open, maintenance, recovery) and backup; and
foreign writers that try to write at any moment. The seed's code is
``paired-writer-migration.js`` and ``writer-contract.js`` (the second seed);
the model that runs it is ``envreplica.model.migration``.

What a store holds is abstract (``Image``): its contract version, and its
data as ``Data``: what it was built from (``Base``: the original data, the
original migrated once, or anything else) and how many foreign writes landed
on it since. Migrating maps the original to the migrated data and keeps the
writes (``migrated``); anything else migrated, or the migrated data migrated
again, is ``Base.OTHER``.

The predicates read a state by its field names (``stores``, ``files``,
``original``, ``procs``: the shape of ``model.migration.MigrationState``)
and import nothing of the model.

Leaves out on purpose: byte-level identity (hashes, paths, canonical paths,
sizes: the seed checks them before any step; the model's files are equal
exactly when their bytes would be), the schema bootstrap (``memory-upgrade``),
physical owner processes (the drain observation sees one kind of writer: a
connection that is open), and a writer's transaction split over several
steps: a foreign write is one step whose admission and version are checked
inside it, as the seed's fence trigger checks them row by row.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence, Sized, cast

from envreplica.spec.frozen import HashOnce

#: The writer contract version before the migration, and after it (the seed's ``STORE_WRITER_VERSION``).
OLD_VERSION = 1
NEW_VERSION = 2


class StoreKind(enum.IntEnum):
    """The two stores of a paired migration, in the seed's order (the intent's ``stores``)."""

    RUN = 0  # the run home's db.sqlite
    RESOURCE = 1  # the resource home's runtime.sqlite


STORES = (StoreKind.RUN, StoreKind.RESOURCE)


class Base(enum.Enum):
    """What a store's data was built from."""

    ORIGINAL = "original"  # the data the migration found
    MIGRATED = "migrated"  # the original, migrated once
    OTHER = "other"  # anything else: migrated twice, or migrated from something other than an original


class Admission(enum.Enum):
    """Who may change a store (the seed's import guard)."""

    OPEN = "open"  # writers of the store's contract version may write
    MAINTENANCE = "maintenance"  # a migration holds it (beginStorageMaintenance)
    RECOVERY = "recovery"  # a recovery holds it (beginStorageRecovery)


@dataclass(frozen=True, order=True, slots=True)
class Data:
    """A store's data, abstractly."""

    base: Base  # what it was built from
    writes: int = 0  # foreign writes landed on it since

    def __str__(self) -> str:
        return self.base.value + (f"+{self.writes}w" if self.writes else "")


@dataclass(frozen=True, slots=True, eq=False)
class Image(HashOnce):
    """A store's content as a backup or a reconcile sees it: contract version and data."""

    version: int  # the writer contract version it records
    data: Data  # its tables

    def __str__(self) -> str:
        return f"v{self.version}:{self.data}"


def migrated(image: Image) -> Image:
    """What one migration makes of ``image``: the data migrated (writes kept), at the new version."""
    base = Base.MIGRATED if image.data.base is Base.ORIGINAL else Base.OTHER
    return Image(NEW_VERSION, Data(base, image.data.writes))


class Refusal(enum.Enum):
    """Why a step refused: the seed's reason codes, and the model's own for the fence and its variants."""

    DRAIN = "physical_owner_alive"  # drained(): a writer is still connected to a store
    CONTENT_ONLY_ROUTE = "content_only_route_required"  # both stores are at the new version already
    REQUEST_CONFLICT = "paired_migration_request_conflict"  # another request was published at this path
    RECOVERY_SELECTED = "recovery_selected"  # a recovery request exists: the migration may not run
    UNKNOWN_CHILD_OUTCOME = "unknown_child_outcome"  # a store is neither its source nor its migration
    COMPLETED_MIGRATION_CHANGED = "completed_migration_changed"  # a result exists, the stores are not migrated
    VERIFICATION_INCOMPLETE = "verification_incomplete"  # after the applies, a store is not migrated
    BACKUP_EVIDENCE_CHANGED = "backup_evidence_changed"  # the backups differ from the result's evidence
    RESULT_CONFLICT = "paired_migration_result_conflict"  # another result was published at this path
    BACKUP_EXISTS = "backup_exists"  # reading REFUSE of a child's backup(): a backup is there already
    STORE_UNDER_RECOVERY = "store_under_recovery"  # maintenance asked of a store that a recovery holds
    NO_MIGRATION = "no_migration_request"  # recovery asked with no published migration request
    RESTORE_ORIGINAL_RECOVERY = "restore_original_recovery"  # a recovery request exists: rerun it instead
    MIGRATION_COMPLETED = "migration_completed"  # with the fix: recovery asked after a published result
    CHANGED_STORE_HAS_NO_BACKUP = "changed_store_has_no_backup"  # a changed store, and no backup of it
    STORE_NOT_ORIGINAL = "store_not_original"  # a store recovery judged unchanged has changed since
    RECOVERY_REQUEST_CONFLICT = "paired_recovery_request_conflict"  # another recovery request at this path
    ADMISSION_CLOSED = "admission_closed"  # a foreign write, refused: the store is under maintenance or recovery
    WRITER_INCOMPATIBLE = "store_writer_incompatible"  # a foreign write, refused: another contract version
    # The environment's faults (``model.migration.Fault``): refused by the implementation's contract.
    SAME_STORE = "same_store_twice"  # migrate named one store twice (another spelling, a symlink, a hard link)
    MASTER_KEY_MISSING = "master_key_missing"  # migrate was given no master key
    MASTER_KEY_WRONG = "master_key_wrong"  # migrate was given a key the stores were not sealed with
    STORE_READ_ONLY = "store_read_only"  # a store file cannot be written
    STORE_BUSY = "store_busy"  # another process holds a write transaction on a store the step writes
    LOCK_HELD = "installation_lock_held"  # reading REFUSE of the lock: another live invocation holds it
    REQUEST_CHANGED = "paired_migration_request_changed"  # the published request's bytes were edited
    EVIDENCE_CUSTODY_CHANGED = "migration_evidence_custody_changed"  # the published result was edited
    INVALID_RECOVERY_INTENT = "invalid_recovery_intent"  # the published recovery request was edited
    BACKUP_CONFLICT = "backup_conflict"  # reading KEEP of backup(): the backup there does not hold the source
    BACKUP_CHANGED = "recovery_backup_changed"  # recovery: the backup to restore no longer holds the original
    REQUEST_NOT_AT_HOME = "request_not_at_home"  # --request names a copy: the request was published elsewhere


#: The command's exit status for an invocation that ends with each refusal (docs/migration.md): 2 when it
#: could not run as asked (the input, the environment, a publication edited, a second invocation, a request
#: that is done), 1 when it stopped on what the stores hold mid-protocol (a finding the operator must judge).
#: An invocation that completes exits 0. The foreign writes' refusals are not an invocation's.
EXIT_STATUS: dict[Refusal, int] = {
    **{code: 2 for code in (
        Refusal.DRAIN, Refusal.CONTENT_ONLY_ROUTE, Refusal.REQUEST_CONFLICT, Refusal.RESULT_CONFLICT,
        Refusal.NO_MIGRATION, Refusal.RESTORE_ORIGINAL_RECOVERY, Refusal.MIGRATION_COMPLETED,
        Refusal.RECOVERY_REQUEST_CONFLICT, Refusal.BACKUP_EVIDENCE_CHANGED, Refusal.SAME_STORE,
        Refusal.MASTER_KEY_MISSING, Refusal.MASTER_KEY_WRONG, Refusal.STORE_READ_ONLY, Refusal.STORE_BUSY,
        Refusal.LOCK_HELD, Refusal.REQUEST_CHANGED, Refusal.EVIDENCE_CUSTODY_CHANGED,
        Refusal.INVALID_RECOVERY_INTENT, Refusal.BACKUP_CONFLICT, Refusal.BACKUP_CHANGED,
        Refusal.REQUEST_NOT_AT_HOME)},
    **{code: 1 for code in (
        Refusal.RECOVERY_SELECTED, Refusal.UNKNOWN_CHILD_OUTCOME, Refusal.COMPLETED_MIGRATION_CHANGED,
        Refusal.VERIFICATION_INCOMPLETE, Refusal.BACKUP_EXISTS, Refusal.STORE_UNDER_RECOVERY,
        Refusal.CHANGED_STORE_HAS_NO_BACKUP, Refusal.STORE_NOT_ORIGINAL)},
}
#: The refusals of a foreign write (no invocation ends with them).
WRITE_REFUSALS = frozenset({Refusal.ADMISSION_CLOSED, Refusal.WRITER_INCOMPATIBLE})


class Status(enum.Enum):
    """The seed's ``reconcile()``: the physical outcome of the two children."""

    APPLIED = "applied"  # both stores migrated from their sources
    PARTIAL = "partial"  # one migrated, the other still its source
    NOT_APPLIED = "not_applied"  # both still their sources
    UNKNOWN = "unknown"  # a store is neither


@dataclass(frozen=True)
class Done:
    """A step's result: it happened (``note`` says what a reader needs, e.g. a reconcile's status)."""

    note: str = ""


@dataclass(frozen=True)
class Refused:
    """A step's result: the invocation stopped here (it holds no lock afterwards; what it published stays)."""

    code: Refusal


@dataclass(frozen=True)
class Landed:
    """A foreign write's result: it changed the store."""


@dataclass(frozen=True)
class Crashed:
    """A crash's result: the process is gone; its memory with it, its files and the stores stay."""


# ---------------------------------------------------------------------------
# The state as the predicates read it: by field names, the shape of ``model.migration.MigrationState``
# ---------------------------------------------------------------------------


class StoreView(Protocol):
    """One store (``model.migration.StoreState``)."""

    @property
    def version(self) -> int: ...

    @property
    def data(self) -> Data: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def backup(self) -> Optional[Image]: ...


class IntentView(Protocol):
    """The published migration request (``model.migration.Intent``)."""

    @property
    def sources(self) -> Sequence[Image]: ...


class EvidenceView(Protocol):
    """The published result's evidence (``model.migration.Evidence``)."""

    @property
    def backups(self) -> Sequence[Optional[Image]]: ...


class RecoveryView(Protocol):
    """The published recovery request (``model.migration.RecoveryRequest``)."""

    @property
    def restores(self) -> Sequence[bool]: ...


class FilesView(Protocol):
    """What has been published (``model.migration.Files``)."""

    @property
    def intent(self) -> Optional[IntentView]: ...

    @property
    def result(self) -> Optional[EvidenceView]: ...

    @property
    def recovery(self) -> Optional[RecoveryView]: ...

    @property
    def recovery_result(self) -> bool: ...


class MigrationView(Protocol):
    """A state of the paired migration (``model.migration.MigrationState``)."""

    @property
    def stores(self) -> Sequence[StoreView]: ...

    @property
    def files(self) -> FilesView: ...

    @property
    def procs(self) -> Sized: ...

    @property
    def original(self) -> Sequence[Optional[Image]]: ...


class WriteView(Protocol):
    """A foreign write (``model.migration.Write``): the only action whose result is ``Landed``."""

    @property
    def store(self) -> int: ...

    @property
    def version(self) -> int: ...


def reconcile_child(source: Image, now: Image, receipt: bool = False) -> Status:
    """One child's physical outcome: its source (not applied), its source migrated (applied), or unknown.
    With ``receipt``, applied means the store records the migration (its source migrated, at the new
    version), whatever writes of the new version landed since it reopened."""
    target = migrated(source)
    if now == source:
        return Status.NOT_APPLIED
    if now == target:
        return Status.APPLIED
    if receipt and now.version == target.version and now.data.base is target.data.base \
            and now.data.writes >= target.data.writes:
        return Status.APPLIED
    return Status.UNKNOWN


def reconcile(sources: Sequence[Image], images: Sequence[Image], receipt: bool = False) -> Status:
    """The pair's outcome (the seed's ``PreparedPairedWriterMigration.reconcile``)."""
    outcomes = [reconcile_child(s, i, receipt) for s, i in zip(sources, images, strict=True)]
    if Status.UNKNOWN in outcomes:
        return Status.UNKNOWN
    applied = outcomes.count(Status.APPLIED)
    return Status.APPLIED if applied == len(outcomes) else Status.PARTIAL if applied else Status.NOT_APPLIED


def image_of(store: StoreView) -> Image:
    """A store's content now."""
    return Image(store.version, store.data)


def before_migration(st: MigrationView, i: int) -> Optional[Image]:
    """Store ``i`` as it was before the migration: when first fenced (by the migration's maintenance or the
    recovery's fence: no write lands after), or its prepared source if never fenced."""
    original = st.original[i]
    if original is not None:
        return original
    return st.files.intent.sources[i] if st.files.intent is not None else None


# ---------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------


def never_result_and_recovery(st: MigrationView) -> bool:
    """Never both a published migration result and a selected recovery."""
    return st.files.result is None or st.files.recovery is None


def no_recovery_over_a_completed_store(st: MigrationView) -> bool:
    """A recovery is never selected while a store the migration completed is open to writers again."""
    intent = st.files.intent
    return st.files.recovery is None or intent is None or not any(
        s.admission is Admission.OPEN and reconcile_child(intent.sources[i], image_of(s), receipt=True)
        is Status.APPLIED for i, s in enumerate(st.stores))


def backups_hold_originals(st: MigrationView) -> bool:
    """Every backup holds its store's original content: none is ever replaced by migrated content."""
    return all(s.backup is None or s.backup == st.original[i] for i, s in enumerate(st.stores))


def result_evidence_is_the_originals(st: MigrationView) -> bool:
    """A published result's evidence names the backups of the stores' original content."""
    result = st.files.result  # evidence naming no backup (a store never fenced) names no original either
    return result is None or (all(o is not None for o in st.original)
                              and tuple(result.backups) == tuple(st.original))


# ---------------------------------------------------------------------------
# Step properties: (pre, action, result, post)
# ---------------------------------------------------------------------------


def result_means_both_migrated(pre: MigrationView, action: object, result: object, post: MigrationView) -> bool:
    """A result is published only when both stores are at the new version, migrated from their originals, and backed up."""
    if post.files.result is None or post.files.result == pre.files.result:
        return True  # this step published none (a result published again with other content counts)
    # Migrated: the original migrated, and any writes of the new version that landed since the stores first
    # reopened (a result published again after its file was moved away; reconcile's receipt).
    return all((o := post.original[i]) is not None and reconcile_child(o, image_of(s), receipt=True) is Status.APPLIED
               and s.backup == o for i, s in enumerate(post.stores))


def writes_are_fenced(pre: MigrationView, action: object, result: object, post: MigrationView) -> bool:
    """A foreign write lands only on a store open to writers, at the store's own contract version."""
    if getattr(action, "kind", None) != "write":
        return not isinstance(result, Landed)  # only a foreign write lands
    write = cast(WriteView, action)
    # It landed where it changed a store's content, whatever it returned, and where it says it landed.
    landed = {i for i, (a, b) in enumerate(zip(pre.stores, post.stores)) if image_of(a) != image_of(b)}
    if isinstance(result, Landed):
        landed.add(write.store)
    return all(pre.stores[i].admission is Admission.OPEN and pre.stores[i].version == write.version
               for i in landed)


def recovery_restores_before(pre: MigrationView, action: object, result: object, post: MigrationView) -> bool:
    """A completed recovery leaves each store exactly as it was before the migration, at the old version."""
    if pre.files.recovery_result or not post.files.recovery_result:
        return True  # this step did not publish the recovery result
    return all(s.version == OLD_VERSION and image_of(s) == before_migration(post, i)
               for i, s in enumerate(post.stores))


def recovery_restores_only_changed_stores(
    pre: MigrationView, action: object, result: object, post: MigrationView
) -> bool:
    """A recovery writes a backup only over a store the migration changed: an unchanged one is left untouched."""
    if pre.files.recovery is None and post.files.recovery is None:
        return True  # no recovery selected, before or by this step
    if getattr(action, "kind", None) == "write":
        return True  # a foreign write, not the recovery: writes_are_fenced's
    # The recovery holds the store (fenced before or by this step): nothing else may change it.
    return all(not (image_of(a) == before_migration(pre, i) and image_of(b) != image_of(a)
                    and Admission.RECOVERY in (a.admission, b.admission))
               for i, (a, b) in enumerate(zip(pre.stores, post.stores)))


# ---------------------------------------------------------------------------
# Sometimes: so that a pass is not vacuous
# ---------------------------------------------------------------------------


def _recovery(st: MigrationView) -> RecoveryView:
    """The published recovery request, read once its result is published (which comes only after it)."""
    return cast(RecoveryView, st.files.recovery)


def sometimes_migration_completes(st: MigrationView) -> bool:
    """Sometimes a migration result is published and both stores are open again."""
    return st.files.result is not None and all(s.admission is Admission.OPEN for s in st.stores)


def sometimes_recovery_restores(st: MigrationView) -> bool:
    """Sometimes a recovery completes having restored a store from its backup."""
    return st.files.recovery_result and any(_recovery(st).restores)


def sometimes_recovery_keeps_unchanged(st: MigrationView) -> bool:
    """Sometimes a recovery completes with one store restored and the other judged unchanged."""
    return st.files.recovery_result and any(_recovery(st).restores) and not all(_recovery(st).restores)


def sometimes_rerun_finds_partial(pre: MigrationView, action: object, result: object, post: MigrationView) -> bool:
    """Sometimes a rerun finds one store migrated and the other not (a crash between the two applies)."""
    return isinstance(result, Done) and result.note == Status.PARTIAL.value


def sometimes_fence_refuses_write(pre: MigrationView, action: object, result: object, post: MigrationView) -> bool:
    """Sometimes a foreign write is refused because a store is under maintenance or recovery."""
    return isinstance(result, Refused) and result.code is Refusal.ADMISSION_CLOSED


def sometimes_crash(pre: MigrationView, action: object, result: object, post: MigrationView) -> bool:
    """Sometimes a process crashes after it changed a store (a backup or an apply done)."""
    return isinstance(result, Crashed) and any(s.backup is not None for s in pre.stores)


def sometimes_recovered_after_crash(
    crash: object, pre: MigrationView, action: object, result: object, post: MigrationView
) -> bool:
    """Sometimes, after such a crash, a recovery completes on the same path."""
    return not pre.files.recovery_result and post.files.recovery_result


def sometimes_resumes_after_partial(
    partial: object, pre: MigrationView, action: object, result: object, post: MigrationView
) -> bool:
    """Sometimes, after a rerun found one store migrated and the other not, it publishes the migration result."""
    return pre.files.result is None and post.files.result is not None


# ---------------------------------------------------------------------------
# The tables the checker reads
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Property:
    """A named predicate and the sentence it checks (the shape ``checker.bfs`` reads)."""

    name: str
    check: Callable[..., bool]
    kind: str  # "invariant" | "step" | "sometimes-state" | "sometimes-step" | "sometimes-after"
    after: Optional["Property"] = None  # sometimes-after: the step that must come first on the path
    actions: Optional[frozenset[str]] = None  # step kinds: where check can fail (None: any step)
    results: Optional[tuple[type, ...]] = None

    @property
    def statement(self) -> str:
        text = (self.check.__doc__ or "").strip()
        return text.splitlines()[0] if text else self.name


def _props(kind: str, *fns: Callable[..., bool]) -> tuple[Property, ...]:
    return tuple(Property(f.__name__, f, kind) for f in fns)


INVARIANTS = _props("invariant", never_result_and_recovery, no_recovery_over_a_completed_store,
                    backups_hold_originals, result_evidence_is_the_originals)
#: No filter (``Property.actions``, ``results``) on these: each can fail on a step of any kind with any result
#: (a result published by a step that then refuses or crashes; a write that changes a store and says Done or
#: refused), and each returns at once where its step changed nothing it reads.
STEP_PROPERTIES = _props("step", result_means_both_migrated, writes_are_fenced, recovery_restores_before,
                         recovery_restores_only_changed_stores)
_CRASH = Property("sometimes_crash", sometimes_crash, "sometimes-step", results=(Crashed,))
_PARTIAL = Property("sometimes_rerun_finds_partial", sometimes_rerun_finds_partial, "sometimes-step", results=(Done,))
SOMETIMES = (
    *_props("sometimes-state", sometimes_migration_completes, sometimes_recovery_restores,
            sometimes_recovery_keeps_unchanged),
    _PARTIAL,
    Property("sometimes_fence_refuses_write", sometimes_fence_refuses_write, "sometimes-step", results=(Refused,)),
    _CRASH,
    Property("sometimes_recovered_after_crash", sometimes_recovered_after_crash, "sometimes-after", after=_CRASH),
    Property("sometimes_resumes_after_partial", sometimes_resumes_after_partial, "sometimes-after", after=_PARTIAL),
)


def settled(st: MigrationView) -> bool:
    """Nothing left to do: no invocation running, both stores open to writers, and the pair consistent.

    Consistent: a published migration result (and no recovery selected), with both stores at the new version
    holding their originals migrated (writes of the new version since they reopened kept: the receipt
    ``reconcile`` reads); or else both stores at the old version holding original data (never migrated, or
    recovered), any selected recovery completed. A recovery selected after a result (F4) ends as a recovery:
    that both files are published is ``never_result_and_recovery``'s to report, not the liveness check's."""
    if st.procs or any(s.admission is not Admission.OPEN for s in st.stores):
        return False
    if st.files.result is not None and st.files.recovery is None:
        return all((before := before_migration(st, i)) is not None
                   and reconcile_child(before, image_of(s), receipt=True) is Status.APPLIED
                   for i, s in enumerate(st.stores))
    return (st.files.recovery is None or st.files.recovery_result) and all(
        s.version == OLD_VERSION and s.data.base is Base.ORIGINAL for s in st.stores)


#: The bounded-liveness property ``checker.liveness`` checks (its sentence).
RECOVERABLE = ("every_state_recoverable",
               "From every reachable state (every crash state among them), rerunning the migration or "
               "selecting recovery, with no further crash and the writers disconnecting, reaches a settled state.")
