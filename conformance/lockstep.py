"""Lockstep conformance: Hypothesis drives the model and an implementation with the same requests.

``LockstepMachine`` is a ``hypothesis.stateful.RuleBasedStateMachine``. Each
rule builds ONE request of the conformance adapter (wire-protocol.md section
5) and sends it to the model (``ModelDriver``) and to the implementation (any
``Driver``). The two responses must be equal: the same keys, ``id``, ``ok``
and ``result`` exactly (as JSON: ``true`` is not ``1``), the error ``type``
for errors (messages may differ), ``nested`` response by response. Then:

* when the implementation exposes its replica's state read back into the
  model's shape (``SqliteDriver``: ``driver.replica.to_model_state()`` and
  ``driver.sealer``), ``with_macs(model state, sealer)`` must equal it (a
  read or invalid request, after which the model did not move, is checked
  with the next step that moves, or at the end of the example);
* every invariant of ``spec.properties.INVARIANTS`` must hold on the model's
  state and on the read-back state, except those the variant is known to
  break (``KNOWN_VIOLATIONS``: ``seed`` and ``fix-f1`` reproduce findings F1
  and F2 of docs/findings.md on the model itself).

Every example starts with a ``reset`` of both sides (and often a first
``begin``). Generation is protocol-aware and biased toward what exists: the
strategies read the model's state (cursor and true high-water mark, the open
attempt and its staged projects, live and staged records, receipts, what
the value store holds). Rule kinds (``KINDS``, weighted by ``RULE_WEIGHTS``):

* ``cloud``: what a consistent cloud sends next (begin, the next canonical
  page, the commit with the true high-water mark and versions, the next
  delivery with a reachable record move, a snapshot read), with the value
  store stocked first (mostly correct envelopes, sometimes every other kind
  of answer), at-least-once retransmissions, lagging snapshots, a narrowed
  policy, an occasional overtaking delivery. This rule reaches deep states.
* ``begin``, ``page``, ``delivery``, ``commit``: the same frames from small
  domains with the odd ones mixed in (other attempts, stale/gapped/wrong
  versions, replays and conflicting frames at consumed sequences, gaps,
  older and conflicting records, strangers); ``close``, ``restart``;
  ``read`` (status, snapshot, receipts); ``store`` (put/fail/off); ``invalid``
  (requests and frames the wire rejects).
* ``duringFetch``: a page or delivery that will read a value often carries
  nested requests run inside its read on both sides: random ones (begin,
  commit, close, restart, deliveries, snapshots, ...) and the races that
  matter (the attempt begun again under fewer epochs and the same page
  resent; a whole reconciliation under fewer epochs inside a live delivery;
  the next delivery moving the record being read for; a commit promoting a
  record still pending).

Swarm testing: the ``@initialize`` rule draws, per example, a random subset
of ``KINDS`` (and whether interleavings are on); each rule's
``@precondition`` checks membership. ``hypothesis.target`` reports depth
(distinct gate transitions, staged records, consumed sequences); the target
phase that hill-climbs on it runs only where the budget is large
(``TARGET_PHASE_PROFILES``: measured, it costs the ``ci`` budget coverage).

Choices: each rule draws one block of bytes and makes every choice from it
(``_Draw``), so a step has the same shape in Hypothesis's choice sequence
whatever the state; shrinking then stays aligned when steps are deleted.
Shrinking is capped (``SHRINK_SECONDS``); then the concrete requests of the
shrunk example are minimized by deleting steps and nested requests while
the divergence stays the same (``MINIMIZE_SECONDS``).

Coverage: ``COVERAGE`` (module level, every run of the process) and each
run's ``LockstepReport.coverage`` count the ops, refusal codes,
materialization reasons (read from results, nested ones included), error
types and gate transitions (the model's gate before/after every
begin/commit/close/restart, nested ones included) reached;
``print_coverage`` prints the table, ``LockstepCoverage.unreached`` lists
what was reachable and not reached.

On a failure the example is written by ``teardown`` (and the minimized one
by ``run_lockstep``) as JSON lines of requests (replayable: ``envreplica
replay FILE.jsonl``, ``envreplica conformance --traces DIR``) and as an
ITF-style trace of (request, model response, implementation response) per
step.

Entry points: ``run_lockstep`` (the CLI, ``envreplica check`` and the
mutant tests use it: keep its signature), ``replay_requests`` /
``replay_steps``, ``lockstep_settings``, ``print_coverage``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Optional, Sequence

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from envreplica.checker.coverage import REASONS as MAT_REASONS
from envreplica.checker.coverage import UNREACHABLE
from envreplica.conformance.drivers import OPS, Driver, ModelDriver
from envreplica.model.state import State, Variant
from envreplica.model.store import legacy_envelope, staged_envelope
from envreplica.spec import properties as P
from envreplica.spec import wire
from envreplica.spec.domain import RefusalCode, WithheldReason
from envreplica.spec.gate import TRANSITIONS, GateEdge, Trigger

__all__ = [
    "COVERAGE",
    "KINDS",
    "KNOWN_VIOLATIONS",
    "LockstepCoverage",
    "LockstepMachine",
    "LockstepReport",
    "compare_responses",
    "describe_request",
    "describe_response",
    "format_steps",
    "lockstep_settings",
    "print_coverage",
    "read_requests",
    "replay_requests",
    "replay_steps",
    "run_lockstep",
]

# ---------------------------------------------------------------------------
# Domains. Small on purpose: operations must interact.
# ---------------------------------------------------------------------------

#: The rule kinds swarm testing chooses among.
KINDS = ("cloud", "begin", "page", "delivery", "commit", "close", "restart", "read", "store", "invalid")

STREAMS = ("s1", "s2")
ATTEMPTS = ("a1", "a2", "a3")
PROJECTS = ("p1", "p2")
STRANGER = "p3"  # a project no begin names
ORG, OTHER_ORG = "o1", "o2"
#: Env keys, in wire (ASCII) order. ``L`` and ``M`` keep their values as legacy
#: SSM versions; ``_X`` too, but is not a Segment, so it has no legacy name
#: (``value_reference_invalid``).
KEYS = ("A", "B", "L", "M", "_X")
LEGACY_KEYS = ("L", "M", "_X")
EPOCH_SETS = ((1, 2), (1,), (2,), (1, 2, 3), ())
REASONS = ("legal_hold", "held")
VALUES = ("v1", "v2")
#: An ack bound that fits one page record, not two (226-byte ack + 326 per record).
SMALL_ACK = 600
OTHER_KEY_HEX = bytes(range(1, 33)).hex()
NESTED_ID_BASE = 100000

#: Invariants a variant's model itself breaks (docs/findings.md): not asserted there.
KNOWN_VIOLATIONS: dict[Variant, frozenset] = {
    Variant.SEED: frozenset({"served_values_are_live_bound_kept"}),
    Variant.FIX_F1: frozenset({"served_values_are_live_bound_kept"}),
    Variant.FIXED: frozenset(),
}

_TRIGGERS = {"begin": Trigger.BEGIN, "commit": Trigger.COMPLETE, "close": Trigger.CLOSE_GATE,
             "restart": Trigger.RESTART}


# ---------------------------------------------------------------------------
# Coverage
# ---------------------------------------------------------------------------


def _mat_item(mat: Any) -> Optional[str]:
    if not isinstance(mat, dict):
        return None
    kind = mat.get("kind")
    if kind == "installed":
        return "installed"
    reason = mat.get("reason")
    if kind == "withheld" and reason not in {w.value for w in WithheldReason}:
        return "withheld: <binding reason>"
    return f"{kind}: {reason}"


_MAT_ITEMS = ["installed"] + [f"{k.value}: {r}" for k, r in MAT_REASONS] + ["withheld: <binding reason>"]
_ERROR_TYPES = ("invalid", "corrupt", "unsupported")


@dataclass
class LockstepCoverage:
    """What lockstep runs reached: ops, refusal codes, materialization reasons, errors, gate moves."""

    ops: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    edges: Counter = field(default_factory=Counter)

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

    def merge(self, other: "LockstepCoverage") -> None:
        for name in ("ops", "refusals", "reasons", "errors", "edges"):
            getattr(self, name).update(getattr(other, name))

    def rows(self) -> list[tuple[str, str, int]]:
        """(group, item, count) for every item a run should reach."""
        out = [("op", op, self.ops.get(op, 0)) for op in OPS]
        out += [("refusal", c.value, self.refusals.get(c.value, 0)) for c in RefusalCode]
        out += [("materialization", item, self.reasons.get(item, 0)) for item in _MAT_ITEMS]
        out += [("error", kind, self.errors.get(kind, 0)) for kind in _ERROR_TYPES]
        out += [("gate", e.label(), self.edges.get(e, 0)) for e in TRANSITIONS]
        return out

    def unreached(self, exempt: Iterable[str] = ()) -> list[tuple[str, str]]:
        """Reachable items with count 0 (``UNREACHABLE`` and ``exempt`` left out)."""
        skip = {c.value for c in UNREACHABLE} | set(exempt)
        return [(g, i) for g, i, n in self.rows() if n == 0 and i not in skip]


#: Every lockstep run of this process adds here.
COVERAGE = LockstepCoverage()


def print_coverage(coverage: LockstepCoverage, console=None, title: str = "lockstep coverage") -> list:
    """Print the coverage table (rich); returns ``coverage.unreached()``."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=title)
    for col in ("group", "item", "count"):
        table.add_column(col, justify="right" if col == "count" else "left")
    unreachable = {c.value for c in UNREACHABLE}
    for group, item, n in coverage.rows():
        shown = f"{n:,}" if n else ("[dim]unreachable[/]" if item in unreachable else "[yellow]0[/]")
        table.add_row(group, item, shown)
    console.print(table)
    for code, why in UNREACHABLE.items():
        console.print(f"[dim]unreachable {code.value}: {why}[/]")
    missing = coverage.unreached()
    if missing:
        console.print(f"[yellow]reachable but not reached:[/] {', '.join(i for _, i in missing)}")
    return missing


# ---------------------------------------------------------------------------
# Comparing responses
# ---------------------------------------------------------------------------


