"""A trace file read for a report: its steps, each step's tables and what changed, its gate path.

Models: an ITF file of any protocol of the project, told apart by ``#meta.protocol`` (absent: the
replica's). Each protocol's reader (``READERS``) turns its document into a ``TraceView``, which the page
renders the same way whatever the protocol: the finding or broken property first, the steps, each step's
state diff, the divergence. The replica's reader is here; the paired writer migration's is
``report.migration.read_trace``. For the replica, two kinds of file, told apart by their ``vars``:

* a model-checker counterexample (``checker.itf.write``): each state holds the
  replica's tables, the gate, the action (``#meta.action``) and its result;
* a lockstep divergence (``conformance.replica.traces.write_trace``): each
  state holds a request and the model's and the implementation's responses,
  but no tables. The report replays the requests on the model
  (``ModelDriver``, the trace's variant) and reads its ``state`` document
  after each step; given an implementation (``impl_factory``: an adapter or
  the built-in SQLite one), it replays them there too and reads its
  tables, so the parting step can show both sides table by table.

Each step names the seed function it runs (``SEED_FUNCTIONS``: the functions
of the seed's ``project-env-replica.ts``).

Leaves out on purpose: judging. The verdicts shown are the trace's own
(``#meta``); a replay that does not reproduce the recorded model responses
is said in a note, not fixed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from envreplica.report import breaks
from envreplica.report import tables as T
from envreplica.report.gatesvg import Diagram, draw, edge_id
from envreplica.report.values import one_line, pretty, show, unitf


class ReportInputError(ValueError):
    """A file the report cannot read as a trace (the message says which and why)."""


class ImplementationUnavailable(ReportInputError):
    """The implementation to replay a divergence on could not be started."""


#: The seed function (``project-env-replica.ts``) each action kind or adapter op runs, with a note.
SEED_FUNCTIONS: dict[str, tuple[Optional[str], str]] = {
    "begin": ("beginProjectEnvReplica", ""),
    "apply_page": ("applyProjectEnvReplicaPage", ""),
    "page": ("applyProjectEnvReplicaPage", ""),
    "apply_delivery": ("applyProjectEnvReplicaDelivery", ""),
    "delivery": ("applyProjectEnvReplicaDelivery", ""),
    "complete": ("completeProjectEnvReplica", ""),
    "commit": ("completeProjectEnvReplica", ""),
    "close_gate": ("closeProjectEnvReplicaGate", ""),
    "close": ("closeProjectEnvReplicaGate", ""),
    "restart": ("closeProjectEnvReplicaGate", "each sidecar restart closes the replica"),
    "status": ("readProjectEnvReplicaStatus", ""),
    "snapshot": ("readProjectEnvReplicaSnapshot", ""),
    "receipts": ("listProjectEnvReplicaReceipts", ""),
    "ready": ("awaitProjectEnvReplicaReady", ""),
    "diagnostics": ("readProjectEnvReplicaSnapshot", "why it would serve nothing"),
    "store_off": ("defaultValueReader", "no value reader: returns null"),
    "store.off": ("defaultValueReader", "no value reader: returns null"),
    "store.put": (None, "the value store (ProjectEnvReplicaValueReader) of the test"),
    "store.fail": (None, "the value store (ProjectEnvReplicaValueReader) of the test"),
    "cloud_change": (None, "the cloud, not the seed"),
    "reset": (None, "the harness: a fresh replica"),
    "state": (None, "test op: every table"),
    "init": (None, "the initial state"),
}
#: A resumed value-store read: where ``readMaterializedValue``'s ``await`` returns to.
_RESUMED = {"PageInFlight": ("materializeStage", "applyProjectEnvReplicaPage"),
            "DeliveryInFlight": ("materializeLive", "applyProjectEnvReplicaDelivery")}
#: The ``mbt::actionTaken`` of each adapter op (what ``spec.diagram.gate_path`` reads).
_KIND_OF_OP = {"begin": "begin", "page": "apply_page", "delivery": "apply_delivery", "commit": "complete",
               "close": "close_gate", "restart": "restart", "store.off": "store_off"}


@dataclass
class StepView:
    index: int
    action: str
    seed: Optional[str]
    seed_note: str
    summary: str  # the parameters on one line
    params: str  # the parameters, indented (long values capped)
    result: str  # the result on one line
    result_full: str
    gate: Optional[str]
    edge: Optional[str] = None  # data-edge of the gate edge this step fires
    diff: list = field(default_factory=list)  # list[TableDiff] against the step before
    tokens: list = field(default_factory=list)  # projects / keys the request names
    impl_result: Optional[str] = None  # lockstep: the implementation's response, when it differs
    agree: Optional[bool] = None
    parting: bool = False
    breaks: bool = False  # the step at which the trace's property breaks (the page opens here)


@dataclass
class Divergence:
    step: int
    reason: str
    request: str
    model: list  # list[FieldDiff]: the model's response (old) and the implementation's (new)
    tables: Optional[list]  # list[TableDiff] from tables.compare, or None when the implementation's are unknown
    tables_note: str = ""
    model_tables: Optional[list] = None  # the model's tables after the step (when the implementation's are unknown)


@dataclass
class TraceView:
    path: str
    kind: str  # counterexample | divergence
    title: str
    meta: dict
    verdicts: list  # (name, kind, statement, verdict)
    steps: list
    diagram: Optional[Diagram]  # the replica's gate machine with the trace's path (None: a protocol without one)
    final: list = field(default_factory=list)  # list[TableDiff]: every table after the last step
    divergence: Optional[Divergence] = None
    notes: list = field(default_factory=list)
    prefix: str = ""  # element id suffix on a page with several traces ("" for the first, then "-t1", ...)
    breaks_at: Optional[int] = None  # the index of the step at which the property breaks (the page opens there)
    breaks_note: str = ""  # what breaks there, or why no step is marked
    finding: str = ""  # the finding a divergence is (``#meta.finding``), shown first
    function_header: str = "seed function"  # what the steps' third column names (the seed's code each step runs)
    gate_header: str = "gate after"  # and the last: the gate (the replica), or the stores' fences (the migration)
    gate_word: str = "gate"  # what a step's diff heading calls it
    request_word: str = "request"  # what a divergence calls the step that parts (an adapter request, a move)
    answers_word: str = "responses"  # and what both sides said

    @property
    def projects_and_keys(self) -> list[str]:
        out: list[str] = []
        for s in self.steps:
            for t in s.tokens:
                if t not in out:
                    out.append(t)
        for table in self.final:
            for r in table.rows:
                for t in r.tokens:
                    if t not in out:
                        out.append(t)
        return out


@dataclass(frozen=True)
class Words:
    """A protocol's words for the page's columns (``TraceView``'s ``function_header`` to ``answers_word``)."""

    function_header: str
    gate_header: str
    gate_word: str
    request_word: str
    answers_word: str = "answers"

    def on(self, view: TraceView) -> TraceView:
        """``view`` with these words."""
        view.function_header, view.gate_header, view.gate_word = self.function_header, self.gate_header, \
            self.gate_word
        view.request_word, view.answers_word = self.request_word, self.answers_word
        return view


def _tokens_of(request: Any) -> list[str]:
    """The project ids and keys a request names (for the filter)."""
    out: list[str] = []

    def walk(v: Any, name: str = "") -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, name)
        elif isinstance(v, str) and name in ("projectId", "projectIds", "project_id", "key"):
            if v not in out:
                out.append(v)

    walk(request)
    return out


