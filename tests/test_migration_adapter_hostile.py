"""The migration adapters under hostile input (issue 39, item 7; docs/protocol.md, section 11, "Errors").

* each hostile line of the issue is answered by one error valid against ``envreplica schema MigrationResponse``:
  ``invalid`` (the line, the id, a field or the order of the moves) or ``unsupported`` (an op it does not know),
  never ``internal`` and never a traceback, with a message that names the field or rule and shows the
  offending value bounded (at most ``MAX_MESSAGE`` characters in all);
* an id is a JSON integer (a boolean is not one: Python's ``bool`` is an ``int``);
* a move out of order (a writer's move with no writer, an edit of a publication not there, a repair of one not
  edited, a step of an invocation not running, ...) is answered by ``--impl paired`` exactly as by ``--impl
  model``: the same lines, the same answers (Hypothesis draws the sequences);
* Hypothesis draws hostile lines (any JSON value, every field of every op of a wrong type, deep nesting, huge
  strings, bytes that are not UTF-8): every answer is in the schema, and the adapter answers the next request;
* killed with SIGKILL while a store is read-only (the immutable flag, as root), the paired adapter leaves its
  directories, and the next start removes them (``conformance.scratch``): ``rm -rf`` works on what is left;
* the replica's adapter (section 5) does not share these flaws.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from envreplica.conformance.migration import protocol as P
from envreplica.conformance.migration.serve import ModelServer, PairedServer, serve
from envreplica.conformance.migration.sides import SILENT
from envreplica.model import migration as mm
from envreplica.spec import schema as S

ENVREPLICA = [sys.executable, "-m", "envreplica.cli.main"]
RESPONSE = Draft202012Validator(S.standalone("MigrationResponse"))
OBSERVATION = Draft202012Validator(S.standalone("MigrationObservation"))
#: The longest error message an answer to a hostile line may carry.
MAX_MESSAGE = 200
HELLO = {"op": "hello", "protocol": P.PROTOCOL}
#: Every op of section 11.2 with its fields and a value of the right type for each.
FIELDS: dict[str, dict[str, Any]] = {
    "hello": {"protocol": P.PROTOCOL}, "reset": {"stores": [{"version": 1, "data": "original"}] * 2},
    "invoke": {"role": "migrate", "fault": "none", "mode": "thread"}, "step": {"invocation": 0},
    "crash": {"invocation": 0}, "connect": {"store": "run"}, "write": {"version": 1}, "disconnect": {},
    "lock": {}, "unlock": {}, "readOnly": {"store": "run", "on": True}, "edit": {"doc": "backup", "store": "run"},
    "repair": {"doc": "backup", "store": "run"}, "observe": {}}
WRONG_TYPES: list[Any] = [True, False, None, 7, -1, 2.5, "", "x" * 300, [], ["run"], {}, {"a": 1}]


class _Kept:
    """A server that ``serve`` cannot shut down: one server answers many sessions."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)

    def close(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def _line(request: Any) -> bytes:
    return request if isinstance(request, bytes) else json.dumps(request).encode()


def _session(server: Any, requests: list[Any]) -> list[dict]:
    """Each request (a dict, or the raw bytes of a line) answered by ``server``, one answer per line."""
    out = io.StringIO()
    serve(_Kept(server), io.BytesIO(b"".join(_line(r) + b"\n" for r in requests)), out)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(answers) == len(requests), out.getvalue()[:2000]
    return answers


def _numbered(requests: list[dict], start: int = 1) -> list[dict]:
    return [{"id": i, **r} for i, r in enumerate(requests, start)]


@pytest.fixture(scope="module")
def paired():
    server = PairedServer()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def model():
    """The model adapter pausing where impl.paired pauses (the lockstep's ``SILENT`` steps taken with the one
    before): line for line the same answers."""
    server = ModelServer(mm.MigrationVariant.FIXED, silent=SILENT)
    yield server
    server.shutdown()


@pytest.fixture(params=["model", "paired"])
def server(request, model, paired):
    return {"model": model, "paired": paired}[request.param]


def _conforms(answer: dict) -> None:
    """An answer in the schema's shape; an error never ``internal``, its message bounded."""
    RESPONSE.validate(answer)
    if not answer["ok"]:
        assert answer["error"]["type"] in ("invalid", "unsupported"), answer
        assert 0 < len(answer["error"]["message"]) <= MAX_MESSAGE, answer


# ---------------------------------------------------------------------------
# The issue's lines, one by one


HUGE_OP = "x" * 10_000_000

#: (what, the lines before it (after a reset), the hostile line, the error type, words in its message, the id)
CASES = [
    ("op an array", [], {"id": 1, "op": ["x"]}, "invalid", ["'op'", '["x"]'], 1),
    ("op an object", [], {"id": 2, "op": {"a": 1}}, "invalid", ["'op'", '{"a": 1}'], 2),
    ("op a number", [], {"id": 3, "op": 7}, "invalid", ["'op'", "7"], 3),
    ("op missing", [], {"id": 3}, "invalid", ["'op'"], 3),
    ("nested 100,000 deep", [], b"[" * 100_000 + b"]" * 100_000, "invalid", ["deep"], None),
    ("a deep field", [], b'{"id": 4, "op": "observe", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "invalid",
     ["deep"], None),
    ("id true", [], {"id": True, **HELLO}, "invalid", ["'id'", "true"], None),
    ("id false", [], {"id": False, "op": "observe"}, "invalid", ["'id'", "false"], None),
    ("id a string", [], {"id": "7", **HELLO}, "invalid", ["'id'", '"7"'], None),
    ("id a float", [], {"id": 1.5, **HELLO}, "invalid", ["'id'", "1.5"], None),
    ("id missing", [], HELLO, "invalid", ["'id'"], None),
    ("not an object", [], [1, 2], "invalid", ["object"], None),
    ("not JSON", [], b"{id: 1}", "invalid", ["JSON"], None),
    ("NaN", [], b'{"id": 5, "op": "write", "version": NaN}', "invalid", ["NaN"], None),
    ("not UTF-8", [], b'{"id": 6, "op": "\xff\xfe"}', "invalid", ["UTF-8"], None),
    ("a 10 MB unknown op", [], {"id": 7, "op": HUGE_OP}, "unsupported", ["unknown op", "xxxx", "10000000"], 7),
    ("a 10 MB role", [], {"id": 8, "op": "invoke", "role": HUGE_OP}, "invalid", ["'role'", "xxxx"], 8),
    ("version true", [{"op": "connect", "store": "run"}], {"id": 9, "op": "write", "version": True}, "invalid",
     ["'version'", "true"], 9),
    ("a store's version true", [], {"id": 10, "op": "reset", "stores": [{"version": True, "data": "original"}] * 2},
     "invalid", ["version", "true"], 10),
    ("mode a list", [], {"id": 11, "op": "invoke", "role": "migrate", "mode": ["thread"]}, "invalid",
     ["'mode'", '["thread"]'], 11),
    ("on a string", [], {"id": 12, "op": "readOnly", "store": "run", "on": "yes"}, "invalid", ["'on'", '"yes"'], 12),
    ("recover with an input fault", [], {"id": 13, "op": "invoke", "role": "recover", "fault": "symlink"},
     "invalid", ["recover", "symlink"], 13),
    ("lock with no writer", [], {"id": 14, "op": "lock"}, "invalid", ["lock", "no writer"], 14),
    ("write with no writer", [], {"id": 15, "op": "write", "version": 1}, "invalid", ["write", "no writer"], 15),
    ("edit of a result not there", [], {"id": 16, "op": "edit", "doc": "result"}, "invalid",
     ["edit", "result", "not published"], 16),
    ("repair before edit", [], {"id": 17, "op": "repair", "doc": "request"}, "invalid",
     ["repair", "request", "not edited"], 17),
    ("repair of a backup before edit", [], {"id": 18, "op": "repair", "doc": "backup", "store": "resource"},
     "invalid", ["repair", "resource", "not edited"], 18),
    ("edit of a backup not there", [], {"id": 19, "op": "edit", "doc": "backup", "store": "run"}, "invalid",
     ["edit", "run", "no backup"], 19),
    ("step of no invocation", [], {"id": 20, "op": "step", "invocation": 3}, "invalid", ["step", "3", "not running"],
     20),
    ("connect twice", [{"op": "connect", "store": "run"}], {"id": 21, "op": "connect", "store": "resource"},
     "invalid", ["connect", "already connected"], 21),
    ("write while locked", [{"op": "connect", "store": "run"}, {"op": "lock"}], {"id": 22, "op": "write",
                                                                                "version": 1},
     "invalid", ["write", "transaction"], 22),
    ("read-only twice", [{"op": "readOnly", "store": "run", "on": True}],
     {"id": 23, "op": "readOnly", "store": "run", "on": True}, "invalid", ["readOnly", "run", "already"], 23),
    ("connect to a read-only store", [{"op": "readOnly", "store": "resource", "on": True}],
     {"id": 24, "op": "connect", "store": "resource"}, "invalid", ["connect", "resource", "read-only"], 24),
]


@pytest.mark.parametrize("what, before, line, kind, words, rid", CASES, ids=[c[0] for c in CASES])
def test_each_hostile_line_is_answered_by_one_clear_error(server, what, before, line, kind, words, rid):
    answers = _session(server, [{"id": 100, "op": "reset"}, *_numbered(before, 101), line,
                                {"id": 999, "op": "observe"}])
    assert all(a["ok"] for a in answers[:-2]), answers[:-2]
    answer = answers[-2]
    _conforms(answer)
    assert answer["id"] == rid and not answer["ok"] and answer["error"]["type"] == kind, answer
    message = answer["error"]["message"]
    for word in words:
        assert word in message, (word, message)
    assert "PosixPath" not in message and "Traceback" not in message
    assert answers[-1]["id"] == 999 and answers[-1]["ok"], answers[-1]  # alive, and answers the next request
    OBSERVATION.validate(answers[-1]["result"])


@pytest.mark.parametrize("op", sorted(FIELDS))
def test_every_field_of_every_op_of_a_wrong_type_is_invalid_and_named(server, op):
    """A wrong type at any field: ``invalid`` naming the field, never accepted, never ``internal``."""
    for key in FIELDS[op]:
        for wrong in WRONG_TYPES:
            if wrong == FIELDS[op][key] and type(wrong) is type(FIELDS[op][key]):
                continue
            if (op, key) == ("reset", "stores") and wrong is None:
                continue  # null stores: the default (the model's first state)
            if (key == "invocation" and type(wrong) is int) or (key == "on" and isinstance(wrong, bool)):
                continue  # a number of an invocation not running, a store read-only already: out of order
            request = {"id": 5, "op": op, **FIELDS[op], key: wrong}
            answer = _session(server, [{"id": 1, "op": "reset"}, request])[-1]
            _conforms(answer)
            # a mode the adapter did not declare is unsupported; any other wrong value is malformed
            kind = "unsupported" if key == "mode" and isinstance(wrong, str) else "invalid"
            assert not answer["ok"] and answer["error"]["type"] == kind, (request, answer)
            assert f"'{key}'" in answer["error"]["message"], (request, answer)


def test_a_huge_unknown_op_is_not_echoed_and_the_adapter_goes_on(server):
    answers = _session(server, [{"id": 1, "op": HUGE_OP}, {"id": 2, **HELLO}])
    assert len(json.dumps(answers[0])) < 400, len(json.dumps(answers[0]))
    assert answers[1]["ok"] and answers[1]["result"]["protocol"] == P.PROTOCOL


# ---------------------------------------------------------------------------
# Out of order: impl.paired answers as the model


def _comparable(answer: dict) -> dict:
    """An answer as the two adapters must agree on it: the event's free-text message left out."""
    out = json.loads(json.dumps(answer))
    if out.get("ok") and isinstance(out["result"], dict):
        out["result"].pop("message", None)
    return out


def _agree(model: ModelServer, paired: PairedServer, moves: list[dict]) -> list[dict]:
    lines = _numbered([{"op": "reset"}, *moves, {"op": "observe"}])
    mine, theirs = _session(model, lines), _session(paired, lines)
    for request, a, b in zip(lines, mine, theirs):
        _conforms(a), _conforms(b)
        assert _comparable(a) == _comparable(b), f"{request}: model {a} | impl.paired {b}"
    return mine


OUT_OF_ORDER = [
    {"op": "lock"}, {"op": "unlock"}, {"op": "write", "version": 1}, {"op": "disconnect"},
    {"op": "edit", "doc": "result"}, {"op": "edit", "doc": "request"}, {"op": "edit", "doc": "recovery"},
    {"op": "repair", "doc": "request"}, {"op": "repair", "doc": "backup", "store": "run"},
    {"op": "edit", "doc": "backup", "store": "resource"}, {"op": "readOnly", "store": "run", "on": False},
    {"op": "readOnly", "store": "run", "on": True}, {"op": "readOnly", "store": "run", "on": True},
    {"op": "connect", "store": "run"}, {"op": "lock"}, {"op": "readOnly", "store": "run", "on": False},
    {"op": "connect", "store": "run"}, {"op": "connect", "store": "resource"}, {"op": "lock"},
    {"op": "write", "version": 2}, {"op": "lock"}, {"op": "unlock"}, {"op": "unlock"}, {"op": "write", "version": 1},
    {"op": "step", "invocation": 0}, {"op": "crash", "invocation": 0},
    {"op": "invoke", "role": "recover", "fault": "symlink"}, {"op": "invoke", "role": "migrate"},
    {"op": "step", "invocation": 0}, {"op": "step", "invocation": 0}, {"op": "edit", "doc": "request"},
    {"op": "edit", "doc": "request"}, {"op": "repair", "doc": "request"}, {"op": "repair", "doc": "request"},
    {"op": "step", "invocation": 5}, {"op": "crash", "invocation": 5}, {"op": "disconnect"}, {"op": "disconnect"},
    *[{"op": "step", "invocation": 0}] * 8, {"op": "edit", "doc": "backup", "store": "run"},
    {"op": "edit", "doc": "backup", "store": "run"}, {"op": "repair", "doc": "backup", "store": "run"},
    {"op": "repair", "doc": "backup", "store": "run"}, {"op": "crash", "invocation": 0},
    {"op": "crash", "invocation": 0}, {"op": "edit", "doc": "result"},
]


def test_moves_out_of_order_are_answered_as_the_model_answers_them(model, paired):
    answers = _agree(model, paired, OUT_OF_ORDER)
    kinds = [a["error"]["type"] if not a["ok"] else "ok" for a in answers]
    assert kinds.count("invalid") >= 25 and "internal" not in kinds, kinds


def _move() -> st.SearchStrategy[dict]:
    store, doc = st.sampled_from(["run", "resource"]), st.sampled_from(["request", "result", "recovery", "backup"])
    pid = st.integers(0, 3)
    return st.one_of(
        st.builds(lambda r: {"op": "invoke", "role": r}, st.sampled_from(["migrate", "recover"])),
        st.builds(lambda r, f: {"op": "invoke", "role": r, "fault": f}, st.sampled_from(["migrate", "recover"]),
                  st.sampled_from(["no-key", "wrong-key", "same-path", "symlink", "hardlink"])),
        st.builds(lambda n: {"op": "step", "invocation": n}, pid),
        st.builds(lambda n: {"op": "crash", "invocation": n}, pid),
        st.builds(lambda s: {"op": "connect", "store": s}, store),
        st.builds(lambda v: {"op": "write", "version": v}, st.sampled_from([1, 2])),
        st.sampled_from([{"op": "disconnect"}, {"op": "lock"}, {"op": "unlock"}]),
        st.builds(lambda s, on: {"op": "readOnly", "store": s, "on": on}, store, st.booleans()),
        st.builds(lambda o, d, s: {"op": o, "doc": d, "store": s}, st.sampled_from(["edit", "repair"]), doc, store),
    )


def _moves() -> st.SearchStrategy[list[dict]]:
    """Moves in and out of order: single moves, and runs of steps of one invocation (so that migrations and
    recoveries go far), often after a migrate started first."""
    steps = st.builds(lambda n, k: [{"op": "step", "invocation": n}] * k, st.integers(0, 2), st.integers(1, 16))
    chunks = st.lists(st.one_of(_move().map(lambda m: [m]), steps), min_size=1, max_size=8)
    migrate = [{"op": "invoke", "role": "migrate"}]
    fenced = [*migrate, *[{"op": "step", "invocation": 0}] * 6, {"op": "crash", "invocation": 0},
              {"op": "invoke", "role": "recover"}]  # a migration crashed with both stores fenced, a recovery started
    start = st.sampled_from([[], migrate, fenced])
    return st.builds(lambda first, rest: first + [m for chunk in rest for m in chunk], start, chunks)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(moves=_moves())
def test_any_sequence_of_moves_is_answered_alike_by_the_model_and_impl_paired(model, paired, moves):
    _agree(model, paired, moves)


# ---------------------------------------------------------------------------
# Hostile lines drawn by Hypothesis


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=20),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                     max_leaves=12)
_OPS = st.sampled_from(sorted(FIELDS))


