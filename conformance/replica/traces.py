"""Steps for people and for files: one-line requests and responses, numbered steps, traces on disk.

``describe_request`` / ``describe_response`` / ``format_steps`` render steps;
``write_trace`` writes an example as JSON lines of requests (replayable:
``envreplica replay FILE.jsonl``, ``envreplica conformance --traces DIR``)
and as an ITF-style trace of (request, model response, implementation
response) per step; ``read_requests`` reads the JSON lines back. Nothing
here sends a request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from envreplica.checker import itf
from envreplica.conformance.drivers import OPS
from envreplica.conformance.replica.compare import _short, compare_responses
from envreplica.conformance.replica.coverage import _mat_item
from envreplica.conformance.replica.text import brief

# ---------------------------------------------------------------------------
# Readable steps
# ---------------------------------------------------------------------------


def _ref_text(ref: Any) -> str:
    if not isinstance(ref, dict):
        return "none"
    if ref.get("kind") == "legacy":
        return f"legacy@{ref.get('ssmVersion')}"
    sid = str(ref.get("stagingId", "?"))
    return f"staged:{sid[:8]}…{sid[-4:]}"


def _record_text(r: Any) -> str:
    try:
        h = r["head"]
        text = f"{r['key']} r{h['revision']}g{h['generation']}"
        text += " tomb" if h["tombstone"] else f" {_ref_text(h['valueRef'])}"
        binding = r["binding"]
        if isinstance(binding, dict):
            text += " omit" if binding.get("kind") == "omit" else f" withhold({binding.get('reason')})"
        text += f" e{r['policyEpoch']}"
        if r["listingGeneration"]:
            text += f" L{r['listingGeneration']}"
        return text
    except (KeyError, TypeError):
        return _short(r, 100)


def _raw_text(raw: Any) -> str:
    """A stored value's text in short: the envelope's fields that matter, or the text itself."""
    try:
        env = json.loads(raw)
        if isinstance(env, dict) and env.get("kind") == "project-env" and "value" in env:
            org = f" org={env['orgId']}" if "orgId" in env else ""
            value = brief(env["value"], 20) if isinstance(env["value"], str) else _short(env["value"], 60)
            return f"envelope(v{env.get('v')}{org} {env.get('projectId')}/{env.get('key')} value={value})"
    except (ValueError, TypeError):
        pass
    return f"raw={_short(raw, 60)}"


def describe_request(request: Any) -> str:
    """One line for a request: the op and its frame in a compact human form."""
    if not isinstance(request, dict):
        return _short(request)
    op = request.get("op")
    try:
        if op == "begin":
            f = request["frame"]
            text = (f"begin {f['attempt']['streamId']}/{f['attempt']['attemptId']} projects={f['projectIds']} "
                    f"kept={request['keptPolicyEpochs']} org={request['orgId']}")
        elif op == "page":
            f = request["frame"]
            recs = " | ".join(_record_text(r) for r in f["records"])
            text = (f"page {f['attemptId']}/{f['projectId']} v{f['recordVersion']} after={f['after']} [{recs}]"
                    f"{' complete' if f['complete'] is True else ' partial'}")
        elif op == "delivery":
            f = request["frame"]
            d = f["delivery"]
            text = (f"delivery {d['streamId']}:{d['sequence']} {f['projectId']}@{f['recordVersion']} "
                    f"{_record_text(f['state'])}")
            if "reconciliationAttemptId" in f:
                text += f" recon={f['reconciliationAttemptId']}"
        elif op == "commit":
            f = request["frame"]
            hw = f["highWater"]
            versions = ", ".join(f"{v['projectId']}@{v['recordVersion']}" for v in f["versions"])
            text = f"commit {f['attemptId']} highWater={hw['streamId']}:{hw['sequence']} [{versions}]"
        elif op == "store.put":
            text = f"store.put {request['projectId']}/{request['key']} {_ref_text(request['ref'])} {_raw_text(request['raw'])}"
            if "reportedVersion" in request:
                text += f" reportedVersion={request['reportedVersion']}"
        elif op == "store.fail":
            text = f"store.fail {request['projectId']}/{request['key']} {_ref_text(request['ref'])} {request['mode']}"
        elif op in ("snapshot", "diagnostics"):
            text = f"{op} {request['projectIds']}"
        elif op == "ready":
            text = f"ready within {request['timeoutMs']} ms"
        elif op == "reset":
            text = f"reset {_short(request.get('config', {}))}"
        elif op in OPS and set(request) <= {"id", "op"}:
            text = str(op)
        else:
            raise KeyError(op)
    except (KeyError, TypeError, AttributeError):
        rest = {k: v for k, v in request.items() if k not in ("id", "duringFetch")}
        text = f"(raw) {_short(rest, 200)}"
    if "crashAfterCommit" in request:
        text += f"  crashAfterCommit={request['crashAfterCommit']}"
    if isinstance(request.get("duringFetch"), list):
        inner = "; ".join(describe_request(n) for n in request["duringFetch"])
        text += f"  duringFetch=[{inner}]"
    return text


def describe_response(response: Any) -> str:
    """One line for a response: ok, a refusal code, materializations, or an error."""
    if not isinstance(response, dict):
        return _short(response)
    if set(response) == {"driver-error"}:
        # The adapter died or stopped answering: what happened and its last lines of standard error, in full.
        return "NO ANSWER: " + str(response["driver-error"]).replace("\n", "\n         ")
    if response.get("ok") is False:
        err = response.get("error") or {}
        text = f"ERROR {err.get('type')}: {_short(err.get('message'), 120)}"
    elif response.get("ok") is True:
        r = response.get("result")
        if isinstance(r, dict) and set(r) == {"crashedAfterCommit"}:
            text = f"CRASHED after write commit {r['crashedAfterCommit']} (reopened from disk, gate closed)"
        elif isinstance(r, dict) and r.get("ok") is False:
            text = f"refused {r.get('code')}"
            if "consumed" in r:
                text += f" (consumed={r['consumed']}, replayed={r['replayed']})"
        elif isinstance(r, dict) and "results" in r:
            text = "ok [" + ", ".join(f"{x['state']['key']}: {_mat_item(x['materialization'])}"
                                      for x in r["results"]) + "]"
        elif isinstance(r, dict) and "replayed" in r:
            text = (f"ok{' (replayed)' if r['replayed'] else ''} {r['result']['state']['key']}: "
                    f"{_mat_item(r['result']['materialization'])} @{r['recordVersion']}")
        elif isinstance(r, dict) and "appliedThrough" in r and "gateOpen" not in r:
            text = f"ok appliedThrough={_short(r['appliedThrough'])} epochs={r.get('policyEpochs')}"
        else:
            text = "ok " + _short(r, 160)
    else:
        text = _short(response)
    if isinstance(response.get("nested"), list):
        text += f"  nested=[{'; '.join(describe_response(n) for n in response['nested'])}]"
    return text


def format_steps(steps: Sequence[dict], divergence: Optional[str] = None, *, header: str = "") -> str:
    """Numbered readable steps; the last one with both responses and the divergence."""
    lines = [header] if header else []
    for i, step in enumerate(steps, 1):
        lines.append(f"  #{i} {describe_request(step['request'])}")
        model, impl = step.get("model"), step.get("impl")
        last = i == len(steps) and divergence is not None
        if last or compare_responses(model, impl) is not None:
            lines.append(f"       model:          {describe_response(model)}")
            lines.append(f"       implementation: {describe_response(impl)}")
        else:
            lines.append(f"       -> {describe_response(model)}")
    if divergence:
        lines.append(f"  DIVERGENCE at step #{len(steps)}: {divergence}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Traces on disk: JSON lines of requests, and an ITF-style record of each step
# ---------------------------------------------------------------------------


#: A step's request as an ITF value (``checker.itf.json_to_itf``: ``null`` as Quint's ``None``, big integers).
_itf = itf.json_to_itf
#: The fields of the adapter's requests (docs/protocol.md sections 5 and 6) besides ``id`` and ``op``: the names
#: of a lockstep trace's ``mbt::nondetPicks`` (with any other field its requests hold).
REQUEST_PICKS = ("frame", "keptPolicyEpochs", "orgId", "projectIds", "projectId", "key", "ref", "raw",
                 "reportedVersion", "mode", "timeoutMs", "config", "crashAfterCommit", "duringFetch")


def request_picks(request: Any) -> dict:
    """A request's fields but ``id`` and ``op``, as ITF values (``mbt::nondetPicks``)."""
    if not isinstance(request, dict):
        return {}
    return {str(k): _itf(v) for k, v in request.items() if k not in ("id", "op")}


