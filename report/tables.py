"""A replica's tables at one step, and what changed between two steps or two sides.

Models: ``Tables`` is table name -> row key (a tuple of strings) -> field path
-> shown value (``values.show``, uncapped: capping is the template's). It is
read from a model-checker ITF state (``from_itf_state``: the ``REPLICA_VARS``
of ``checker.itf``) or from a ``state`` document of
docs/protocol.md section 6 (``from_state_doc``: the lockstep's tables, keyed by
``readback.STATE_TABLES``). ``diff`` says, table by table, which rows were
added, removed or changed (and which fields); ``compare`` holds an
implementation's tables against the model's, field by field.

Leaves out on purpose: unchanged rows in a diff (they are counted), and
``requestMac`` in ``compare`` (an implementation's MAC is its own: the
lockstep compares MACs as names, docs/protocol.md section 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from envreplica.report.values import flatten, is_variant, key_part, show

Row = dict[str, str]
Table = dict[tuple[str, ...], Row]
Tables = dict[str, Table]

#: Tables with one row that belongs to no project: a filter never hides them.
GLOBAL_TABLES = ("authority", "store")
#: Field names whose value names a project or a key: a row matches a filter on them too.
_TOKEN_FIELDS = ("project_id", "projectId", "key", "attemptId", "attempt_id", "streamId", "stream_id")
#: Fields ``compare`` leaves alone: the implementation's MAC is held as a name, not compared.
_NAMES_ONLY = ("requestMac",)

_ITF_TABLES = ("projects", "records", "values", "stage_projects", "stage_records", "stage_values", "receipts")


def _row(value: Any) -> Row:
    return dict(flatten(value))


def _map_rows(value: Any) -> Table:
    rows: Table = {}
    pairs = value.get("#map", []) if isinstance(value, dict) else []
    for k, v in pairs:
        parts = k if isinstance(k, list) else k.get("#tup") or [] if isinstance(k, dict) and "#tup" in k else [k]
        rows[tuple(key_part(p) for p in parts)] = _row(v)
    return rows


def from_itf_state(state: dict) -> Tables:
    """The tables of one state of a model-checker ITF trace (``checker.itf.write``)."""
    tables: Tables = {}
    if "authority" in state:
        tables["authority"] = {("authority",): _row(state["authority"])}
    for name in _ITF_TABLES:
        if name in state:
            tables[name] = _map_rows(state[name])
    inflight = state.get("inflight")
    if isinstance(inflight, list):
        tables["inflight"] = {(f"slot {i}",): _row(op) for i, op in enumerate(inflight)}
    if "store_on" in state:
        tables["store"] = {("value store",): {"store_on": show(state["store_on"])}}
    return tables


def from_state_doc(doc: Any) -> Tables:
    """The tables of a ``state`` document (docs/protocol.md section 6), rows keyed by primary key."""
    from envreplica.conformance.readback import STATE_TABLES

    tables: Tables = {}
    if not isinstance(doc, dict):
        return tables
    for name, value in doc.items():
        if name == "authority" and isinstance(value, dict):
            tables[name] = {("authority",): _row(value)}
            continue
        if not isinstance(value, list):
            tables[name] = {("value",): {"value": show(value)}}
            continue
        pk = STATE_TABLES.get(name, ())
        rows: Table = {}
        for i, r in enumerate(value):
            if isinstance(r, dict) and pk and all(k in r for k in pk):
                key = tuple(key_part(r[k]) for k in pk)
                rows[key] = _row({k: v for k, v in r.items() if k not in pk})
            else:
                rows[(f"#{i}",)] = _row(r)
        tables[name] = rows
    return tables


def gate_of_doc(doc: Any) -> Optional[str]:
    """The gate a ``state`` document's authority row says (``spec.gate.Gate`` values)."""
    a = doc.get("authority") if isinstance(doc, dict) else None
    if not isinstance(a, dict):
        return None
    if not a.get("activated"):
        return "inactive"
    if a.get("gateOpen"):
        return "open"
    return "closed.staging" if a.get("attemptId") is not None else "closed.idle"


# ---------------------------------------------------------------------------
# Differences
# ---------------------------------------------------------------------------


@dataclass
class FieldDiff:
    path: str
    old: Optional[str]  # None: the field is new (or the row was added)
    new: Optional[str]  # None: the field is gone (or the row was removed)
    changed: bool


