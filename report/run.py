"""A whole run in a report: ``envreplica check --report FILE`` and ``envreplica conformance --report FILE``.

Models: ``ModelCheckRecord`` is what the model check knows (per bounds:
states, transitions, depth, seconds; each property's verdict per bounds; the
coverage; the counterexample files). ``check`` may run the model check in a
child process (``cli.main._BackgroundModelCheck``), so the record goes
through a small JSON file beside the report (``FILE.model-check.json``,
removed once the page is written). ``write_check_report`` and
``write_conformance_report`` add the stages, the lockstep's coverage and
its divergence, and write the page.

Leaves out on purpose: re-running anything but the divergent lockstep trace
(replayed once on the implementation, so the page shows its tables beside
the model's).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from envreplica.report.html import write_page
from envreplica.report.traces import ImplementationUnavailable, ReportInputError, TraceView, read


@dataclass
class RunView:
    title: str
    command: str
    failed: bool
    stages: list = field(default_factory=list)  # (stage, what, result, seconds)
    bounds: list = field(default_factory=list)  # bounds names (verdict columns)
    verdicts: list = field(default_factory=list)  # (name, kind, statement, [verdict per bounds])
    figures: list = field(default_factory=list)  # dicts, one per bounds
    coverage: list = field(default_factory=list)  # (title, [(group, item, count)])
    notes: list = field(default_factory=list)


def _sidecar(report: str) -> Path:
    return Path(str(report) + ".model-check.json")


def _plain(markup: str) -> str:
    """A summary cell without rich markup."""
    from rich.text import Text

    try:
        return Text.from_markup(str(markup)).plain
    except Exception:  # not markup after all
        return str(markup)


class ModelCheckRecord:
    """What ``cli.main._model_check`` learns, saved for the page (it may run in a child process)."""

    def __init__(self, args) -> None:
        self.path = _sidecar(args.report)
        self.path.unlink(missing_ok=True)  # a stale record of an earlier run is never read
        # Who wrote it: this process (``--serial``, ``--model-only``) or the child of the one that reads it.
        self.data: dict[str, Any] = {"bounds": args.bounds, "variant": args.variant, "figures": [], "traces": [],
                                     "writers": [os.getpid(), os.getppid()]}

    def add_bounds(self, bounds, r) -> None:
        self.data["figures"].append({
            "bounds": bounds.name, "mode": bounds.mode.value, "distinct states": r.states,
            "transitions": r.transitions, "depth": r.depth,
            "complete": "yes" if r.complete else f"to depth {bounds.max_depth}",
            "seconds": round(r.seconds, 2), "states/s": round(r.states_per_second)})

    def add_trace(self, path) -> None:
        self.data["traces"].append(str(path))

    def save(self, verdicts: dict, coverage, collision: float, failed: bool) -> Path:
        from envreplica.checker.coverage import UNREACHABLE

        self.data.update(verdicts=verdicts, coverage=[list(r) for r in coverage.rows()], collision=collision,
                         failed=failed, unreachable={c.value: why for c, why in UNREACHABLE.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data))
        return self.path


def add_trace(report: str, path) -> bool:
    """Add a counterexample another stage of the same process wrote (the migration's model check, after the
    replica's saved its record) to the record beside ``report``; False when there is no record to add it to."""
    sidecar = _sidecar(report)
    try:
        data = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return False
    data.setdefault("traces", []).append(str(path))
    sidecar.write_text(json.dumps(data))
    return True


def _model_part(view: RunView, report: str) -> list[str]:
    """Fill ``view`` from the model check's record; the counterexample files."""
    from envreplica.spec import properties as P

    path = _sidecar(report)
    try:
        data = json.loads(path.read_text())
        if os.getpid() not in data.get("writers", ()):
            raise ValueError("a record of another run")
    except (OSError, ValueError):
        view.notes.append("the model check left no record (it did not finish): no verdicts or figures")
        return []
    finally:
        path.unlink(missing_ok=True)
    view.bounds = [f["bounds"] for f in data["figures"]]
    kinds = {p.name: (p.kind, p.statement) for p in P.ALL}
    for name, cells in data["verdicts"].items():
        kind, statement = kinds.get(name, ("?", ""))
        view.verdicts.append((name, kind, statement, ["violated" if c == "VIOLATED" else c for c in cells]))
    view.figures = data["figures"]
    view.coverage.append(("model-check coverage (all bounds together)", data["coverage"]))
    view.notes.append(f"visited sets of 64-bit fingerprints: estimated probability that two distinct states shared "
                      f"one {data['collision']:.1e}")
    for code, why in data.get("unreachable", {}).items():
        view.notes.append(f"unreachable {code}: {why}")
    return data["traces"]


def _traces(paths: list) -> tuple[list, list]:
    """The views of ``paths`` ((path, implementation factory or None)); notes for the ones not shown."""
    views: list[TraceView] = []
    notes: list[str] = []
    for path, factory in paths:
        prefix = f"-t{len(views)}" if views else ""  # never a step number: ids stay unique
        try:
            try:
                views.append(read(Path(path), factory, prefix=prefix))
            except ImplementationUnavailable as error:
                notes.append(f"trace {path}: {error}")
                views.append(read(Path(path), None, prefix=prefix))
        except (ReportInputError, OSError) as error:
            notes.append(f"trace {path} not shown: {error}")
    return views, notes


def write_check_report(args, stages: list, lockstep=None) -> Path:
    """The page of one ``envreplica check`` run, written to ``args.report``."""
    view = RunView(title=f"envreplica check --bounds {args.bounds} --variant {args.variant}",
                   command=f"envreplica check --bounds {args.bounds} --variant {args.variant}"
                           + (" --model-only" if args.model_only else ""),
                   failed=any(_plain(s[2]).strip() == "FAIL" for s in stages),
                   stages=[tuple(_plain(c) for c in s) for s in stages])
    paths = [(p, None) for p in _model_part(view, args.report)]
    if lockstep is not None:
        view.coverage.append(("lockstep coverage (SQLite vs model)", [list(r) for r in lockstep.coverage.rows()]))
        if not lockstep.ok and lockstep.itf_path is not None:
            paths.append((lockstep.itf_path, _sqlite_factory(lockstep.variant)))
    traces, notes = _traces(paths)
    view.notes += notes
    return write_page(Path(args.report), view.title, traces, view)


def write_conformance_report(args, lockstep, cases: list) -> Path:
    """The page of one ``envreplica conformance`` run, written to ``args.report``."""
    from envreplica.conformance.external import SubprocessDriver

    stages = [(c.name, (c.message or "parts from the model") if c.failure else "agrees",
               "FAIL" if c.failure or c.error else "PASS", f"{c.seconds:.1f}") for c in cases]
    view = RunView(title=f"envreplica conformance --variant {lockstep.variant}",
                   command=f"envreplica conformance --adapter {args.adapter!r} --variant {args.variant}",
                   failed=any(s[2] == "FAIL" for s in stages), stages=stages)
    view.figures = [{"run": f"lockstep {lockstep.variant}", "examples": lockstep.examples, "steps": lockstep.steps,
                     "steps/s": round(lockstep.steps_per_second), "seconds": round(lockstep.seconds, 2),
                     "tables": lockstep.tables or "", "shrunk to": lockstep.shrunk_steps or ""}]
    view.coverage.append(("lockstep coverage", [list(r) for r in lockstep.coverage.rows()]))
    paths = []
    if not lockstep.ok and lockstep.itf_path is not None:
        paths.append((lockstep.itf_path, lambda: SubprocessDriver(args.adapter, timeout=args.timeout)))
    traces, notes = _traces(paths)
    view.notes += notes
    return write_page(Path(args.report), view.title, traces, view)


def _sqlite_factory(variant: str):
    """The built-in SQLite implementation on a scratch file (public TEST key), as ``check``'s lockstep ran it."""
    from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
    from envreplica.conformance.replica.context import _scratch_dir

    class _Scratch(SqliteDriver):
        _dir: str  # the scratch directory the file lives in, removed on close

        def close(self) -> None:
            try:
                super().close()
            finally:
                shutil.rmtree(self._dir, ignore_errors=True)

    def make():
        scratch = _scratch_dir()
        driver = _Scratch(variant, Path(scratch) / "replica.db", master_key=TEST_MASTER_KEY)
        driver._dir = scratch
        return driver

    return make


def page_path_of(trace: Path) -> Path:
    """Where a trace's page goes unless told otherwise: beside it, ``NAME.html`` for ``NAME.itf.json`` (or a
    lockstep's ``NAME.jsonl``)."""
    trace = Path(trace)
    for suffix in (".itf.json", ".jsonl", ".json"):
        if trace.name.endswith(suffix):
            return trace.with_name(trace.name[: -len(suffix)] + ".html")
    return trace.with_name(trace.name + ".html")


def write_beside(trace: Path) -> tuple[Optional[Path], str]:
    """The page of a trace a run wrote (``check`` / ``conformance --out``), written beside it (``page_path_of``):
    (the page, "") or (None, why it was not written). The page is a by-product of the run: what kept it from
    being written is said, never raised, so the run's verdict stands. A lockstep divergence's page shows the
    model's tables (``envreplica report FILE --adapter COMMAND`` replays it on the implementation too)."""
    try:
        return write_trace_report(Path(trace), page_path_of(trace)), ""
    except Exception as error:  # the report is a by-product: say what went wrong, keep the verdict
        return None, f"{type(error).__name__}: {error}"


def write_trace_report(path: Path, out: Path, adapter: Optional[str] = None, timeout: float = 30.0) -> Path:
    """The page of one trace file (``envreplica report FILE``)."""
    factory = None
    if adapter:
        from envreplica.conformance.external import SubprocessDriver

        factory = lambda: SubprocessDriver(adapter, timeout=timeout)  # noqa: E731
    view = read(Path(path), factory)
    return write_page(Path(out), f"envreplica report: {Path(path).name}", [view], None)
