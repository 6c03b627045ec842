"""A ``Driver`` for an implementation in another process: the adapter protocol over pipes.

``SubprocessDriver(command)`` starts ``command`` (split with ``shlex``, no
shell) with its standard input and output as pipes, in the caller's working
directory (where the command was written) and with the caller's environment
less its ``ENVREPLICA_*`` variables (``hermetic.child_env``: none of them
reaches a process under test; ``env`` replaces it), and speaks
docs/protocol.md section 5: one request as one JSON line, one response line
back, in order. A reader thread turns the output into lines, so every wait
for a response has a timeout: ``timeout`` for each, and ``start_timeout``
for the first response of a process (default: ``timeout``, but at least
``START_TIMEOUT``: an adapter may compile its implementation when it starts;
``envreplica conformance --timeout`` sets both, ``--start-timeout`` the first).
While it waits for that first response, ``waiting(op, waited, limit)`` is
called about every ``WAIT_TICK_SECONDS`` (the command line says what it waits
for). The process's standard error is kept (its last lines) to explain a failure.

Failures raise ``AdapterError`` (a ``RuntimeError``) with what happened and
what the process said on standard error: the process could not start, died
(with its exit status), took longer than the timeout to answer, wrote a
line that is not UTF-8, not JSON, not a JSON object, or nested deeper than
``MAX_NESTING`` arrays and objects (read with a depth guard: no answer of
either protocol nests ten deep, and a deeper one is refused before it is
parsed, never a ``RecursionError``), or answered with an id other than its
request's (section 5.1: a request with an integer id is answered with that
id; ``null`` for any other). ``error.request`` is the number of the request
to this process (from 1). After any of these the process can no longer be
trusted to stay in step: a conformance run stops there (``AdapterFailure``),
exit 2 from the command line, naming the move that broke; it is never a
divergence, and the adapter is never restarted to go on.

**Every answer is held to its op's response definition** (docs/protocol.md
section 9; ``conformance.answers``): a ``page`` answer must be a
``PageResponse``, a ``status`` answer a ``StatusResponse``, and so on, nested
answers each to their own op's. One that is not raises ``ProtocolBreak`` (an
``AdapterError``) naming the request, its op, the definition and where the
answer breaks it; the break keeps the answer (``.response``), so that the
lockstep can show a wrong answer as a divergence from the model's first
(``lockstep.machine``). This is on unless ``check_answers=False`` (or
``ENVREPLICA_CHECK_ANSWERS=0``, ``answers.CHECK_ANSWERS``), and off for a
process whose first request is ``hello``: the migration protocol's
(section 11), whose answers are held by ``conformance.migration``.

Typical use::

    driver = SubprocessDriver("python -m envreplica.conformance.adapter --impl sqlite --test-key")
    driver.handle({"id": 1, "op": "reset"})   # {"id": 1, "ok": True, "result": {}}
    driver.close()

**Tables, not only answers** (``StateProbe``). The adapter protocol's
``state`` op (docs/protocol.md section 6) reads every table of an
implementation. After each step that may have moved the replica, the
lockstep asks the external adapter for ``state`` out of band (not a trace
step: its ids come from ``STATE_ID_BASE`` up, never reused by a step) and
holds the document table by table against the model's own ``state``
document (``ModelDriver.state_doc``): the same tables, the same rows by
primary key, in the same order, each row equal field by field; a
difference names the table, the row and the field (values by length only).
Receipt MACs cannot be recomputed (the harness does not know the
implementation's key or algorithm), so they are held as *names*: over one
run, under one master key (the ``masterKeyHex`` of the last ``reset``) of
one adapter process, the same model request must always carry the same
``requestMac`` and two different requests never one. An adapter that answers ``state``
``unsupported`` (it does not offer it, or runs without the test key) is
held to its responses only from then on, and the run's report says so
(``StateProbe.describe``); one that answered ``state`` before and then
calls it unsupported diverges.

**Extensions it may not offer** (``probe_extensions``). Before its first
example the lockstep asks a new external adapter, out of band, whether it
offers ``ready``, ``diagnostics`` and ``crashAfterCommit``; what it does not
offer is not generated for it (a read becomes ``status``, a page or delivery
carries no crash), and the report lists it.
"""

from __future__ import annotations

import collections
import json
import queue
import re
import shlex
import subprocess
import threading
import time
from typing import IO, Any, Callable, Optional, Sequence, Union