def _seed(kind: str, action: Any, before: Optional[dict]) -> tuple[Optional[str], str]:
    if isinstance(action, dict) and "crashAfterCommit" in action:
        inner = {k: v for k, v in action.items() if k != "crashAfterCommit"}
        op = str(inner.get("op") or "")
        fn, note = _seed(_KIND_OF_OP.get(op, op), inner, before)
        dies = f"the process dies after write commit {action['crashAfterCommit']}"
        return fn, dies + (f"; {note}" if note else "")
    if kind == "resume":
        slot = action.get("slot") if isinstance(action, dict) else None
        inflight = (before or {}).get("inflight") or []
        tag = inflight[slot].get("tag") if isinstance(slot, int) and 0 <= slot < len(inflight) else None
        fn, outer = _RESUMED.get(str(tag), ("readMaterializedValue", "a page or delivery"))
        return fn, f"readMaterializedValue's await returns (in {outer})"
    return SEED_FUNCTIONS.get(kind, (None, ""))


def load_json(path: Path) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ReportInputError(f"{path}: not UTF-8 text ({error.reason}); give an .itf.json trace") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise ReportInputError(f"{path}: not JSON ({error}); give an .itf.json trace written by "
                               f"`envreplica check` or `envreplica conformance`") from None


def resolve(path: Path) -> Path:
    """The ``.itf.json`` of ``path``: itself, or the sibling of a lockstep ``NAME.jsonl``."""
    path = Path(path)
    if path.name.endswith(".jsonl"):
        sibling = path.with_name(path.name[: -len(".jsonl")] + ".itf.json")
        if not sibling.exists():
            if not path.exists():
                raise FileNotFoundError(2, "No such file or directory", str(path))
            raise ReportInputError(f"{path}: a JSON-lines trace has no responses; the report needs its sibling "
                                   f"{sibling.name} (written beside it by `envreplica conformance --out`)")
        return sibling
    return path


