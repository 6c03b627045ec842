"""Throughput of an adapter: many requests in flight through the JSON-lines pipe (docs/protocol.md section 5).

``SubprocessDriver`` (``conformance.external``) sends one request and waits
for its answer, so a benchmark through it times the pipe's round trip (two
context switches and a wake-up per request) as much as the implementation.
``pipelined(command, requests)`` starts the adapter as a ``SubprocessDriver``
(its process, its output-line and standard-error reader threads) and keeps
up to ``window`` requests in flight: a writer thread writes ahead (flushing
only when the window is full or the requests run out) while the calling
thread takes the answers, in order, as they come. Section 5 has the adapter
answer in order, one line per request, so nothing more is needed of it. The
window bounds what sits unanswered in the pipes and in memory; with the
writer and the readers on separate threads, neither pipe can fill up against
the other.

Each answer is held to the rules of section 5 that let a harness keep
count: one JSON object per line; its ``id`` the request's integer ``id``
(``null`` for a request without one). A broken rule raises ``AdapterError``
(``conformance.external``) naming the request (``#n``, 1-based, as
``envreplica replay`` numbers steps; ``error.index`` is 0-based), what was
expected and what came, and the end of the adapter's standard error: the
adapter died or closed its output before answering every request, answered
out of order (a wrong ``id``), wrote a line that is not a JSON object (or
one nested deeper than ``external.MAX_NESTING``, refused unread), or
gave no answer for ``timeout`` seconds. The process is killed on any of
these.

``round_trip(command, requests)`` is the baseline: the same requests one at
a time through ``SubprocessDriver``, with the same checks and the same clock.

Timing (``PipelineResult``): ``seconds`` runs from the first answer to the
last, and ``requests_per_second`` is the answers after the first over it,
so neither the process's start-up (imports, opening a database) nor its
exit is timed; ``wall_seconds`` is the whole run, start-up and exit
included. Requests are encoded before the process starts; decoding the
answers is timed (a harness has to).

Left out: what the answers say (``responses`` are returned for the caller
to compare: bench/bench_adapter.py holds the model's and SQLite's against
each other, the lockstep holds them against the model); ``duringFetch``
nested responses are not matched to their requests' ids; the adapter's
standard input is not checked for what it does with a request that is not
a JSON object (a harness sends what the trace holds); no ``state`` reads,
no restarts of a dead adapter (the lockstep does that, one request at a
time).

From the command line::

    python -m envreplica.conformance.pipeline --adapter "envreplica adapter --impl model" TRACE.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from envreplica.conformance.external import (DEFAULT_TIMEOUT, MAX_NESTING, AdapterError, SubprocessDriver,
                                             nesting_depth)

__all__ = ["PipelineResult", "pipelined", "round_trip", "DEFAULT_WINDOW", "AdapterError"]

#: Requests in flight at most (written, not yet answered).
DEFAULT_WINDOW = 256

Command = Union[str, Sequence[str]]


@dataclass
class PipelineResult:
    """The answers of one run, in request order, and how fast they came."""

    command: str
    mode: str  # "pipelined (window N)" or "round trip"
    responses: list = field(repr=False)
    requests: int
    seconds: float  # from the first answer to the last
    wall_seconds: float  # from starting the process to its exit

    @property
    def requests_per_second(self) -> float:
        """Answers after the first, per second between the first answer and the last."""
        return (self.requests - 1) / self.seconds if self.requests > 1 and self.seconds > 0 else 0.0


def _expected_id(request: Any) -> Any:
    rid = request.get("id") if isinstance(request, dict) else None
    return rid if type(rid) is int else None


def _brief(data: Any, width: int = 160) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
    text = text.rstrip("\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def _error(index: int, total: int, text: str, command: str, stderr: str = "") -> AdapterError:
    message = f"request #{index + 1} of {total}: {text}: {command}"
    if stderr:
        message += "\n  its standard error ends with:\n    " + "\n    ".join(stderr.splitlines())
    error = AdapterError(message)
    # which request failed, for callers that read it with getattr; AdapterError declares no such attribute
    error.index = index  # type: ignore[attr-defined]
    return error


def _decode(line: bytes, request: Any, index: int, total: int, command: str, stderr) -> dict:
    """One answer line, held to section 5's framing: a JSON object carrying the request's id."""
    if nesting_depth(line) > MAX_NESTING:  # refused unread: never a RecursionError
        raise _error(index, total, f"the answer nests deeper than {MAX_NESTING} arrays and objects: "
                                   f"{_brief(line)!r} (no answer of the protocol nests ten deep)", command, stderr())
    try:
        response = json.loads(line)
    except (ValueError, RecursionError):
        raise _error(index, total, f"the answer is not JSON: {_brief(line)!r} (section 5: one JSON object per "
                                   f"line on standard output; logs belong on standard error)",
                     command, stderr()) from None
    if not isinstance(response, dict):
        raise _error(index, total, f"the answer is not a JSON object: {_brief(line)!r} (section 5: "
                                   f"{{\"id\", \"ok\", ...}} per line)", command, stderr())
    _check_id(response, request, index, total, command, stderr)
    return response


def _check_id(response: dict, request: Any, index: int, total: int, command: str, stderr) -> None:
    want = _expected_id(request)
    got = response.get("id", _MISSING)
    if type(got) is not type(want) or got != want:
        shown = "missing" if got is _MISSING else json.dumps(got)
        raise _error(index, total, f"the answer's id is {shown}, expected {json.dumps(want)} (section 5: answers "
                                   f"come in request order, each echoing its request's integer id, null for a "
                                   f"request without one); the answer: {_brief(json.dumps(response))}",
                     command, stderr())


_MISSING = object()


def pipelined(command: Command, requests: Sequence[Any], *, window: int = DEFAULT_WINDOW,
              timeout: float = DEFAULT_TIMEOUT, cwd: Optional[str] = None,
              env: Optional[dict] = None) -> PipelineResult:
    """Send every request to a new ``command`` process with up to ``window`` in flight; read the answers in order.

    The process, its standard error and its output lines are ``SubprocessDriver``'s; here a writer thread
    writes ahead of the answers. ``timeout`` bounds the wait for each answer (from the previous one) and
    for the process to exit after its input closed. Raises ``AdapterError`` (see the module docstring);
    returns the decoded answers and the rate.
    """
    if type(window) is not int or window < 1:
        raise ValueError(f"window must be an integer >= 1 (requests in flight); got {window!r}")
    if not requests:
        raise ValueError("no requests to send: give at least one (a trace of JSON lines, one request a line)")
    lines = [(json.dumps(r, separators=(",", ":"), ensure_ascii=True) + "\n").encode("utf-8") for r in requests]
    total = len(lines)
    started = time.perf_counter()
    driver = SubprocessDriver(command, timeout=timeout, cwd=cwd, env=env)
    text, proc = driver.command, driver.proc
    slots = threading.Semaphore(window)
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        out = proc.stdin
        assert out is not None, "SubprocessDriver opens the adapter's standard input as a pipe"
        try:
            for line in lines:
                if not slots.acquire(blocking=False):
                    out.flush()  # the window is full: let the adapter see what is written
                    while not slots.acquire(timeout=0.05):
                        if stop.is_set():
                            return
                if stop.is_set():
                    return
                out.write(line)
                written[0] += 1
            out.flush()
            out.close()  # end of input: the adapter exits once it has answered
        except (BrokenPipeError, OSError, ValueError):  # the adapter died; the reader reports it
            pass

    thread = threading.Thread(target=writer, name="pipeline-writer", daemon=True)
    thread.start()
    responses: list = []
    first = last = None
    try:
        for index, request in enumerate(requests):
            try:
                line = driver.next_line(timeout)
            except queue.Empty:
                proc.kill()
                raise _error(index, total, f"no answer within {timeout:g} s ({written[0]} requests written, "
                                           f"{index} answered); the process was killed "
                                           f"(raise the timeout for a slow implementation)",
                             text, driver.stderr_tail()) from None
            if line is None:
                try:
                    status = proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    status = None
                how = f"exited with status {status}" if status is not None else "closed its standard output"
                raise _error(index, total, f"the adapter {how} after answering {index} of {total} requests "
                                           f"({written[0]} written; section 5: one answer per request, until "
                                           f"end of input)", text, driver.stderr_tail())
            slots.release()
            responses.append(_decode(line, request, index, total, text, driver.stderr_tail))
            last = time.perf_counter()
            if first is None:
                first = last
        extra = []
        try:
            proc.wait(timeout=timeout)  # then its output ends: whatever it wrote after the last answer is queued
            while (line := driver.next_line(timeout)) is not None:
                if line.strip():
                    extra.append(line)
        except (subprocess.TimeoutExpired, queue.Empty):
            pass  # still running: close() below kills it
        if extra:
            raise _error(total - 1, total, f"the adapter wrote {len(extra)} line(s) more than the {total} requests "
                                           f"asked for, first {_brief(extra[0])!r} (section 5: exactly one answer "
                                           f"per request)", text, driver.stderr_tail())
    finally:
        stop.set()
        driver.close()
        thread.join(timeout=1)
    return PipelineResult(text, f"pipelined (window {window})", responses, total, (last or 0) - (first or 0),
                          time.perf_counter() - started)


def round_trip(command: Command, requests: Sequence[Any], *, timeout: float = DEFAULT_TIMEOUT,
               cwd: Optional[str] = None, env: Optional[dict] = None) -> PipelineResult:
    """The baseline: the same requests one at a time through ``SubprocessDriver`` (a round trip each), held to
    the same rules as ``pipelined`` (section 5's framing; what the answers say is the caller's, so they are not
    held to their definitions here either: ``check_answers=False``)."""
    if not requests:
        raise ValueError("no requests to send: give at least one (a trace of JSON lines, one request a line)")
    total = len(requests)
    started = time.perf_counter()
    driver = SubprocessDriver(command, timeout=timeout, cwd=cwd, env=env, check_answers=False)
    text = driver.command
    responses: list = []
    first = last = None
    try:
        for index, request in enumerate(requests):
            try:
                response = driver.handle(request)
            except AdapterError as error:
                raise _error(index, total, str(error), text) from None
            _check_id(response, request, index, total, text, driver.stderr_tail)
            responses.append(response)
            last = time.perf_counter()
            if first is None:
                first = last
    finally:
        driver.close()
    return PipelineResult(text, "round trip", responses, total, (last or 0) - (first or 0),
                          time.perf_counter() - started)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _tally(responses: Sequence[dict]) -> str:
    counts: collections.Counter = collections.Counter()
    for r in responses:
        result = r.get("result")
        if r.get("ok") is not True:
            counts["error"] += 1
        elif isinstance(result, dict) and result.get("ok") is False:
            counts["refused"] += 1
        else:
            counts["ok"] += 1
    return ", ".join(f"{kind} {counts[kind]}" for kind in ("ok", "refused", "error"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envreplica.conformance.pipeline",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", required=True, metavar="CMD",
                        help="the adapter command (split like a shell would, not run by one)")
    parser.add_argument("trace", metavar="TRACE.jsonl", help="the requests, one JSON object a line")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                        help=f"requests in flight at most (default {DEFAULT_WINDOW})")
    parser.add_argument("--round-trip", action="store_true",
                        help="also run the requests one at a time (SubprocessDriver), for comparison")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for each answer (default {DEFAULT_TIMEOUT:g})")
    args = parser.parse_args(argv)
    from pathlib import Path

    from envreplica.conformance.replica.traces import read_requests

    try:
        requests = read_requests(Path(args.trace))
        runs = [pipelined(args.adapter, requests, window=args.window, timeout=args.timeout)]
        if args.round_trip:
            runs.append(round_trip(args.adapter, requests, timeout=args.timeout))
    except (OSError, ValueError, AdapterError) as error:
        print(f"envreplica pipeline: {error}", file=sys.stderr)
        return 1
    for run in runs:
        print(f"{run.mode}: {run.requests} requests, {run.requests_per_second:,.0f} requests/s "
              f"({run.seconds:.2f} s first to last answer, {run.wall_seconds:.2f} s with start-up); "
              f"answers: {_tally(run.responses)}")
    if len(runs) == 2:
        same = runs[0].responses == runs[1].responses
        print(f"pipelined / round trip: {runs[0].requests_per_second / runs[1].requests_per_second:.2f}x; "
              f"the answers {'are the same' if same else 'DIFFER'}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
