"""Adapter requests (docs/protocol.md section 5) as small builders, for hand-written scenarios.

Shared by ``tests/test_adapter.py`` (the adapter suite) and
``tests/impl_mutants.py`` (each mutant's scenario). Defaults describe one
organisation ``o1``, stream ``s1``, attempt ``a1`` and project ``p1``.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any, Optional

from envreplica.model.store import legacy_envelope, staged_envelope

SID = "0f8fad5b-d9cb-469f-a165-70867728950e"
SID2 = "1f8fad5b-d9cb-469f-a165-70867728950e"
SID3 = "2f8fad5b-d9cb-469f-a165-70867728950e"


# ---------------------------------------------------------------------------
# Request builders.
# ---------------------------------------------------------------------------


def staged(sid: str = SID) -> dict:
    return {"kind": "staged", "stagingId": sid}


def legacy(version: int) -> dict:
    return {"kind": "legacy", "ssmVersion": version}


def rec(key: str = "A", rev: int = 1, gen: int = 1, ref: Optional[dict] = None, tomb: bool = False,
        binding: Any = None, epoch: Optional[int] = 1, listing: int = 0) -> dict:
    if ref is None and not tomb:
        ref = staged()
    return {"key": key, "head": {"revision": rev, "generation": gen, "tombstone": tomb, "valueRef": ref},
            "binding": binding, "policyEpoch": epoch, "listingGeneration": listing}


def reset(**config) -> dict:
    return {"op": "reset", "config": config} if config else {"op": "reset"}


def begin(attempt: str = "a1", stream: str = "s1", projects=("p1",), epochs=(1,), org: str = "o1") -> dict:
    return {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": attempt},
                                     "projectIds": list(projects)},
            "keptPolicyEpochs": list(epochs), "orgId": org}


def page(records=(), attempt: str = "a1", project: str = "p1", after: Optional[str] = None, version: int = 0,
         complete: bool = True, during: Optional[list] = None) -> dict:
    out = {"op": "page", "frame": {"opId": "op-page", "attemptId": attempt, "projectId": project, "after": after,
                                   "recordVersion": version, "records": list(records), "complete": complete}}
    if during is not None:
        out["duringFetch"] = during
    return out


def delivery(state: dict, sequence: int = 1, version: int = 1, project: str = "p1", stream: str = "s1",
             attempt: Optional[str] = None, during: Optional[list] = None) -> dict:
    frame = {"kind": "env.replica.apply", "opId": f"op-{sequence}", "projectId": project,
             "recordVersion": version, "state": state, "delivery": {"streamId": stream, "sequence": sequence}}
    if attempt is not None:
        frame["reconciliationAttemptId"] = attempt
    out = {"op": "delivery", "frame": frame}
    if during is not None:
        out["duringFetch"] = during
    return out


def commit(attempt: str = "a1", stream: str = "s1", sequence: int = 0, versions=(("p1", 0),)) -> dict:
    return {"op": "commit", "frame": {"attemptId": attempt, "highWater": {"streamId": stream, "sequence": sequence},
                                      "versions": [{"projectId": p, "recordVersion": v} for p, v in versions]}}


def put(key: str = "A", ref: Optional[dict] = None, raw: Optional[str] = None, project: str = "p1",
        value: str = "secret-A", **extra) -> dict:
    ref = ref or staged()
    if raw is None:
        raw = (staged_envelope("o1", project, key, ref["stagingId"], value) if ref["kind"] == "staged"
               else legacy_envelope(project, key, value))
    return {"op": "store.put", "projectId": project, "key": key, "ref": ref, "raw": raw, **extra}


def fail(mode: str, key: str = "A", ref: Optional[dict] = None, project: str = "p1") -> dict:
    return {"op": "store.fail", "projectId": project, "key": key, "ref": ref or staged(), "mode": mode}


def op(name: str, **fields) -> dict:
    return {"op": name, **fields}


def snapshot(*projects: str) -> dict:
    return op("snapshot", projectIds=list(projects or ("p1",)))


def ready(timeout_ms: int = 0) -> dict:
    return op("ready", timeoutMs=timeout_ms)


def diagnostics(*projects: str) -> dict:
    return op("diagnostics", projectIds=list(projects or ("p1",)))


def state() -> dict:
    return op("state")


def crash(request: dict, after: int) -> dict:
    """``request`` (a page or delivery) asked to crash right after its ``after``-th write commit."""
    return dict(request, crashAfterCommit=after)


#: An activated replica with an open gate: p1 live at record version 0, no records.
BOOT = [reset(), begin(), page(), commit()]


def serving_a_and_b(values: dict[str, str]) -> list[dict]:
    """A fresh replica brought to serve p1 {A, B} and p2 {}: the values of A, B and C (``values``) put, staged
    under SID, SID2 and SID3; a snapshot of p1 and p2, both empty, committed; A and B delivered (C's value waits
    for its delivery). ``tests/test_integrity.py``'s and ``tests/test_tamper_generated.py``'s replicas."""
    return [*(put(key, staged(sid), value=values[key]) for key, sid in (("A", SID), ("B", SID2), ("C", SID3))),
            begin(projects=("p1", "p2")),
            page([], project="p1"),
            page([], project="p2"),
            commit(versions=(("p1", 0), ("p2", 0))),
            delivery(rec("A", ref=staged(SID)), sequence=1, version=1),
            delivery(rec("B", ref=staged(SID2)), sequence=2, version=2)]


def with_ids(requests: list, start: int = 1) -> list:
    """Number the requests (nested ones from 1000 up) so every response can be matched."""
    out = []
    nested_id = [1000]
    for i, request in enumerate(requests):
        request = dict(request, id=request.get("id", start + i))
        if isinstance(request.get("duringFetch"), list):
            inner = []
            for n in request["duringFetch"]:
                inner.append(dict(n, id=nested_id[0]) if "id" not in n else n)
                nested_id[0] += 1
            request["duringFetch"] = inner
        out.append(request)
    return out


# ---------------------------------------------------------------------------
# A deliberately divergent adapter (run as ``python -c BROKEN_ADAPTER --impl sqlite --test-key``).
# ---------------------------------------------------------------------------

class FlipsCommits:
    """Put before a driver class: every successful commit answers with its ``ok`` flipped (a divergence at the
    commit that no fix of the seed's explains)."""

    def handle(self, request):
        response = super().handle(request)
        if isinstance(request, dict) and request.get("op") == "commit" and response.get("ok"):
            response["result"]["ok"] = not response["result"]["ok"]
        return response


#: Wraps the real adapter; answers every commit with its ``ok`` flipped (found within a few examples). A script
#: of its own (it is written where the adapter runs): ``FlipsCommits`` is written into it.
BROKEN_ADAPTER = textwrap.dedent("""
    import sys

    from envreplica.conformance import adapter
    from envreplica.conformance.drivers import SqliteDriver


""") + inspect.getsource(FlipsCommits) + textwrap.dedent("""

    class Broken(FlipsCommits, SqliteDriver):
        pass


    adapter.SqliteDriver = Broken
    from envreplica.cli.adapter import main  # the options (cli/adapter.py)
    sys.exit(main(sys.argv[1:]))
""")
