"""The paired writer migration's traces in a report: its counterexamples, its lockstep's divergences, its run page.

Models: the migration's page section (``traces.READERS["migration"]``): an ITF trace of protocol ``migration``
(``checker.migration.write_trace``: a model-checker counterexample; ``conformance.migration.traces.write_itf``:
a lockstep divergence) as the same ``TraceView`` the replica's traces give, so that the page is the same kind:
the broken property or the divergence first (with the finding it is), then the steps (each move, the seed's
step it takes, what the model answered and, where it differs, the implementation), what each step changed in
the state's tables (``stores``, ``files``, ``invocations``, ``counters``), and, at a divergence, both sides'
observations of the files side by side. ``write_migration_report`` writes the run page of ``envreplica
conformance --protocol migration --report FILE``: the verdict, the figures, what the adapter declared, the
divergence, the coverage after.

Where a counterexample breaks is found, not assumed: its actions are replayed on the model at its bounds
(``#meta.suite``, ``bounds``, ``variant``) and the property evaluated along them, as ``report.breaks`` does for
the replica; a stuck state (``every_state_recoverable``) is the trace's last.

Leaves out on purpose: a diagram (the migration has no gate machine: each invocation's step is in the steps'
table), and replaying a divergence on the implementation (the lockstep recorded both observations where they
differ).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from envreplica.report import tables as T
from envreplica.report.traces import Divergence, Replayer, TraceView, Words, counterexample_break, model_steps
from envreplica.report.values import flatten, pretty

#: The stores' names, by index (``spec.migration.STORES``).
STORE_NAMES = ("run", "resource")


def _tables(state: dict) -> T.Tables:
    """The tables of one state: each store, the published files, each live invocation, the counters."""
    tables: T.Tables = {}
    stores = state.get("stores")
    if isinstance(stores, list):
        tables["stores"] = {(STORE_NAMES[i] if i < len(STORE_NAMES) else f"#{i}",): dict(flatten(s))
                            for i, s in enumerate(stores)}
    if "files" in state:
        tables["files"] = {("published",): dict(flatten(state["files"]))}
    procs = state.get("procs")
    if isinstance(procs, list):
        tables["invocations"] = {(f"{p.get('role', '?')}#{p.get('pid', '?')}",):
                                 dict(flatten({k: v for k, v in p.items() if k not in ("pid", "role")}))
                                 for p in procs if isinstance(p, dict)}
    counters = {k: state[k] for k in ("migrations", "recoveries", "crashes", "faults", "original") if k in state}
    if counters:
        tables["counters"] = {("counters",): dict(flatten(counters))}
    return tables


def _observation_tables(obs: Any) -> T.Tables:
    """An observation (``conformance.migration.observe.Observation.to_json``) as tables: each store, then what
    is published."""
    if not isinstance(obs, dict):
        return {}
    stores = obs.get("stores") or []
    return {"stores": {(STORE_NAMES[i] if i < len(STORE_NAMES) else f"#{i}",): dict(flatten(s))
                       for i, s in enumerate(stores)},
            "published": {("files",): dict(flatten({k: v for k, v in obs.items() if k != "stores"}))}}


def _fences(state: dict) -> Optional[str]:
    """Each store's admission after a step ("run maintenance, resource open")."""
    stores = state.get("stores")
    if not isinstance(stores, list):
        return None
    return ", ".join(f"{STORE_NAMES[i] if i < len(STORE_NAMES) else i} {s.get('admission')}"
                     for i, s in enumerate(stores) if isinstance(s, dict))


def _breaks(doc: dict, meta: dict, steps: list) -> tuple[str, str, str, Optional[int], str]:
    """The counterexample's property, and the step at which it first fails (marked in ``steps``) with the sentence
    saying so (or why no step is marked): ``traces.counterexample_break`` on the migration model at the trace's
    bounds."""
    from envreplica.checker import migration as cm
    from envreplica.model import migration as mm
    from envreplica.spec import migration as spec

    def replayer() -> Replayer:
        cfg = next(b for b in mm.suite(str(meta["suite"]), mm.MigrationVariant(meta["variant"]))
                   if b.name == meta["bounds"])
        return Replayer(lambda: mm.init(cfg), lambda st, a: mm.next_state(cfg, st, a), cm.action_from_json,
                        cm.state_vars, cm.MIGRATION_VARS)

    return counterexample_break(doc, meta, steps, spec, replayer, "migration model",
                                "the checker's liveness check found none of the operator's reruns settles from it")


#: The migration's words for the page's columns: the seed's step, the stores' fences after it, a move.
WORDS = Words("seed step", "fences after", "fences", "move")