from envreplica.conformance import answers, hermetic
from envreplica.conformance.readback import STATE_TABLES

__all__ = ["AdapterError", "AdapterTimeout", "ProtocolBreak", "SubprocessDriver", "DEFAULT_TIMEOUT", "START_TIMEOUT", "StateProbe", "STATE_ID_BASE",
           "STATE_TABLES", "state_doc_difference", "probe_extensions", "GENERATED_EXTENSIONS"]

#: Seconds to wait for each response (and for the process to exit on ``close``).
DEFAULT_TIMEOUT = 30.0
#: Seconds the first response of a process may take at least: an adapter may compile or type-check its
#: implementation when it starts (the TypeScript kit runs ``tsc`` over new code: seconds, more on a busy machine).
START_TIMEOUT = 120.0
#: Seconds between two calls of a ``SubprocessDriver``'s ``waiting`` hook while it waits for the first answer.
WAIT_TICK_SECONDS = 0.5
#: Seconds ``close`` gives a process that already let an answer time out to exit on its own (then it is killed).
STALLED_EXIT_SECONDS = 1.0

_EOF = object()


class AdapterError(RuntimeError):
    """The external adapter did not answer a request with one JSON line."""

    #: The request to this process it failed on (from 1; 0: before any, e.g. it could not start).
    request: int = 0


class AdapterTimeout(AdapterError):
    """The external adapter did not answer within its timeout (``first``: it was the process's first answer,
    bounded by ``SubprocessDriver.start_timeout``)."""

    first: bool = False


class AdapterFailure(BaseException):
    """An adapter failed mid-run (an ``AdapterError`` that is not a ``ProtocolBreak``, or, for the migration
    protocol, an error answer): nothing after it can be judged, so the run stops at once, exit 2.

    A ``BaseException`` on purpose, like ``KeyboardInterrupt``: Hypothesis takes every ``Exception`` raised in
    an example for a failure to shrink and replay, and replaying examples on an adapter that broke gives
    answers that depend on when it broke, not on the example (Hypothesis's "Flaky" verdict, exit 1). This one
    passes through Hypothesis untouched to the run, which reports it (``LockstepReport.adapter_failure``,
    ``MigrationLockstepReport.adapter_failure``). ``where`` names the move (or step, or request) that broke,
    ``what`` what broke, ``request`` the request to the adapter process (from 1; 0: unknown)."""

    def __init__(self, where: str, what: str, request: int = 0) -> None:
        super().__init__(where, what, request)
        self.where = where
        self.what = what
        self.request = request

    def __str__(self) -> str:
        counted = f", request {self.request} to the adapter process" if self.request else ""
        return f"the adapter broke on {self.where}{counted}: {self.what}"


#: How deep an answer line may nest arrays and objects before it is refused unread (no answer of the replica's
#: or the migration's protocol nests ten deep; Python's own parser gives up near a thousand).
MAX_NESTING = 100

# Built from str: a bytes literal of this module would join the lockstep's pool of drawn literals
# (``conformance.literals``), and one of a block's length would change the examples every run draws.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"'.encode(), re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_depth(line: bytes, most: int = MAX_NESTING) -> int:
    """How deep ``line`` nests arrays and objects (strings left out), counted up to ``most`` + 1 at most:
    a guard that runs before the line is parsed. A line with ``most`` brackets or fewer is not scanned."""
    if line.count(b"[") + line.count(b"{") <= most:
        return 0
    depth = 0
    for byte in _JSON_STRING.sub(b"", line).translate(None, _NOT_BRACKETS):
        if byte in b"[{":
            depth += 1
            if depth > most:
                return depth
        else:
            depth -= 1
    return 0


def decode_line(line: bytes) -> Any:
    """One answer line as JSON, or ``AdapterError`` saying what is wrong with it: not UTF-8, nested deeper than
    ``MAX_NESTING`` (refused before it is parsed), not JSON, not a JSON object."""
    shown = _shown(line)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise AdapterError(f"the adapter wrote a line that is not UTF-8 (byte 0x{line[error.start]:02x} at "
                           f"offset {error.start}): {shown}") from None
    if nesting_depth(line) > MAX_NESTING:
        raise AdapterError(f"the adapter wrote a line nested deeper than {MAX_NESTING} arrays and objects, "
                           f"left unread (no answer of the protocol nests ten deep): {shown}")
    try:
        response = json.loads(text)
    except (ValueError, RecursionError):
        raise AdapterError(f"the adapter wrote a line that is not JSON: {shown} (one JSON object per line is "
                           f"expected on standard output; logs belong on standard error)") from None
    if not isinstance(response, dict):
        raise AdapterError(f"the adapter answered {shown}, not a JSON object")
    return response