def _canon(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _short(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else _canon(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _first_difference(a: Any, b: Any, path: str) -> str:
    """The path of the first place where two JSON values differ, and both values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a:
                return f"{path}.{key}: model has no such key, implementation {_short(b[key])}"
            if key not in b:
                return f"{path}.{key}: model {_short(a[key])}, implementation has no such key"
            if _canon(a[key]) != _canon(b[key]):
                return _first_difference(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: model has {len(a)} items, implementation {len(b)}: model {_short(a)}, implementation {_short(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if _canon(x) != _canon(y):
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: model {_short(a)}, implementation {_short(b)}"


def compare_responses(model: Any, impl: Any, path: str = "response") -> Optional[str]:
    """None when ``impl`` answers as ``model`` does; else where and how they differ.

    Equal means: the same keys; ``id`` and ``ok`` equal; ``result`` equal as
    JSON (``true`` is not ``1``); for errors the same ``type`` (messages may
    differ); ``nested`` responses equal one by one.
    """
    if not isinstance(impl, dict):
        return f"{path}: the implementation answered {_short(impl)}, not a JSON object"
    if not isinstance(model, dict):  # pragma: no cover - the model always answers an object
        return f"{path}: the model answered {_short(model)}"
    if set(model) != set(impl):
        return (f"{path}: keys differ: model {sorted(model)}, implementation {sorted(impl)}"
                f" (implementation answered {_short(impl)})")
    for key in ("id", "ok"):
        if _canon(model[key]) != _canon(impl[key]):
            detail = (f"; implementation error {_short(impl.get('error'))}" if impl.get("ok") is False
                      else f"; model error {_short(model.get('error'))}" if model.get("ok") is False else "")
            return f"{path}.{key}: model {_short(model[key])}, implementation {_short(impl[key])}{detail}"
    if model["ok"] is True:
        if _canon(model["result"]) != _canon(impl["result"]):
            return _first_difference(model["result"], impl["result"], f"{path}.result")
    else:
        m_err, i_err = model.get("error"), impl.get("error")
        if not isinstance(i_err, dict) or i_err.get("type") != m_err.get("type"):
            return (f"{path}.error.type: model {_short(m_err.get('type'))} ({_short(m_err.get('message'), 100)}), "
                    f"implementation {_short(i_err)}")
    if "nested" in model:
        m_nested, i_nested = model["nested"], impl["nested"]
        if not isinstance(i_nested, list) or len(i_nested) != len(m_nested):
            return f"{path}.nested: model {len(m_nested)} responses, implementation {_short(i_nested)}"
        for i, (m, n) in enumerate(zip(m_nested, i_nested)):
            diff = compare_responses(m, n, f"{path}.nested[{i}]")
            if diff:
                return diff
    return None


# ---------------------------------------------------------------------------
# Readable steps
# ---------------------------------------------------------------------------


def _ref_text(ref: Any) -> str:
    if not isinstance(ref, dict):
        return "none"
    if ref.get("kind") == "legacy":
        return f"legacy@{ref.get('ssmVersion')}"
    sid = str(ref.get("stagingId", "?"))
    return f"staged:{sid[:8]}…{sid[-4:]}"


def _record_text(r: Any) -> str:
    try:
        h = r["head"]
        text = f"{r['key']} r{h['revision']}g{h['generation']}"
        text += " tomb" if h["tombstone"] else f" {_ref_text(h['valueRef'])}"
        binding = r["binding"]
        if isinstance(binding, dict):
            text += " omit" if binding.get("kind") == "omit" else f" withhold({binding.get('reason')})"
        text += f" e{r['policyEpoch']}"
        if r["listingGeneration"]:
            text += f" L{r['listingGeneration']}"
        return text
    except (KeyError, TypeError):
        return _short(r, 100)


def _raw_text(raw: Any) -> str:
    """A stored value's text in short: the envelope's fields that matter, or the text itself."""
    try:
        env = json.loads(raw)
        if isinstance(env, dict) and env.get("kind") == "project-env" and "value" in env:
            org = f" org={env['orgId']}" if "orgId" in env else ""
            return f"envelope(v{env.get('v')}{org} {env.get('projectId')}/{env.get('key')} value={env['value']!r})"
    except (ValueError, TypeError):
        pass
    return f"raw={_short(raw, 60)}"


def describe_request(request: Any) -> str:
    """One line for a request: the op and its frame in a compact human form."""
    if not isinstance(request, dict):
        return _short(request)
    op = request.get("op")
    try:
        if op == "begin":
            f = request["frame"]
            text = (f"begin {f['attempt']['streamId']}/{f['attempt']['attemptId']} projects={f['projectIds']} "
                    f"kept={request['keptPolicyEpochs']} org={request['orgId']}")
        elif op == "page":
            f = request["frame"]
            recs = " | ".join(_record_text(r) for r in f["records"])
            text = (f"page {f['attemptId']}/{f['projectId']} v{f['recordVersion']} after={f['after']} [{recs}]"
                    f"{' complete' if f['complete'] is True else ' partial'}")
        elif op == "delivery":
            f = request["frame"]
            d = f["delivery"]
            text = (f"delivery {d['streamId']}:{d['sequence']} {f['projectId']}@{f['recordVersion']} "
                    f"{_record_text(f['state'])}")
            if "reconciliationAttemptId" in f:
                text += f" recon={f['reconciliationAttemptId']}"
        elif op == "commit":
            f = request["frame"]
            hw = f["highWater"]
            versions = ", ".join(f"{v['projectId']}@{v['recordVersion']}" for v in f["versions"])
            text = f"commit {f['attemptId']} highWater={hw['streamId']}:{hw['sequence']} [{versions}]"
        elif op == "store.put":
            text = f"store.put {request['projectId']}/{request['key']} {_ref_text(request['ref'])} {_raw_text(request['raw'])}"
            if "reportedVersion" in request:
                text += f" reportedVersion={request['reportedVersion']}"
        elif op == "store.fail":
            text = f"store.fail {request['projectId']}/{request['key']} {_ref_text(request['ref'])} {request['mode']}"
        elif op == "snapshot":
            text = f"snapshot {request['projectIds']}"
        elif op == "reset":
            text = f"reset {_short(request.get('config', {}))}"
        elif op in OPS and set(request) <= {"id", "op"}:
            text = str(op)
        else:
            raise KeyError(op)
    except (KeyError, TypeError, AttributeError):
        rest = {k: v for k, v in request.items() if k not in ("id", "duringFetch")}
        text = f"(raw) {_short(rest, 200)}"
    if isinstance(request.get("duringFetch"), list):
        inner = "; ".join(describe_request(n) for n in request["duringFetch"])
        text += f"  duringFetch=[{inner}]"
    return text


def describe_response(response: Any) -> str:
    """One line for a response: ok, a refusal code, materializations, or an error."""
    if not isinstance(response, dict):
        return _short(response)
    if response.get("ok") is False:
        err = response.get("error") or {}
        text = f"ERROR {err.get('type')}: {_short(err.get('message'), 120)}"
    elif response.get("ok") is True:
        r = response.get("result")
        if isinstance(r, dict) and r.get("ok") is False:
            text = f"refused {r.get('code')}"
            if "consumed" in r:
                text += f" (consumed={r['consumed']}, replayed={r['replayed']})"
        elif isinstance(r, dict) and "results" in r:
            text = "ok [" + ", ".join(f"{x['state']['key']}: {_mat_item(x['materialization'])}"
                                      for x in r["results"]) + "]"
        elif isinstance(r, dict) and "replayed" in r:
            text = (f"ok{' (replayed)' if r['replayed'] else ''} {r['result']['state']['key']}: "
                    f"{_mat_item(r['result']['materialization'])} @{r['recordVersion']}")
        elif isinstance(r, dict) and "appliedThrough" in r and "gateOpen" not in r:
            text = f"ok appliedThrough={_short(r['appliedThrough'])} epochs={r.get('policyEpochs')}"
        else:
            text = "ok " + _short(r, 160)
    else:
        text = _short(response)
    if isinstance(response.get("nested"), list):
        text += f"  nested=[{'; '.join(describe_response(n) for n in response['nested'])}]"
    return text


def format_steps(steps: Sequence[dict], divergence: Optional[str] = None, *, header: str = "") -> str:
    """Numbered readable steps; the last one with both responses and the divergence."""
    lines = [header] if header else []
    for i, step in enumerate(steps, 1):
        lines.append(f"  #{i} {describe_request(step['request'])}")
        model, impl = step.get("model"), step.get("impl")
        last = i == len(steps) and divergence is not None
        if last or compare_responses(model, impl) is not None:
            lines.append(f"       model:          {describe_response(model)}")
            lines.append(f"       implementation: {describe_response(impl)}")
        else:
            lines.append(f"       -> {describe_response(model)}")
    if divergence:
        lines.append(f"  DIVERGENCE at step #{len(steps)}: {divergence}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Traces on disk: JSON lines of requests, and an ITF-style record of each step
# ---------------------------------------------------------------------------


def _itf(value: Any) -> Any:
    if value is None:
        return {"tag": "None", "value": {"#tup": []}}
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= wire.MAX_COUNT else {"#bigint": str(value)}
    if isinstance(value, dict):
        return {str(k): _itf(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_itf(v) for v in value]
    return repr(value)


def write_trace(out_dir: Path, name: str, steps: Sequence[dict], divergence: Optional[str],
                meta: Optional[dict] = None) -> tuple[Path, Path]:
    """Write ``NAME.jsonl`` (the requests) and ``NAME.itf.json`` (request, model, impl per step)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(s["request"], separators=(",", ":")) + "\n" for s in steps))
    doc = {
        "#meta": {"format": "ITF", "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
                  "description": f"lockstep divergence: {divergence}" if divergence else "lockstep trace",
                  "source": "envreplica.conformance.lockstep", **(meta or {})},
        "vars": ["request", "model", "implementation", "agree"],
        "states": [
            {"#meta": {"index": i, "step": describe_request(s["request"])},
             "request": _itf(s["request"]), "model": _itf(s.get("model")),
             "implementation": _itf(s.get("impl")),
             "agree": compare_responses(s.get("model"), s.get("impl")) is None}
            for i, s in enumerate(steps)
        ],
    }
    itf_path = out_dir / f"{name}.itf.json"
    itf_path.write_text(json.dumps(doc, indent=1) + "\n")
    return jsonl, itf_path


def read_requests(path: Path) -> list[dict]:
    """The requests of a JSON-lines trace (blank lines skipped)."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as error:
                raise ValueError(f"{path}:{n}: not a JSON line: {error}") from None
    return out


# ---------------------------------------------------------------------------
# State read back from the implementation
# ---------------------------------------------------------------------------


def _readback(impl: Any):
    """(state, sealer) when ``impl`` exposes its replica's model-state readback, else None."""
    replica = getattr(impl, "replica", None)
    sealer = getattr(impl, "sealer", None)
    if replica is None or sealer is None or not callable(getattr(replica, "to_model_state", None)):
        return None
    return replica, sealer


_STATE_FIELDS = ("authority", "projects", "records", "values", "stage_projects", "stage_records",
                 "stage_values", "receipts", "inflight", "store_on")


def state_difference(model: State, impl: State) -> str:
    """Which tables differ, with the first differing rows (values shown by length only)."""
    parts = []
    for name in _STATE_FIELDS:
        a, b = getattr(model, name), getattr(impl, name)
        if a == b:
            continue
        if hasattr(a, "items") and hasattr(b, "items"):
            keys = sorted(set(a) | set(b), key=repr)
            rows = []
            for k in keys:
                if a.get(k) != b.get(k):
                    rows.append(f"{k}: model {_short(_hide(a.get(k)), 200)} / implementation {_short(_hide(b.get(k)), 200)}")
                if len(rows) == 3:
                    break
            parts.append(f"{name} differs: " + "; ".join(rows))
        else:
            parts.append(f"{name} differs: model {_short(repr(a), 200)} / implementation {_short(repr(b), 200)}")
    return " | ".join(parts) or "states differ"


def _hide(row: Any) -> str:
    if row is None:
        return "absent"
    text = repr(row)
    value = getattr(row, "value", None)
    if isinstance(value, str):
        text = text.replace(repr(value), f"<value of {len(value)} chars>")
    return text


def _check_state(model: Any, impl: Any, variant: Variant, state_check: bool) -> Optional[str]:
    """The state checks after a step: readback equality, then invariants on both sides."""
    known = KNOWN_VIOLATIONS.get(variant, frozenset())
    st_model = getattr(model, "state", None)
    if isinstance(st_model, State):
        for prop in P.INVARIANTS:
            if prop.name not in known and not prop.check(st_model):
                return f"invariant {prop.name} fails on the MODEL's state: {prop.statement}"
    rb = _readback(impl) if state_check else None
    if rb is None:
        return None
    replica, sealer = rb
    try:
        impl_state = replica.to_model_state()
    except Exception as error:  # a corrupt file is a divergence, not a harness crash
        return f"state readback failed: {type(error).__name__}: {error}"
    if isinstance(st_model, State):
        from envreplica.impl.replica import with_macs

        expected = with_macs(st_model, sealer)
        if expected != impl_state:
            return f"state after the step differs from the model's: {state_difference(expected, impl_state)}"
    for prop in P.INVARIANTS:
        if prop.name not in known and not prop.check(impl_state):
            return f"invariant {prop.name} fails on the implementation's state: {prop.statement}"
    return None


# ---------------------------------------------------------------------------
# Replay of saved requests
# ---------------------------------------------------------------------------


def _roundtrip(request: Any) -> Any:
    return json.loads(json.dumps(request))


def replay_steps(requests: Sequence[Any], impl: Driver, model: Driver, *, variant: Optional[Variant] = None,
                 state_check: bool = True, stop: bool = True) -> tuple[list[dict], Optional[dict]]:
    """Send each request to both drivers; (steps so far, first divergence or None)."""
    variant = Variant(variant or getattr(model, "variant", Variant.FIXED))
    steps: list[dict] = []
    first = None
    for index, request in enumerate(requests, 1):
        m = model.handle(_roundtrip(request))
        try:
            i = impl.handle(_roundtrip(request))
        except Exception as error:
            i = {"driver-error": f"{type(error).__name__}: {error}"}
        steps.append({"request": request, "model": m, "impl": i})
        reason = compare_responses(m, i)
        if reason is None:
            reason = _check_state(model, impl, variant, state_check)
        if reason is not None and first is None:
            first = {"index": index, "request": request, "model": m, "impl": i, "reason": reason}
            if stop:
                break
    return steps, first


def replay_requests(requests: Sequence[Any], impl: Driver, model: Driver) -> Optional[dict]:
    """Replay adapter requests on both drivers; the first divergence, or None when they agree.

    The divergence is ``{"index" (1-based), "request", "model", "impl", "reason"}``.
    """
    return replay_steps(requests, impl, model)[1]


# ---------------------------------------------------------------------------
# Hypothesis settings
# ---------------------------------------------------------------------------

#: Examples per lockstep run, per profile (steps per example: ``STEPS_PER_EXAMPLE``).
#: ``ci`` is sized so that one run against the in-process SQLite driver takes
#: about a minute on 2 cores (~370 steps/s) and reaches every reachable coverage
#: item with a margin (the rarest about 15 times; tests/test_lockstep.py).
PROFILE_EXAMPLES = {"dev": 60, "ci": 800, "nightly": 10000}
#: Steps per example. Shorter examples shrink faster; depth comes from the
#: consistent-cloud rule, which opens the gate within a handful of steps.
STEPS_PER_EXAMPLE = 30
#: Profiles whose budget is spent on Hypothesis's target phase. Its hill climbing on
#: the ``target()`` observations takes up to half the examples; measured on ``ci``
#: (800 examples) it left record_version_stale unreached and materialization_pending
#: at 2 hits (18 without), so small budgets skip the phase and keep the observations.
TARGET_PHASE_PROFILES = frozenset({"nightly"})


def lockstep_settings(profile: str = "ci", *, max_examples: Optional[int] = None,
                      step_count: Optional[int] = None) -> hypothesis.settings:
    """Lockstep-sized settings for the ``dev`` / ``ci`` / ``nightly`` profile.

    The parent is the Hypothesis profile of that name when one is registered
    (tests/conftest.py registers all three; Hypothesis has a built-in ``ci``),
    so database and derandomization follow it; the example count and steps
    are sized for the lockstep, whose steps each cost a SQLite round trip.
    """
    try:
        parent = hypothesis.settings.get_profile(profile)
    except hypothesis.errors.InvalidArgument:
        parent = hypothesis.settings.get_profile("default")
    # No example database: it is keyed by the test function, which run_state_machine_as_test
    # shares across every implementation and variant the lockstep is pointed at.
    extra: dict = {"database": None}
    if profile == "ci":
        extra.update(derandomize=True)
    phases = tuple(parent.phases)
    if profile not in TARGET_PHASE_PROFILES:
        phases = tuple(p for p in phases if p is not Phase.target)
    return hypothesis.settings(
        parent,
        max_examples=max_examples if max_examples is not None else PROFILE_EXAMPLES.get(profile, 60),
        stateful_step_count=step_count or STEPS_PER_EXAMPLE,
        deadline=None,
        phases=phases,
        **extra,
    )


#: Seconds Hypothesis may spend shrinking a failure (its own default is 300). Each
#: shrink attempt replays an example on SQLite (tens of ms); Hypothesis deletes most
#: steps in the first seconds and then lowers choices byte by byte, which only makes
#: the frames look simpler. ``_minimize`` then deletes the remaining needless steps
#: from the concrete requests. Measured on the 16 mutants of tests/impl_mutants.py:
#: 20 s gave shrunk traces of 3-8 steps, 8 s the same lengths in half the time.
SHRINK_SECONDS = 8.0


@contextlib.contextmanager
def _shrink_budget(seconds: Optional[float]):
    """Temporarily cap Hypothesis's shrinking time (``engine.MAX_SHRINKING_SECONDS``)."""
    from hypothesis.internal.conjecture import engine

    old = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if seconds is None or old is None:
        yield
        return
    engine.MAX_SHRINKING_SECONDS = seconds
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = old


def _effective_settings(given: Optional[hypothesis.settings]) -> hypothesis.settings:
    base = given if given is not None else lockstep_settings("dev")
    verbosity = base.verbosity if base.verbosity > Verbosity.normal else Verbosity.quiet
    phases = tuple(p for p in base.phases if p is not Phase.explain)
    return hypothesis.settings(
        base, deadline=None, report_multiple_bugs=False, verbosity=verbosity, phases=phases,
        suppress_health_check=list(HealthCheck),
    )


# ---------------------------------------------------------------------------
# One run: the implementation driver, counters, coverage, the last failure
# ---------------------------------------------------------------------------


def _scratch_dir() -> str:
    """A temporary directory, on tmpfs when there is one (SQLite fsyncs are then free)."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="envreplica-lockstep-", dir=base)


def _default_impl_factory(variant: Variant, scratch: list) -> Callable[[], Driver]:
    """The built-in SQLite implementation, each driver on a file in a fresh scratch directory."""
    from envreplica.conformance.drivers import SqliteDriver

    def factory() -> Driver:
        directory = _scratch_dir()
        scratch.append(directory)
        return SqliteDriver(variant, os.path.join(directory, "replica.db"))

    return factory


class _Run:
    """Shared by every example of one ``run_lockstep``."""

    def __init__(self, impl_factory: Optional[Callable[[], Driver]], variant: Variant,
                 out_dir: Optional[Path], state_check: bool, trace_name: Optional[str] = None) -> None:
        self.variant = Variant(variant)
        self._scratch: list[str] = []  # directories the default factory made (removed by close)
        self.impl_factory = impl_factory or _default_impl_factory(self.variant, self._scratch)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.state_check = state_check
        self.trace_name = trace_name or f"lockstep-{self.variant.value}"
        self.coverage = LockstepCoverage()
        self.examples = 0
        self.steps = 0
        self.failure: Optional[dict] = None  # the last failing example's steps and divergence
        self.last_steps: list = []
        self.trace_path: Optional[Path] = None
        self._driver: Optional[Driver] = None
        self.started = time.perf_counter()
        self.first_failure: Optional[tuple[int, float, int]] = None  # (examples, seconds, steps) when first seen

    def driver(self) -> Driver:
        if self._driver is None:
            self._driver = self.impl_factory()
        return self._driver

    def discard(self) -> None:
        """Drop the implementation driver (it died); the next example builds a new one."""
        driver, self._driver = self._driver, None
        with contextlib.suppress(Exception):
            close = getattr(driver, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        """Close the driver; remove the scratch directories of the default factory."""
        import shutil

        self.discard()
        while self._scratch:
            shutil.rmtree(self._scratch.pop(), ignore_errors=True)


class _TracingModel(ModelDriver):
    """The model driver, reporting each gate move (nested requests included)."""

    def __init__(self, variant: Variant, sink: list) -> None:
        self._sink = sink
        super().__init__(variant)

    def handle(self, request: Any) -> dict:
        op = request.get("op") if isinstance(request, dict) else None
        trigger = _TRIGGERS.get(op) if isinstance(op, str) else None
        before = self.state.authority.gate if trigger is not None else None
        response = super().handle(request)
        if trigger is not None and response.get("ok") is True:
            result = response.get("result")
            if trigger is not Trigger.COMPLETE or (isinstance(result, dict) and result.get("ok") is True):
                self._sink.append(GateEdge(trigger, before, self.state.authority.gate))
        return response


# ---------------------------------------------------------------------------
# Drawing: every choice is one small integer, so examples shrink to the first option
# ---------------------------------------------------------------------------

#: Each rule draws ONE block of random bytes and makes every choice of its request
#: from it, a byte at a time (a byte maps to an option; 0 is the first option, where
#: shrinking goes; past the end every choice is 0). So a step is always the same
#: shape in Hypothesis's choice sequence, however many choices the state makes it
#: consume: when shrinking deletes a step, the steps after it still replay aligned
#: (with individually drawn choices most shrink attempts were misaligned).
#: Block sizes per rule kind: about the most choices a request of that kind makes
#: (measured). Every byte costs the shrinker a call, used or not, so no bigger.
BLOCK_BYTES = {"start": 24, "cloud": 32, "begin": 8, "page": 28, "delivery": 32, "commit": 6, "read": 2,
               "store": 10, "invalid": 32}
_BLOCKS = {kind: st.binary(min_size=n, max_size=n) for kind, n in BLOCK_BYTES.items()}


class _Draw:
    """Choices from one drawn block of bytes; option 0 is where shrinking goes."""

    __slots__ = ("block", "used")

    def __init__(self, block: bytes) -> None:
        self.block = block
        self.used = 0

    def _byte(self) -> int:
        i = self.used
        self.used += 1
        return self.block[i] if i < len(self.block) else 0

    def index(self, n: int) -> int:
        b = self._byte()
        return b * n // 256 if n > 1 else 0

    def one(self, seq: Sequence):
        return seq[self.index(len(seq))]

    def weighted(self, options: Sequence[tuple[int, Any]]):
        """One value; options with weight 0 are skipped. The first option is the shrink target."""
        options = [(w, v) for w, v in options if w > 0]
        point = self.index(sum(w for w, _ in options))
        for w, v in options:
            if point < w:
                return v
            point -= w
        return options[-1][1]  # pragma: no cover

    def flag(self, percent: int) -> bool:
        """True with about ``percent``% probability; shrinks to False."""
        return self._byte() >= 256 - percent * 256 // 100


def staging_id(key: str, generation: int, alt: int = 0) -> str:
    """A lowercase canonical UUID naming the staged value of ``key`` at ``generation``."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{digest}-{alt:04x}-4000-8000-{generation:012x}"


def ref_for(key: str, generation: int) -> dict:
    if key in LEGACY_KEYS:
        return {"kind": "legacy", "ssmVersion": max(generation, 1)}
    return {"kind": "staged", "stagingId": staging_id(key, generation)}


def record(key: str, revision: int = 1, generation: int = 1, tombstone: bool = False, ref: Any = "auto",
           binding: Any = None, epoch: Optional[int] = 1, listing: int = 0) -> dict:
    if ref == "auto":
        ref = None if tombstone else ref_for(key, generation)
    return {"key": key, "head": {"revision": revision, "generation": generation, "tombstone": tombstone,
                                 "valueRef": ref},
            "binding": binding, "policyEpoch": epoch, "listingGeneration": listing}


def _moved(r: dict, move: str) -> dict:
    """``r`` after one cloud-side change (each a reachable record advance, when it applies)."""
    key, h = r["key"], r["head"]
    rev, gen = h["revision"], h["generation"]
    out = json.loads(json.dumps(r))
    oh = out["head"]
    if move == "rotate":
        oh.update(generation=gen + 1, valueRef=ref_for(key, gen + 1))
    elif move == "upgrade":
        oh["revision"] = rev + 1
        out["policyEpoch"] = 1 if r["policyEpoch"] is None else r["policyEpoch"] % 3 + 1
    elif move == "withhold":
        oh["revision"] = rev + 1
        out["binding"] = {"kind": "withhold", "reason": REASONS[rev % len(REASONS)]}
    elif move == "omit":
        oh["revision"] = rev + 1
        out["binding"] = {"kind": "omit"}
    elif move == "bind":
        oh["revision"] = rev + 1
        out["binding"] = None
    elif move == "delete":
        oh.update(revision=rev + 1, generation=gen + 1, tombstone=True, valueRef=None)
    elif move == "restore":
        oh.update(revision=rev + 1, generation=gen + 1, tombstone=False, valueRef=ref_for(key, gen + 1))
    elif move == "relist":
        out["listingGeneration"] = r["listingGeneration"] + 1
    elif move == "older":
        oh["revision"] = max(rev - 1, 0)
    elif move == "twin":  # same counters, another binding: a conflict
        out["binding"] = {"kind": "withhold", "reason": "odd"} if r["binding"] is None else None
    return out


def _fetchable(r: Any, epochs: Sequence[int]) -> bool:
    """Whether a record would be fetched from the value store (before looking at what is stored)."""
    try:
        ref = r["head"]["valueRef"]
        return (ref is not None and not r["head"]["tombstone"] and r["binding"] is None
                and r["policyEpoch"] in epochs and not (ref["kind"] == "legacy" and r["key"].startswith("_")))
    except (KeyError, TypeError):
        return False


class _View:
    """What the harness knows: the model's state, read the way a cloud learns it from acks."""

    def __init__(self, state: State, sent: Sequence[tuple]) -> None:
        a = state.authority
        self.state = state
        self.activated = a.gate.activated
        self.gate_open = a.gate.is_open
        self.stream = a.stream_id
        self.applied = a.applied_sequence
        self.attempt = a.attempt_id
        self.org = a.org_id
        self.epochs = a.policy_epochs
        self.live_versions = dict(state.projects.items())
        self.stage = {p: sp for (att, p), sp in state.stage_projects.items() if att == a.attempt_id}
        self.sent = sent  # (projectId, key, record JSON) recently sent in frames

    def live(self, project: str) -> dict[str, dict]:
        return {k: wire.encode(row.state) for (p, k), row in self.state.records.items() if p == project}

    def staged(self, project: str) -> dict[str, dict]:
        return {k: wire.encode(row.state) for (att, p, k), row in self.state.stage_records.items()
                if att == self.attempt and p == project}

    def current(self, project: str, key: str, staged: bool) -> Optional[dict]:
        if staged and self.attempt is not None:
            row = self.state.stage_records.get((self.attempt, project, key))
        else:
            row = self.state.records.get((project, key))
        return None if row is None else wire.encode(row.state)

    def consumed(self) -> list[int]:
        """The sequences of the current stream whose receipts the replica keeps."""
        return sorted(n for (s, n) in self.state.receipts if s == self.stream)

    def superseded(self) -> list[int]:
        """Consumed sequences whose record is no longer what the replica holds for its key.

        Their retransmissions are the ones a dedupe bug would corrupt: a snapshot
        or a later delivery moved (or dropped) the record since they applied.
        """
        out = []
        for n in self.consumed():
            frame = self.state.receipts[(self.stream, n)].request
            held = self.current(frame.project_id, frame.state.key, staged=self.attempt is not None)
            if held != wire.encode(frame.state):
                out.append(n)
        return out

    def in_play(self) -> list[tuple[str, str, dict]]:
        """(projectId, key, record) of every record live, staged or recently sent."""
        out = [(p, k, wire.encode(row.state)) for (p, k), row in self.state.records.items()]
        out += [(p, k, wire.encode(row.state)) for (_a, p, k), row in self.state.stage_records.items()]
        out += list(self.sent)
        return out


class _Gen:
    """Request builders. Each takes a ``_Draw`` and a ``_View``; none changes anything."""

    # -- records ------------------------------------------------------------

    @staticmethod
    def random_record(d: _Draw, key: str) -> dict:
        rev, gen = d.index(4), d.index(4)
        tomb = d.flag(20)
        if tomb:
            ref = None
        else:
            ref = d.weighted([(6, ref_for(key, gen)),
                              (2, {"kind": "staged", "stagingId": staging_id(key, gen, 1)}),
                              (2, {"kind": "legacy", "ssmVersion": max(gen, 1)})])
        binding = d.weighted([(6, None), (2, {"kind": "omit"}), (2, {"kind": "withhold", "reason": d.one(REASONS)})])
        epoch = d.weighted([(5, 1), (2, 2), (1, 3), (2, None)])
        return record(key, rev, gen, tomb, ref, binding, epoch, d.index(3))

    @classmethod
    def record(cls, d: _Draw, key: str, current: Optional[dict], kept: Sequence[int] = (1, 2)) -> dict:
        """Mostly the next record a consistent cloud would send; sometimes an odd one."""
        if current is None:
            choice = d.weighted([(6, "create"), (1, "fence"), (2, "random"), (1, "create2")])
            if choice == "create":
                return record(key, epoch=kept[0] if kept else 1)
            if choice == "create2":
                return record(key, epoch=2)
            if choice == "fence":
                return record(key, 1, 0, True)
            return cls.random_record(d, key)
        tomb = current["head"]["tombstone"]
        if tomb:
            moves = ["restore", "relist"]
        else:
            moves = ["rotate", "upgrade", "delete", "withhold", "relist", "omit"]
            if current["binding"] is not None:
                moves.insert(0, "bind")
        choice = d.weighted([(11, "advance"), (3, "same"), (2, "random"), (2, "older"), (2, "twin"), (1, "twice")])
        if choice == "advance":
            return _moved(current, d.one(moves))
        if choice == "same":
            return current
        if choice == "twice":
            return _moved(_moved(current, d.one(moves)), "relist")
        if choice in ("older", "twin"):
            return _moved(current, choice)
        return cls.random_record(d, key)

    @staticmethod
    def key(d: _Draw, existing: Iterable[str]) -> str:
        existing = sorted(set(existing))
        if existing and d.index(10) < 6:
            return d.one(existing)
        return d.one(KEYS)

    # -- begin --------------------------------------------------------------

    @staticmethod
    def begin(d: _Draw, v: _View) -> dict:
        fresh = [a for a in ATTEMPTS if a != v.attempt]
        attempt = d.weighted([(8, d.one(fresh)), (2, d.one(ATTEMPTS))])
        stream = v.stream or STREAMS[0]
        other = [s for s in STREAMS if s != stream] or [stream]
        stream = d.weighted([(8, stream), (2, d.one(other))])
        projects = d.weighted([(4, ["p1", "p2"]), (4, ["p1"]), (2, ["p2"]), (1, []), (1, ["p2", "p1"])])
        epochs = list(d.weighted([(3, v.epochs if v.activated else (1, 2))] + [(2, e) for e in EPOCH_SETS]))
        org = d.weighted([(10, v.org or ORG), (1, OTHER_ORG)])
        return {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": attempt},
                                         "projectIds": projects},
                "keptPolicyEpochs": epochs, "orgId": org}

    @staticmethod
    def begin_again(v: _View, epochs: Optional[Sequence[int]] = None) -> dict:
        """The open attempt begun again with the same id (a reconnect that reuses it), maybe under other epochs."""
        return {"op": "begin", "frame": {"attempt": {"streamId": v.stream or STREAMS[0],
                                                     "attemptId": v.attempt or ATTEMPTS[0]},
                                         "projectIds": sorted(v.stage) or ["p1"]},
                "keptPolicyEpochs": list(v.epochs if epochs is None else epochs), "orgId": v.org or ORG}

    # -- page ---------------------------------------------------------------

    @classmethod
    def page(cls, d: _Draw, v: _View) -> dict:
        attempt = v.attempt if v.attempt is not None and not d.flag(8) else d.one(ATTEMPTS)
        mine = attempt == v.attempt
        staged = sorted(v.stage) if mine else []
        open_ = [p for p in staged if not v.stage[p].complete]
        project = d.weighted([(12, d.one(open_ or staged or list(PROJECTS))), (1, d.one(PROJECTS + (STRANGER,)))])
        live_v = v.live_versions.get(project, 0)
        sp = v.stage.get(project) if mine else None
        continuing = (sp is not None and sp.record_version is not None and not sp.complete
                      and sp.last_key is not None)
        if continuing and not d.flag(12):
            version, after = sp.record_version, sp.last_key
        else:
            after = None if not d.flag(10) else d.one(KEYS[:-1])
            options = [(9, live_v + 1), (5, live_v), (1, live_v + 2)]
            if sp is not None and sp.record_version is not None:
                options.append((2, sp.record_version))
            if live_v > 0:
                options.append((4, live_v - 1))
            version = d.weighted(options)
        if version == live_v and not d.flag(20):
            # The live version again: a consistent cloud resends the live records as they are.
            live = v.live(project)
            candidates = [live[k] for k in sorted(live) if after is None or k > after]
        else:
            candidates = []
            keys = [k for k in KEYS if after is None or k > after]
            known = set(v.live(project)) | (set(v.staged(project)) if mine else set())
            for k in keys:
                if d.index(100) < (70 if k in known else 35):
                    current = v.current(project, k, staged=mine) or v.current(project, k, staged=False)
                    candidates.append(cls.record(d, k, current, v.epochs))
        n = len(candidates)
        take = d.weighted([(6, min(n, 2)), (2, min(n, 1)), (1, 0), (1, n)])
        records = candidates[:take]
        complete = take == n if not d.flag(10) else not (take == n)
        frame = {"opId": f"page-{project}", "attemptId": attempt, "projectId": project, "after": after,
                 "recordVersion": version, "records": records, "complete": complete}
        return {"op": "page", "frame": frame}

    # -- delivery -----------------------------------------------------------

    @classmethod
    def delivery(cls, d: _Draw, v: _View) -> dict:
        stream = v.stream or STREAMS[0]
        if d.flag(6):
            stream = d.one([s for s in STREAMS if s != stream] or [stream])
        receipts = v.state.receipts if stream == v.stream else {}
        consumed = sorted(n for (s, n) in receipts if s == stream)
        superseded = v.superseded() if stream == v.stream else []
        mode = d.weighted([(30, "next"), (4 if consumed else 0, "replay"), (3 if consumed else 0, "conflict"),
                           (4, "gap")])
        if mode in ("replay", "conflict"):
            sequence = d.weighted([(4, consumed[-1]), (2, d.one(consumed)),
                                   (3 if superseded else 0, d.one(superseded or consumed))])
            frame = dict(wire.encode(receipts[(stream, sequence)].request))
            frame["opId"] = f"d-{sequence}"
            if v.attempt is not None and d.flag(50):
                frame["reconciliationAttemptId"] = v.attempt
            if mode == "conflict":
                how = d.index(3)
                if how == 0:
                    frame["state"] = _moved(frame["state"], "relist")
                elif how == 1:
                    frame["recordVersion"] += 1
                else:
                    frame["projectId"] = d.one([p for p in PROJECTS + (STRANGER,) if p != frame["projectId"]])
            return {"op": "delivery", "frame": frame}
        sequence = v.applied + (1 if mode == "next" else d.weighted([(3, 2), (1, 3)]))
        staging = v.attempt is not None
        if staging:
            complete = [p for p, sp in v.stage.items() if sp.complete]
            choices = sorted(complete or v.stage) or list(PROJECTS)
            project = d.weighted([(12, d.one(choices)), (1, d.one(PROJECTS + (STRANGER,)))])
            sp = v.stage.get(project)
            base = sp.record_version if sp is not None and sp.record_version is not None else 0
            existing = v.staged(project)
        else:
            live = sorted(v.live_versions) or list(PROJECTS)
            project = d.weighted([(12, d.one(live)), (2, d.one(PROJECTS + (STRANGER,)))])
            base = v.live_versions.get(project, 0)
            existing = v.live(project)
        record_version = max(1, d.weighted([(16, base + 1), (2, base), (2, base + 2)]))
        key = cls.key(d, existing)
        state = cls.record(d, key, existing.get(key), v.epochs)
        frame = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": record_version, "state": state,
                 "delivery": {"streamId": stream, "sequence": sequence}}
        if staging:
            recon = d.weighted([(16, v.attempt), (1, None), (1, d.one(ATTEMPTS))])
        else:
            recon = d.weighted([(16, None), (1, d.one(ATTEMPTS))])
        if recon is not None:
            frame["reconciliationAttemptId"] = recon
        return {"op": "delivery", "frame": frame}

    # -- commit -------------------------------------------------------------

    @staticmethod
    def commit(d: _Draw, v: _View, anticipate: Optional[dict] = None) -> dict:
        attempt = v.attempt or ATTEMPTS[0]
        if d.flag(8):
            attempt = d.one(ATTEMPTS)
        stream = v.stream or STREAMS[0]
        hw = d.weighted([(24, (stream, v.applied)), (1, (stream, v.applied + 1)),
                         (1 if v.applied else 0, (stream, v.applied - 1)),
                         (1, (d.one([s for s in STREAMS if s != stream] or [stream]), v.applied))])
        versions = {p: (sp.record_version if sp.record_version is not None else 0) for p, sp in v.stage.items()}
        versions.update(anticipate or {})
        how = d.weighted([(24, "true"), (1, "bump"), (1, "drop"), (1, "extra")])
        if how == "bump" and versions:
            p = d.one(sorted(versions))
            versions[p] += 1
        elif how == "drop" and versions:
            versions.pop(d.one(sorted(versions)))
        elif how == "extra":
            versions[d.one(PROJECTS + (STRANGER,))] = 0
        return {"op": "commit", "frame": {
            "attemptId": attempt, "highWater": {"streamId": hw[0], "sequence": hw[1]},
            "versions": [{"projectId": p, "recordVersion": n} for p, n in sorted(versions.items())]}}

    # -- value store --------------------------------------------------------

    @staticmethod
    def store(d: _Draw, v: _View) -> dict:
        if d.flag(4):
            return {"op": "store.off"}
        play = v.in_play()
        which = d.weighted([(5 if play else 0, "current"), (3 if play else 0, "next"), (2, "random")])
        if which == "random":
            project, key = d.one(PROJECTS), d.one(KEYS)
            gen = 1 + d.index(3)
            ref = d.weighted([(3, ref_for(key, gen)), (1, {"kind": "staged", "stagingId": staging_id(key, gen, 1)})])
        else:
            project, key, rec = d.one(play)
            h = rec["head"]
            if which == "next" or h["valueRef"] is None:
                ref = ref_for(key, h["generation"] + 1)
            else:
                ref = h["valueRef"]
        org = v.org or ORG
        value = d.one(VALUES)
        what = d.weighted([(30, "put"), (3, "wrong"), (2, "garbage"), (2, "version"), (3, "missing"), (3, "error")])
        if what in ("missing", "error"):
            return {"op": "store.fail", "projectId": project, "key": key, "ref": ref, "mode": what}
        out = {"op": "store.put", "projectId": project, "key": key, "ref": ref}
        if ref["kind"] == "staged":
            sid = ref["stagingId"]
            if what == "wrong":
                raw = staged_envelope(OTHER_ORG, project, key, sid, value) if d.flag(50) else \
                    staged_envelope(org, project, key + "Z", sid, value)
            else:
                raw = staged_envelope(org, project, key, sid, value)
        else:
            raw = legacy_envelope(project, key + "Z" if what == "wrong" else key, value)
            if what == "version":
                out["reportedVersion"] = ref["ssmVersion"] + 1
        if what == "garbage":
            raw = d.one(["{not json", json.dumps({"v": 3, "kind": "project-env"}), "[]"])
        out["raw"] = raw
        return out

    # -- reads, close, restart ---------------------------------------------------

    @staticmethod
    def read(d: _Draw, v: _View) -> dict:
        what = d.weighted([(4, "snapshot"), (3, "status"), (2, "receipts")])
        if what != "snapshot":
            return {"op": what}
        projects = sorted(v.live_versions)
        projects = d.weighted([(8, projects), (1, projects[:1]), (1, projects + [STRANGER]),
                               (1, list(reversed(projects)))])
        return {"op": "snapshot", "projectIds": projects}

    # -- invalid requests -----------------------------------------------------

    @classmethod
    def invalid(cls, d: _Draw, v: _View) -> dict:
        kind = d.index(16)
        if kind == 0:
            return {"op": "explode"}
        if kind == 1:
            return {"op": "snapshot"}
        if kind == 2:
            return {"op": "status", "verbose": True}
        if kind == 3:
            req = cls.begin(d, v)
            req["frame"]["attempt"]["attemptId"] = "-bad"
            return req
        if kind == 4:
            req = cls.begin(d, v)
            req["frame"]["projectIds"] = ["p1", "p1"]
            return req
        if kind == 5:
            req = cls.page(d, v)
            req["frame"]["records"] = [record("B"), record("A")]
            req["frame"]["after"] = None
            return req
        if kind == 6:
            req = cls.page(d, v)
            req["frame"]["recordVersion"] = True
            return req
        if kind == 7:
            req = cls.delivery(d, v)
            req["frame"]["state"]["head"]["tombstone"] = not req["frame"]["state"]["head"]["tombstone"]
            return req
        if kind == 8:
            req = cls.delivery(d, v)
            req["frame"]["delivery"]["sequence"] = 0
            return req
        if kind == 9:
            req = cls.delivery(d, v)
            req["frame"]["reconciliationAttemptId"] = None
            return req
        if kind == 10:
            req = cls.commit(d, v)
            req["duringFetch"] = []
            return req
        if kind == 11:
            req = cls.commit(d, v)
            req["frame"]["versions"] = list(reversed(req["frame"]["versions"])) + [
                {"projectId": "p0", "recordVersion": 0}]
            return req
        if kind == 12:
            return {"op": "store.fail", "projectId": "p1", "key": "A", "ref": ref_for("A", 1), "mode": "sometimes"}
        if kind == 13:
            return {"op": "store.put", "projectId": "p1", "key": "A", "ref": ref_for("A", 1), "raw": "x",
                    "reportedVersion": 2}
        if kind == 14:
            return {"op": "reset", "config": {"ackPageBytes": -1}}
        return {"op": "status", "id": "seven"}

    # -- the consistent cloud -------------------------------------------------------

    @staticmethod
    def advance(d: _Draw, key: str, current: Optional[dict], kept: Sequence[int] = (1, 2)) -> dict:
        """A record one reachable head move ahead of ``current`` (a first save when there is none).

        Weighted toward moves that leave a value to fetch (a rotation, a
        relisting, a restore, a rebinding), so reads and their races happen.
        """
        if current is None:
            epoch = d.weighted([(8, kept[0] if kept else 1), (1, 2), (1, None)])
            return d.weighted([(8, record(key, epoch=epoch)), (1, record(key, 1, 0, True))])
        if current["head"]["tombstone"]:
            move = d.weighted([(4, "restore"), (1, "relist")])
        elif current["binding"] is not None:
            move = d.weighted([(4, "bind"), (1, "rotate"), (1, "relist")])
        elif kept and current["policyEpoch"] not in kept:  # approved again under a kept epoch
            move = d.weighted([(4, "upgrade"), (1, "rotate"), (1, "relist"), (1, "delete")])
        else:
            move = d.weighted([(4, "rotate"), (2, "relist"), (2, "upgrade"), (1, "delete"), (1, "withhold"),
                               (1, "omit")])
        moved = _moved(current, move)
        if move == "upgrade":
            later = [e for e in kept if current["policyEpoch"] is not None and e > current["policyEpoch"]]
            if later and not d.flag(20):
                moved["policyEpoch"] = later[0]
        return moved

    @classmethod
    def fresh_begin(cls, d: _Draw, v: _View) -> dict:
        fresh = [a for a in ATTEMPTS if a != v.attempt]
        stream = v.stream or STREAMS[0]
        if v.activated and d.flag(10):
            stream = d.one([s for s in STREAMS if s != stream])
        projects = d.weighted([(5, ["p1", "p2"]), (4, ["p1"]), (1, ["p2"]), (1, [])])
        current = tuple(v.epochs) if v.activated else (1, 2)
        # Mostly the same policy; sometimes it narrows (the oldest kept epoch retired), or anything.
        epochs = list(d.weighted([(8, current), (2, current[1:])] + [(1, e) for e in EPOCH_SETS]))
        return {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": d.one(fresh)},
                                         "projectIds": projects},
                "keptPolicyEpochs": epochs, "orgId": d.weighted([(30, v.org or ORG), (1, OTHER_ORG)])}

    @classmethod
    def next_page(cls, d: _Draw, v: _View, project: str) -> dict:
        """The next canonical page of ``project`` for the open attempt."""
        sp = v.stage[project]
        live_v = v.live_versions.get(project, 0)
        if sp.record_version is not None and not sp.complete and sp.last_key is not None:
            version, after = sp.record_version, sp.last_key
        else:
            # Sometimes the cloud's snapshot lags behind a delivery the replica already applied.
            version = d.weighted([(7, live_v + 1), (3, live_v), (1 if live_v > 0 else 0, live_v - 1)])
            after = None
        live = v.live(project)
        if version == live_v:
            candidates = [live[k] for k in sorted(live) if after is None or k > after]
        else:
            candidates = []
            for k in KEYS:
                if after is not None and k <= after:
                    continue
                current = v.current(project, k, staged=True) or live.get(k)
                if d.index(100) < (85 if current is not None else 35):
                    how = d.weighted([(14, "advance"), (6 if current else 0, "same"), (2 if current else 0, "older")])
                    if how == "same":
                        candidates.append(current)
                    elif how == "older":  # a lagging snapshot: an older state of the record
                        candidates.append(_moved(current, "older"))
                    else:
                        candidates.append(cls.advance(d, k, current, v.epochs))
        n = len(candidates)
        take = d.weighted([(6, min(n, 2)), (3, min(n, 1)), (1, n)])
        frame = {"opId": f"page-{project}", "attemptId": v.attempt, "projectId": project, "after": after,
                 "recordVersion": version, "records": candidates[:take], "complete": take == n}
        return {"op": "page", "frame": frame}

    @classmethod
    def next_delivery(cls, d: _Draw, v: _View) -> dict:
        """The next delivery of the stream: one record advanced, at the next record version."""
        staging = v.attempt is not None
        if staging:
            project = d.one(sorted(p for p, sp in v.stage.items() if sp.complete))
            base = v.stage[project].record_version or 0
            existing = v.staged(project)
        else:
            # Sometimes the stream carries a project this replica does not hold.
            project = d.weighted([(15, d.one(sorted(v.live_versions))), (1, d.one(PROJECTS + (STRANGER,)))])
            base = v.live_versions.get(project, 0)
            existing = v.live(project)
        key = cls.key(d, existing)
        sequence = v.applied + d.weighted([(15, 1), (1, 2)])  # sometimes one overtakes another
        frame = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": base + 1, "state": cls.advance(d, key, existing.get(key), v.epochs),
                 "delivery": {"streamId": v.stream, "sequence": sequence}}
        if staging:
            frame["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": frame}

    @classmethod
    def cloud(cls, d: _Draw, v: _View) -> dict:
        """What a consistent cloud sends next: begin, the next page, the commit, the next delivery."""
        if v.activated and d.flag(12):
            # A task loader reads what is served (None unless open with no attempt).
            return {"op": "snapshot", "projectIds": sorted(v.live_versions)}
        if not v.activated:
            return cls.fresh_begin(d, v)
        if v.applied and d.flag(6):
            # At-least-once delivery: the last delivery (or an earlier one) arrives again,
            # often one whose record a snapshot or a later delivery has moved since.
            consumed, superseded = v.consumed() or [v.applied], v.superseded()
            sequence = d.weighted([(4, v.applied), (2, d.one(consumed)),
                                   (3 if superseded else 0, d.one(superseded or consumed))])
            receipt = v.state.receipts.get((v.stream, sequence))
            if receipt is not None:
                frame = dict(wire.encode(receipt.request), opId=f"d-{sequence}")
                if v.attempt is not None:
                    frame["reconciliationAttemptId"] = v.attempt
                return {"op": "delivery", "frame": frame}
        if v.attempt is None:
            if not v.gate_open or not v.live_versions or d.flag(12):
                return cls.fresh_begin(d, v)
            return cls.next_delivery(d, v)
        incomplete = sorted(p for p, sp in v.stage.items() if not sp.complete)
        complete = len(incomplete) < len(v.stage)
        if incomplete and not (complete and d.flag(15)):
            return cls.next_page(d, v, d.one(incomplete))
        if complete and d.flag(35):
            return cls.next_delivery(d, v)
        return cls.commit(d, v)

    @classmethod
    def advance_delivery(cls, d: _Draw, v: _View, frame: dict) -> dict:
        """The delivery after ``frame``'s (a page's or delivery's): its record (or first record) advanced."""
        project = frame.get("projectId")
        record = frame.get("state") if "state" in frame else (frame.get("records") or [None])[0]
        if not isinstance(record, dict) or project is None:
            return cls.delivery(d, v)
        staged = v.attempt is not None
        base = (v.stage[project].record_version or 0) if staged and project in v.stage \
            else v.live_versions.get(project, 0)
        if frame.get("recordVersion", 0) > base:  # the outer delivery's own version, applied before its read
            base = frame["recordVersion"]
        if record["head"]["tombstone"] or record["binding"] is not None:
            state = cls.advance(d, record["key"], record, v.epochs)
        else:  # mostly a new value: the read in flight is for a reference no longer current
            state = _moved(record, d.weighted([(4, "rotate"), (1, "upgrade"), (1, "relist")]))
        sequence = v.applied + 1
        inner = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": base + 1, "state": state,
                 "delivery": {"streamId": v.stream or STREAMS[0], "sequence": sequence}}
        if staged:
            inner["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": inner}

    @classmethod
    def reconcile(cls, d: _Draw, v: _View, frame: dict) -> list[dict]:
        """A whole reconciliation of the delivery's project (begin, its page, the commit) under fewer epochs.

        Run inside a live delivery's read: the delivery's first transaction
        already made its record live (pending), so the page resends the live
        records with it; the commit then makes it withheld under the new
        epochs, and the read in flight must not install onto it (finding F1).
        """
        project, version = frame["projectId"], frame["recordVersion"]
        records = v.live(project)
        records[frame["state"]["key"]] = frame["state"]
        attempt = d.one([a for a in ATTEMPTS if a != v.attempt])
        epochs = list(d.weighted([(1, v.epochs[1:]), (1, (2,)), (1, v.epochs)]))
        stream = v.stream or STREAMS[0]
        return [
            {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": attempt}, "projectIds": [project]},
             "keptPolicyEpochs": epochs, "orgId": v.org or ORG},
            {"op": "page", "frame": {"opId": f"page-{project}", "attemptId": attempt, "projectId": project,
                                     "after": None, "recordVersion": version,
                                     "records": [records[k] for k in sorted(records)], "complete": True}},
            {"op": "commit", "frame": {"attemptId": attempt, "highWater": {"streamId": stream, "sequence": v.applied},
                                       "versions": [{"projectId": project, "recordVersion": version}]}},
        ]

    # -- duringFetch ----------------------------------------------------------

    @classmethod
    def nested(cls, d: _Draw, v: _View, outer: dict, anticipate: dict) -> list[dict]:
        """Requests to run inside ``outer``'s value-store read.

        Weighted toward the races that matter: a commit that would now
        succeed (it promotes a record still pending), the open attempt begun
        again (it wipes the staged row the operation will answer with), the
        same delivery run to its end first.
        """
        frame = outer["frame"]
        others_complete = all(sp.complete for p, sp in v.stage.items() if p != frame.get("projectId"))
        commit_now = outer["op"] == "page" and frame.get("complete") is True and others_complete
        staged_delivery = outer["op"] == "delivery" and v.attempt is not None
        live_delivery = outer["op"] == "delivery" and v.attempt is None and v.gate_open
        pattern = d.weighted([(6, None), (2 if outer["op"] == "page" and v.attempt else 0, "narrow"),
                              (2 if live_delivery else 0, "reconcile"),
                              (4 if outer["op"] == "delivery" else 0, "advance")])
        if pattern == "narrow":
            # The attempt begun again under fewer kept epochs, then the same page: the read in
            # flight must not install onto the record now withheld (finding F1, adversarial).
            epochs = d.weighted([(1, v.epochs[1:]), (1, (2,)), (1, ())])
            return [cls.begin_again(v, epochs),
                    json.loads(json.dumps({k: x for k, x in outer.items() if k != "duringFetch"}))]
        if pattern == "reconcile":
            return cls.reconcile(d, v, frame)
        if pattern == "advance":
            # The next delivery moves the very record being read for: the read's answer is stale.
            return [cls.advance_delivery(d, v, frame)]
        out = []
        for _ in range(d.weighted([(3, 1), (1, 2)])):
            kind = d.weighted([(20 if staged_delivery else 4, "begin_again"), (3, "begin"),
                               (12 if commit_now else 4, "commit"), (2, "close"), (3, "restart"),
                               (3, "delivery"), (3, "advance"), (1, "store"), (1, "status"), (2, "snapshot"),
                               (1, "page"), (2 if out else 0, "same")])
            if kind == "begin_again":
                # The same attempt again, sometimes keeping fewer epochs (the race of finding F1).
                epochs = d.weighted([(3, None), (1, v.epochs[1:]), (1, (2,))])
                out.append(cls.begin_again(v, epochs))
            elif kind == "same":
                out.append(json.loads(json.dumps({k: x for k, x in outer.items() if k != "duringFetch"})))
            elif kind == "advance":
                out.append(cls.advance_delivery(d, v, frame))
            elif kind == "begin":
                out.append(cls.begin(d, v))
            elif kind == "commit":
                out.append(cls.commit(d, v, anticipate))
                if d.flag(50):  # a task loader reads while the operation is still in its read
                    out.append({"op": "snapshot", "projectIds": sorted(set(v.stage) | set(anticipate))})
            elif kind == "snapshot":
                out.append({"op": "snapshot", "projectIds": sorted(v.live_versions)})
            elif kind in ("close", "restart", "status"):
                out.append({"op": kind})
            elif kind == "delivery":
                if outer["op"] == "delivery" and d.flag(50):
                    out.append(json.loads(json.dumps(outer)))  # the same delivery, run to its end inside
                else:
                    out.append(cls.delivery(d, v))
            elif kind == "store":
                out.append(cls.store(d, v))
            else:
                out.append(cls.page(d, v))
        return out


