"""What lockstep runs reached: ``LockstepCoverage``, the process-wide ``COVERAGE``, ``print_coverage``.

Counts ops, refusal codes, materialization reasons (read from results,
nested ones included), error types, gate transitions, and the classes of
values the replica held (``VALUE_CLASSES``, counted in the model's state
after each step, live and staged; the read-back compares every one of them
with the implementation's, opened from its seal: a pass that never held a
lone surrogate says nothing about F3). The gate
transitions are reported by the machine's tracing model driver
(``machine._TracingModel``); this module only counts them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from envreplica.checker.coverage import (
    BINDING_REASON_ITEM,
    MATERIALIZATION_ITEMS,
    CoverageCounts,
    print_coverage_table,
)
from envreplica.conformance.drivers import OPS
from envreplica.spec.domain import RefusalCode, WithheldReason
from envreplica.spec.gate import TRANSITIONS, GateEdge


def _mat_item(mat: Any) -> Optional[str]:
    if not isinstance(mat, dict):
        return None
    kind = mat.get("kind")
    if kind == "installed":
        return "installed"
    reason = mat.get("reason")
    if kind == "withheld" and reason not in {w.value for w in WithheldReason}:
        return BINDING_REASON_ITEM
    return f"{kind}: {reason}"


_ERROR_TYPES = ("invalid", "corrupt", "unsupported")

#: Classes of stored values (a value may be in several), each a string the wire allows.
VALUE_CLASSES = {
    "ascii": lambda v: v.isascii() and v != "",
    "empty": lambda v: v == "",
    "NUL": lambda v: "\x00" in v,
    # Fetched with a lone surrogate: kept as is (fixed), or as U+FFFD (seed, F3; no drawn value holds U+FFFD).
    "lone surrogate": re.compile("[\ud800-\udfff\ufffd]").search,
    "non-BMP": re.compile("[\U00010000-\U0010ffff]").search,
    "over 64 KiB": lambda v: len(v) > 21845 and len(v.encode("utf-8", "surrogatepass")) > 65536,
}


@dataclass
class LockstepCoverage(CoverageCounts):
    """What lockstep runs reached: ops, refusal codes, materialization reasons, errors, gate moves."""

    ops: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    edges: Counter = field(default_factory=Counter)
    values: Counter = field(default_factory=Counter)

    def observe(self, request: Any, response: Any) -> None:
        """Count one request and the model's response (nested ones included)."""
        op = request.get("op") if isinstance(request, dict) else None
        if isinstance(op, str) and op in OPS:
            self.ops[op] += 1
        if not isinstance(response, dict):
            return
        if response.get("ok") is True:
            self._observe_result(op, response.get("result"))
        elif isinstance(response.get("error"), dict):
            self.errors[response["error"].get("type")] += 1
        nested = response.get("nested")
        inner = request.get("duringFetch") if isinstance(request, dict) else None
        if isinstance(nested, list) and isinstance(inner, list):
            for sub_request, sub_response in zip(inner, nested):
                self.observe(sub_request, sub_response)

    def _observe_result(self, op: Optional[str], result: Any) -> None:
        if op in ("page", "delivery", "commit") and isinstance(result, dict):
            if result.get("ok") is False:
                self.refusals[result.get("code")] += 1
            elif op == "page":
                for item in result.get("results") or ():
                    self._mat(item.get("materialization"))
            elif op == "delivery" and isinstance(result.get("result"), dict):
                self._mat(result["result"].get("materialization"))
        elif op == "snapshot" and isinstance(result, dict):
            for project in result.get("projects") or ():
                for entry in project.get("entries") or ():
                    self._mat(entry.get("materialization"))
        elif op == "receipts" and isinstance(result, list):
            for receipt in result:
                if isinstance(receipt, dict) and isinstance(receipt.get("result"), dict):
                    self._mat(receipt["result"].get("materialization"))

    def _mat(self, mat: Any) -> None:
        item = _mat_item(mat)
        if item is not None:
            self.reasons[item] += 1

    def observe_edge(self, edge: GateEdge) -> None:
        self.edges[edge] += 1

    def rows(self) -> list[tuple[str, str, int]]:
        """(group, item, count) for every item a run should reach."""
        out = [("op", op, self.ops.get(op, 0)) for op in OPS]
        out += [("refusal", c.value, self.refusals.get(c.value, 0)) for c in RefusalCode]
        out += [("materialization", item, self.reasons.get(item, 0)) for item in MATERIALIZATION_ITEMS]
        out += [("error", kind, self.errors.get(kind, 0)) for kind in _ERROR_TYPES]
        out += [("gate", e.label(), self.edges.get(e, 0)) for e in TRANSITIONS]
        out += [("stored value", name, self.values.get(name, 0)) for name in VALUE_CLASSES]
        return out

def value_classes(state) -> Counter:
    """The classes of the values ``state`` holds (live and staged), each counted once per value."""
    return Counter(name for stored in (*state.values.values(), *state.stage_values.values())
                   for name, test in VALUE_CLASSES.items() if test(stored.value))


#: Every lockstep run of this process adds here.
COVERAGE = LockstepCoverage()


def print_coverage(coverage: LockstepCoverage, console=None, title: str = "lockstep coverage") -> list:
    """Print the coverage table (rich); returns ``coverage.unreached()``."""
    from rich.console import Console

    return print_coverage_table(coverage, console or Console(), title, "reachable but not reached")
