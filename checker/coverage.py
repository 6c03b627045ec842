"""Coverage of a model-checking run: which actions, refusal codes, materialization
reasons, errors and gate transitions were reached.

Models: bookkeeping only. ``Coverage.observe_step`` sees every transition and
``observe_state`` every new state; ``rows`` lists each item with reached or
not, so a pass that never reached the interesting states shows as such.

Leaves out on purpose: judging reachability. Whether an unreached item is
reachable at all is argued in ``UNREACHABLE`` (with the reason) and pinned by
tests.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Optional, Protocol, Self

from mypy_extensions import mypyc_attr

from envreplica.spec.domain import ActionKind
from envreplica.spec.gate import fired_trigger
from envreplica.spec.domain import Failed, MatKind, RefusalCode, UnavailableReason, WithheldReason
from envreplica.spec.gate import TRANSITIONS, GateEdge

if TYPE_CHECKING:
    from rich.console import Console

    from envreplica.model.state import State

#: One row of a coverage table: (group, item, count).
CoverageRow = tuple[str, str, int]

#: Refusal codes no run can reach, and why (argued, and pinned by tests).
UNREACHABLE = {
    RefusalCode.RECEIPT_MISSING: (
        "receipts always cover 1..applied of the current stream "
        "(invariant receipts_cover_consumed), so a sequence at or below the cursor always has one"
    ),
}

#: Materialization reasons the replica decides (binding reasons are open-ended).
REASONS = (
    [(MatKind.WITHHELD, r.value) for r in WithheldReason]
    + [(MatKind.UNAVAILABLE, r.value) for r in UnavailableReason if r is not UnavailableReason.TOMBSTONE]
)


#: The item every binding-chosen withheld reason counts under (they are open-ended).
BINDING_REASON_ITEM = "withheld: <binding reason>"
#: The materialization rows of a coverage table, in order.
MATERIALIZATION_ITEMS = ["installed"] + [f"{k.value}: {r}" for k, r in REASONS] + [BINDING_REASON_ITEM]


@mypyc_attr(allow_interpreted_subclasses=True)  # the lockstep's coverage derives from it
class CoverageCounts:
    """What every coverage dataclass shares: its ``Counter`` fields merge, and ``rows()`` gives what was missed."""

    #: Set by ``@dataclass`` on each subclass (what ``fields`` reads).
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def merge(self, other: Self) -> None:
        for f in fields(self):
            getattr(self, f.name).update(getattr(other, f.name))

    def rows(self) -> list[CoverageRow]:
        """(group, item, count) for every item the run should reach (each subclass says)."""
        raise NotImplementedError

    def unreached(self, exempt: Iterable[str] = ()) -> list[tuple[str, str]]:
        """Items with count 0, minus the ones argued unreachable and ``exempt``."""
        skip = {c.value for c in UNREACHABLE} | set(exempt)
        return [(g, i) for g, i, n in self.rows() if n == 0 and i not in skip]


@dataclass
class Coverage(CoverageCounts):
    """Counts of what a run reached."""

    actions: Counter[Optional[str]] = field(default_factory=Counter)  # by action kind (an ``ActionKind``, mostly)
    refusals: Counter[RefusalCode] = field(default_factory=Counter)
    reasons: Counter[tuple[MatKind, Optional[str]]] = field(default_factory=Counter)
    edges: Counter[GateEdge] = field(default_factory=Counter)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)

    def observe_step(self, pre: State, action: Any, result: object, post: State) -> None:
        kind = getattr(action, "kind", None)
        self.actions[kind] += 1
        code = getattr(result, "code", None)
        if isinstance(code, RefusalCode):
            self.refusals[code] += 1
        if isinstance(result, Failed):
            self.errors[(result.kind, result.message)] += 1
        trigger = fired_trigger(action, result) if isinstance(kind, ActionKind) else None
        if trigger is not None:
            self.edges[GateEdge(trigger, pre.authority.gate, post.authority.gate)] += 1

    def observe_state(self, st: State) -> None:
        for rows in (st.records, st.stage_records):
            for row in rows.values():
                mat = row.mat
                if mat.kind is not MatKind.INSTALLED:
                    self.reasons[(mat.kind, mat.reason)] += 1
                else:
                    self.reasons[(MatKind.INSTALLED, None)] += 1

    def rows(self) -> list[CoverageRow]:
        """(group, item, count) for every item the run should reach."""
        out: list[CoverageRow] = []
        for kind in ActionKind:
            out.append(("action", kind.value, self.actions.get(kind, 0)))
        for code in RefusalCode:
            out.append(("refusal", code.value, self.refusals.get(code, 0)))
        out.append(("materialization", "installed", self.reasons.get((MatKind.INSTALLED, None), 0)))
        for mat_kind, reason in REASONS:  # a name of its own: compiled, a variable keeps its first type
            out.append(("materialization", f"{mat_kind.value}: {reason}", self.reasons.get((mat_kind, reason), 0)))
        binding = sum(n for (k, r), n in self.reasons.items()
                      if k is MatKind.WITHHELD and r not in {w.value for w in WithheldReason})
        out.append(("materialization", BINDING_REASON_ITEM, binding))
        for edge in TRANSITIONS:
            out.append(("gate", edge.label(), self.edges.get(edge, 0)))
        return out


class CoverageTable(Protocol):
    """What ``print_coverage_table`` reads of a coverage."""

    def rows(self) -> list[CoverageRow]: ...

    def unreached(self) -> list[tuple[str, str]]: ...


def print_coverage_table(coverage: CoverageTable, console: Console, title: str,
                         missing_label: str) -> list[tuple[str, str]]:
    """Print ``coverage.rows()`` as a rich table, the argued-unreachable items, then what was missed.

    Serves both the model checker's ``Coverage`` and the lockstep's coverage
    (anything with ``rows()`` and ``unreached()``); returns ``unreached()``.
    """
    from rich.table import Table

    table = Table(title=title)
    for col in ("group", "item", "count"):
        table.add_column(col, justify="right" if col == "count" else "left")
    unreachable = {code.value for code in UNREACHABLE}
    for group, item, n in coverage.rows():
        shown = f"{n:,}" if n else ("[dim]unreachable[/]" if item in unreachable else "[yellow]0[/]")
        table.add_row(group, item, shown)
    console.print(table)
    for code, why in UNREACHABLE.items():
        console.print(f"[dim]unreachable {code.value}: {why}[/]")
    missing = coverage.unreached()
    if missing:
        console.print(f"[yellow]{missing_label}:[/] {', '.join(item for _, item in missing)}")
    return missing