# ---------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------


#: Ops that never change the replica (reads); an invalid request changes nothing either.
READ_OPS = frozenset({"status", "snapshot", "receipts"})


def op_reads_only(request: Any) -> bool:
    """The request cannot change state when the implementation is right (a read, or not a known op)."""
    op = request.get("op") if isinstance(request, dict) else None
    return op in READ_OPS or op not in OPS


class LockstepDivergence(AssertionError):
    """The implementation parted from the model (or a state check failed)."""


class LockstepMachine(RuleBasedStateMachine):
    """One example: a reset, then rules that each send one request to model and implementation.

    Bind it to an implementation and variant with ``bind``; the bare class
    runs the built-in SQLite implementation under ``fixed``
    (``TestLockstep = LockstepMachine.TestCase`` works as is).
    """

    run: ClassVar[Optional[_Run]] = None

    @classmethod
    def bind(cls, run: _Run) -> type:
        return type(f"{cls.__name__}_{run.variant.value.replace('-', '_')}", (cls,), {"run": run})

    def __init__(self) -> None:
        super().__init__()
        run = type(self).run
        if run is None:
            run = type(self).run = _Run(None, Variant.FIXED, None, True)
        self.ctx = run
        self.edges: list[GateEdge] = []
        self.model = _TracingModel(run.variant, self.edges)
        self.impl = run.driver()
        self.steps: list[dict] = []
        self.enabled: frozenset = frozenset(KINDS)
        self.interleave = True
        self.failure: Optional[str] = None
        self.impl_dead = False
        self.next_id = 1
        self.next_nested = NESTED_ID_BASE
        self.sent: list[tuple] = []
        self.max_staged = 0
        self.max_applied = 0
        self.seen_edges: set = set()
        self.plan: list[dict] = []  # the cloud's next requests (values first, then the frame)
        self._checked_state: Optional[State] = None  # the model state last compared with the implementation's
        self._unchecked = False  # a step since then was not checked (the model did not move)

    # -- plumbing -------------------------------------------------------------

    def view(self) -> _View:
        return _View(self.model.state, self.sent[-12:])

    def _number(self, request: dict) -> dict:
        request = dict(request)
        if "id" not in request:
            request["id"] = self.next_id
        self.next_id += 1
        if isinstance(request.get("duringFetch"), list):
            inner = []
            for n in request["duringFetch"]:
                n = dict(n, id=self.next_nested)
                self.next_nested += 1
                inner.append(n)
            request["duringFetch"] = inner
        return request

    def _remember(self, request: dict) -> None:
        """Records sent in frames: the store rule puts values for them."""
        frame = request.get("frame")
        if request.get("op") == "page" and isinstance(frame, dict):
            for r in frame.get("records", ()):
                self.sent.append((frame.get("projectId"), r.get("key"), r))
        elif request.get("op") == "delivery" and isinstance(frame, dict):
            self.sent.append((frame.get("projectId"), frame["state"].get("key"), frame["state"]))
        for n in request.get("duringFetch") or ():
            self._remember(n)

    def _fail(self, reason: str) -> None:
        self.failure = reason
        raise LockstepDivergence(reason)

    def send(self, request: dict) -> dict:
        """One step on both sides; asserts they agree and the state checks pass."""
        request = self._number(request)
        self._remember(request)
        wire_request = _roundtrip(request)
        model_response = self.model.handle(_roundtrip(wire_request))
        try:
            impl_response = self.impl.handle(_roundtrip(wire_request))
        except Exception as error:
            self.impl_dead = bool(getattr(error, "dead", True))
            impl_response = {"driver-error": f"{type(error).__name__}: {error}"}
        self.steps.append({"request": request, "model": model_response, "impl": impl_response})
        self.ctx.steps += 1
        cov = self.ctx.coverage
        cov.observe(request, model_response)
        COVERAGE.observe(request, model_response)
        for edge in self.edges:
            cov.observe_edge(edge)
            COVERAGE.observe_edge(edge)
        self.seen_edges.update(self.edges)
        self.edges.clear()
        reason = compare_responses(model_response, impl_response)
        if reason is not None:
            self._fail(reason)
        st_ = self.model.state
        if st_ is self._checked_state and op_reads_only(request):
            # The model did not move (a read, an invalid request): the implementation must not
            # have either; that is checked with the next step that moves, or at teardown.
            self._unchecked = True
        else:
            reason = _check_state(self.model, self.impl, self.ctx.variant, self.ctx.state_check)
            if reason is not None:
                self._fail(reason)
            self._checked_state, self._unchecked = st_, False
        self.max_staged = max(self.max_staged, len(st_.stage_records))
        self.max_applied = max(self.max_applied, st_.authority.applied_sequence)
        return model_response

    # -- rules ------------------------------------------------------------------

    @initialize(data=_BLOCKS["start"])
    def start(self, data) -> None:
        """Swarm: choose this example's rule kinds; then reset both sides."""
        d = _Draw(data)
        enabled = frozenset(k for k in KINDS if d.index(5) != 4)
        self.enabled = enabled or frozenset({"read"})
        self.interleave = d.index(6) != 5
        config = d.weighted([(16, None), (2, {"ackPageBytes": SMALL_ACK}), (1, {"prefix": "/other"}),
                             (1, {"masterKeyHex": OTHER_KEY_HEX})])
        self.send({"op": "reset"} if config is None else {"op": "reset", "config": config})
        if d.flag(60):
            self.send(_Gen.fresh_begin(d, self.view()))

    def _with_nested(self, d: _Draw, v: _View, request: dict) -> dict:
        """Maybe give a page or delivery ``duringFetch`` requests; likelier when it will read a value."""
        frame = request["frame"]
        records = frame.get("records") if request["op"] == "page" else [frame.get("state")]
        reads = v.state.store_on and any(_fetchable(r, v.epochs) for r in records or ())
        if not self.interleave or not d.flag(60 if reads else 10):
            return request
        anticipate: dict = {}
        if request["op"] == "page" and frame.get("complete") is True:
            anticipate[frame["projectId"]] = frame["recordVersion"]
        elif request["op"] == "delivery" and v.attempt is not None:
            anticipate[frame["projectId"]] = frame["recordVersion"]
        request["duringFetch"] = _Gen.nested(d, v, request, anticipate)
        return request

    def _missing_values(self, d: _Draw, v: _View, request: dict) -> list[dict]:
        """Store answers for each fetchable record of a frame the store has no answer for.

        Mostly a correct envelope (so values get installed); sometimes each
        other kind of answer: another organisation or key, text that is not
        an envelope, a legacy version other than asked, nothing, an error.
        """
        from envreplica.model.store import legacy_parameter_name, staged_parameter_name

        frame = request["frame"]
        project = frame["projectId"]
        records = frame["records"] if request["op"] == "page" else [frame["state"]]
        prefix = self.model.cfg.prefix
        org = v.org or ORG
        puts = []
        for r in records:
            ref = r["head"]["valueRef"]
            if ref is None or r["binding"] is not None or r["policyEpoch"] not in v.epochs:
                continue
            key = r["key"]
            staged = ref["kind"] == "staged"
            if staged:
                name, version = staged_parameter_name(prefix, project, key, ref["stagingId"]), None
            else:
                name, version = legacy_parameter_name(prefix, project, key), ref["ssmVersion"]
            if name is None or (name, version) in self.model.store:
                continue
            answer = d.weighted([(24, "correct"), (3, "wrong"), (2, "garbage"), (0 if staged else 8, "version"),
                                 (2, "missing"), (2, "error"), (2, "none")])
            if answer == "none":
                continue
            if answer in ("missing", "error"):
                puts.append({"op": "store.fail", "projectId": project, "key": key, "ref": ref, "mode": answer})
                continue
            value = d.one(VALUES)
            if staged:
                raw = staged_envelope(OTHER_ORG if answer == "wrong" else org, project, key, ref["stagingId"], value)
            else:
                raw = legacy_envelope(project, key + "Z" if answer == "wrong" else key, value)
            if answer == "garbage":
                raw = d.one(["{not json", json.dumps({"v": 3, "kind": "project-env"})])
            put = {"op": "store.put", "projectId": project, "key": key, "ref": ref, "raw": raw}
            if answer == "version":
                put["reportedVersion"] = ref["ssmVersion"] + 1
            puts.append(put)
        return puts

    def do_cloud(self, data) -> None:
        d = _Draw(data)
        if self.plan and not d.flag(10):
            self.send(self.plan.pop(0))
            return
        v = self.view()
        request = _Gen.cloud(d, v)
        self.plan = []
        if request["op"] in ("page", "delivery"):
            puts = self._missing_values(d, v, request)
            request = self._with_nested(d, v, request)
            if puts and not d.flag(20):
                self.plan = puts[1:] + [request]
                request = puts[0]
        self.send(request)

    def do_begin(self, data) -> None:
        self.send(_Gen.begin(_Draw(data), self.view()))

    def do_page(self, data) -> None:
        d, v = _Draw(data), self.view()
        self.send(self._with_nested(d, v, _Gen.page(d, v)))

    def do_delivery(self, data) -> None:
        d, v = _Draw(data), self.view()
        self.send(self._with_nested(d, v, _Gen.delivery(d, v)))

    def do_commit(self, data) -> None:
        self.send(_Gen.commit(_Draw(data), self.view()))

    def do_close(self, data) -> None:
        self.send({"op": "close"})

    def do_restart(self, data) -> None:
        self.send({"op": "restart"})

    def do_read(self, data) -> None:
        self.send(_Gen.read(_Draw(data), self.view()))

    def do_store(self, data) -> None:
        self.send(_Gen.store(_Draw(data), self.view()))

    def do_invalid(self, data) -> None:
        self.send(_Gen.invalid(_Draw(data), self.view()))

    # -- end of an example ----------------------------------------------------------

    def teardown(self) -> None:
        ctx = self.ctx
        late = None
        if self.failure is None and self._unchecked and not self.impl_dead:
            late = _check_state(self.model, self.impl, ctx.variant, ctx.state_check)
            if late is not None:
                self.failure = f"after the last step: {late}"
        ctx.examples += 1
        ctx.last_steps = self.steps
        if self.failure is not None:
            if ctx.first_failure is None:
                ctx.first_failure = (ctx.examples, time.perf_counter() - ctx.started, len(self.steps))
            ctx.failure = {"steps": list(self.steps), "reason": self.failure}
            if ctx.out_dir is not None:
                jsonl, _itf_path = write_trace(
                    ctx.out_dir, ctx.trace_name, self.steps, self.failure,
                    {"variant": ctx.variant.value, "steps": len(self.steps)})
                ctx.trace_path = jsonl
        if self.impl_dead:
            ctx.discard()
        hypothesis.target(float(len(self.seen_edges)), label="gate transitions seen")
        hypothesis.target(float(self.max_staged), label="staged records")
        hypothesis.target(float(self.max_applied), label="consumed sequences")
        if late is not None:
            raise LockstepDivergence(self.failure)


