"""The projection lock under the stress of ``reliability.lock_stress``, small: 8 processes, a stale lock to start
with, SIGKILLs inside and outside the operation, on ext4 and on tmpfs. Verdicts in counts: 0 overlaps, 0 wedged
locks, every kill done, the stale lock taken over. The harness is shown to count what it counts: with no lock at
all it sees overlaps; with a bare ``mkdir`` lock (no takeover) a holder killed inside wedges it.

``bench/bench_lock.py`` runs the same at full size, beside the well-known Python locks and the seed's own.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from envreplica.reliability.lock_stress import filesystem_of, run_lock_stress

KILLS = 12  # half inside the operation, half outside
PROCESSES = 8


@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_our_lock_holds_under_kills(tmp_path, where):
    if where == "shm":
        if not (os.path.isdir("/dev/shm") and filesystem_of(Path("/dev/shm")) == "tmpfs"):
            pytest.skip("no tmpfs at /dev/shm")
        directory = Path(tempfile.mkdtemp(prefix="envreplica-lock-", dir="/dev/shm"))
    else:
        directory = tmp_path
    try:
        result = run_lock_stress("envreplica", directory / "run", processes=PROCESSES, kills=KILLS, seed=3)
    finally:
        if where == "shm":
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
    assert result.errors == 0, result.error_lines
    assert result.kills == KILLS  # the stale lock's first holder among them
    assert result.kills_inside >= 2  # the first holder, and at least one more killed inside
    assert result.overlaps == 0 and result.max_inside == 1
    assert result.wedged == 0
    assert result.entries >= (KILLS - 1) * 2 + PROCESSES  # two entries between kills, then one per process after


def test_the_harness_counts_overlaps_without_a_lock(tmp_path):
    result = run_lock_stress("none", tmp_path / "run", processes=4, kills=2, seed=1)
    assert result.overlaps > 0 and result.max_inside >= 2


def test_the_harness_counts_a_wedged_lock(tmp_path):
    """A bare mkdir lock: its first holder killed inside leaves it held; the harness sees the stall (every holder
    dead), clears it as an operator would, and counts it."""
    result = run_lock_stress("mkdir", tmp_path / "run", processes=4, kills=2, seed=1, stall_rounds=25)
    assert result.wedged >= 1
