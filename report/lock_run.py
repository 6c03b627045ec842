"""The page of one ``envreplica conformance --protocol lock`` run.

Models: the same kind of page as the migration's run (``run.RunView``): the verdict, the figures and what the
adapter declared, then the divergence (its ITF trace, read by ``report.lock``), then the coverage.

Leaves out on purpose: the implementation's own tables (an adapter's observation is in the trace's
``#meta.implementationObservation`` where it differs from the model's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


def write_lock_report(out: Path, report: Any, decl: Any, variant: Any, adapter: str, required: frozenset[str],
                      itf_path: Optional[Path] = None, finding: Optional[str] = None) -> Path:
    """Write the page of one lock conformance run (``report``: a ``LockLockstepReport``) to ``out``."""
    from envreplica.report.html import write_page
    from envreplica.report.run import RunView, _traces

    verdict = "PASS" if report.passed and not report.adapter_failure else \
        "ADAPTER FAILED" if report.adapter_failure else "FAIL"
    missing = report.coverage.unreached(required)
    view = RunView(title=f"envreplica conformance --protocol lock --variant {variant.value}",
                   command=f"envreplica conformance --protocol lock --adapter {adapter!r} --variant {variant.value}",
                   failed=verdict != "PASS",
                   stages=[("lock lockstep", f"{decl.implementation} against the lock model", verdict,
                            f"{report.seconds:.1f}")])
    view.figures = [{"examples": report.examples, "moves": report.moves,
                     "moves/s": round(report.moves_per_second, 1), "seconds": round(report.seconds, 2),
                     "coverage": f"{len(required) - len(missing)}/{len(required)} required items"}]
    view.notes.append(f"the adapter declared: the {decl.design} design; {len(decl.steps)} steps it pauses at; "
                      f"tries before busy {decl.max_tries if decl.max_tries is not None else 'as reset sets them'}; "
                      f"world {', '.join(sorted(decl.world)) or 'none'}; busy answers "
                      f"{'name' if decl.busy_names else 'do not name'} whom they waited for")
    if report.adapter_failure:
        view.notes.append(f"the adapter failed: {report.adapter_failure}")
    elif report.divergence is not None:
        view.notes.append(f"divergence ({report.divergence.key}): {report.divergence.reason}")
        if finding:
            view.notes.append(f"finding: {finding}")
    if missing:
        view.notes.append(f"not reached at this budget: {', '.join(missing)}")
    rows = [("lock", item if item in required else f"{item} (not required)", n)
            for item, n in sorted(report.coverage.counts.items())]
    view.coverage.append(("lock lockstep coverage (required items, and the others)", rows))
    traces, notes = _traces([(itf_path, None)] if itf_path is not None else [])
    view.notes += notes
    return write_page(Path(out), view.title, traces, view)


__all__ = ["write_lock_report"]
