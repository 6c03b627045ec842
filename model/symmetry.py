"""Symmetry reduction: a checker world's representative up to renaming of interchangeable names.

Models: ``Model.canonical`` of ``checker.bfs`` (Stateright's
``Representative``). ``Symmetry(bounds).canonical(world)`` renames the
interchangeable names of ``world`` by sort-and-relabel: each name gets a
signature (how the state uses it: which table, field, in-flight slot, log
position or receipt sequence, and the name-free content there, with every
other permuted name written as its role: ``=`` for the authority's current
attempt or stream, ``*`` for any other), the names of a group
are sorted by signature (names in use first) and relabelled, in that order,
to the bounds' own names of the group in the bounds' order. The result is a
state over the same domains, reachable exactly when the original is, and the
same for every renaming of it (``tests/test_symmetry.py``). Names in use
whose signatures tie need no search when the signatures are exact (no other
permuted name was written as ``*``): then swapping them leaves the world as
it is (``Symmetry.signatures``). Otherwise the tied names (at most a handful)
are arranged every way and the least result kept (identical results are one;
otherwise the least by a name-independent ordering of the whole world,
``total_key``). Nothing depends on Python's hash seed: every process picks
the same representative.

Sound by construction as long as the permutations applied are symmetries of
the model (of ``model.generate``'s enabled frames, of ``model.replica``, and
of every property in ``spec.properties``): then states merged are in one
orbit, every orbit member has the same successors up to renaming and the
same verdicts, and BFS depth (so the shortest counterexample) is the same.
The frontier keeps the states actually reached, so counterexamples are
real paths (``checker.bfs``).

Permuted (each only where the bounds have two or more of them):

* **Project ids, both modes.** The replica only compares them for equality
  (table keys, ``frame.project_id``, a delivery request's project, the value
  store's envelope check). Where it sorts them it sorts only to compare two
  sets: ``complete`` compares the attempt's staged projects, sorted, with the
  commit's versions position by position, and every commit the generators
  emit lists its versions in sorted order (the cloud: ``sorted(bounds.
  projects)``; the adversary: combinations of ``sorted(bounds.projects)``),
  so the check is set equality of (project, version) pairs, which a renaming
  keeps (the commit enabled in the renamed state is the sorted renaming of
  the original). ``page_prepare``'s sorts pick one project's rows and order
  them by key. ``begin`` builds its staging tables from the set of a frame's
  projects (insertion order is invisible: ``FMap`` equality is by content);
  the generators offer the same sets (the cloud: all projects; the
  adversary: every subset). The cloud treats each project alike (records,
  versions and pages per project; deliveries from its log). The
  properties read snapshots of ``sorted(st.projects)`` whose verdicts depend
  only on each project's own entries, and otherwise compare projects for
  equality. Byte sizes: a page acknowledgement (``page_fits``) includes the
  project id, so only ids of the same JSON byte length are permuted with
  each other. A value-store read's parameter name embeds the project id: it
  is rebuilt for the new id (nothing compares it).
* **Attempt ids, stream ids and organisations, adversary mode only.** The
  adversary offers every frame over every attempt, stream and organisation
  (``_adversary_frames``: products over the whole domain). The replica
  compares them only for equality (authority row, staging keys, receipts
  keys, reconciliation attempt, value-store envelope: the wrong-organisation
  envelope is ``org + "x"``, unequal to every org either way). Receipts are
  listed by stream (``list_receipts``), which no property reads. A page
  acknowledgement includes the attempt id and the applied stream id, so
  attempts and streams are permuted only within a JSON byte length; the
  organisation enters no byte count, so organisations of any length are one
  group.

NOT permuted, and why:

* **Attempt and stream ids in cloud mode.** ``Cloud.attempts`` counts the
  attempts begun and the next is ``Bounds.attempts[Cloud.attempts]`` by
  position; ``Cloud.stream`` is an index into ``Bounds.streams`` that only
  moves forward. Renaming ``a1`` to ``a2`` in a state would not rename the
  cloud's next choice: not a symmetry. The cloud names only ``orgs[0]``.
* **Keys.** Pages are ordered by key (``after``, ``k > after`` in the
  adversary's pages and the cloud's ``_next_page``), a key is legacy or
  staged (``legacy_keys``), a path segment or not (``_X`` has no legacy
  name), and its length enters the acknowledgement's byte count; the
  adversary's record alphabet is per key. Only a renaming that keeps the
  order would be sound, and on a totally ordered set that is the identity.
* **Staging ids** (``StagedRef.staging_id``): a function of the record's
  generation (``generate._ref``), not a free name: a renamed id would pair
  with a generation the cloud never gives it.
* **Values** (``Bounds.values``): the store's wrong envelopes use
  ``values[0]``, and a value's text matters (F3's surrogates).
* **Ordinals: revisions, generations, listing generations, record versions,
  sequences, policy epochs.** Compared by order (``state_order``,
  ``record_version > staged + 1``, ``e > policy_epoch``), capped by absolute
  bounds (``max_counter``, ``max_record_version``, ``max_sequence``),
  started at fixed values (create is revision 1 generation 1, a new stream
  restarts at 0, receipts must cover 1..applied), and the kept epochs are
  the bounds' own sets: a shifted state would sit elsewhere under the same
  caps and behave differently (a record at the cap cannot move), so no shift
  is a symmetry.
* **In-flight slots.** ``inflight`` is ordered by suspension, a ``Resume``
  names a slot, and ``resume_changes_only_its_operation`` reads the order.
* **Operation ids** (always ``"op"``) and binding reasons (``held``/``odd``):
  constants.

Safety verdicts are exactly those of the plain search (an orbit's members
break the same properties at the same depth). One approximation is the
checker's, not this module's: ``checker.bfs`` carries a ``sometimes-after``
mark (the earlier step) by fingerprint, so with symmetry a mark made on the
way to one state may be read at a renamed copy of it, whose later steps name
things differently; such a "sometimes" witness can then be missed, or in
principle credited to two steps no single path pairs (it compares the two
steps' names). Invariants and step properties are unaffected. In every run
compared
(``tests/test_symmetry.py``, ``bench/bench_symmetry.py``) every property was
witnessed at the same depth with and without symmetry.

Leaves out on purpose: symmetries that are not renamings of names
(reordering in-flight operations, shifting counters), and key permutations.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from enum import Enum
from itertools import permutations, product
from typing import Any, Callable, Optional, Union, cast, overload

from envreplica.model.fmap import FMap
from envreplica.model.generate import Bounds, Cloud, Mode, World
from envreplica.model.state import (
    DEFAULT_PREFIX,
    Authority,
    AwaitRead,
    DeliveryInFlight,
    InFlight,
    LiveRow,
    PageInFlight,
    PreparedDelivery,
    ReadRequest,
    Receipt,
    StageRow,
    State,
    StoredValue,
)
from envreplica.spec import wire
from envreplica.spec.domain import (
    ApplyFrame,
    BindingState,
    Cursor,
    DeliveryRequest,
    LegacyRef,
    Materialization,
    PageFrame,
)

#: The classes of names this module can permute.
PROJECT, ATTEMPT, STREAM, ORG = "project", "attempt", "stream", "org"
CLASSES = (PROJECT, ATTEMPT, STREAM, ORG)

#: Per class, its groups of interchangeable names (``groups``).
Groups = dict[str, tuple[tuple[str, ...], ...]]
#: A renaming of one class: name -> new name (names not in it stay).
Names = dict[str, str]
#: Name-free content: str, int and bool, and tuples of them (nested), so that any two compare.
Sortable = Union[str, int, tuple["Sortable", ...]]
Content = tuple[Sortable, ...]
#: One use of a name in a signature: (where: a table or the authority row or an in-flight slot, its contexts).
Use = tuple[tuple[str, int], Content]
#: A table of a world as ``getattr(state or cloud, tag)`` reads it: an ``FMap`` (its key and row types are
#: the tag's) or the cloud's log.
Log = tuple[tuple[str, int, BindingState], ...]
Table = Union[FMap[Any, Any], Log]


def groups(bounds: Bounds) -> Groups:
    """Per class, the groups of names that are interchangeable under ``bounds`` (groups of two or more only).

    Projects always; attempts, streams and organisations in adversary mode
    only. Projects, attempts and streams enter a page acknowledgement's byte
    count, so a group holds names of one JSON byte length (in the bounds'
    order); organisations are one group.
    """
    domains = {PROJECT: bounds.projects}
    if bounds.mode is Mode.ADVERSARY:
        domains.update({ATTEMPT: bounds.attempts, STREAM: bounds.streams, ORG: bounds.orgs})
    out: Groups = {}
    for cls, names in domains.items():
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate {cls} names in bounds {bounds.name}: {names}")
        if cls == ORG:
            parts = [tuple(names)]
        else:
            by_size: dict[int, list[str]] = {}
            for n in names:
                by_size.setdefault(wire.json_bytes_len(n), []).append(n)
            parts = [tuple(g) for g in by_size.values()]
        kept = tuple(g for g in parts if len(g) >= 2)
        if kept:
            out[cls] = kept
    return out


# ---------------------------------------------------------------------------
# Name-free content of rows, as tuples of str / int / bool (sortable)
# ---------------------------------------------------------------------------


def _bs(b: BindingState) -> Content:
    """A ``BindingState`` (names no project, attempt, stream or org)."""
    h = b.head
    ref = h.value_ref
    binding = b.binding
    return (
        b.key, h.revision, h.generation, h.tombstone,
        "" if ref is None else ("L" if isinstance(ref, LegacyRef) else "S"),
        "" if ref is None else str(ref.ssm_version if isinstance(ref, LegacyRef) else ref.staging_id),
        "" if binding is None else type(binding).__name__ + ":" + str(getattr(binding, "reason", "")),
        -1 if b.policy_epoch is None else b.policy_epoch,
        b.listing_generation,
    )


def _mat(m: Materialization) -> Content:
    return (m.kind.value, m.reason or "")


def _row(row: Union[LiveRow, StageRow]) -> Content:
    """A ``LiveRow`` or ``StageRow``."""
    return _bs(row.state) + _mat(row.mat) + (getattr(row, "present", True),)


def _val(v: StoredValue) -> Content:
    """A ``StoredValue``."""
    ref = v.value_ref
    return (v.revision, v.generation, "L" if isinstance(ref, LegacyRef) else "S", str(ref), v.value)


# ---------------------------------------------------------------------------
# A deterministic, name-independent total order on whole worlds (for ties)
# ---------------------------------------------------------------------------


def total_key(x: object) -> Content:
    """A sortable key of any model value: equal values, equal keys; no hashing (the same in every process)."""
    if x is None:
        return ("n",)
    if isinstance(x, bool):
        return ("b", int(x))
    if isinstance(x, Enum):
        return ("e", type(x).__name__, str(x.value))
    if isinstance(x, int):
        return ("i", x)
    if isinstance(x, str):
        return ("s", x)
    if isinstance(x, tuple):
        return ("t",) + tuple(total_key(v) for v in x)
    if isinstance(x, FMap):
        return ("m",) + tuple(sorted((total_key(k), total_key(v)) for k, v in x.items()))
    if is_dataclass(x):
        return ("d", type(x).__name__) + tuple(total_key(getattr(x, f.name)) for f in fields(x))
    raise TypeError(f"total_key: unexpected {type(x).__name__}: {x!r}")


# ---------------------------------------------------------------------------
# The group and its canonicalizer
# ---------------------------------------------------------------------------


@overload
def _g(m: Names, x: str) -> str: ...


@overload
def _g(m: Names, x: Optional[str]) -> Optional[str]: ...


def _g(m: Names, x: Optional[str]) -> Optional[str]:
    return m.get(x, x) if x is not None else None


def _rows(tbl: Table) -> dict[Any, Any]:
    """An ``FMap`` table's dict, read only (this module and model.fmap are one package): any table but the log."""
    return cast(FMap[Any, Any], tbl)._d