def _shown(line: bytes, width: int = 160) -> str:
    """A line as the messages show it: its first ``width`` bytes (as a bytes literal), and its length if longer."""
    line = line.rstrip(b"\n")
    return repr(line[:width]) + (f"... ({len(line):,} bytes)" if len(line) > width else "")


def expected_id(request: Any) -> Any:
    """The id an answer to ``request`` carries (section 5.1): its integer ``id``, else ``null``."""
    rid = request.get("id") if isinstance(request, dict) else None
    return rid if type(rid) is int else None


class ProtocolBreak(AdapterError):
    """The adapter answered with a JSON object that breaks its op's response definition (section 9)."""

    def __init__(self, message: str, *, op: str, definition: str, where: str, response: Any) -> None:
        super().__init__(message)
        self.op = op  # the request's op ("?" when it had none)
        self.definition = definition  # the definition the answer breaks, e.g. "PageResponse"
        self.where = where  # where and how: "response.result.code: ... is not one of ..."
        self.response = response  # the answer as decoded


def _pipe(stream: Optional[IO[bytes]]) -> IO[bytes]:
    """One of ``SubprocessDriver.proc``'s streams: never None, each is opened with ``subprocess.PIPE``."""
    assert stream is not None, "the adapter's standard streams are pipes"
    return stream


