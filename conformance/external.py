"""A ``Driver`` for an implementation in another process: the adapter protocol over pipes.

``SubprocessDriver(command)`` starts ``command`` (split with ``shlex``, no
shell) with its standard input and output as pipes and speaks
wire-protocol.md section 5: one request as one JSON line, one response line
back, in order. A reader thread turns the output into lines, so every wait
for a response has a timeout; the process's standard error is kept (its last
lines) to explain a failure.

Failures raise ``AdapterError`` (a ``RuntimeError``) with what happened and
what the process said on standard error: the process could not start, died
(with its exit status), took longer than the timeout to answer, or wrote a
line that is not a JSON object. After any of these the process can no
longer be trusted to stay in step, so the lockstep starts a fresh one.

Typical use::

    driver = SubprocessDriver("python -m envreplica.conformance.adapter --impl sqlite --test-key")
    driver.handle({"id": 1, "op": "reset"})   # {"id": 1, "ok": True, "result": {}}
    driver.close()
"""

from __future__ import annotations

import collections
import json
import queue
import shlex
import subprocess
import threading
import time
from typing import Any, Optional, Sequence, Union

__all__ = ["AdapterError", "SubprocessDriver", "DEFAULT_TIMEOUT"]

#: Seconds to wait for each response (and for the process to exit on ``close``).
DEFAULT_TIMEOUT = 30.0

_EOF = object()


class AdapterError(RuntimeError):
    """The external adapter did not answer a request with one JSON line."""


class SubprocessDriver:
    """The conformance adapter of ``command``, driven over its standard input and output."""

    def __init__(self, command: Union[str, Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT,
                 cwd: Optional[str] = None, env: Optional[dict] = None) -> None:
        self.command = command if isinstance(command, str) else shlex.join(command)
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise AdapterError("the adapter command is empty")
        self.timeout = timeout
        self._stderr: collections.deque = collections.deque(maxlen=40)
        self._lines: "queue.Queue[Any]" = queue.Queue()
        self.requests = 0
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=cwd, env=env,  # buffered pipes: an unbuffered readline reads a byte per system call
            )
        except OSError as error:
            raise AdapterError(f"could not start the adapter {self.command!r}: {error}") from None
        self._out = threading.Thread(target=self._read_stdout, name="adapter-stdout", daemon=True)
        self._err = threading.Thread(target=self._read_stderr, name="adapter-stderr", daemon=True)
        self._out.start()
        self._err.start()

    # -- reader threads -------------------------------------------------------

    def _read_stdout(self) -> None:
        stream = self.proc.stdout
        try:
            for line in iter(stream.readline, b""):
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(_EOF)

    def _read_stderr(self) -> None:
        try:
            for line in iter(self.proc.stderr.readline, b""):
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

    def handle(self, request: Any) -> dict:
        """Send one request line; return the decoded response line."""
        data = (json.dumps(request, separators=(",", ":"), ensure_ascii=True) + "\n").encode("utf-8")
        if self.proc.poll() is not None:
            raise self._died("waiting for a request")
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._died("reading a request") from None
        self.requests += 1
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise AdapterError(
                f"the adapter did not answer within {self.timeout:g} s (request {self.requests}: "
                f"{data[:200].decode('utf-8', 'replace').rstrip()}): {self.command}") from None
        if line is _EOF:
            raise self._died("answering a request")
        try:
            response = json.loads(line)
        except ValueError:
            raise AdapterError(
                f"the adapter wrote a line that is not JSON: {line[:200]!r} (one JSON object per line is "
                f"expected on standard output; logs belong on standard error)") from None
        if not isinstance(response, dict):
            raise AdapterError(f"the adapter answered {line[:200]!r}, not a JSON object")
        return response

    def close(self) -> Optional[int]:
        """End of input; wait for the process (kill it after the timeout). Returns its exit status."""
        proc = self.proc
        if proc.poll() is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=min(self.timeout, 10))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        return proc.returncode

    def __enter__(self) -> "SubprocessDriver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SubprocessDriver({self.command!r})"
