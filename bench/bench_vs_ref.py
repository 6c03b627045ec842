"""Delivery and snapshot cost of this tree against another git ref, measured in one run, interleaved.

Builds the ref in a temporary worktree with its own virtual environment (pip
reuses its cache), then runs the same measurement in both, alternately,
``--rounds`` times: live deliveries per second at ``synchronous=NORMAL`` and
``FULL`` (each delivery fetches, seals and installs a new key), and the time
of a snapshot of ``--values`` installed values. It prints the medians and the
ratio this tree / ref. The measurement uses each tree's own
``bench/bench_impl.py`` helpers, so the two run the same scenario through
their own API.

Default ref: ``59cf726``, the last commit without integrity at rest,
which the cost of tamper evidence is measured against.

Run: ``.venv/bin/python bench/bench_vs_ref.py [--ref REF] [--rounds N] [--deliveries N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Run inside each tree's interpreter: prints one JSON object of figures.
PROBE = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/bench")
import bench_impl as B
n, values, sync = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
store = B._seed_store(max(n, values))
with tempfile.TemporaryDirectory(prefix="envreplica-vs-ref-") as d:
    rate = B.bench_deliveries(Path(d), sync, n, store)
    out = {"deliveries_per_s": rate}
    if sync == "NORMAL":
        _, _, impl_median, _ = B.bench_snapshot(Path(d), values, store)
        out["snapshot_ms"] = impl_median * 1000
print(json.dumps(out))
"""


def _venv_for(ref: str, work: Path) -> tuple[Path, Path]:
    tree = work / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), ref], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    python = work / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tree)], check=True, capture_output=True,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return tree, python


def _probe(python: Path, tree: Path, n: int, values: int, sync: str) -> dict:
    out = subprocess.run([str(python), "-c", PROBE, str(tree), str(n), str(values), sync], check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="59cf726", help="the git ref to compare with (default: 59cf726, without integrity at rest)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--deliveries", type=int, default=400)
    parser.add_argument("--values", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envreplica-ref-") as tmp:
        ref_tree, ref_python = _venv_for(args.ref, Path(tmp))
        try:
            sides = {"this tree": (REPO, Path(sys.executable)), f"ref {args.ref}": (ref_tree, ref_python)}
            figures: dict = {name: {"NORMAL": [], "FULL": [], "snapshot_ms": []} for name in sides}
            for _ in range(args.rounds):
                for sync in ("NORMAL", "FULL"):
                    for name, (tree, python) in sides.items():  # interleaved: same machine state for both
                        got = _probe(python, tree, args.deliveries, args.values, sync)
                        figures[name][sync].append(got["deliveries_per_s"])
                        if "snapshot_ms" in got:
                            figures[name]["snapshot_ms"].append(got["snapshot_ms"])
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(ref_tree)],
                           capture_output=True)
    this, ref = figures["this tree"], figures[f"ref {args.ref}"]
    print(f"medians of {args.rounds} interleaved rounds, {args.deliveries} deliveries, {args.values} values")
    for sync in ("NORMAL", "FULL"):
        a, b = statistics.median(this[sync]), statistics.median(ref[sync])
        print(f"live deliveries/s, synchronous={sync:<6}: this tree {a:7.0f}   ref {b:7.0f}   ratio {a / b:.2f}")
    a, b = statistics.median(this["snapshot_ms"]), statistics.median(ref["snapshot_ms"])
    print(f"snapshot of {args.values} values, ms:          this tree {a:7.1f}   ref {b:7.1f}   ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