@st.composite
def _hostile_line(draw: Any) -> bytes:
    """One line: any JSON value, a request with wrong-typed fields, deep nesting, a huge string, or raw bytes."""
    kind = draw(st.sampled_from(["json", "fields", "deep", "huge", "bytes", "id"]))
    if kind == "json":
        line = json.dumps(draw(_JSON)).encode()
    elif kind == "fields":
        op = draw(_OPS | st.text(max_size=10) | _JSON)
        fields = dict(FIELDS.get(op, {})) if isinstance(op, str) else {}
        for key in draw(st.lists(st.sampled_from(sorted(fields) or ["x"]), max_size=3)):
            fields[key] = draw(_JSON)
        line = json.dumps({"id": draw(st.integers(-5, 10**30)), "op": op, **fields}).encode()
    elif kind == "deep":
        depth = draw(st.sampled_from([500, 990, 2_000, 100_000]))
        inner = draw(st.sampled_from([b"[", b'{"a":']))
        close = b"]" if inner == b"[" else b"}"
        line = b'{"id": 1, "op": "observe", "x": ' + inner * depth + b"0" + close * depth + b"}"
    elif kind == "huge":
        size = draw(st.sampled_from([5_000, 200_000, 2_000_000]))
        key = draw(st.sampled_from(["op", "role", "store", "doc", "protocol", "mode", "fault"]))
        line = json.dumps({"id": 2, "op": "invoke", "role": "migrate", key: "y" * size}).encode()
    elif kind == "id":
        line = json.dumps({"id": draw(_JSON), **draw(st.sampled_from([HELLO, {"op": "observe"}]))}).encode()
    else:
        line = draw(st.binary(min_size=1, max_size=40))
    line = line.replace(b"\n", b" ")
    return line if line.strip() else b"?"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lines=st.lists(_hostile_line(), min_size=1, max_size=4))