@dataclass
class RowDiff:
    key: tuple[str, ...]
    status: str  # added | removed | changed | same (diff); differs | only-model | only-impl | same (compare)
    fields: list[FieldDiff]
    tokens: list[str]  # what a filter matches: the key's parts and the project / key fields
    is_global: bool = False

    @property
    def key_text(self) -> str:
        return " / ".join(self.key)

    @property
    def changed_fields(self) -> list[FieldDiff]:
        return [f for f in self.fields if f.changed]

    @property
    def unchanged_fields(self) -> list[FieldDiff]:
        return [f for f in self.fields if not f.changed]


@dataclass
class TableDiff:
    name: str
    rows: list[RowDiff] = field(default_factory=list)
    unchanged: int = 0  # rows equal on both sides (not listed)

    @property
    def marked(self) -> bool:
        """Whether a row of it differs from the other side."""
        return any(r.status == "differs" for r in self.rows)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out


def _tokens(key: tuple[str, ...], *rows: Optional[Row]) -> list[str]:
    out = list(key)
    for row in rows:
        for path, text in (row or {}).items():
            if path.rsplit(".", 1)[-1] in _TOKEN_FIELDS and text.startswith('"') and text.endswith('"'):
                out.append(text[1:-1])
    return sorted(set(out), key=out.index)


def _fields(old: Optional[Row], new: Optional[Row], skip=()) -> list[FieldDiff]:
    old, new = old or {}, new or {}
    paths = list(new) + [p for p in old if p not in new]
    return [FieldDiff(p, old.get(p), new.get(p), p not in skip and old.get(p) != new.get(p)) for p in paths]


def _walk(old: Tables, new: Tables, judge, new_first: bool) -> list[TableDiff]:
    """Table by table, row by row over both sides (in ``new``'s order then ``old``'s extras, or the other way
    round): ``judge(old_row, new_row, in_old, in_new)`` gives a row's (status, fields), or None when it is the
    same on both sides (counted as unchanged)."""
    first, second = (new, old) if new_first else (old, new)
    out = []
    for name in list(first) + [n for n in second if n not in first]:
        a, b = old.get(name, {}), new.get(name, {})
        lead, rest = (b, a) if new_first else (a, b)
        table = TableDiff(name)
        for key in list(lead) + [k for k in rest if k not in lead]:
            judged = judge(a.get(key), b.get(key), key in a, key in b)
            if judged is None:
                table.unchanged += 1
                continue
            status, fields = judged
            table.rows.append(RowDiff(key, status, fields, _tokens(key, a.get(key), b.get(key)),
                                      name in GLOBAL_TABLES))
        out.append(table)
    return out


def diff(before: Optional[Tables], after: Tables) -> list[TableDiff]:
    """Table by table, the rows ``after`` adds, removes or changes against ``before`` (None: nothing before)."""

    def judge(old, new, had, has):
        if not had:
            return "added", [FieldDiff(p, None, v, True) for p, v in new.items()]
        if not has:
            return "removed", [FieldDiff(p, v, None, True) for p, v in old.items()]
        return ("changed", _fields(old, new)) if old != new else None

    return _walk(before or {}, after, judge, new_first=True)


def compare(model: Tables, impl: Tables) -> list[TableDiff]:
    """The implementation's tables against the model's: rows on one side only, and fields that differ."""

    def judge(m, i, in_model, in_impl):
        if not in_impl:
            return "only-model", _fields(m, None)
        if not in_model:
            return "only-impl", _fields(None, i)
        fields = _fields(m, i, skip=_NAMES_ONLY)
        return ("differs", fields) if any(f.changed for f in fields) else None

    return _walk(model, impl, judge, new_first=False)


def full(tables: Tables) -> list[TableDiff]:
    """Every row of ``tables`` (status ``same``), for the tables after a step."""
    out = []
    for name, rows in tables.items():
        out.append(TableDiff(name, [RowDiff(k, "same", [FieldDiff(p, v, v, False) for p, v in r.items()],
                                            _tokens(k, r), name in GLOBAL_TABLES) for k, r in rows.items()]))
    return out


def response_fields(response: Any) -> dict[str, str]:
    """A response (wire JSON) as dotted paths; ``results`` lists by index (``results.0.state.key``)."""
    out: dict[str, str] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict) and value and not is_variant(value):
            for k, v in value.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for n, v in enumerate(value):
                walk(v, f"{prefix}.{n}" if prefix else str(n))
        else:
            out[prefix or "value"] = show(value)

    walk(response, "")
    return out
