"""The projection lock's traces in a report: its model's counterexamples (and its lockstep's divergences).

Models: the lock's page section (``traces.READERS["lock"]``): an ITF trace of protocol ``lock``
(``checker.lock.write_trace``: a model-checker counterexample or a stuck state's path) as the same ``TraceView``
the other protocols' traces give, so that the page is the same kind: the broken property first, then the steps
(each process's filesystem or system call, what it found, who is inside the operation after it), what each step
changed in the state's tables (``lock`` the lock path and what lies beside it, ``processes`` each caller,
``kernel`` the processes the kernel knows), and the state after the last step.

Where a counterexample breaks is found, not assumed: its actions are replayed on the model at its bounds
(``#meta.suite``, ``bounds``, ``fixes``) and the property evaluated along them, as ``report.migration`` does; a
stuck state (``every_state_recoverable``) is the trace's last.

Its picture is a sequence (``report.locksequence``): the lock has no gate machine to draw.
A lockstep divergence (``implementation`` beside ``model`` in each state) is read as the migration's is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from envreplica.report import tables as T
from envreplica.report.traces import Divergence, StepView, TraceView
from envreplica.report.values import flatten, one_line, pretty

_ACTION_TAKEN = "mbt::actionTaken"


def _some(value: Any) -> Any:
    """An ITF option's value (None for Quint's ``None``)."""
    if isinstance(value, dict) and value.get("tag") in ("Some", "None") and set(value) == {"tag", "value"}:
        return value["value"] if value["tag"] == "Some" else None
    return value


def _tables(state: dict) -> T.Tables:
    """The tables of one state: the lock path and its neighbours, each process, the kernel's processes."""
    tables: T.Tables = {}
    fs = state.get("fs")
    if isinstance(fs, dict):
        lock = _some(fs.get("lock"))
        rows: dict = {("L",): dict(flatten(lock)) if isinstance(lock, dict) else {"state": "absent"}}
        for mover, moved in (fs.get("moved") or []):
            rows[(f"L.stale (moved by p{mover})",)] = dict(flatten(moved))
        for t in (fs.get("temps") or {}).get("#set", []):
            rows[(f"temp of p{t[0]}#{t[1]}" if isinstance(t, list) else "temp",)] = {"state": "complete"}
        for t in (fs.get("tickets") or {}).get("#set", []):
            if isinstance(t, dict):
                rows[(f"ticket seq {t.get('seq')} rank {t.get('rank')}",)] = dict(flatten(t))
        tables["lock"] = rows
    procs = state.get("procs")
    if isinstance(procs, list):
        tables["processes"] = {(f"p{p.get('slot', '?')}",): dict(flatten({k: _some(v) for k, v in p.items()
                                                                          if k != "slot"}))
                               for p in procs if isinstance(p, dict)}
    occupants = ((state.get("os") or {}).get("occupants") or {}).get("#set", [])
    if occupants:
        tables["kernel"] = {(f"ns {o.get('ns')} pid {o.get('pid')}",): dict(flatten(o))
                            for o in occupants if isinstance(o, dict)}
    counters = {k: state[k] for k in ("crashes", "reuses") if k in state}
    if counters:
        tables["counters"] = {("counters",): dict(flatten(counters))}
    return tables


def _inside(state: dict) -> Optional[str]:
    """Who is inside the operation after a step ("p0", "p0, p2", "nobody")."""
    procs = state.get("procs")
    if not isinstance(procs, list):
        return None
    inside = [f"p{p.get('slot')}" + ("" if p.get("status") == "running" else f" ({p.get('status')})")
              for p in procs if isinstance(p, dict) and p.get("inside")]
    return ", ".join(inside) or "nobody"


def _property(name: str) -> tuple[str, str, Any]:
    """(kind, statement, the property or None) of a lock property's name."""
    from envreplica.spec import lock as spec

    for prop in (*spec.INVARIANTS, *spec.STEP_PROPERTIES):
        if prop.name == name:
            return prop.kind, prop.statement, prop
    if name == spec.RECOVERABLE[0]:
        return "bounded liveness", spec.RECOVERABLE[1], None
    return "?", "", None


def _bounds(meta: dict) -> Any:
    """The trace's bounds: its suite's bounds of that name, with the trace's fixes."""
    from envreplica.model import lock as ml

    fixes = frozenset(ml.Fix(f) for f in meta["fixes"]) if isinstance(meta.get("fixes"), list) else None
    variant = ml.Variant(meta.get("variant", "fixed")) if meta.get("variant") in ("seed", "fixed") else ml.Variant.FIXED
    return next(b for b in ml.suite(str(meta["suite"]), variant, fixes) if b.name == meta["bounds"])