#: Each protocol's reader (``module:function``, imported when a trace of it is read): ``function(path, doc, meta,
#: impl_factory, prefix)`` gives the ``TraceView`` of one ITF document (``ReportInputError`` for one it cannot
#: read; an implementation factory it may ignore). A new protocol adds its line here, and its encoder on the
#: writing side (``checker.itf.Encoder``): docs/report.md, "Another protocol".
READERS: dict[str, str] = {
    "replica": "envreplica.report.traces:read_replica",
    "migration": "envreplica.report.migration:read_trace",
    "lock": "envreplica.report.lock:read_trace",
}


def model_steps(doc: dict, tables: list, after: Callable[[dict], Optional[str]]) -> tuple[list, bool, Optional[int]]:
    """The steps of an ITF trace written by ``checker.itf.write_steps`` (a model's counterexample) or by a lockstep
    (each state with the ``model``'s and the ``implementation``'s answers and whether they ``agree``), as the page
    shows them: each state's action, its result, what ``tables`` say changed, and ``after``'s word for the state it
    left (the stores' fences, who is inside). Also whether it is a lockstep's, and where the two sides part."""
    states = doc["states"]
    lockstep = "implementation" in (doc.get("vars") or []) or "implementation" in states[-1]
    parting = next((i for i, st in enumerate(states) if st.get("agree") is False), len(states) - 1) \
        if lockstep else None
    steps = []
    for i, st in enumerate(states):
        smeta = st.get("#meta") if isinstance(st.get("#meta"), dict) else {}
        action = smeta.get("action") if isinstance(smeta.get("action"), dict) else None
        kind = str(st.get("mbt::actionTaken") or (action or {}).get("kind") or ("init" if i == 0 else "?"))
        params = {k: v for k, v in (action or {}).items() if k != "kind"}
        result = st.get("model") if lockstep else smeta.get("result")
        impl = st.get("implementation") if lockstep else None
        steps.append(StepView(
            index=i, action=kind, seed=smeta.get("step") or None, seed_note="",
            summary=one_line(params) if action else "", params=pretty(params) if action else "",
            result=str(result or ""), result_full=pretty(result) if result else "", gate=after(st),
            diff=T.diff(tables[i - 1] if i else None, tables[i]),
            impl_result=str(impl) if lockstep and i and impl != result else None,
            agree=st.get("agree") if isinstance(st.get("agree"), bool) else None,
            parting=lockstep and i == parting))
    return steps, lockstep, parting


@dataclass(frozen=True)
class Replayer:
    """What ``breaking_step`` needs of one protocol's model to replay a counterexample: its first state, a step,
    an action from the trace's JSON, and a state's variables as the trace writes them."""

    init: Callable[[], Any]
    take: Callable[[Any, Any], tuple[Any, Any]]  # (state, action) -> (next state, result)
    action: Callable[[dict], Any]
    variables: Callable[[Any], dict]
    names: tuple[str, ...]  # the trace's variables (compared state by state)