class SubprocessDriver:
    """The conformance adapter of ``command``, driven over its standard input and output."""

    #: The harness reads this implementation's tables with the ``state`` op (``StateProbe``).
    state_by_request = True

    def __init__(self, command: Union[str, Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT,
                 cwd: Optional[str] = None, env: Optional[dict] = None,
                 check_answers: Optional[bool] = None, start_timeout: Optional[float] = None,
                 waiting: Optional[Callable[[str, float, float], None]] = None) -> None:
        self.command = command if isinstance(command, str) else shlex.join(command)
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise AdapterError("the adapter command is empty")
        self.timeout = timeout
        #: Seconds the first answer may take (an adapter may compile at start: see the module).
        self.start_timeout = max(timeout, START_TIMEOUT) if start_timeout is None else start_timeout
        #: Called while the first answer is awaited: the request's op, seconds waited, seconds it may take.
        self.waiting = waiting
        self._stalled = False  # an answer timed out: ``close`` does not wait long for it to exit
        #: Whether each answer is held to its op's response definition (None: ``answers.CHECK_ANSWERS``).
        self.check_answers = answers.CHECK_ANSWERS if check_answers is None else check_answers
        self._answers_chosen = check_answers is not None
        self.answers_checked = 0  # answers held to their definitions (nested ones included)
        self._stderr: collections.deque = collections.deque(maxlen=40)
        self._lines: "queue.Queue[Any]" = queue.Queue()
        self.requests = 0
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=cwd, env=hermetic.child_env() if env is None else env,
                # buffered pipes: an unbuffered readline reads a byte per system call
            )
        except OSError as error:
            raise AdapterError(f"could not start the adapter {self.command!r}: {error}") from None
        self._out = threading.Thread(target=self._read_stdout, name="adapter-stdout", daemon=True)
        self._err = threading.Thread(target=self._read_stderr, name="adapter-stderr", daemon=True)
        self._out.start()
        self._err.start()

    # -- reader threads -------------------------------------------------------

    def _read_stdout(self) -> None:
        stream = _pipe(self.proc.stdout)
        try:
            for line in iter(stream.readline, b""):
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(_EOF)

    def _read_stderr(self) -> None:
        try:
            for line in iter(_pipe(self.proc.stderr).readline, b""):
                self._stderr.append(line.decode("utf-8", "replace").rstrip("\n"))
        except (OSError, ValueError):
            pass

    # -- diagnostics -----------------------------------------------------------

    def stderr_tail(self, lines: int = 15) -> str:
        time.sleep(0.05)  # let the reader catch the last words of a dying process
        tail = list(self._stderr)[-lines:]
        return "\n".join(tail)

    def _died(self, doing: str) -> AdapterError:
        try:
            status = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            status = None
        how = f"exited with status {status}" if status is not None else "closed its output"
        tail = self.stderr_tail()
        text = f"the adapter {how} while {doing} (after {self.requests} requests): {self.command}"
        if tail:
            text += "\n  its standard error ends with:\n    " + "\n    ".join(tail.splitlines())
        return AdapterError(text)

    # -- the protocol -----------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def next_line(self, timeout: float) -> Optional[bytes]:
        """The adapter's next line on standard output (None: it closed its output); ``queue.Empty`` after
        ``timeout`` seconds. For harnesses that write ahead (``conformance.pipeline``)."""
        line = self._lines.get(timeout=timeout)
        return None if line is _EOF else line

    def _next_answer(self, limit: float, first_op: Optional[str]) -> Any:
        """The next output line (or ``_EOF``) within ``limit`` seconds, else ``queue.Empty``; while waiting for
        the first answer (``first_op``: its request's op), ``waiting`` is told how long it has waited."""
        if first_op is None or self.waiting is None:
            return self._lines.get(timeout=limit)
        began = time.monotonic()
        while True:
            waited = time.monotonic() - began
            self.waiting(first_op, waited, limit)
            if waited >= limit:
                raise queue.Empty
            try:
                return self._lines.get(timeout=min(WAIT_TICK_SECONDS, limit - waited))
            except queue.Empty:
                continue

    def handle(self, request: Any) -> dict:
        """Send one request line; return the decoded response line (``AdapterError``, its ``request`` the
        number of this request, when the adapter does not answer it with one)."""
        attempted = self.requests + 1
        try:
            return self._exchange(request)
        except AdapterError as error:
            error.request = error.request or attempted
            raise

    def _exchange(self, request: Any) -> dict:
        data = (json.dumps(request, separators=(",", ":"), ensure_ascii=True) + "\n").encode("utf-8")
        if self.proc.poll() is not None:
            raise self._died("waiting for a request")
        try:
            stdin = _pipe(self.proc.stdin)
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._died("reading a request") from None
        self.requests += 1
        first = self.requests == 1
        waited = self.start_timeout if first else self.timeout
        try:
            line = self._next_answer(waited, str(request.get("op")) if first and isinstance(request, dict) else None)
        except queue.Empty:
            timeout = AdapterTimeout(
                f"the adapter did not answer within {waited:g} s (request {self.requests}: "
                f"{data[:200].decode('utf-8', 'replace').rstrip()}): {self.command}")
            timeout.first = first
            self._stalled = True
            raise timeout from None
        if line is _EOF:
            raise self._died("answering a request")
        response = decode_line(line)
        want = expected_id(request)
        if want is not None and (type(response.get("id")) is not int or response["id"] != want):
            raise AdapterError(f"the answer's id is {json.dumps(response.get('id'))[:40]}, expected {want} (section "
                               f"5.1: an answer carries its request's integer id; the adapter is out of step): "
                               f"{self.command}")
        if self.check_answers:
            self._hold(request, response)
        return response

    def _hold(self, request: Any, response: dict) -> None:
        """Hold ``response`` to its request's response definition; ``ProtocolBreak`` when it breaks it."""
        if self.requests == 1 and not self._answers_chosen and isinstance(request, dict) \
                and request.get("op") == "hello":
            self.check_answers = False  # the migration protocol (section 11): not this contract's answers
            return
        before = answers.answers_checked()
        problem = answers.answer_problem(request, response)
        self.answers_checked += answers.answers_checked() - before
        if problem is None:
            return
        op, definition, where = problem
        rid = request.get("id") if isinstance(request, dict) else None
        raise ProtocolBreak(
            f"the adapter's answer to request {self.requests} (op {op!r}, id {json.dumps(rid)}) breaks its "
            f"definition {definition} (docs/protocol.md section 9; envreplica schema {definition}): {where}; "
            f"the answer: {json.dumps(response)[:300]}", op=op, definition=definition, where=where, response=response)

    def close(self) -> Optional[int]:
        """End of input; wait for the process (kill it after the timeout, or after ``STALLED_EXIT_SECONDS`` when
        an answer timed out). Returns its exit status."""
        proc = self.proc
        if proc.poll() is None:
            try:
                _pipe(proc.stdin).close()
            except OSError:
                pass
            try:
                proc.wait(timeout=min(self.timeout, STALLED_EXIT_SECONDS if self._stalled else 10))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            try:
                _pipe(stream).close()
            except OSError:
                pass
        return proc.returncode

    def __enter__(self) -> "SubprocessDriver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SubprocessDriver({self.command!r})"