def write_trace(out_dir: Path, name: str, steps: Sequence[dict], divergence: Optional[str],
                meta: Optional[dict] = None) -> tuple[Path, Path]:
    """Write ``NAME.jsonl`` (the requests) and ``NAME.itf.json`` (request, model, impl per step; the request's op
    as ``mbt::actionTaken``, its fields as ``mbt::nondetPicks``; ``#meta.protocol`` ``replica``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(s["request"], separators=(",", ":")) + "\n" for s in steps))
    picked = [request_picks(s["request"]) for s in steps]
    names = [*REQUEST_PICKS, *sorted({k for p in picked for k in p} - set(REQUEST_PICKS))]
    states = [
        {"#meta": {"index": i, "step": describe_request(s["request"])},
         "request": _itf(s["request"]), "model": _itf(s.get("model")),
         "implementation": _itf(s.get("impl")),
         "agree": compare_responses(s.get("model"), s.get("impl")) is None,
         itf.ACTION_TAKEN: str(s["request"].get("op")) if isinstance(s["request"], dict) else "?",
         itf.NONDET_PICKS: itf.nondet_picks(names, picked[i])}
        for i, s in enumerate(steps)
    ]
    doc = itf.document(itf.REPLICA, ["request", "model", "implementation", "agree"], states,
                       f"lockstep divergence: {divergence}" if divergence else "lockstep trace", meta,
                       source="envreplica.conformance.replica")
    itf_path = itf.save(out_dir / f"{name}.itf.json", doc)
    return jsonl, itf_path


def read_requests(path: Path) -> list[dict]:
    """The requests of a JSON-lines trace (blank lines skipped)."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as error:
                raise ValueError(f"{path}:{n}: not a JSON line: {error}") from None
    return out