#: How many rules of each kind the machine has. Hypothesis picks uniformly among
#: the enabled rules, so this is the step mix when every kind is enabled: the
#: constructive kinds (pages, deliveries, store answers) outweigh the ones that
#: throw an attempt away (begin, close, restart).
RULE_WEIGHTS = {"cloud": 6, "begin": 1, "page": 3, "delivery": 3, "commit": 1, "close": 1, "restart": 1,
                "read": 2, "store": 2, "invalid": 1}


def _make_rule(kind: str, name: str):
    """A rule of ``kind``: its argument is the block of bytes its choices come from."""
    if kind in BLOCK_BYTES:
        def body(self, data) -> None:
            getattr(self, f"do_{kind}")(data)

        decorate = rule(data=_BLOCKS[kind])
    else:  # close, restart: nothing to choose
        def body(self) -> None:
            getattr(self, f"do_{kind}")(None)

        decorate = rule()
    body.__name__ = body.__qualname__ = name
    body.__doc__ = f"Send one {kind} request to both sides."
    return precondition(lambda self: kind in self.enabled)(decorate(body))


for _kind, _weight in RULE_WEIGHTS.items():
    for _n in range(_weight):
        _name = _kind if _n == 0 else f"{_kind}_{_n + 1}"
        setattr(LockstepMachine, _name, _make_rule(_kind, _name))
