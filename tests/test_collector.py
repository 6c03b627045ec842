"""checker.collector: full collections deferred while a check runs, the thresholds restored after, and no check
leaving a cycle through what it kept (which the next full collection would walk, seconds long, inside whatever
ran next: 3 s after the lock's suite, compiled, while ``checker.bfs`` kept a closure that held itself)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from test_compiled import _env, _require_build

from envreplica.checker.collector import DEFERRED_THRESHOLD, full_collections_deferred


def test_full_collections_are_deferred_inside_and_the_thresholds_restored_after_nesting_and_errors():
    before = gc.get_threshold()
    try:
        gc.set_threshold(500, 7, 9)
        with full_collections_deferred():
            assert gc.get_threshold() == (500, 7, DEFERRED_THRESHOLD)  # young and middle collections as they were
            with full_collections_deferred():
                assert gc.get_threshold() == (500, 7, DEFERRED_THRESHOLD)
            assert gc.get_threshold() == (500, 7, DEFERRED_THRESHOLD)
            try:
                with full_collections_deferred():
                    raise KeyError("a check that fails")
            except KeyError:
                pass
            assert gc.get_threshold() == (500, 7, DEFERRED_THRESHOLD)
        assert gc.get_threshold() == (500, 7, 9)
        gc.set_threshold(700, 10, 5000)  # a caller's own higher threshold is kept, never lowered
        with full_collections_deferred():
            assert gc.get_threshold() == (700, 10, 5000)
    finally:
        gc.set_threshold(*before)


#: Each protocol's model check as a command, at small bounds, then what a full collection finds unreachable.
_LEFT_BEHIND = """
import gc, json, sys
from envreplica.cli.main import main
from envreplica.spec import compiled
left = {"compiled": compiled.STATUS.compiled}
for name, argv in json.loads(sys.argv[1]).items():
    gc.collect()
    try:
        main(argv)
    except SystemExit:
        pass
    left[name] = gc.collect()  # the objects that only a full collection frees: cyclic garbage
print(json.dumps(left))
"""

_CHECKS = {
    "replica": ["check", "--protocol", "replica", "--model-only", "--serial", "--bounds", "tiny", "--quiet"],
    "migration": ["check", "--protocol", "migration", "--quiet"],
    "lock": ["check", "--protocol", "lock", "--bounds", "lock-tiny", "--quiet"],
}


def _left_behind(pure: bool, tmp_path) -> dict:
    done = subprocess.run([sys.executable, "-c", _LEFT_BEHIND, json.dumps(
        {name: [*argv, "--out", str(tmp_path / name)] for name, argv in _CHECKS.items()})],
        env=_env(pure), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_check_leaves_a_cycle_through_what_it_kept_compiled(tmp_path):
    """Compiled is where the cycle was (a mypyc closure's environment holds the closure); the lock's tiny suite
    left 21,005 objects so at its ``answers`` bounds (1,155 states), 2 million at its ``lock`` suite
    (measured before the fix, ``checker.collector``)."""
    _require_build()
    left = _left_behind(False, tmp_path)
    assert left.pop("compiled") is True
    assert all(n < 1_000 for n in left.values()), left


def test_no_check_leaves_a_cycle_through_what_it_kept_interpreted(tmp_path):
    left = _left_behind(True, tmp_path)
    assert left.pop("compiled") is False
    assert all(n < 1_000 for n in left.values()), left
