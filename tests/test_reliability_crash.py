"""The crash and torn-write harnesses (``reliability.crash``, ``reliability.torn``), run small.

Each run must reach the states it exists for (kills with requests in flight,
during deliveries and during snapshots; a WAL of many frames, cut and
garbled), and the crash harness must catch an adapter that acknowledges
deliveries before they are durable. The full-size runs are
``run_crash(kills=200, deliveries=400)`` and ``run_torn(deliveries=300)``.
"""

from __future__ import annotations

import shlex
import sys
import textwrap

import pytest

from envreplica.reliability.crash import adapter_argv, run_crash
from envreplica.reliability.torn import run_torn

SNAPSHOT_OPS = {"begin", "page", "commit"}

#: An adapter with a write-back cache: the real one, but what it wrote since the last
#: commit is lost when it restarts (it saves a copy of the replica after each commit and
#: puts that copy back when it starts). Deliveries are acknowledged before they are durable.
ACK_BEFORE_DURABLE = textwrap.dedent('''
    import argparse
    import shutil
    import sys
    from pathlib import Path

    from envreplica.conformance.adapter import build_driver, serve

    db = Path(sys.argv[1])
    files = [db, Path(f"{db}-wal")]
    saved = [Path(f"{f}.durable") for f in files]


    def save():
        for live, copy in zip(files, saved):
            if live.exists():
                shutil.copyfile(live, copy)
            else:
                copy.unlink(missing_ok=True)


    def restore():
        if not saved[0].exists():
            return
        for live, copy in zip(files, saved):
            if copy.exists():
                shutil.copyfile(copy, live)
            else:
                live.unlink(missing_ok=True)
        Path(f"{db}-shm").unlink(missing_ok=True)


    restore()
    driver = build_driver(argparse.Namespace(impl="sqlite", variant="fixed", db=str(db), store="embedded",
                                             test_key=True, anchor=None))
    handle = driver.handle


    def handle_then_save_commits(request):
        response = handle(request)
        if isinstance(request, dict) and request.get("op") == "commit":
            save()
        return response


    driver.handle = handle_then_save_commits
    serve(driver, sys.stdin.buffer, sys.stdout)
''')


def test_crash_kills_land_in_flight_and_lose_nothing(scratch):
    report = run_crash(kills=10, deliveries=60, seed=1, workdir=scratch)
    landed = dict(report.landed)
    assert report.kills == 10
    aimed = dict(report.aimed)  # drawn from the seed: startup 1, snapshot 4, delivery 5 (while deliveries remain)
    assert aimed["startup"] == 1 and aimed["snapshot"] >= 4 and sum(aimed.values()) == 10, report.lines()
    assert report.kills_in_flight >= 5, report.lines()
    assert landed.get("delivery", 0) >= 1, report.lines()
    assert sum(landed.get(op, 0) for op in SNAPSHOT_OPS) >= 1, report.lines()
    assert report.acknowledged >= 50, report.lines()  # all but those whose answer a kill cut off
    assert report.receipts_checked >= report.acknowledged
    assert report.resumes >= 5, report.lines()
    assert report.read_backs == 11  # after each kill, and at the end
    assert report.invariant_checks > 0
    assert all(isinstance(line, str) and line for line in report.lines())
    assert list(scratch.iterdir()) == []  # the scratch directory is removed


def test_crash_catches_deliveries_acknowledged_before_durable(scratch, tmp_path):
    script = tmp_path / "ack_before_durable.py"
    script.write_text(ACK_BEFORE_DURABLE)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{db}}"
    # Seed 0 aims the first kill at delivery 19: 18 are acknowledged first, then lost by the restart.
    with pytest.raises(AssertionError, match=r"kill \d+ of 4.*acknowledged delivery \d+ lost"):
        run_crash(kills=4, deliveries=30, seed=0, workdir=scratch, adapter_command=command)
    assert list(scratch.iterdir()) == []


def test_adapter_command_must_name_the_file():
    assert adapter_argv("impl --db {db} --x '{db}.b'", "/r d/x.db") == ["impl", "--db", "/r d/x.db", "--x",
                                                                      "/r d/x.db.b"]
    with pytest.raises(ValueError, match="{db}"):
        adapter_argv("impl --db replica.db", "/x.db")


def test_torn_wal_every_boundary_is_a_committed_prefix(scratch):
    report = run_torn(deliveries=40, seed=0, workdir=scratch, garble_every=7)
    assert report.frames > 100, report.lines()
    assert report.boundaries == report.frames + 1
    assert report.garbled + report.cut_inside == len(range(0, report.frames, 7))
    assert report.garbled > 0 and report.garbled_headers > 0 and report.cut_inside > 0, report.lines()
    assert report.acknowledged == 40
    assert report.receipts_checked > report.acknowledged
    assert report.states_compared > 0
    assert all(isinstance(line, str) and line for line in report.lines())
    assert list(scratch.iterdir()) == []