def breaking_step(doc: dict, name: str, kind: str, statement: str, prop: Any, replayer: Callable[[], Replayer],
                  model: str, stuck_why: str) -> tuple[Optional[int], str]:
    """The step at which a counterexample's property first fails, and the sentence saying so (or why no step is
    marked): its actions replayed on the model (``replayer``, made here: building it may fail on a trace of
    another model version) and the property evaluated along them; a stuck state (bounded liveness) is the last.
    ``model`` names the model in the sentences, ``stuck_why`` says what the liveness check found."""
    last = len(doc["states"]) - 1
    if kind == "bounded liveness":
        return last, f"the state after step #{last} is stuck: {statement} ({stuck_why})"
    if prop is None:
        return None, f"{name or 'the trace'} names no safety property of the {model}: no step is marked"
    try:
        r = replayer()
        st = r.init()
        for i, state in enumerate(doc["states"]):
            action_data = (state.get("#meta") or {}).get("action")
            if action_data is not None:
                action = r.action(action_data)
                before = st
                st, result = r.take(st, action)
                if prop.kind == "step" and not prop.check(before, action, result, st):
                    return i, f"step #{i} ({action.kind}) breaks the step property {name}: {statement}"
            if r.variables(st) != {k: state.get(k) for k in r.names}:
                return None, (f"replayed on this model, the trace's state #{i} differs (another model version?): "
                              f"no step is marked")
            if prop.kind == "invariant" and not prop.check(st):
                return i, (f"the state after step #{i} is the first to violate the invariant {name}: {statement}"
                           if i else f"the initial state violates the invariant {name}: {statement}")
    except (KeyError, ValueError, TypeError, StopIteration) as error:
        return None, (f"the trace's actions could not be replayed on the model ({type(error).__name__}: {error}): "
                      f"no step is marked")
    return None, f"replayed on this model, no step of the trace breaks {name}: no step is marked"


def property_of(spec: Any, name: str) -> tuple[str, str, Any]:
    """(kind, statement, the property or None) of a property's ``name`` in ``spec``, a protocol's spec module
    (``INVARIANTS``, ``STEP_PROPERTIES``, ``RECOVERABLE``: the migration's, the lock's); ``("?", "", None)`` for a
    name it does not hold."""
    for prop in (*spec.INVARIANTS, *spec.STEP_PROPERTIES):
        if prop.name == name:
            return prop.kind, prop.statement, prop
    if name == spec.RECOVERABLE[0]:
        return "bounded liveness", spec.RECOVERABLE[1], None
    return "?", "", None


def counterexample_break(doc: dict, meta: dict, steps: list, spec: Any, replayer: Callable[[], Replayer],
                         model: str, stuck_why: str) -> tuple[str, str, str, Optional[int], str]:
    """A protocol's counterexample: its property (``#meta.violated``, looked up in ``spec``: ``property_of``) as
    its name, kind and statement, then ``breaking_step``'s step and sentence, that step marked in ``steps``."""
    name = str(meta.get("violated") or "")
    kind, statement, prop = property_of(spec, name)
    at, note = breaking_step(doc, name, kind, statement, prop, replayer, model, stuck_why)
    if at is not None and at < len(steps):
        steps[at].breaks = True
    return name, kind, statement, at, note


def protocol_of(doc: dict) -> str:
    """The protocol an ITF document is of (``#meta.protocol``; a trace without it is the replica's)."""
    from envreplica.checker.itf import meta_of

    protocol = meta_of(doc).get("protocol", "replica")
    return protocol if isinstance(protocol, str) else repr(protocol)


