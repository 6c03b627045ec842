"""The gate's verdict on a broken adapter: exit 2, one line naming the move that broke and what broke.

Each case runs ``envreplica conformance`` (a process of its own: its exit status and standard error are what a
user sees) on a working adapter of one protocol (``envreplica adapter --impl model``, ``envreplica adapter
--protocol migration --impl model``, ``envreplica adapter --protocol lock --impl model``) behind
``tests/broken_adapters.py``, which breaks it in one way (it exits,
writes a line that is not JSON or not UTF-8, answers with another id, stalls past ``--timeout``, or answers
with JSON nested 100,000 deep) at one request: the first, a later one every run reaches (the replica's first
``delivery``, the migration's first foreign ``write``, the lock's first ``step``), or one drawn from a seed. The gate must stop there:
exit 2, one line on standard error that names the move (or request) and what broke, no traceback, no
Hypothesis "Flaky" anywhere, never exit 1 (a broken adapter is not a divergence). With ``--junit`` the run's
case is an error, not a failure; ``--report`` and ``--out`` are written or left alone, never a crash.

Budgets are counts (``--max-examples``); the one clock here is the feature under test: a stall is bounded by
``--timeout`` (asserted with a wide margin).
"""

from __future__ import annotations

import random
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import broken_adapters as B

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
PROXY = Path(__file__).with_name("broken_adapters.py")
#: The working adapters, per protocol.
WORKING = {
    "replica": [sys.executable, "-m", "envreplica.cli.main", "adapter", "--impl", "model"],
    "migration": [sys.executable, "-m", "envreplica.cli.main", "adapter", "--protocol", "migration", "--impl", "model"],
    "lock": [sys.executable, "-m", "envreplica.cli.main", "adapter", "--protocol", "lock", "--impl", "model"],
}
PROTOCOLS = tuple(WORKING)
#: A request every run of each protocol reaches at these budgets, after the first example has begun (the lock's
#: first ``step``: move #2 of its first example, after the ``spawn`` of a process).
LATER = {"replica": "op:delivery", "migration": "op:write", "lock": "op:step"}
#: What the first request of each protocol is (the replica's gate starts its adapter with a ``reset``).
FIRST_OP = {"replica": "reset", "migration": "hello", "lock": "hello"}
#: Examples per run: enough that ``LATER`` and every ``random`` position are reached (the lock's 4 examples send
#: 93 moves, each with an ``observe`` after it: ``envreplica conformance --protocol lock --max-examples 4``; the
#: migration's 4 examples no longer send a foreign ``write``, as of aee7f54: its 8 send 717 requests, 7 of them
#: writes, the same with ``--protocol migration --max-examples 8``).
EXAMPLES = {"replica": "6", "migration": "8", "lock": "4"}
#: The per-response timeout given to every run (seconds); a stall ends the run within ``STALL_BOUND``.
TIMEOUT = 2.0
STALL_BOUND = 60.0
#: The bound of the adapter's first answer (``--start-timeout``; ``--timeout`` alone would bound it too).
START_TIMEOUT = 120.0
#: What the one line must say broke, per break.
SAYS = {
    "exit": r"exited with status 1",
    "not-json": r"not JSON",
    "not-utf8": r"not UTF-8",
    "other-id": r"the answer's id is \d+, expected \d+",
    "stall": rf"did not answer within {TIMEOUT:g} s",
    "deep": r"nested deeper than \d+",
}
#: Seeds of the random positions (one per break: each a request no test chose).
SEEDS = {"exit": 11, "not-json": 12, "not-utf8": 13, "other-id": 14, "stall": 15, "deep": 16}


def broken(protocol: str, how: str, when: str) -> str:
    return shlex.join([sys.executable, str(PROXY), how, when, "--", *WORKING[protocol]])


