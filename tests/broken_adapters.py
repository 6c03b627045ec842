"""Deliberately broken adapters: a working adapter behind a proxy that breaks it in one way at one request.

``python tests/broken_adapters.py BREAK WHEN -- COMMAND...`` runs ``COMMAND`` (a working adapter of either
protocol: ``envreplica adapter --impl model``, ``envreplica adapter --protocol migration --impl model``) and
passes every request line to it and its answer back, unchanged, until the request ``WHEN`` names; that request
it answers broken by ``BREAK``:

* ``exit``: the proxy exits with status 1 (a line on standard error first), answering nothing;
* ``not-json``: a line that is not JSON;
* ``not-utf8``: a line of bytes that are not UTF-8;
* ``other-id``: the working adapter's answer with another id (the request's plus 1000);
* ``stall``: nothing, ever (it sleeps until it is killed or its input ends);
* ``deep``: an answer whose ``result`` is JSON nested ``DEEP`` (100,000) arrays deep.

``WHEN`` is ``start`` (``exit`` only: before reading anything), ``at:N`` (the N-th request the process reads,
from 1), ``op:NAME`` (the first request of op ``NAME``, e.g. ``op:write`` for the migration's first foreign
write) or ``random:SEED`` (the N-th request, N drawn by ``random.Random(SEED)`` from ``RANDOM_RANGE``: a
position no test chose). Once broken it stays broken: every later request is answered the same way (an
``exit`` has no later request).

Leaves out on purpose: breaks inside a well-formed answer (a wrong result, a wrong shape): those are the
implementation's answers, which the lockstep judges (a divergence, exit 1), not a broken adapter.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

BREAKS = ("exit", "not-json", "not-utf8", "other-id", "stall", "deep")
#: How deep ``deep`` nests its result.
DEEP = 100_000
#: The requests a ``random:SEED`` position is drawn from (both protocols' runs reach 60 requests within a few
#: examples: an example of either sends a reset and one request per step or move, a state read or an observe
#: after each).
RANDOM_RANGE = (2, 60)


def position(when: str) -> tuple[str, object]:
    """``WHEN`` as (kind, value): ("start", None), ("at", n), ("op", name)."""
    if when == "start":
        return "start", None
    kind, _, value = when.partition(":")
    if kind == "at":
        return "at", int(value)
    if kind == "op":
        return "op", value
    if kind == "random":
        return "at", random.Random(int(value)).randint(*RANDOM_RANGE)
    raise SystemExit(f"broken_adapters.py: WHEN must be start, at:N, op:NAME or random:SEED, not {when!r}")


def _broken(how: str, request: dict, answer: bytes) -> bytes:
    """The line ``how`` answers ``request`` with (``answer``: the working adapter's line, for ``other-id``)."""
    rid = request.get("id") if isinstance(request, dict) else None
    if how == "not-json":
        return b"this is not JSON\n"
    if how == "not-utf8":
        return b'{"id": ' + json.dumps(rid).encode() + b', "ok": true, "result": "\xff\xfe\xfa"}\n'
    if how == "other-id":
        data = json.loads(answer)
        data["id"] = (rid if type(rid) is int else 0) + 1000
        return json.dumps(data).encode() + b"\n"
    if how == "deep":
        return (b'{"id": ' + json.dumps(rid).encode() + b', "ok": true, "result": ' + b"[" * DEEP + b"]" * DEEP
                + b"}\n")
    raise AssertionError(how)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or argv[0] not in BREAKS:
        raise SystemExit(f"usage: broken_adapters.py {{{'|'.join(BREAKS)}}} WHEN -- COMMAND...")
    how, (kind, value), command = argv[0], position(argv[1]), argv[3:]
    if kind == "start":
        print("broken adapter: exits before reading anything", file=sys.stderr, flush=True)
        return 1
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    out = sys.stdout.buffer
    seen, broken = 0, False
    for line in sys.stdin.buffer:
        seen += 1
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        op = request.get("op") if isinstance(request, dict) else None
        broken = broken or (kind == "at" and seen == value) or (kind == "op" and op == value)
        if broken and how == "exit":
            print(f"broken adapter: exits at request {seen} ({op})", file=sys.stderr, flush=True)
            child.kill()
            return 1
        if broken and how == "stall":
            print(f"broken adapter: stalls at request {seen} ({op})", file=sys.stderr, flush=True)
            child.kill()
            while sys.stdin.buffer.read(1):  # until the harness closes its input (or kills it)
                time.sleep(0.05)
            return 0
        answer = b""
        if not broken or how == "other-id":
            child.stdin.write(line)
            child.stdin.flush()
            answer = child.stdout.readline()
            if not answer:
                return child.wait()
        out.write(_broken(how, request, answer) if broken else answer)
        out.flush()
    child.stdin.close()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
