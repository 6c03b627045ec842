"""Benchmark of the conformance adapter (not a test): requests per second, pipelined and one round trip each.

The fixed trace bench/traces/adapter-throughput.jsonl (about 4,100 requests
of a consistent cloud: begins, pages, commits, deliveries with the values
they stage put in the store first, snapshot and status reads; written by
bench/make_adapter_trace.py) goes through three adapters:

* ``echo``: ``python -c`` answering ``{"id", "ok": true, "result": {}}`` to
  each line, flushing each answer as ``conformance.adapter.serve`` does:
  the pipe's own ceiling, and this harness's;
* ``model``: ``envreplica adapter --impl model --variant fixed``;
* ``sqlite``: ``envreplica adapter --impl sqlite --test-key --variant fixed``,
  its temporary replica on tmpfs when there is one (``TMPDIR``; fsync is then
  free, as in bench_lockstep.py), or with ``--disk`` on the default
  temporary directory.

Each adapter runs ``conformance.pipeline.pipelined`` (``--window`` requests in
flight) and ``round_trip`` (``SubprocessDriver``, one request at a time), a
fresh process each time, the runs interleaved over ``--repeats`` rounds
(echo, model, sqlite; pipelined then round trip), so a load that comes and
goes on the machine touches every cell alike. Each cell shows the median
rate, between the first answer and the last (start-up not timed), with the
range over the rounds. The model's and SQLite's answers must be the same,
pipelined and round trip, in every round (asserted); the table shows how
many were ok, refused (a result with ``ok: false``) or errors.

Run: ``.venv/bin/python bench/bench_adapter.py [--repeats N] [--window N] [--disk]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from envreplica.conformance.replica.traces import read_requests
from envreplica.conformance.pipeline import DEFAULT_WINDOW, pipelined, round_trip

HERE = Path(__file__).resolve().parent
TRACE = HERE / "traces" / "adapter-throughput.jsonl"

#: The floor: an adapter that reads each line's id and answers ok, flushing each answer.
ECHO = ("import json, sys\n"
        "write, flush = sys.stdout.write, sys.stdout.flush\n"
        "for line in sys.stdin:\n"
        "    write(json.dumps({'id': json.loads(line).get('id'), 'ok': True, 'result': {}}) + '\\n')\n"
        "    flush()\n")


def _adapter(impl: str) -> list[str]:
    argv = [sys.executable, "-m", "envreplica.cli.main", "adapter", "--impl", impl, "--variant", "fixed"]
    return argv + (["--test-key"] if impl == "sqlite" else [])


def _tally(responses: list) -> str:
    ok = refused = error = 0
    for r in responses:
        result = r.get("result")
        if r.get("ok") is not True:
            error += 1
        elif isinstance(result, dict) and result.get("ok") is False:
            refused += 1
        else:
            ok += 1
    return f"{ok:,} / {refused:,} / {error:,}"


def _difference(what: str, got: list, reference: str, want: list, trace: Path) -> str:
    index = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    shown = [json.dumps(x[index])[:300] if index < len(x) else "(no answer)" for x in (got, want)]
    return (f"{what}: the answers differ from {reference}'s at request #{index + 1}: {shown[0]} against "
            f"{shown[1]}. The model and SQLite must answer the trace the same: replay it with "
            f"envreplica replay {trace} to see the first divergence")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE,
                        help=f"the requests (default {TRACE.relative_to(HERE.parent)})")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every run (default 3)")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                        help=f"requests in flight when pipelined (default {DEFAULT_WINDOW})")
    parser.add_argument("--disk", action="store_true",
                        help="SQLite's temporary replica on the default temporary directory, not tmpfs")
    args = parser.parse_args()
    requests = read_requests(args.trace)
    env = dict(os.environ)
    shm = "/dev/shm"
    where = tempfile.gettempdir()
    if not args.disk and os.path.isdir(shm) and os.access(shm, os.W_OK):
        env["TMPDIR"] = where = shm
    adapters = {"echo (pipe floor)": [sys.executable, "-c", ECHO], "model": _adapter("model"),
                "sqlite": _adapter("sqlite")}
    modes = {"pipelined": lambda cmd: pipelined(cmd, requests, window=args.window, env=env),
             "round trip": lambda cmd: round_trip(cmd, requests, env=env)}
    rates: dict = {(a, m): [] for a in adapters for m in modes}
    answers: dict = {}
    console = Console(stderr=True)
    for n in range(1, args.repeats + 1):
        for name, command in adapters.items():
            for mode, run in modes.items():
                result = run(command)
                rates[name, mode].append(result.requests_per_second)
                console.print(f"round {n}/{args.repeats}: {name}, {mode}: "
                              f"{result.requests_per_second:,.0f} requests/s", highlight=False)
                if name == "echo (pipe floor)":
                    continue
                first = answers.setdefault("reference", (f"{name}, {mode}, round {n}", result.responses))
                if result.responses != first[1]:
                    raise SystemExit(_difference(f"{name}, {mode}, round {n}", result.responses, *first, args.trace))
                answers[name] = _tally(result.responses)

    table = Table(title=f"adapter throughput: {len(requests):,} requests of {args.trace.name}, "
                        f"window {args.window}, median of {args.repeats} (range) ({platform.python_implementation()} "
                        f"{platform.python_version()}, {os.cpu_count()} cpus, SQLite temp dir {where})")
    for column in ("adapter", "pipelined req/s", "round trip req/s", "pipelined / round trip",
                   "answers ok / refused / error"):
        table.add_column(column, justify="left" if column == "adapter" else "right")

    def cell(values: list) -> str:
        return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"

    for name in adapters:
        piped, rt = rates[name, "pipelined"], rates[name, "round trip"]
        table.add_row(name, cell(piped), cell(rt), f"{statistics.median(piped) / statistics.median(rt):.2f}x",
                      answers.get(name, "(not compared)"))
    Console(width=150).print(table)
    print("the model and SQLite answered every request the same, pipelined and round trip, in every round")


if __name__ == "__main__":
    main()