# ---------------------------------------------------------------------------
# Tables: the ``state`` op, held table by table against the model's
# ---------------------------------------------------------------------------

#: Ids of the out-of-band ``state`` requests: far above any step's or nested request's id.
STATE_ID_BASE = 1_000_000_000

_ROWS_SHOWN = 3


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _brief(value: Any, width: int = 160) -> str:
    text = _json(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _hidden(row: Any) -> Any:
    """A row with its plaintext ``value`` replaced by its length (a row shown whole: missing, extra, odd).
    A value two rows hold differently is shown where it differs (``_row_difference``)."""
    if isinstance(row, dict) and isinstance(row.get("value"), str):
        return dict(row, value=f"<value of {len(row['value'])} chars>")
    return row


def _row_key(row: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(row, dict) or any(f not in row for f in fields):
        return None
    return tuple(row[f] for f in fields)


def _key_text(key: tuple) -> str:
    return "(" + ", ".join(str(k) for k in key) + ")"


def _row_difference(model: dict, impl: dict) -> str:
    for field in sorted(set(model) | set(impl)):
        if field not in impl:
            return f"{field}: model {_brief(_hidden(model).get(field))}, implementation has no such field"
        if field not in model:
            return f"{field}: the implementation has a field the model does not ({_brief(_hidden(impl).get(field))})"
        if _json(model[field]) != _json(impl[field]):
            if field == "value":
                if isinstance(model[field], str) and isinstance(impl[field], str):
                    # Test data only (``state`` is offered with the test key alone): where it differs, escaped.
                    from envreplica.conformance.replica.text import text_difference

                    return f"value: {text_difference(model[field], impl[field])}"
                other = f"{len(impl[field])} chars" if isinstance(impl[field], str) else _brief(impl[field])
                return f"value: differs (model {_brief(_hidden(model).get(field))}, implementation {other})"
            return f"{field}: model {_brief(model[field])}, implementation {_brief(impl[field])}"
    return "rows differ"


class _MacNames:
    """Receipt MACs as names: per master key, one request one MAC, one MAC one request."""

    def __init__(self) -> None:
        self.by_request: dict[tuple, str] = {}  # (key scope, model's name) -> implementation's MAC
        self.by_mac: dict[tuple, str] = {}  # (key scope, implementation's MAC) -> model's name

    def check(self, scope: Any, name: str, mac: Any, where: str) -> Optional[str]:
        if not isinstance(mac, str) or not mac:
            return f"{where}: requestMac: must be a non-empty string; the implementation answered {_brief(mac)}"
        seen_mac = self.by_request.get((scope, name))
        if seen_mac is not None and seen_mac != mac:
            return (f"{where}: requestMac: one request, two MACs: under this master key the model's request "
                    f"{name[:19]}… was {seen_mac[:24]}… before, now {mac[:24]}…")
        seen_name = self.by_mac.get((scope, mac))
        if seen_name is not None and seen_name != name:
            return (f"{where}: requestMac: two requests, one MAC: {mac[:24]}… named request {seen_name[:19]}… "
                    f"before and now request {name[:19]}… (the model's requests differ)")
        self.by_request[(scope, name)] = mac
        self.by_mac[(scope, mac)] = name
        return None


def state_doc_difference(model: Any, impl: Any, macs: Optional[_MacNames] = None,
                         scope: Any = None) -> Optional[str]:
    """None when the implementation's ``state`` document equals the model's; else each differing table.

    Rows are matched by primary key and must come in the model's order;
    ``requestMac`` is held as a name through ``macs`` (under ``scope``, the
    master key), never compared with the model's stand-in.
    """
    if not isinstance(impl, dict):
        return f"state: the implementation answered {_brief(impl)}, not an object of tables"
    if set(impl) != set(STATE_TABLES):
        missing, extra = sorted(set(STATE_TABLES) - set(impl)), sorted(set(impl) - set(STATE_TABLES))
        return f"state: the tables differ: missing {missing}, not in the contract {extra}"
    macs = macs if macs is not None else _MacNames()
    parts = []
    for table, fields in STATE_TABLES.items():
        m, i = model[table], impl[table]
        if table == "authority":
            if not isinstance(i, dict):
                parts.append(f"authority: the implementation answered {_brief(i)}, not an object")
            elif _json(m) != _json(i):
                parts.append(f"authority: {_row_difference(m, i)}")
            continue
        if not isinstance(i, list):
            parts.append(f"{table}: the implementation answered {_brief(i)}, not a list of rows")
            continue
        problems = []
        m_rows = {_row_key(r, fields): r for r in m}
        i_rows: dict = {}
        for n, row in enumerate(i):
            key = _row_key(row, fields)
            if key is None:
                problems.append(f"row #{n} has no primary key {list(fields)}: {_brief(_hidden(row))}")
            elif key in i_rows:
                problems.append(f"row {_key_text(key)} appears twice")
            else:
                i_rows[key] = row
        for key, row in m_rows.items():
            if key not in i_rows:
                problems.append(f"row {_key_text(key)} missing (the model has {_brief(_hidden(row))})")
                continue
            other = i_rows[key]
            if table == "receipts" and isinstance(other, dict):
                if "requestMac" not in other:
                    problems.append(f"row {_key_text(key)}: requestMac: the implementation has no such field")
                    continue
                bad = macs.check(scope, row.get("requestMac"), other["requestMac"], f"row {_key_text(key)}")
                if bad:
                    problems.append(bad)
                    continue
                row = {k: v for k, v in row.items() if k != "requestMac"}
                other = {k: v for k, v in other.items() if k != "requestMac"}
            if not isinstance(other, dict) or _json(row) != _json(other):
                problems.append(f"row {_key_text(key)}: "
                                + (_row_difference(row, other) if isinstance(other, dict) else _brief(other)))
        for key, row in i_rows.items():
            if key not in m_rows:
                problems.append(f"row {_key_text(key)} is not in the model's table ({_brief(_hidden(row))})")
        if not problems and [_row_key(r, fields) for r in i] != [_row_key(r, fields) for r in m]:
            problems.append(f"rows out of order: model {[_key_text(_row_key(r, fields)) for r in m]}, "
                            f"implementation {[_key_text(_row_key(r, fields)) for r in i]}")
        if problems:
            more = f" (and {len(problems) - _ROWS_SHOWN} more)" if len(problems) > _ROWS_SHOWN else ""
            parts.append(f"{table}: " + "; ".join(problems[:_ROWS_SHOWN]) + more)
    if not parts:
        return None
    return "state table " + " | state table ".join(parts)


def _reset_scope(request: Any, response: Any, scope: Any) -> Any:
    """The master-key scope after ``request`` ran: the ``masterKeyHex`` of the last ``reset`` that ran
    (nested ones included, in order), ``None`` for the adapter's own key."""
    if not isinstance(request, dict) or not isinstance(response, dict):
        return scope
    inner, nested = request.get("duringFetch"), response.get("nested")
    if isinstance(inner, list) and isinstance(nested, list):
        for sub_request, sub_response in zip(inner, nested):
            scope = _reset_scope(sub_request, sub_response, scope)
    if request.get("op") == "reset" and response.get("ok") is True:
        config = request.get("config")
        key = config.get("masterKeyHex") if isinstance(config, dict) else None
        scope = key.lower() if isinstance(key, str) else None
    return scope


class StateProbe:
    """Asks an external adapter for ``state`` after steps and holds it to the model's, table by table.

    One per run (``lockstep.context._Run``): the MAC names and whether the
    adapter offers ``state`` last as long as the run. ``observe`` sees
    every step (it follows the master key of the last ``reset``); ``check``
    sends one out-of-band ``state`` request and returns the difference, or
    None. Once the adapter answers ``unsupported`` the probe stops asking
    (``supported`` is False) and ``describe`` says the run fell back to
    responses only.
    """

    def __init__(self) -> None:
        self.supported: Optional[bool] = None  # None: not asked yet
        self.fallback: Optional[str] = None  # the adapter's message when it answered unsupported
        self.compared = 0  # state documents compared
        self._next_id = STATE_ID_BASE
        self._macs = _MacNames()
        self._scope: Any = None  # the masterKeyHex of the last reset (None: the adapter's own key)
        self._impl: Any = None  # the adapter process asked last, and how many processes came before it
        self._process = 0

    def observe(self, request: Any, model_response: Any) -> None:
        """Follow the master key through one step (its ``reset``s, nested ones included)."""
        self._scope = _reset_scope(request, model_response, self._scope)

    def check(self, model: Any, impl: Any) -> Optional[str]:
        """Ask ``impl`` for ``state`` and compare it with ``model.state_doc()``; None when equal (or unsupported)."""
        if self.supported is False:
            return None
        if impl is not self._impl:  # a new process may hold another key of its own: MACs are its own names
            self._impl, self._process = impl, self._process + 1
        rid = self._next_id
        self._next_id += 1
        try:
            response = impl.handle({"id": rid, "op": "state"})
        except ProtocolBreak as broke:  # the adapter is in step; its answer is not a state document
            return (f"tables after the step: the implementation's state answer (out-of-band request id {rid}) breaks "
                    f"{broke.definition}: {broke.where}")
        if not isinstance(response, dict) or response.get("id") != rid:
            return (f"state (out-of-band request id {rid}): the implementation answered "
                    f"{_brief(response)}; its id must be {rid}")
        if response.get("ok") is False:
            error = response.get("error")
            if not isinstance(error, dict):
                error = {}
            if error.get("type") == "unsupported":
                if self.supported:
                    return (f"state: the implementation answered 'state' {self.compared} times in this run, and "
                            f"now calls it unsupported ({_brief(error.get('message'), 120)})")
                self.supported = False
                self.fallback = str(error.get("message", ""))[:200]
                return None
            return f"state: the implementation answered the error {_brief(error, 200)}; the model's tables read fine"
        if response.get("ok") is not True or set(response) != {"id", "ok", "result"}:
            return f"state: the implementation answered {_brief(response)}, not a section-5 response"
        self.supported = True
        self.compared += 1
        from envreplica.conformance.readback import StateDocError, doc_to_state

        try:  # the documented shape first: exact rows, wire values, sorted primary keys
            doc_to_state(response["result"], store_on=True)
        except StateDocError as error:
            return f"tables after the step: the implementation's {error}"
        difference = state_doc_difference(model.state_doc(), response["result"], self._macs,
                                          (self._process, self._scope))
        return None if difference is None else f"tables after the step differ from the model's: {difference}"

    def describe(self) -> str:
        """How the run held the implementation's tables, for the report."""
        if self.supported is None:
            return "tables: not compared (no step asked for them)"
        if self.supported:
            return f"tables: compared table by table with the model's after each step ({self.compared} state reads)"
        return (f"tables: NOT compared: the adapter answered 'state' unsupported ({self.fallback}); "
                f"the run held it to its responses only")


# ---------------------------------------------------------------------------
# Which extensions an external adapter offers
# ---------------------------------------------------------------------------

#: The requests of docs/protocol.md section 6 the lockstep generates (``state`` is ``StateProbe``'s).
GENERATED_EXTENSIONS = ("ready", "diagnostics", "crashAfterCommit")

_PROBE_PAGE: dict[str, Any] = {"opId": "probe", "attemptId": "probe", "projectId": "probe", "after": None,
                               "recordVersion": 0, "records": [], "complete": True}


def probe_extensions(driver: Any, first_id: int = STATE_ID_BASE - 10) -> dict[str, bool]:
    """Which generated extensions ``driver`` offers: name -> bool. Out of band, on a replica it then resets.

    ``ready`` and ``diagnostics`` are offered unless answered ``unsupported``;
    ``crashAfterCommit`` is asked on a page sent to an empty replica, which
    fails before any write commit: an adapter that knows the field answers
    as the model does (``corrupt``: not activated), one that does not rejects
    the key (``invalid``) or the request (``unsupported``).
    """
    requests: dict[str, dict[str, Any]] = {
        "reset": {"op": "reset"},
        "ready": {"op": "ready", "timeoutMs": 0},
        "diagnostics": {"op": "diagnostics", "projectIds": []},
        "crashAfterCommit": {"op": "page", "frame": dict(_PROBE_PAGE), "crashAfterCommit": 1},
    }
    offered: dict[str, bool] = {}
    for n, (name, request) in enumerate(requests.items()):
        response = driver.handle(dict(request, id=first_id + n))
        error = response.get("error") if isinstance(response, dict) and response.get("ok") is False else None
        kind = error.get("type") if isinstance(error, dict) else None
        if name == "crashAfterCommit":
            offered[name] = kind not in ("invalid", "unsupported")
        elif name != "reset":
            offered[name] = kind != "unsupported"
    return offered