def read(path: Path, impl_factory: Optional[Callable[[], Any]] = None, prefix: str = "") -> TraceView:
    """The report's view of one trace file (``.itf.json``, or a lockstep ``.jsonl`` with its sibling)."""
    import importlib

    source = Path(path)
    path = resolve(source)
    doc = load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("states"), list) or not doc["states"]:
        raise ReportInputError(f"{path}: not an ITF trace (no 'states' list); give an .itf.json trace written by "
                               f"`envreplica check` or `envreplica conformance`")
    if not all(isinstance(s, dict) for s in doc["states"]):
        raise ReportInputError(f"{path}: not an ITF trace (a state is not an object)")
    meta: dict[str, Any] = doc["#meta"] if isinstance(doc.get("#meta"), dict) else {}
    protocol = protocol_of(doc)
    if protocol not in READERS:
        raise ReportInputError(f"{path}: a trace of protocol {protocol!r} (#meta.protocol), which this envreplica "
                               f"does not read ({', '.join(READERS)}); give a trace it wrote, or upgrade it")
    module, name = READERS[protocol].split(":")
    reader = getattr(importlib.import_module(module), name)
    try:
        return reader(path, doc, meta, impl_factory, prefix)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as error:
        if isinstance(error, ReportInputError):
            raise
        raise ReportInputError(f"{path}: a malformed trace ({type(error).__name__}: {error}; protocol {protocol}); "
                               f"give an .itf.json trace as written by `envreplica check` or `envreplica "
                               f"conformance`") from None


def read_replica(path: Path, doc: dict, meta: dict, impl_factory: Optional[Callable[[], Any]],
                 prefix: str) -> TraceView:
    """The replica's reader (``READERS``): a model-checker counterexample, or a lockstep divergence."""
    variables = doc.get("vars") or []
    if "request" in variables or "request" in doc["states"][0]:
        return _lockstep(path, doc, meta, impl_factory, prefix)
    if "gate" in doc["states"][0]:
        return _counterexample(path, doc, meta, prefix)
    raise ReportInputError(f"{path}: an ITF file, but neither a model-checker counterexample (states with 'gate') "
                           f"nor a lockstep trace (states with 'request')")


def _verdict_rows(meta: dict) -> list:
    from envreplica.spec import properties as P

    name = meta.get("violated")
    if not name:
        return []
    try:
        prop = P.by_name(name)
        return [(name, prop.kind, prop.statement, "violated")]
    except KeyError:
        return [(name, "?", str(meta.get("description", "")), "violated")]


def _counterexample(path: Path, doc: dict, meta: dict, prefix: str) -> TraceView:
    from envreplica.spec.diagram import gate_path

    states = doc["states"]
    edges = {i: edge_id(e.source.value, e.dest.value) for i, e in gate_path(doc)}
    steps, before, prev_state = [], None, None
    for i, st in enumerate(states):
        tables = T.from_itf_state(st)
        smeta = st.get("#meta") if isinstance(st.get("#meta"), dict) else {}
        action = smeta.get("action")
        kind = st.get("mbt::actionTaken") or (action or {}).get("op") or ("init" if i == 0 else "?")
        params = {k: v for k, v in (action or {}).items() if k != "op"}
        fn, note = _seed(kind, action, prev_state)
        result = smeta.get("result")
        steps.append(StepView(
            index=i, action=kind + (f" ({action['op']})" if kind == "crash_after" and action else ""),
            seed=fn, seed_note=note, summary=one_line(params) if action else "",
            params=pretty(params) if action else "", result=one_line(result) if action else "",
            result_full=pretty(result) if action else "",
            gate=st.get("gate"), edge=edges.get(i), diff=T.diff(before, tables), tokens=_tokens_of(action)))
        before, prev_state = tables, st
    title = f"counterexample: {meta.get('violated') or meta.get('description') or path.name}"
    view = TraceView(str(path), "counterexample", title, meta, _verdict_rows(meta), steps,
                     draw(doc, f"gate{prefix}"), final=T.full(before or {}), prefix=prefix)
    found = breaks.find(doc, meta)
    if isinstance(found, breaks.Break) and found.step < len(steps):
        steps[found.step].breaks = True
        view.breaks_at, view.breaks_note = found.step, found.note
    elif found is not None:
        view.breaks_note = found.note
    return view


# ---------------------------------------------------------------------------
# Lockstep traces
# ---------------------------------------------------------------------------


def _state_of(driver: Any, rid: int) -> Any:
    """A driver's ``state`` document (out-of-band request id ``rid``), or None when it offers none."""
    if hasattr(driver, "state_doc"):
        return driver.state_doc()
    response = driver.handle({"id": rid, "op": "state"})
    if isinstance(response, dict) and response.get("ok") is True:
        return response.get("result")
    return None


