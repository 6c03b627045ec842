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
from envreplica.report.traces import Divergence, Replayer, TraceView, Words, counterexample_break, model_steps
from envreplica.report.values import flatten, pretty



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


def _bounds(meta: dict) -> Any:
    """The trace's bounds: its suite's bounds of that name, with the trace's fixes."""
    from envreplica.model import lock as ml

    fixes = frozenset(ml.Fix(f) for f in meta["fixes"]) if isinstance(meta.get("fixes"), list) else None
    variant = ml.Variant(meta.get("variant", "fixed")) if meta.get("variant") in ("seed", "fixed") else ml.Variant.FIXED
    return next(b for b in ml.suite(str(meta["suite"]), variant, fixes) if b.name == meta["bounds"])


def _breaks(doc: dict, meta: dict, steps: list) -> tuple[str, str, str, Optional[int], str]:
    """The counterexample's property, and the step at which it first fails (marked in ``steps``) with the sentence
    saying so: ``traces.counterexample_break`` on the lock model at the trace's bounds and fixes."""
    from envreplica.checker import lock as cl
    from envreplica.model import lock as ml
    from envreplica.spec import lock as spec

    def replayer() -> Replayer:
        cfg = _bounds(meta)
        return Replayer(lambda: ml.init(cfg), lambda st, a: ml.next_state(cfg, st, a), cl.action_from_json,
                        cl.state_vars, cl.LOCK_VARS)

    return counterexample_break(doc, meta, steps, spec, replayer, "lock model",
                                "the checker's liveness check found no way the processes alone settle from it")


def _sequence(doc: dict, breaks_at: Optional[int], prefix: str) -> Any:
    """The trace as a sequence picture (``report.locksequence``): the lock has no gate machine to draw."""
    from dataclasses import replace

    from envreplica.report.locksequence import draw

    picture = draw(doc, breaks_at, prefix=f"seq{prefix}")
    return replace(picture, caption="the steps as a sequence: each process's calls to the lock path, a kill as a "
                                    "red cross, a green bar while inside the operation (two side by side: mutual "
                                    "exclusion broken), the breaking step in red")


#: The lock's words for the page's columns: the step's call, who is inside after it.
WORDS = Words("call", "inside after", "inside", "step")


def read_trace(path: Path, doc: dict, meta: dict, impl_factory: Optional[Callable[[], Any]],
               prefix: str) -> TraceView:
    """The lock's reader (``traces.READERS``): a counterexample, or a lockstep divergence."""
    states = doc["states"]
    tables = [_tables(st) for st in states]
    steps, lockstep, parting = model_steps(doc, tables, _inside)
    if not lockstep:
        name, kind, statement, at, note = _breaks(doc, meta, steps)
        title = f"counterexample: {name or meta.get('description') or path.name}"
        if meta.get("finding"):
            title += f" (finding {meta['finding']})"
        return WORDS.on(TraceView(
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
    return WORDS.on(TraceView(
        str(path), "divergence", f"lock lockstep divergence: {path.name}", meta, verdicts, steps, None,
        final=T.full(tables[-1]), divergence=divergence, prefix=prefix, breaks_at=parting,
        breaks_note=f"the implementation parts from the model at step #{parting}",
        finding=str(meta.get("finding") or "")))