del _kind, _weight, _n, _name


# ---------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------


@dataclass
class LockstepReport:
    """The outcome of one ``run_lockstep``."""

    ok: bool
    examples: int  # examples run (generation and shrinking)
    steps: int  # requests sent to each side (top level)
    seconds: float
    coverage: LockstepCoverage
    failure: Optional[str] = None  # the shrunk steps, readable, and the divergence
    trace_path: Optional[Path] = None  # the JSON-lines requests of the shrunk example
    shrunk_steps: Optional[int] = None  # steps of the shrunk example
    variant: str = Variant.FIXED.value
    itf_path: Optional[Path] = None
    divergence: Optional[str] = None  # the one-line reason
    found_after_examples: Optional[int] = None  # examples run when the first failure appeared
    found_after_seconds: Optional[float] = None  # seconds into the run when it appeared (before shrinking)
    found_steps: Optional[int] = None  # steps of that first failing example (before shrinking)
    hypothesis_shrunk_steps: Optional[int] = None  # steps after Hypothesis's shrinking, before step deletion

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


def run_lockstep(
    impl_factory: Callable[[], Driver],
    *,
    variant: Variant = Variant.FIXED,
    settings: Optional[hypothesis.settings] = None,
    out_dir: Optional[Path] = None,
    state_check: bool = True,
) -> LockstepReport:
    """Run ``LockstepMachine`` against ``impl_factory()``'s driver under ``variant``.

    The driver is built once and reused across examples (each example starts
    with a ``reset``); it is rebuilt when it raised (a dead process). With
    ``out_dir`` the shrunk failing example is written there as
    ``lockstep-VARIANT.jsonl`` and ``lockstep-VARIANT.itf.json``.
    ``settings`` defaults to ``lockstep_settings("dev")``; whatever is given,
    the deadline is off, only the first bug is reported, and Hypothesis's own
    printing is quiet (the report carries the readable trace).
    """
    variant = Variant(variant)
    run = _Run(impl_factory, variant, out_dir, state_check)
    machine = LockstepMachine.bind(run)
    started = time.perf_counter()
    error: Optional[BaseException] = None
    try:
        try:
            with _shrink_budget(SHRINK_SECONDS):
                run_state_machine_as_test(machine, settings=_effective_settings(settings))
        except Exception as exc:  # a divergence, a driver crash, or Flaky
            error = exc
        return _report(run, error, started)
    finally:
        run.close()