def test_every_answer_to_hostile_lines_is_in_the_schema_and_the_adapter_goes_on(server, lines):
    first = _session(server, [{"id": 1, "op": "reset"}, {"id": 2, "op": "observe"}])[1]
    answers = _session(server, [*lines, {"id": 77, "op": "reset"}, {"id": 78, "op": "observe"}])
    for line, answer in zip(lines, answers):
        _conforms(answer)
        if not answer["ok"] and answer["id"] is not None:
            assert json.loads(line)["id"] == answer["id"]
    assert answers[-2] == {"id": 77, "ok": True, "result": {}}
    assert answers[-1] == {**first, "id": 78}


# ---------------------------------------------------------------------------
# Through the command line: no traceback on standard error


@pytest.fixture
def short_tmp():
    """A fresh directory for ``TMPDIR``, with a short path (an adapter's step sockets live under it, and a socket's
    path holds at most 107 bytes); removed afterwards, whatever is left in it."""
    path = Path(tempfile.mkdtemp(prefix="erh-", dir="/tmp"))
    yield path
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def test_the_command_answers_the_issues_lines_with_nothing_on_standard_error(short_tmp):
    lines = [_line(c[2]) for c in CASES if not c[1]] + [b'{"id": 50, "op": "reset"}', b'{"id": 51, "op": "lock"}',
                                                       b'{"id": 52, "op": "repair", "doc": "request"}']
    env = {**os.environ, "TMPDIR": str(short_tmp)}
    done = subprocess.run([*ENVREPLICA, "adapter", "--protocol", "migration", "--impl", "paired"],
                          input=b"".join(line + b"\n" for line in lines), capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(lines)
    for answer in answers:
        _conforms(answer)
    assert done.stderr == b"", done.stderr[-2000:]
    assert list(short_tmp.iterdir()) == []  # and it took its directories with it


# ---------------------------------------------------------------------------
# Killed: nothing left behind once the next one starts


def _ask(proc: subprocess.Popen, request: dict) -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(request).encode() + b"\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def _start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([*ENVREPLICA, "adapter", "--protocol", "migration", "--impl", "paired"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


def _owned_by(pid: int) -> list[Path]:
    """The directories in /dev/shm whose name says process ``pid`` made them."""
    shm = Path("/dev/shm")
    return sorted(p for p in shm.glob(f"envreplica-*p{pid}s*")) if shm.is_dir() else []


def test_a_killed_paired_adapter_leaves_nothing_once_the_next_one_starts(short_tmp):
    tmp = short_tmp / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    first = _start(env)
    for request in _numbered([HELLO, {"op": "reset"}, {"op": "readOnly", "store": "run", "on": True},
                              {"op": "invoke", "role": "migrate"}, {"op": "step", "invocation": 0}]):
        assert _ask(first, request)["ok"], request
    made = sorted(tmp.iterdir()) + _owned_by(first.pid)
    assert made, "the adapter made no directory where it was told to"
    first.kill()
    first.wait(timeout=60)
    left = [p for p in made if p.exists()]
    assert left  # SIGKILL runs no clean-up
    immutable = os.geteuid() == 0 and subprocess.run(["lsattr", "-R", str(tmp)], capture_output=True,
                                                     text=True).stdout.count("-i-") > 0
    if immutable:  # the read-only store: not even rm -rf removes it
        assert subprocess.run(["rm", "-rf", *map(str, left)], capture_output=True).returncode != 0
    second = _start(env)
    try:
        assert _ask(second, {"id": 1, **HELLO})["ok"]
        assert [p for p in made if p.exists()] == []  # the next start removed the dead one's directories
    finally:
        assert second.stdin is not None
        second.stdin.close()
        assert second.wait(timeout=120) == 0
    assert list(tmp.iterdir()) == [] and _owned_by(second.pid) == []
    assert subprocess.run(["rm", "-rf", str(tmp)], capture_output=True).returncode == 0 and not tmp.exists()


def test_a_killed_replica_adapter_leaves_nothing_once_the_next_one_starts(short_tmp):
    """The replica's adapter without ``--db`` keeps its replica in a temporary directory: the same mechanism."""
    env = {**os.environ, "TMPDIR": str(short_tmp)}
    command = [*ENVREPLICA, "adapter", "--impl", "sqlite", "--test-key"]
    first = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=env)
    assert _ask(first, {"id": 1, "op": "reset"})["ok"]
    made = sorted(short_tmp.iterdir())
    assert made and all(p.name.startswith(f"envreplica-adapter-p{first.pid}s") for p in made), made
    first.kill()
    first.wait(timeout=60)
    assert all(p.exists() for p in made)
    second = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=env)
    try:
        assert _ask(second, {"id": 1, "op": "reset"})["ok"]
        assert [p for p in made if p.exists()] == []
    finally:
        assert second.stdin is not None
        second.stdin.close()
        assert second.wait(timeout=120) == 0
    assert list(short_tmp.iterdir()) == []