#: The tables of a world in the (fixed, name-independent) order signatures list them:
#: (tag, which classes its keys or rows hold, whether it is the cloud's).
_TABLES = (
    ("projects", (PROJECT,), False),
    ("records", (PROJECT,), False),
    ("values", (PROJECT,), False),
    ("stage_projects", (PROJECT, ATTEMPT), False),
    ("stage_records", (PROJECT, ATTEMPT), False),
    ("stage_values", (PROJECT, ATTEMPT), False),
    ("receipts", (PROJECT, STREAM), False),
    ("versions", (PROJECT,), True),
    ("records", (PROJECT,), True),
    ("log", (PROJECT,), True),
)


class Symmetry:
    """The symmetry group of ``bounds`` (see the module docstring) and its sort-and-relabel canonicalizer.

    Caches, each cleared when large: each world's representative, by value
    (most transitions reach a world seen before), and the representative's
    hash, by identity (``fingerprint``); by table identity (checked on a
    hit, so a reused id never answers; tables are shared between states),
    each table's share of the signatures and each table renamed under each
    renaming (a renamed table keeps its cached hash).
    """

    _LIMIT = 1 << 16

    def __init__(self, bounds: Bounds, prefix: str = DEFAULT_PREFIX, forced_groups: Optional[Groups] = None) -> None:
        """``forced_groups`` (tests only: negative controls) replaces ``groups(bounds)``, sound or not."""
        self.bounds = bounds
        self.prefix = prefix
        self.groups = groups(bounds) if forced_groups is None else dict(forced_groups)
        self.classes = frozenset(self.groups)
        self._tables = tuple((tag, cloud) for tag, classes, cloud in _TABLES
                             if any(c in self.classes for c in classes))
        self._memo: dict[int, tuple[World, World]] = {}  # hash(world) -> (world, its representative)
        self._fingerprints: dict[int, tuple[World, int]] = {}  # id(representative) -> (representative, its hash)
        # (tag, cloud?, table id, current) -> (table, {(class, name): contexts})
        self._shares: dict[tuple[str, bool, int, Optional[str]],
                           tuple[Table, tuple[dict[tuple[str, str], Use], bool]]] = {}
        # (tag, cloud?, table id, renaming) -> (table, renamed table)
        self._renamed: dict[tuple[str, bool, int, tuple[tuple[str, tuple[tuple[str, str], ...]], ...]],
                            tuple[Table, Table]] = {}

    @property
    def trivial(self) -> bool:
        """No two names are interchangeable: every state is its own representative."""
        return not self.groups

    # -- renaming -------------------------------------------------------------

    def _read_name(self, name: str, old: str, new: str) -> str:
        head = f"{self.prefix}/projects/{old}/"
        if not name.startswith(head):
            raise ValueError(f"value-store parameter name {name!r} does not start with {head!r}")
        return f"{self.prefix}/projects/{new}/" + name[len(head):]

    def _read(self, r: AwaitRead, P: Names, A: Names, O: Names) -> AwaitRead:
        p = _g(P, r.project_id)
        request = r.request
        if p != r.project_id:
            request = ReadRequest(request.ref, self._read_name(request.name, r.project_id, p))
        return AwaitRead(r.view, _g(A, r.attempt_id), p, r.key, r.before, _g(O, r.org_id), request)

    def _op(self, op: InFlight, P: Names, A: Names, S: Names, O: Names) -> InFlight:
        f: Union[PageFrame, ApplyFrame]
        frame: Union[PageFrame, ApplyFrame]
        if isinstance(op, PageInFlight):
            f = op.frame
            frame = PageFrame(f.op_id, _g(A, f.attempt_id), _g(P, f.project_id), f.after, f.record_version,
                              f.records, f.complete)
            return PageInFlight(frame, op.keys_left, self._read(op.read, P, A, O), op.reader_on)
        assert isinstance(op, DeliveryInFlight), op
        f, d = op.frame, op.prepared
        frame = ApplyFrame(f.op_id, _g(P, f.project_id), f.record_version, f.state,
                           Cursor(_g(S, f.delivery.stream_id), f.delivery.sequence),
                           _g(A, f.reconciliation_attempt_id))
        prepared = PreparedDelivery(d.result, d.fetch, d.changed, d.actual_version, _g(A, d.attempt_id))
        return DeliveryInFlight(frame, prepared, self._read(op.read, P, A, O))

    @staticmethod
    def _rename_table(tag: str, cloud: bool, tbl: Table, P: Names, A: Names, S: Names) -> Table:
        """``tbl`` renamed, or ``tbl`` itself when it holds no renamed name."""
        if tag == "log":
            log = cast(Log, tbl)
            if any(e[0] in P for e in log):
                return tuple((P.get(p, p), v, x) for p, v, x in log)
            return tbl
        d = _rows(tbl)
        if tag in ("projects", "versions"):
            if any(p in P for p in d):
                return FMap({P.get(p, p): v for p, v in d.items()})
        elif tag in ("records", "values"):
            if any(k[0] in P for k in d):
                return FMap({(P.get(p, p), k): v for (p, k), v in d.items()})
        elif tag == "stage_projects":
            if any(k[0] in A or k[1] in P for k in d):
                return FMap({(A.get(x, x), P.get(p, p)): v for (x, p), v in d.items()})
        elif tag in ("stage_records", "stage_values"):
            if any(k[0] in A or k[1] in P for k in d):
                return FMap({(A.get(x, x), P.get(p, p), k): v for (x, p, k), v in d.items()})
        elif tag == "receipts":
            if any(s in S or r.request.project_id in P or r.request.delivery.stream_id in S
                   for (s, _), r in d.items()):
                out: dict[tuple[str, int], Receipt] = {}
                for (s, n), r in d.items():
                    q = r.request
                    q = DeliveryRequest(P.get(q.project_id, q.project_id), q.record_version, q.state,
                                        Cursor(S.get(q.delivery.stream_id, q.delivery.stream_id), q.delivery.sequence))
                    out[(S.get(s, s), n)] = Receipt(q, r.ok, r.code, r.result, r.record_version)
                return FMap(out)
        else:  # pragma: no cover
            raise AssertionError(tag)
        return tbl

    def rename(self, world: World, maps: dict[str, Names]) -> World:
        """``world`` with each name ``n`` of class ``c`` replaced by ``maps[c].get(n, n)``.

        ``maps`` must be bijections of each class's domain (only classes this
        symmetry permutes are renamed). A table holding no renamed name is kept
        as it is (the same object, its hash cached).
        """
        maps = {c: m for c, m in maps.items() if m}
        unknown = set(maps) - self.classes
        if unknown:
            raise ValueError(f"bounds {self.bounds.name} do not permute {sorted(unknown)}")
        if not maps:
            return world
        P, A, S, O = (maps.get(c) or {} for c in CLASSES)
        mkey = tuple((c, tuple(sorted(maps[c].items()))) for c in CLASSES if c in maps)
        st, cloud = world.replica, world.cloud
        tables: dict[tuple[str, bool], Table] = {}
        cache = self._renamed
        for tag, in_cloud in self._tables:
            if in_cloud and cloud is None:
                continue
            tbl = getattr(cloud if in_cloud else st, tag)
            key = (tag, in_cloud, id(tbl), mkey)
            hit = cache.get(key)
            if hit is not None and hit[0] is tbl:
                tables[(tag, in_cloud)] = hit[1]
                continue
            out = self._rename_table(tag, in_cloud, tbl, P, A, S)
            if len(cache) > self._LIMIT:
                cache.clear()
            cache[key] = (tbl, out)
            tables[(tag, in_cloud)] = out

        def table(tag: str, in_cloud: bool = False) -> Table:
            found: Table = tables.get((tag, in_cloud), getattr(cloud if in_cloud else st, tag))
            return found

        def fmap(tag: str, in_cloud: bool = False) -> FMap[Any, Any]:
            return cast(FMap[Any, Any], table(tag, in_cloud))  # every table but the log is an FMap

        a = st.authority
        authority = a
        if a.attempt_id in A or a.stream_id in S or a.org_id in O:
            authority = Authority(a.gate, _g(S, a.stream_id), a.applied_sequence, _g(A, a.attempt_id),
                                  _g(O, a.org_id), a.policy_epochs)
        inflight = st.inflight
        if inflight:
            inflight = tuple(self._op(op, P, A, S, O) for op in inflight)
        replica = State(authority, fmap("projects"), fmap("records"), fmap("values"), fmap("stage_projects"),
                        fmap("stage_records"), fmap("stage_values"), fmap("receipts"), inflight, st.store_on)
        if cloud is not None and P:
            cloud = Cloud(fmap("records", True), fmap("versions", True), cast(Log, table("log", True)),
                          cloud.stream, cloud.attempts)
        return World(replica, cloud)

    # -- signatures -----------------------------------------------------------

    def signatures(self, world: World) -> tuple[dict[tuple[str, str], list[Use]], bool]:
        """(class, name) -> how ``world`` uses that name: its signature (permuted classes only); and ``starred``.

        A list of (where, contexts): the authority row's fields, then each
        table's share in a fixed table order (the sorted contexts of the name
        in that table: its position and the name-free content there, any other
        permuted name written as its role: ``=`` for the authority's current
        attempt or stream, ``*`` for another), then each in-flight operation's
        fields in slot order. A renaming of ``world`` gives each renamed name
        the same list. Each table's share is cached by the table's identity.

        ``starred``: some context wrote a name as ``*``. When none did, the
        signatures are exact: each context is a whole entry of its table (the
        complete name-free content, every other name in it fixed by every
        renaming that keeps the signatures), and no entry holds two names of
        one class. Two names with equal signatures then occupy the same
        entries up to their own name, so swapping them leaves the world
        unchanged: a tie needs no search.
        """
        classes = self.classes
        st, cloud = world.replica, world.cloud
        a = st.authority
        occ: dict[tuple[str, str], list[Use]] = {}
        starred = False
        if STREAM in classes and a.stream_id is not None:
            occ[(STREAM, a.stream_id)] = [(("authority", 0), ())]
        if ATTEMPT in classes and a.attempt_id is not None:
            occ[(ATTEMPT, a.attempt_id)] = [(("authority", 0), ())]
        if ORG in classes and a.org_id is not None:
            occ[(ORG, a.org_id)] = [(("authority", 0), ())]
        shares = self._shares
        for tag, in_cloud in self._tables:
            if in_cloud and cloud is None:
                continue
            tbl = getattr(cloud if in_cloud else st, tag)
            if not tbl:
                continue
            current = a.attempt_id if tag.startswith("stage") else a.stream_id if tag == "receipts" else None
            key = (tag, in_cloud, id(tbl), current)
            hit = shares.get(key)
            if hit is not None and hit[0] is tbl:
                share, star = hit[1]
            else:
                share, star = entry = self._share(tag, in_cloud, tbl, current)
                if len(shares) > self._LIMIT:
                    shares.clear()
                shares[key] = (tbl, entry)
            starred = starred or star
            for name, contexts in share.items():
                occ.setdefault(name, []).append(contexts)

        def add(cls: str, x: Optional[str], ctx: Content) -> None:
            if x is not None and cls in classes:
                occ.setdefault((cls, x), []).append((("inflight", i), ctx))

        for i, op in enumerate(st.inflight):
            r = op.read
            slot = (type(op).__name__, r.view.value, r.key)
            add(PROJECT, r.project_id, slot + ("read.project",))
            add(ATTEMPT, r.attempt_id, slot + ("read.attempt",))
            add(ORG, r.org_id, slot + ("read.org",))
            f = op.frame
            add(PROJECT, f.project_id, slot + ("frame.project",))
            if isinstance(f, PageFrame):
                add(ATTEMPT, f.attempt_id, slot + ("frame.attempt",))
            else:
                assert isinstance(f, ApplyFrame), f
                add(STREAM, f.delivery.stream_id, slot + ("frame.stream", f.delivery.sequence))
                add(ATTEMPT, f.reconciliation_attempt_id, slot + ("frame.reconciliation",))
                prepared = cast(DeliveryInFlight, op).prepared  # an ApplyFrame is in flight as a delivery
                add(ATTEMPT, prepared.attempt_id, slot + ("prepared.attempt",))
        return occ, starred

    def _share(
        self, tag: str, in_cloud: bool, tbl: Table, current: Optional[str]
    ) -> tuple[dict[tuple[str, str], Use], bool]:
        """One table's share of the signatures: (class, name) -> (where, its sorted contexts there); and starred."""
        classes = self.classes
        out: dict[tuple[str, str], list[Content]] = {}

        def add(cls: str, x: Optional[str], ctx: Content) -> None:
            if x is not None and cls in classes:
                out.setdefault((cls, x), []).append(ctx)

        starred = False

        def role(cls: str, x: Optional[str]) -> str:
            nonlocal starred
            if x is None:
                return ""
            if cls not in classes:
                return x
            if x == current:
                return "="
            starred = True
            return "*"

        if tag == "log":
            for i, (p, v, b) in enumerate(cast(Log, tbl)):
                add(PROJECT, p, (i, v) + _bs(b))
        elif tag in ("projects", "versions"):
            for p, v in _rows(tbl).items():
                add(PROJECT, p, (v,))
        elif tag in ("records", "values"):
            content: Callable[[Any], Content] = _bs if in_cloud else _row if tag == "records" else _val
            for (p, k), row in _rows(tbl).items():
                add(PROJECT, p, (k,) + content(row))
        elif tag == "stage_projects":
            for (att, p), sp in _rows(tbl).items():
                body: Content = (-1 if sp.record_version is None else sp.record_version, sp.last_key or "", sp.complete)
                add(PROJECT, p, (role(ATTEMPT, att),) + body)
                add(ATTEMPT, att, (role(PROJECT, p),) + body)
        elif tag in ("stage_records", "stage_values"):
            content = _row if tag == "stage_records" else _val
            for (att, p, k), row in _rows(tbl).items():
                body = (k,) + content(row)
                add(PROJECT, p, (role(ATTEMPT, att),) + body)
                add(ATTEMPT, att, (role(PROJECT, p),) + body)
        elif tag == "receipts":
            for (s, n), r in _rows(tbl).items():
                q = r.request
                body = (n, q.record_version, r.ok, "" if r.code is None else r.code.value) + _bs(q.state)
                add(STREAM, s, ("key",) + body)
                add(STREAM, q.delivery.stream_id, ("request", q.delivery.sequence) + body)
                add(PROJECT, q.project_id, (role(STREAM, s),) + body)
        else:  # pragma: no cover
            raise AssertionError(tag)
        where = (tag, int(in_cloud))
        return {name: (where, tuple(sorted(contexts))) for name, contexts in out.items()}, starred

    # -- the representative ---------------------------------------------------

    def canonical(self, world: World) -> World:
        """The representative of ``world``'s orbit: the same for ``world`` and every renaming of it.

        Memoised by value (a world is hashed once here; its representative's
        hash is kept for ``fingerprint``): most transitions reach a world seen
        before.
        """
        if not self.groups:
            return world
        h = hash(world)
        memo = self._memo
        hit = memo.get(h)
        if hit is not None and (hit[0] is world or hit[0] == world):
            return hit[1]
        out = self._canonical(world)
        if len(memo) > self._LIMIT:
            memo.clear()
            self._fingerprints.clear()
        if out is world:
            fp = h
        else:
            fp = hash(out)
            own = memo.get(fp)
            if own is not None and own[0] == out:
                out = own[1]  # one object per representative seen
            else:
                memo[fp] = (out, out)
        memo[h] = (world, out)
        self._fingerprints[id(out)] = (out, fp)
        return out

    def fingerprint(self, world: World) -> int:
        """``hash(world)``; for a representative ``canonical`` handed out, its hash kept then."""
        hit = self._fingerprints.get(id(world))
        if hit is not None and hit[0] is world:
            return hit[1]
        return hash(world)

    def _canonical(self, world: World) -> World:
        occ, starred = self.signatures(world)
        base: dict[str, Names] = {}
        #: runs of names in use whose signatures tie: (class, their target names, the names)
        ties: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
        for cls, parts in self.groups.items():
            mapping: Names = {}
            for group in parts:
                keyed: list[tuple[tuple[int, Content], str]] = []
                for n in group:
                    sig = occ.get((cls, n))
                    keyed.append(((1, ()) if sig is None else (0, tuple(sig)), n))
                keyed.sort(key=lambda kn: kn[0])
                i = 0
                while i < len(keyed):
                    j = i + 1
                    while j < len(keyed) and keyed[j][0] == keyed[i][0]:
                        j += 1
                    if j - i > 1 and keyed[i][0][0] == 0:
                        ties.append((cls, group[i:j], tuple(n for _, n in keyed[i:j])))
                    i = j
                for target, (_, n) in zip(group, keyed):
                    if n != target:
                        mapping[n] = target
            if mapping:
                base[cls] = mapping
        if not ties or not starred:  # no tie, or exact signatures: a tie is a symmetry of the world itself
            return self.rename(world, base) if base else world
        # Tied names in use: every arrangement of each tied run, the least result kept.
        candidates: list[World] = []
        for arrangement in product(*(permutations(names) for _, _, names in ties)):
            maps = {cls: dict(m) for cls, m in base.items()}
            for (cls, targets, _), names in zip(ties, arrangement):
                m = maps.setdefault(cls, {})
                for n, t in zip(names, targets):
                    if n != t:
                        m[n] = t
                    else:
                        m.pop(n, None)
            candidates.append(self.rename(world, maps))
        first = candidates[0]
        if all(c == first for c in candidates[1:]):
            return first
        return min(candidates, key=total_key)


def symmetry(bounds: Bounds, prefix: str = DEFAULT_PREFIX) -> Optional[Symmetry]:
    """The symmetry of ``bounds``, or None when no two names are interchangeable (nothing to reduce).

    A checker uses ``.canonical`` as ``Model.canonical`` and ``.fingerprint`` as ``Model.fingerprint``.
    """
    sym = Symmetry(bounds, prefix)
    return None if sym.trivial else sym