def _report(run: _Run, error: Optional[BaseException], started: float) -> LockstepReport:
    variant = run.variant
    report = LockstepReport(ok=error is None, examples=run.examples, steps=run.steps, seconds=0.0,
                            coverage=run.coverage, variant=variant.value)
    if error is not None:
        failing = run.failure
        if failing is not None:
            steps, reason = failing["steps"], failing["reason"]
            report.hypothesis_shrunk_steps = len(steps)
            steps, reason = _minimize(run, steps, reason)
        else:
            steps, reason = run.last_steps, f"{type(error).__name__}: {error}"
        if isinstance(error, hypothesis.errors.Flaky) or type(error).__name__.startswith("Flaky"):
            reason = f"{reason} (Hypothesis reports the failure as flaky: {type(error).__name__})"
        if run.out_dir is not None and steps:
            run.trace_path, _ = write_trace(run.out_dir, run.trace_name, steps, reason,
                                            {"variant": variant.value, "steps": len(steps)})
        report.divergence = reason
        report.shrunk_steps = len(steps)
        if run.first_failure is not None:
            report.found_after_examples, report.found_after_seconds, report.found_steps = run.first_failure
        report.failure = format_steps(steps, reason, header=f"lockstep divergence under variant {variant.value}, "
                                                             f"shrunk to {len(steps)} steps:")
        report.trace_path = run.trace_path
        if run.trace_path is not None:
            report.itf_path = run.trace_path.parent / f"{run.trace_name}.itf.json"
    report.seconds = time.perf_counter() - started
    return report