def gate(protocol: str, adapter: str, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run([*ENVREPLICA, "conformance", "--protocol", protocol, "--adapter", adapter,
                           "--max-examples", EXAMPLES[protocol], "--timeout", f"{TIMEOUT:g}",
                           "--start-timeout", f"{START_TIMEOUT:g}", "--out", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, timeout=600)  # a safety net only
    return done, time.perf_counter() - started


def assert_broken_verdict(done: subprocess.CompletedProcess, says: str, names: str) -> str:
    """Exit 2, one line on stderr saying ``says`` and naming ``names``; no traceback, no Flaky; the line."""
    shown = f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 2, shown
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, shown
    line = lines[0]
    assert line.startswith("envreplica conformance: "), shown
    assert "Traceback" not in done.stderr + done.stdout, shown
    assert "Flaky" not in done.stderr + done.stdout and "DIVERGENCE" not in done.stdout, shown
    assert "RecursionError" not in line, shown
    assert re.search(says, line), (says, shown)
    assert re.search(names, line), (names, shown)
    return line


def _cases():
    for protocol in PROTOCOLS:
        for how in B.BREAKS:
            # a stall at the very first request waits --start-timeout (START_TIMEOUT here: the adapter's start
            # on a busy machine is no part of what is tested; tests/test_progress.py holds a stalled start)
            whens = ["at:1"] if how != "stall" else []
            whens += [LATER[protocol], f"random:{SEEDS[how]}"]
            for when in whens:
                yield pytest.param(protocol, how, when, id=f"{protocol}-{how}-{when}")


@pytest.mark.parametrize("protocol, how, when", list(_cases()))
def test_a_broken_adapter_is_exit_2_naming_the_move(protocol, how, when, tmp_path):
    done, seconds = gate(protocol, broken(protocol, how, when), tmp_path)
    kind, value = B.position(when)
    if kind == "at" and value == 1:
        names = rf"`{FIRST_OP[protocol]}`"
    elif kind == "op":
        names = rf"#\d+ \(`{value}\b"  # the move or step, by its number and its op
    else:
        names = rf"request {value} to the adapter process"
    assert_broken_verdict(done, SAYS[how], names)
    if how == "stall":
        assert seconds < STALL_BOUND, seconds


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_adapter_that_exits_at_start_is_exit_2(protocol, tmp_path):
    done, _ = gate(protocol, broken(protocol, "exit", "start"), tmp_path)
    assert_broken_verdict(done, "exited with status 1", "could not be run")
    assert "exits before reading anything" in done.stderr  # its standard error, quoted


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_outputs_of_a_broken_run_are_written_and_its_junit_case_is_an_error(protocol, tmp_path):
    """``--junit``, ``--report`` and ``--out`` on a run whose adapter breaks mid-run (deeply nested JSON on a
    move every run reaches): the JUnit case is an error with the line's reason; the HTML page is written; no
    crash."""
    junit, page = tmp_path / "gate.xml", tmp_path / "gate.html"
    done, _ = gate(protocol, broken(protocol, "deep", LATER[protocol]), tmp_path, "--junit", str(junit),
                   "--report", str(page))
    line = assert_broken_verdict(done, SAYS["deep"], rf"`{B.position(LATER[protocol])[1]}\b")
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None and suite.get("errors") == "1" and suite.get("failures") == "0", junit.read_text()
    error = suite.find("testcase").find("error")
    assert error is not None and "nested deeper than" in (error.get("message") or ""), junit.read_text()
    assert page.is_file() and "nested deeper than" in page.read_text(), line


def test_the_random_positions_are_spread():
    """The seeds' positions differ (the random cases do not all break at one request)."""
    positions = {random.Random(seed).randint(*B.RANDOM_RANGE) for seed in SEEDS.values()}
    assert len(positions) >= 4, positions


#: A lock adapter that diverges (the model less ``claimed-takeover``, under ``fixed``) broken at a request of each
#: phase of the run: while Hypothesis generates (request 200: move #1 of example 6, an example whose first choices
#: example 5 made and went on from, where a break once came back as Hypothesis's ``FlakyStrategyDefinition``, exit
#: 3) and while ``minimize`` replays the divergence it found in example 11 (request 460: example 13). Measured:
#: ``envreplica conformance --protocol lock --adapter "envreplica adapter --protocol lock --impl model --without
#: claimed-takeover" --max-examples 120`` sends 511 requests; its divergence is found at request 453.
DIVERGING_LOCK = [*WORKING["lock"], "--without", "claimed-takeover"]
LOCK_PHASES = {"at:200": r"of example 6\b", "at:460": r"of example 13\b"}


@pytest.mark.parametrize("when", list(LOCK_PHASES))
@pytest.mark.parametrize("how", B.BREAKS)
def test_a_lock_adapter_broken_while_generating_or_minimizing_is_exit_2(how, when, tmp_path):
    adapter = shlex.join([sys.executable, str(PROXY), how, when, "--", *DIVERGING_LOCK])
    started = time.perf_counter()
    done = subprocess.run([*ENVREPLICA, "conformance", "--protocol", "lock", "--adapter", adapter,
                           "--max-examples", "120", "--timeout", f"{TIMEOUT:g}", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)  # a safety net only
    seconds = time.perf_counter() - started
    line = assert_broken_verdict(done, SAYS[how], rf"request {when[3:]} to the adapter process")
    assert re.search(LOCK_PHASES[when], line), line
    if how == "stall":
        assert seconds < STALL_BOUND, seconds