def test_the_reaper_removes_only_the_directories_of_processes_that_are_gone(tmp_path):
    """A dead owner's directory goes (an immutable file in it too, as root), and so does one whose pid is alive
    but started at another time (the pid was reused); a live owner's stays; a directory of another pid namespace,
    or of a name without the tag, is left alone."""
    from envreplica.conformance import scratch

    me = scratch.owner_of()
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(done.stdout)  # a process that has ended (its pid not reused this soon, or reused at another start)
    prefix = "envreplica-test-"
    live = scratch.owned_dir(prefix, tmp_path)
    dead = tmp_path / f"{prefix}{scratch.Owner(gone, 1, me.namespace).tag}a"
    reused = tmp_path / f"{prefix}{scratch.Owner(me.pid, me.start + 1, me.namespace).tag}b"
    foreign = tmp_path / f"{prefix}{scratch.Owner(gone, 1, me.namespace + 1).tag}c"
    untagged = tmp_path / f"{prefix}d8f7x"
    other = tmp_path / f"other-{scratch.Owner(gone, 1, me.namespace).tag}e"
    for d in (dead, reused, foreign, untagged, other):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "store.db").write_bytes(b"x")
    flagged = os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(dead / "sub" / "store.db")],
                                                   capture_output=True).returncode == 0
    if flagged:
        assert subprocess.run(["rm", "-rf", str(dead)], capture_output=True).returncode != 0
    assert live.name.startswith(prefix + me.tag)
    assert sorted(scratch.reap(prefix, [tmp_path, tmp_path / "absent"])) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert all(d.exists() for d in (live, foreign, untagged, other))
    assert scratch.reap(prefix, [tmp_path]) == []