#: Seconds the post-shrink step deletion may take.
MINIMIZE_SECONDS = 10.0


def _failure_kind(reason: str) -> str:
    """What a divergence is about, without the values: its path (``response.result.ok``) or its phrase."""
    return reason.removeprefix("after the last step: ").split(":", 1)[0]


def _minimize(run: _Run, steps: list, reason: str) -> tuple[list, str]:
    """Delete steps (and nested requests) from Hypothesis's shrunk example while it still fails the same way.

    Hypothesis shrinks the choices that generate an example; this replays
    the concrete requests (each replay starts with the example's ``reset``),
    so a step that only fed the generator's state goes too. Bounded by
    ``MINIMIZE_SECONDS``; returns the steps as replayed and their divergence.
    """
    deadline = time.perf_counter() + MINIMIZE_SECONDS
    kind = _failure_kind(reason)
    best_requests = [s["request"] for s in steps]
    best = (steps, reason)

    def attempt(requests: list):
        try:
            impl = run.driver()
            got, divergence = replay_steps(requests, impl, ModelDriver(run.variant), variant=run.variant,
                                           state_check=run.state_check)
        except Exception:
            run.discard()
            return None
        if getattr(impl, "alive", True) is False:
            run.discard()
        if divergence is None or _failure_kind(divergence["reason"]) != kind:
            return None
        return got, divergence["reason"]

    changed = True
    while changed and time.perf_counter() < deadline:
        changed = False
        i = len(best_requests) - 2
        while i >= 1 and time.perf_counter() < deadline:  # never the first step (the reset)
            candidate = best_requests[:i] + best_requests[i + 1:]
            found = attempt(candidate)
            if found is not None:
                best = found
                best_requests = [s["request"] for s in found[0]]
                changed = True
            i = min(i - 1, len(best_requests) - 2)
        i = 0
        while i < len(best_requests) and time.perf_counter() < deadline:
            request = best_requests[i]
            inner = request.get("duringFetch") if isinstance(request, dict) else None
            j = len(inner) - 1 if isinstance(inner, list) else -1
            while j >= 0 and time.perf_counter() < deadline:
                rest = inner[:j] + inner[j + 1:]
                smaller = dict(request, duringFetch=rest)
                if not rest:
                    del smaller["duringFetch"]
                found = attempt(best_requests[:i] + [smaller] + best_requests[i + 1:])
                if found is not None:
                    best = found
                    best_requests = [s["request"] for s in found[0]]
                    changed = True
                    if i >= len(best_requests):
                        break
                    request, inner = smaller, rest
                j -= 1
            i += 1
    return best