def _breaks(doc: dict, meta: dict) -> tuple[Optional[int], str]:
    """The step at which the counterexample's property first fails, and the sentence saying so."""
    from envreplica.checker import lock as cl
    from envreplica.model import lock as ml

    name = str(meta.get("violated") or "")
    kind, statement, prop = _property(name)
    last = len(doc["states"]) - 1
    if kind == "bounded liveness":
        return last, (f"the state after step #{last} is stuck: {statement} (the checker's liveness check found "
                      f"no way the processes alone settle from it)")
    if prop is None:
        return None, f"{name or 'the trace'} names no safety property of the lock model: no step is marked"
    try:
        cfg = _bounds(meta)
        st = ml.init(cfg)
        for i, state in enumerate(doc["states"]):
            action_data = (state.get("#meta") or {}).get("action")
            if action_data is not None:
                action = cl.action_from_json(action_data)
                before = st
                st, result = ml.next_state(cfg, st, action)
                if prop.kind == "step" and not prop.check(before, action, result, st):
                    return i, f"step #{i} ({action.kind}) breaks the step property {name}: {statement}"
            if cl.state_vars(st) != {k: state.get(k) for k in cl.LOCK_VARS}:
                return None, (f"replayed on this model, the trace's state #{i} differs (another model version?): "
                              f"no step is marked")
            if prop.kind == "invariant" and not prop.check(st):
                return i, (f"the state after step #{i} is the first to violate the invariant {name}: {statement}"
                           if i else f"the initial state violates the invariant {name}: {statement}")
    except (KeyError, ValueError, TypeError, StopIteration) as error:
        return None, (f"the trace's actions could not be replayed on the model ({type(error).__name__}: {error}): "
                      f"no step is marked")
    return None, f"replayed on this model, no step of the trace breaks {name}: no step is marked"


def _sequence(doc: dict, breaks_at: Optional[int], prefix: str) -> Any:
    """The trace as a sequence picture (``report.locksequence``): the lock has no gate machine to draw."""
    from dataclasses import replace

    from envreplica.report.locksequence import draw

    picture = draw(doc, breaks_at, prefix=f"seq{prefix}")
    return replace(picture, caption="the steps as a sequence: each process's calls to the lock path, a kill as a "
                                    "red cross, a green bar while inside the operation (two side by side: mutual "
                                    "exclusion broken), the breaking step in red")


def _labelled(view: TraceView) -> TraceView:
    """``view`` with the lock's words for the page's columns: the step's call, who is inside after it."""
    view.function_header, view.gate_header, view.gate_word = "call", "inside after", "inside"
    view.request_word, view.answers_word = "step", "answers"
    return view


def read_trace(path: Path, doc: dict, meta: dict, impl_factory: Optional[Callable[[], Any]],
               prefix: str) -> TraceView:
    """The lock's reader (``traces.READERS``): a counterexample, or a lockstep divergence."""
    states = doc["states"]
    lockstep = "implementation" in (doc.get("vars") or []) or "implementation" in states[-1]
    tables = [_tables(st) for st in states]
    parting = next((i for i, st in enumerate(states) if st.get("agree") is False), len(states) - 1) \
        if lockstep else None
    steps = []
    for i, st in enumerate(states):
        smeta = st.get("#meta") if isinstance(st.get("#meta"), dict) else {}
        action = smeta.get("action") if isinstance(smeta.get("action"), dict) else None
        kind = str(st.get(_ACTION_TAKEN) or (action or {}).get("kind") or ("init" if i == 0 else "?"))
        params = {k: v for k, v in (action or {}).items() if k != "kind"}
        result = st.get("model") if lockstep else smeta.get("result")
        impl = st.get("implementation") if lockstep else None
        steps.append(StepView(
            index=i, action=kind, seed=smeta.get("step") or None, seed_note="",
            summary=one_line(params) if action else "", params=pretty(params) if action else "",
            result=str(result or ""), result_full=pretty(result) if result else "", gate=_inside(st),
            diff=T.diff(tables[i - 1] if i else None, tables[i]),
            impl_result=str(impl) if lockstep and i and impl != result else None,
            agree=st.get("agree") if isinstance(st.get("agree"), bool) else None,
            parting=lockstep and i == parting))
    if not lockstep:
        name = str(meta.get("violated") or "")
        kind, statement, _ = _property(name)
        at, note = _breaks(doc, meta)
        if at is not None and at < len(steps):
            steps[at].breaks = True
        title = f"counterexample: {name or meta.get('description') or path.name}"
        if meta.get("finding"):
            title += f" (finding {meta['finding']})"
        return _labelled(TraceView(
            str(path), "counterexample", title, meta, [(name, kind, statement, "violated")] if name else [], steps,
            _sequence(doc, at, prefix), final=T.full(tables[-1]), prefix=prefix, breaks_at=at, breaks_note=note,
            finding=str(meta.get("finding") or "")))
    assert parting is not None
    steps[parting].breaks = True
    at = states[parting]
    smeta = at.get("#meta") if isinstance(at.get("#meta"), dict) else {}
    model, impl = str(at.get("model", "")), str(at.get("implementation", ""))
    divergence = Divergence(parting, str(meta.get("description", "")), pretty(smeta.get("action")),
                            [T.FieldDiff("outcome", model, impl, model != impl)], None,
                            "the answers part: the model's state after the step is shown", T.full(tables[parting]))
    fixes = ", ".join(meta.get("fixes") or []) or "none"
    verdicts = [("lock lockstep", "model vs implementation", f"fixes: {fixes}: every call, answer and the directory "
                 f"equal", "diverged")]
    return _labelled(TraceView(
        str(path), "divergence", f"lock lockstep divergence: {path.name}", meta, verdicts, steps, None,
        final=T.full(tables[-1]), divergence=divergence, prefix=prefix, breaks_at=parting,
        breaks_note=f"the implementation parts from the model at step #{parting}",
        finding=str(meta.get("finding") or "")))