# ---------------------------------------------------------------------------
# The replica's adapter (section 5) does not share the flaws


def _replica_answers(driver: Any, lines: list[Any]) -> list[dict]:
    from envreplica.conformance.adapter import serve as replica_serve

    out = io.StringIO()
    replica_serve(driver, io.BytesIO(b"".join(_line(r) + b"\n" for r in lines)), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_replica_adapter_answers_the_same_hostile_lines_and_moves_out_of_order_alike(tmp_path):
    """Wrong-type ``op``, deep JSON, a boolean id, a 10 MB unknown op: one error each in ``Response``'s shape, the
    id null where it is not an integer, the op not echoed; ``page``, ``delivery`` and ``commit`` before any
    ``begin`` are answered by the SQLite replica as by the model."""
    from envreplica.conformance.drivers import TEST_MASTER_KEY, ModelDriver, SqliteDriver

    from adapter_requests import begin, commit, delivery, page, rec

    response = Draft202012Validator(S.standalone("Response"))
    hostile = [{"id": 1, "op": ["x"]}, {"id": 2, "op": {"a": 1}}, b"[" * 100_000 + b"]" * 100_000,
               {"id": True, "op": "status"}, {"id": 3, "op": HUGE_OP}, b'{"id": 4, "op": "\xff"}']
    moves = [{"op": "reset"}, page([rec()]), commit(), {"op": "close"}, delivery(rec()),
             begin(), commit(sequence=3), page([rec()], attempt="other"), {"op": "status"}]
    lines = [*hostile, *_numbered(moves, 10)]
    model = _replica_answers(ModelDriver("fixed"), lines)
    sqlite = _replica_answers(SqliteDriver("fixed", tmp_path / "r.db", master_key=TEST_MASTER_KEY), lines)
    assert len(model) == len(sqlite) == len(lines)
    for answers in (model, sqlite):
        for answer in answers:
            response.validate(answer)
        assert [a["id"] for a in answers[:len(hostile)]] == [1, 2, None, None, 3, None]
        assert [a["error"]["type"] for a in answers[:len(hostile)]] == ["invalid"] * 4 + ["unsupported", "invalid"]
        assert all(len(a["error"]["message"]) < 400 for a in answers[:len(hostile)])
        assert not any("internal error" in json.dumps(a) for a in answers)
    for a, b in zip(model[len(hostile):], sqlite[len(hostile):]):
        assert a["ok"] == b["ok"] and (a["ok"] or a["error"]["type"] == b["error"]["type"]), (a, b)
        if a["ok"]:
            assert a == b