def read_trace(path: Path, doc: dict, meta: dict, impl_factory: Optional[Callable[[], Any]],
               prefix: str) -> TraceView:
    """The migration's reader (``traces.READERS``): a counterexample, or a lockstep divergence."""
    states = doc["states"]
    tables = [_tables(st) for st in states]
    steps, lockstep, parting = model_steps(doc, tables, _fences)
    if not lockstep:
        name, kind, statement, at, note = _breaks(doc, meta, steps)
        return WORDS.on(TraceView(
            str(path), "counterexample", f"counterexample: {name or meta.get('description') or path.name}", meta,
            [(name, kind, statement, "violated")] if name else [], steps, None, final=T.full(tables[-1]),
            prefix=prefix, breaks_at=at, breaks_note=note))
    assert parting is not None
    steps[parting].breaks = True
    at = states[parting]
    smeta = at.get("#meta") if isinstance(at.get("#meta"), dict) else {}
    reason = str(meta.get("description", "")).removeprefix("migration lockstep divergence: ")
    model, impl = str(at.get("model", "")), str(at.get("implementation", ""))
    compared, model_tables, note = None, None, ""
    if smeta.get("modelObservation") is not None:
        compared = T.compare(_observation_tables(smeta["modelObservation"]),
                             _observation_tables(smeta.get("implementationObservation")))
        note = "what each side holds after the step: the files as the lockstep observes them"
    else:
        model_tables = T.full(tables[parting])
        note = "the answers part (the files were not compared after this step): the model's state after it is shown"
    divergence = Divergence(parting, reason, pretty(smeta.get("action")),
                            [T.FieldDiff("outcome", model, impl, model != impl)], compared, note, model_tables)
    fixes = ", ".join(meta.get("fixes") or []) or "none"
    verdicts = [("migration lockstep", "model vs implementation", f"bounds {meta.get('cfg', '?')} (fixes: {fixes}): "
                 f"every answer and the files equal", "diverged")]
    return WORDS.on(TraceView(
        str(path), "divergence", f"migration lockstep divergence: {path.name}", meta, verdicts, steps, None,
        final=T.full(tables[-1]), divergence=divergence, prefix=prefix, breaks_at=parting,
        breaks_note=f"the implementation parts from the model at step #{parting}",
        finding=str(meta.get("finding") or "")))


def write_migration_report(out: Path, report: Any, decl: Any, variant: Any, adapter: str,
                           required: dict[str, frozenset[str]]) -> Path:
    """Write the page of one ``conformance --protocol migration`` run (``report``, a ``MigrationLockstepReport``)
    to ``out``: the same kind of page as the replica's run (``run.RunView``): its verdict, figures and what the
    adapter declared, then the divergence (its ITF trace, ``report.itf_path``), then the coverage."""
    from envreplica.report.html import write_page
    from envreplica.report.run import RunView, _traces

    harness = report.key == "harness"
    verdict = "PASS" if report.ok else "ADAPTER FAILED" if harness else "FAIL"
    reached, total = report.coverage.reached(required)
    view = RunView(title=f"envreplica conformance --protocol migration --variant {variant.value}",
                   command=f"envreplica conformance --protocol migration --adapter {adapter!r} "
                           f"--variant {variant.value}",
                   failed=not report.ok,
                   stages=[("migration lockstep", f"{decl.implementation} against the migration model",
                            verdict, f"{report.seconds:.1f}")])
    view.figures = [{"examples": report.examples, "moves": report.moves,
                     "moves/s": round(report.moves_per_second, 1), "seconds": round(report.seconds, 2),
                     "profile": report.profile, "shrunk to": report.shrunk_moves or "",
                     "coverage": f"{reached}/{total} required items"}]
    faults = ", ".join(sorted(f.value for f in decl.faults)) or "none"
    view.notes.append(f"the adapter declared: readings {decl.reading}; evidence of a rerun checked "
                      f"{'before' if decl.evidence_first else 'after'} maintenance; faults {faults}; "
                      f"{len(decl.steps)} steps it pauses at; exit statuses "
                      f"{'compared' if decl.exit_status else 'not compared'}; modes {', '.join(decl.modes)}")
    if not report.ok:
        view.notes.append(f"{'the adapter failed' if harness else 'divergence'}: {report.divergence}")
    missing = report.coverage.unreached(required)
    if missing:
        view.notes.append(f"not reached at this budget: {', '.join(missing)}")
    rows = [(g, item if item in required.get(g, frozenset()) else f"{item} (not required)", n)
            for g, item, n in report.coverage.rows()]
    view.coverage.append(("migration lockstep coverage (required items, and the others)", rows))
    itf_path = getattr(report, "itf_path", None)
    traces, notes = _traces([(itf_path, None)] if not report.ok and itf_path is not None else [])
    view.notes += notes
    if not report.ok and not harness and itf_path is None:
        view.notes.append("no ITF trace was written (give --out): the divergence is not shown step by step")
    return write_page(Path(out), view.title, traces, view)


__all__ = ["read_trace", "write_migration_report"]
