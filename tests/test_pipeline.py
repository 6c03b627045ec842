"""conformance/pipeline.py: many requests in flight through an adapter's pipes, answers read in order.

The real adapter (``--impl model``) on a slice of the committed benchmark
trace answers pipelined exactly as one request at a time; small ``python -c``
adapters break one rule of section 5 each (die, answer the wrong id, write a
line that is not JSON, stay silent, answer twice) and the harness names the
request. The committed trace is what bench/make_adapter_trace.py builds.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest

from envreplica.conformance.external import AdapterError
from envreplica.conformance.replica.traces import read_requests
from envreplica.conformance.pipeline import main, pipelined, round_trip

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "bench" / "traces" / "adapter-throughput.jsonl"
MODEL = [sys.executable, "-m", "envreplica.cli.main", "adapter", "--impl", "model", "--variant", "fixed"]


def _fake(body: str) -> list[str]:
    """A ``python -c`` adapter: for each line ``n`` (1-based) with request ``req``, run ``body``."""
    code = ("import json, sys\n"
            "def answer(rid, **extra):\n"
            "    sys.stdout.write(json.dumps(dict({'id': rid, 'ok': True, 'result': {}}, **extra)) + '\\n')\n"
            "    sys.stdout.flush()\n"
            "for n, line in enumerate(sys.stdin, 1):\n"
            "    req = json.loads(line)\n"
            + "".join(f"    {part}\n" for part in body.splitlines()))
    return [sys.executable, "-c", code]


ECHO = _fake("answer(req.get('id'))")
REQUESTS = [{"id": i, "op": "status"} for i in range(1, 41)]


@pytest.fixture(scope="module")
def trace_slice() -> list:
    return read_requests(TRACE)[:300]


def test_pipelined_answers_equal_round_trip_on_the_trace(trace_slice):
    piped = pipelined(MODEL, trace_slice, window=64)
    one_by_one = round_trip(MODEL, trace_slice)
    assert piped.requests == one_by_one.requests == len(trace_slice) == len(piped.responses)
    assert piped.responses == one_by_one.responses
    assert [r["id"] for r in piped.responses] == [r["id"] for r in trace_slice]
    ok = sum(1 for r in piped.responses if r["ok"] is True and not (
        isinstance(r["result"], dict) and r["result"].get("ok") is False))
    assert ok >= 0.9 * len(trace_slice)  # the benchmark times the steady path, not refusals


@pytest.mark.parametrize("window", [1, 3, 1000])
def test_any_window_answers_every_request_in_order(window):
    result = pipelined(ECHO, REQUESTS, window=window)
    assert [r["id"] for r in result.responses] == list(range(1, 41))


def test_a_dying_adapter_names_the_first_unanswered_request():
    dies = _fake("answer(req['id'])\nif n == 5: sys.stderr.write('giving up\\n'); sys.exit(3)")
    with pytest.raises(AdapterError) as caught:
        pipelined(dies, REQUESTS, window=8)
    text = str(caught.value)
    assert "request #6 of 40" in text and "exited with status 3" in text and "answering 5 of 40" in text
    assert "giving up" in text  # its standard error
    assert caught.value.index == 5
    with pytest.raises(AdapterError, match=r"request #6 of 40"):
        round_trip(dies, REQUESTS)


def test_a_wrong_id_is_caught():
    wrong = _fake("answer(req['id'] + 1 if n == 3 else req['id'])")
    with pytest.raises(AdapterError) as caught:
        pipelined(wrong, REQUESTS)
    assert "request #3 of 40" in str(caught.value) and "id is 4, expected 3" in str(caught.value)
    assert caught.value.index == 2
    with pytest.raises(AdapterError, match=r"request #3 of 40.*id is 4, expected 3"):
        round_trip(wrong, REQUESTS)


def test_a_request_without_an_id_is_answered_with_null():
    requests = [{"id": 1, "op": "status"}, {"op": "status"}, {"id": True, "op": "status"}]
    nulls = _fake("answer(req.get('id') if type(req.get('id')) is int else None)")
    assert [r["id"] for r in pipelined(nulls, requests).responses] == [1, None, None]
    with pytest.raises(AdapterError, match=r"request #3 of 3: the answer's id is true, expected null"):
        pipelined(ECHO, requests)


def test_a_line_that_is_not_json_is_caught():
    chatty = _fake("if n == 4: print('hello from the adapter', flush=True)\nelse: answer(req['id'])")
    with pytest.raises(AdapterError, match=r"request #4 of 40: the answer is not JSON: 'hello from the adapter'"):
        pipelined(chatty, REQUESTS)
    listy = _fake("print('[1, 2]', flush=True)")
    with pytest.raises(AdapterError, match=r"request #1 of 40: the answer is not a JSON object"):
        pipelined(listy, REQUESTS)


def test_an_answer_nested_100000_deep_is_refused_unread():
    """JSON nested 100,000 arrays deep: refused before it is parsed (never a ``RecursionError``), both ways."""
    deep = _fake("if n == 3: print('{\"id\": %d, \"ok\": true, \"result\": %s%s}' % (req['id'], '[' * 100000, "
                 "']' * 100000), flush=True)\nelse: answer(req['id'])")
    with pytest.raises(AdapterError, match=r"request #3 of 40: the answer nests deeper than 100 arrays"):
        pipelined(deep, REQUESTS)
    with pytest.raises(AdapterError, match=r"request #3 of 40: the adapter wrote a line nested deeper than 100"):
        round_trip(deep, REQUESTS)


def test_silence_times_out_and_extra_answers_are_caught():
    silent = _fake("if n == 2: __import__('time').sleep(60)\nanswer(req['id'])")
    with pytest.raises(AdapterError, match=r"request #2 of 40: no answer within 0.5 s"):
        pipelined(silent, REQUESTS, timeout=0.5)
    twice = _fake("answer(req['id'])\nif n == 40: answer(req['id'])")
    with pytest.raises(AdapterError, match=r"wrote 1 line\(s\) more than the 40 requests"):
        pipelined(twice, REQUESTS)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(AdapterError, match="command is empty"):
        pipelined("", REQUESTS)
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        pipelined(ECHO, REQUESTS, window=0)
    with pytest.raises(AdapterError, match="could not start the adapter"):
        pipelined(["/nonexistent/adapter"], REQUESTS)


def test_the_command_line_prints_the_rate(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"id":{i},"op":"status"}}\n' for i in range(1, 21)))
    assert main(["--adapter", shlex.join(ECHO), str(trace), "--round-trip", "--window", "4"]) == 0
    out = capsys.readouterr().out
    assert "pipelined (window 4): 20 requests" in out and "round trip: 20 requests" in out
    assert "the answers are the same" in out


def test_the_committed_trace_is_what_the_script_builds():
    spec = importlib.util.spec_from_file_location("make_adapter_trace", ROOT / "bench" / "make_adapter_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert TRACE.read_text() == module.encode(module.build()), \
        "bench/traces/adapter-throughput.jsonl is stale: rerun .venv/bin/python bench/make_adapter_trace.py"
    assert 3000 <= len(read_requests(TRACE)) <= 5000 and TRACE.stat().st_size < 2_000_000