def _replay(requests: list, driver: Any) -> tuple[list, list, str]:
    """Each request's response and the tables after it; a note when the replay stopped early."""
    from envreplica.conformance.external import STATE_ID_BASE

    responses, docs = [], []
    try:
        docs.append(_state_of(driver, STATE_ID_BASE))
        for n, request in enumerate(requests, 1):
            responses.append(driver.handle(request))
            docs.append(_state_of(driver, STATE_ID_BASE + n))
    except Exception as error:  # an adapter that died or answered garbage: report what was read
        return responses, docs, f"replay stopped at step #{len(responses) + 1}: {type(error).__name__}: {error}"
    return responses, docs, ""


def _inner(response: Any) -> Any:
    if isinstance(response, dict) and response.get("ok") is True:
        return response.get("result")
    return {"ok": False, "error": response.get("error") if isinstance(response, dict) else response}


def _lockstep(path: Path, doc: dict, meta: dict, impl_factory, prefix: str) -> TraceView:
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.replica.compare import compare_responses
    from envreplica.conformance.replica.traces import describe_response
    from envreplica.spec.variants import Variant

    states = doc["states"]
    requests = [unitf(s["request"]) for s in states]
    models = [unitf(s.get("model")) for s in states]
    impls = [unitf(s.get("implementation")) for s in states]
    notes = []
    variant = meta.get("variant", Variant.FIXED.value)
    try:
        model = ModelDriver(Variant(variant))
    except ValueError:
        raise ReportInputError(f"{path}: #meta.variant {variant!r} is not a model variant "
                               f"({', '.join(v.value for v in Variant)})") from None
    replayed, docs, stopped = _replay(requests, model)
    if stopped:
        notes.append(f"model {stopped}")
    if [r for r in replayed] != models[: len(replayed)]:
        first = next(n for n, (a, b) in enumerate(zip(replayed, models), 1) if a != b) if any(
            a != b for a, b in zip(replayed, models)) else len(replayed) + 1
        notes.append(f"the model replayed here answers otherwise than the trace records from step #{first} "
                     f"(another model version?): the tables shown are this model's")
    impl_docs: Optional[list] = None
    if impl_factory is not None:
        try:
            impl = impl_factory()
        except Exception as error:  # a bad adapter command, a dead process
            raise ImplementationUnavailable(f"the implementation could not be started to read its tables: "
                                            f"{type(error).__name__}: {error}") from None
        try:
            _, impl_docs, stopped = _replay(requests, impl)
        finally:
            close = getattr(impl, "close", None)
            if close:
                close()
        if stopped:
            notes.append(f"implementation {stopped}")
        if impl_docs and all(d is None for d in impl_docs):
            notes.append("the implementation answered 'state' unsupported: its tables are not shown")
            impl_docs = None

    tables = [T.from_state_doc(d) if d is not None else {} for d in docs]
    gates = [T.gate_of_doc(d) for d in docs]
    parting = next((n for n, s in enumerate(states, 1) if s.get("agree") is False), len(states))
    # A pseudo ITF trace for spec.diagram: state 0 the fresh replica, state n after step #n.
    pseudo: dict[str, list[dict[str, Any]]] = {
        "states": [{"gate": gates[0] or "inactive", "mbt::actionTaken": "init", "#meta": {}}]}
    for n, request in enumerate(requests, 1):
        op = str(request.get("op")) if isinstance(request, dict) else ""
        crashed = isinstance(request, dict) and "crashAfterCommit" in request
        pseudo["states"].append({"gate": gates[n] if n < len(gates) and gates[n] else pseudo["states"][-1]["gate"],
                                 "mbt::actionTaken": "crash_after" if crashed else _KIND_OF_OP.get(op, op),
                                 "#meta": {"result": _inner(models[n - 1])}})
    from envreplica.spec.diagram import gate_path

    edges = {i: edge_id(e.source.value, e.dest.value) for i, e in gate_path(pseudo)}
    steps = []
    for n, (s, request) in enumerate(zip(states, requests), 1):
        op = request.get("op", "?") if isinstance(request, dict) else "?"
        fn, note = _seed(_KIND_OF_OP.get(op, op), request, None)
        params = {k: v for k, v in request.items() if k not in ("op", "id")} if isinstance(request, dict) else request
        agree = s.get("agree") if isinstance(s.get("agree"), bool) else None
        smeta = s.get("#meta") if isinstance(s.get("#meta"), dict) else {}
        differs = compare_responses(models[n - 1], impls[n - 1]) is not None
        steps.append(StepView(
            index=n, action=op + (" (crash)" if isinstance(request, dict) and "crashAfterCommit" in request else ""),
            seed=fn, seed_note=note, summary=str(smeta.get("step") or one_line(params)), params=pretty(params),
            result=describe_response(models[n - 1]), result_full=pretty(models[n - 1]),
            gate=gates[n] if n < len(gates) else None, edge=edges.get(n),
            diff=T.diff(tables[n - 1], tables[n]) if n < len(tables) else [],
            tokens=_tokens_of(request), impl_result=describe_response(impls[n - 1]) if differs else None,
            agree=agree, parting=n == parting, breaks=n == parting))

    reason = str(meta.get("description", "")).removeprefix("lockstep divergence: ")
    m, i = models[parting - 1], impls[parting - 1]
    mf, inf = T.response_fields(m), T.response_fields(i)
    fields = [T.FieldDiff(p, mf.get(p), inf.get(p), mf.get(p) != inf.get(p)) for p in
              list(mf) + [p for p in inf if p not in mf]]
    compared, tables_note, model_tables = None, "", None
    if impl_docs is not None and parting < len(impl_docs) and impl_docs[parting] is not None and parting < len(docs):
        compared = T.compare(tables[parting], T.from_state_doc(impl_docs[parting]))
        if not any(t.rows for t in compared):
            tables_note = "the implementation's tables, replayed here, equal the model's at this step"
    else:
        model_tables = T.full(tables[parting]) if parting < len(tables) else []
        _mark_reason(model_tables, reason)
        tables_note = ("the implementation's tables were not read (run `envreplica report FILE --adapter COMMAND` "
                       "to replay the requests on it): the model's tables are shown, the row and field the "
                       "divergence names marked")
    divergence = Divergence(parting, reason, pretty(requests[parting - 1]), fields, compared, tables_note,
                            model_tables)
    verdicts = [("lockstep", "model vs implementation", f"variant {variant}: every response and table equal",
                 "diverged" if reason else "agreed")]
    title = f"lockstep divergence: {path.name}"
    view = TraceView(str(path), "divergence", title, meta, verdicts, steps, draw(pseudo, f"gate{prefix}"),
                     final=T.full(tables[-1]) if tables else [], divergence=divergence, notes=notes, prefix=prefix,
                     breaks_at=parting, breaks_note=f"the implementation parts from the model at step #{parting}",
                     finding=str(meta.get("finding") or ""))
    return view


def _mark_reason(tables: list, reason: str) -> None:
    """Mark the row and field a ``state table T: row (K): F:`` reason names as ``differs``."""
    import re

    for m in re.finditer(r"state table (\w+): row \(([^)]*)\): ([\w.]+)", reason):
        table, key, field_name = m.group(1), tuple(p.strip() for p in m.group(2).split(",")), m.group(3)
        for t in tables:
            if t.name != table:
                continue
            for r in t.rows:
                if r.key == key:
                    r.status = "differs"
                    for f in r.fields:
                        if f.path == field_name or f.path.startswith(field_name + "."):
                            f.changed = True
    for m in re.finditer(r"state table authority: (\w+):", reason):
        for t in tables:
            if t.name == "authority":
                for r in t.rows:
                    r.status = "differs"
                    for f in r.fields:
                        if f.path == m.group(1):
                            f.changed = True


__all__ = ["ImplementationUnavailable", "READERS", "ReportInputError", "SEED_FUNCTIONS", "StepView", "TraceView",
           "Divergence", "Words", "counterexample_break", "property_of", "protocol_of", "read", "read_replica",
           "resolve", "show"]
