"""Run by tests/test_compiled.py in a subprocess, compiled or interpreted: what the checker and the lockstep
find, as JSON on stdout, so that the two ways can be compared whole.

``python tests/compiled_probe.py OUT_DIR``: the model check of the ``tiny`` bounds (both variants) and of
``cloud`` under ``seed`` (finding F1), each as distinct states, transitions, depth, every violation's
counterexample (its actions, written out) and the depth each sometimes property was first witnessed at; then
the derandomized ``ci`` lockstep of the seed's SQLite implementation against the ``fixed`` model (100
examples), as its shrunk trace's requests. And which of spec.compiled.MODULES ran compiled.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from envreplica.checker.bfs import check
from envreplica.checker.run import build_model
from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver
from envreplica.conformance.replica import lockstep_settings, read_requests, run_lockstep
from envreplica.model import lock as _lock  # noqa: F401  (every module of spec.compiled.MODULES loads: the lock's
# are held to their interpreted twins in tests/test_lock_model.py)
from envreplica.model.presets import suite
from envreplica.spec import compiled
from envreplica.spec.variants import Variant


def model_checks() -> dict[str, object]:
    out: dict[str, object] = {}
    for name, variant in (("tiny", Variant.SEED), ("tiny", Variant.FIXED), ("cloud", Variant.SEED)):
        for bounds in suite(name, variant):
            result = check(build_model(bounds), max_depth=bounds.max_depth)
            out[f"{bounds.name}/{variant.value}"] = {
                "states": result.states, "transitions": result.transitions, "depth": result.depth,
                "violations": {p: [repr(step.action) for step in v.steps] for p, v in sorted(result.violations.items())},
                "witnessed": dict(sorted(result.witnessed.items())),
            }
    return out


def lockstep(directory: Path) -> dict[str, object]:
    directory.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    report = run_lockstep(lambda: SqliteDriver("seed", directory / f"r{next(counter)}.db", master_key=TEST_MASTER_KEY),
                          variant="fixed", settings=lockstep_settings("ci", max_examples=100), out_dir=directory / "out")
    return {"ok": report.ok, "examples": report.examples, "shrunk_steps": report.shrunk_steps,
            "failure": report.failure,
            "requests": read_requests(report.trace_path) if report.trace_path is not None else None}


if __name__ == "__main__":
    where = Path(sys.argv[1])
    found = {"model": model_checks(), "lockstep": lockstep(where)}
    print(json.dumps({"status": str(compiled.STATUS), "compiled": compiled.loaded(), "found": found}, sort_keys=True))
