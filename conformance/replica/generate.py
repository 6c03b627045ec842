"""Request generation: ``_Gen``, the builders of every request a rule sends.

Each builder takes a ``_Draw`` (``draw``) and a ``_View`` (``records``) and
changes nothing: protocol-aware, biased toward what exists, from the small
domains of ``domains``. Which rule runs when, and sending the requests, are
in ``machine``.
"""

from __future__ import annotations

import json
import random
import re
from typing import Callable, Collection, Iterable, Optional, Sequence, Union

from envreplica.conformance.replica.domains import (
    ATTEMPTS,
    ALL_KEYS,
    EPOCH_SETS,
    HARD_VALUES,
    KEYS,
    LONG_KEYS,
    ODD_PROJECTS,
    ORG,
    OTHER_ORG,
    PROJECTS,
    REASONS,
    STRANGER,
    STREAMS,
    VALUES,
    draw_value,
)
from envreplica.conformance.replica.coverage import page_ack_bytes
from envreplica.conformance.replica.draw import _Draw
from envreplica.conformance.replica.records import (
    _moved,
    _View,
    combined_move,
    moves_of,
    record,
    ref_for,
    staging_id,
)
from envreplica.model.state import LiveRow, StageRow
from envreplica.model.store import legacy_envelope, legacy_parameter_name, staged_envelope
from envreplica.spec import wire
from envreplica.spec.domain import MatKind

#: The values a clean reconciliation stocks, in turn from a random start: every class of value each
#: reconciliation or two, so that each is installed and served often. The 72 KB value once a turn and the
#: 256 KiB one never (``draw_value`` draws it): every later step that holds one reads back, opens and
#: compares it (~1.5 ms and ~3 ms a step).
RECONCILED_VALUES = (VALUES[0], *HARD_VALUES[:-1], VALUES[1], *HARD_VALUES[:-2])

#: A lone surrogate in a Python string (json.loads joins escaped pairs; only lone ones stay).
_LONE = re.compile("[\ud800-\udfff]")


def _other_project(project: str) -> str:
    """A project id of ``PROJECTS`` that is not ``project``."""
    return PROJECTS[1] if project == PROJECTS[0] else PROJECTS[0]


def wrong_staged_envelope(d: _Draw, org: str, project: str, key: str, staging: str, value: str) -> str:
    """A staged envelope right in every field but one, drawn from the fields the seed's check compares:
    the organisation (a value another tenant staged), the staging id (a value staged for another
    generation: a stale one), the project or the key. Each such envelope must read as
    ``value_envelope_mismatch``; one field at a time, so that an implementation that forgets any one
    comparison installs it and parts from the model."""
    field = d.weighted([(3, "org"), (2, "project"), (2, "key"), (3, "staging")])
    if field == "org":
        org = OTHER_ORG if org != OTHER_ORG else ORG
    elif field == "project":
        project = _other_project(project)
    elif field == "key":
        key = key + "Z"
    else:
        staging = staging[:-1] + ("1" if staging[-1] != "1" else "2")
    return staged_envelope(org, project, key, staging, value)


def wrong_legacy_envelope(d: _Draw, project: str, key: str, value: str) -> str:
    """A legacy envelope right but for its project or its key: ``value_envelope_mismatch`` either way."""
    if d.flag(50):
        return legacy_envelope(_other_project(project), key, value)
    return legacy_envelope(project, key + "Z", value)


#: The fields of a legacy (v1) envelope, each with values of another JSON type than the seed's reader takes.
LEGACY_FIELD_TYPES = {
    "v": ("1", True, None, [1]),
    "kind": (1, None, ["project-env"]),
    "projectId": (1, None, {"id": "p1"}),
    "key": (7, False, ["A"]),
    "value": (5, 2.5, None, True, {"v": "secret"}, ["secret"]),
}


#: The field ``typed_legacy_envelope`` gives another type: ``value`` (the text a task reads) twice as often.
_TYPED_FIELDS = ("v", "kind", "projectId", "key", "value", "value")


def typed_legacy_envelope(d: _Draw, project: str, key: str, value: str, field: Optional[str] = None) -> str:
    """A legacy envelope with every key in place but one field of another JSON type (a number, an object, an
    array, null, a boolean): ``parseStoredProjectEnv`` throws on it, and the seed reads ``value_unavailable``.
    An implementation that takes a field to be text raises later instead, or compares a number with a string."""
    envelope = json.loads(legacy_envelope(project, key, value))
    salt = json.dumps([project, key, value]).encode()
    field = field or d.spread(_TYPED_FIELDS, salt)
    envelope[field] = d.spread(LEGACY_FIELD_TYPES[field], salt)
    return json.dumps(envelope, separators=(",", ":"))


def stored_envelope(d: _Draw, ref: dict, org: str, project: str, key: str, value: str, wrong: bool = False) -> str:
    """The text a store holds for ``ref`` (a wire value reference): the envelope the seed reads back as
    ``value`` for (``org``, ``project``, ``key``), or with ``wrong`` one wrong in a single field (drawing
    from ``d`` only then)."""
    if ref["kind"] == "staged":
        if wrong:
            return wrong_staged_envelope(d, org, project, key, ref["stagingId"], value)
        return staged_envelope(org, project, key, ref["stagingId"], value)
    return wrong_legacy_envelope(d, project, key, value) if wrong else legacy_envelope(project, key, value)


class _Gen:
    """Request builders. Each takes a ``_Draw`` and a ``_View``; none changes anything."""

    # -- records ------------------------------------------------------------

    @staticmethod
    def random_record(d: _Draw, key: str) -> dict:
        rev, gen = d.index(4), d.index(4)
        tomb = d.flag(20)
        if tomb:
            ref = None
        else:
            ref = d.weighted([(6, ref_for(key, gen)),
                              (2, {"kind": "staged", "stagingId": staging_id(key, gen, 1)}),
                              (2, {"kind": "legacy", "ssmVersion": max(gen, 1)})])
        binding = d.weighted([(6, None), (2, {"kind": "omit"}), (2, {"kind": "withhold", "reason": d.one(REASONS)})])
        epoch = d.weighted([(5, 1), (2, 2), (1, 3), (2, None)])
        return record(key, rev, gen, tomb, ref, binding, epoch, d.index(3))

    @classmethod
    def record(cls, d: _Draw, key: str, current: Optional[dict], kept: Sequence[int] = (1, 2),
               where: str = "") -> dict:
        """Mostly the next record a consistent cloud would send; sometimes an odd one. ``where`` (the
        state it is sent in) salts the choice among the many combined moves (``_Draw.spread``)."""
        if current is None:
            choice = d.weighted([(6, "create"), (1, "fence"), (2, "random"), (1, "create2")])
            if choice == "create":
                return record(key, epoch=kept[0] if kept else 1)
            if choice == "create2":
                return record(key, epoch=2)
            if choice == "fence":
                return record(key, 1, 0, True)
            return cls.random_record(d, key)
        tomb = current["head"]["tombstone"]
        if tomb:
            moves = ["restore", "relist"]
        else:
            moves = ["rotate", "upgrade", "delete", "withhold", "relist", "omit"]
            if current["binding"] is not None:
                moves.insert(0, "bind")
        choice = d.weighted([(11, "advance"), (3, "same"), (2, "random"), (2, "older"), (2, "twin"), (1, "twice"),
                             (36, "combined")])
        if choice == "advance":
            return _moved(current, d.one(moves))
        if choice == "combined":  # several fields at once: every combination the record domain allows
            return combined_move(current, d.spread(moves_of(current), (where + json.dumps(current, sort_keys=True)).encode()))
        if choice == "same":
            return current
        if choice == "twice":
            return _moved(_moved(current, d.one(moves)), "relist")
        if choice in ("older", "twin"):
            return _moved(current, choice)
        return cls.random_record(d, key)

    @staticmethod
    def key(d: _Draw, existing: Iterable[str]) -> str:
        existing = sorted(set(existing))
        if existing and d.index(10) < 6:
            return d.one(existing)
        return d.one(d.weighted([(9, KEYS), (1, LONG_KEYS)]))  # now and then a key at the rules' bounds

    # -- begin --------------------------------------------------------------

    @staticmethod
    def begin(d: _Draw, v: _View) -> dict:
        fresh = [a for a in ATTEMPTS if a != v.attempt]
        attempt = d.weighted([(8, d.one(fresh)), (2, d.one(ATTEMPTS))])
        stream = v.stream or STREAMS[0]
        other = [s for s in STREAMS if s != stream] or [stream]
        stream = d.weighted([(8, stream), (2, d.one(other))])
        projects = d.weighted([(4, ["p1", "p2"]), (4, ["p1"]), (2, ["p2"]), (1, []), (1, ["p2", "p1"]), (2, None)])
        projects = _Gen.odd_projects(d) if projects is None else projects
        epochs = list(d.weighted([(3, v.epochs if v.activated else (1, 2))] + [(2, e) for e in EPOCH_SETS]))
        org = d.weighted([(10, v.org or ORG), (1, OTHER_ORG)])
        return {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": attempt},
                                         "projectIds": projects},
                "keptPolicyEpochs": epochs, "orgId": org}

    @staticmethod
    def begin_again(v: _View, epochs: Optional[Sequence[int]] = None) -> dict:
        """The open attempt begun again with the same id (a reconnect that reuses it), maybe under other epochs."""
        return {"op": "begin", "frame": {"attempt": {"streamId": v.stream or STREAMS[0],
                                                     "attemptId": v.attempt or ATTEMPTS[0]},
                                         "projectIds": sorted(v.stage) or ["p1"]},
                "keptPolicyEpochs": list(v.epochs if epochs is None else epochs), "orgId": v.org or ORG}

    # -- page ---------------------------------------------------------------

    @classmethod
    def page(cls, d: _Draw, v: _View) -> dict:
        attempt = v.attempt if v.attempt is not None and not d.flag(8) else d.one(ATTEMPTS)
        mine = attempt == v.attempt
        staged = sorted(v.stage) if mine else []
        open_ = [p for p in staged if not v.stage[p].complete]
        project = d.weighted([(12, d.one(open_ or staged or list(PROJECTS))), (1, d.one(PROJECTS + (STRANGER,)))])
        live_v = v.live_versions.get(project, 0)
        sp = v.stage.get(project) if mine else None
        continuing = (sp is not None and sp.record_version is not None and not sp.complete
                      and sp.last_key is not None)
        if continuing and not d.flag(12):
            assert sp is not None  # continuing
            version, after = sp.record_version, sp.last_key
        else:
            after = None if not d.flag(10) else d.one(KEYS[:-1])
            options = [(9, live_v + 1), (5, live_v), (1, live_v + 2)]
            if sp is not None and sp.record_version is not None:
                options.append((2, sp.record_version))
            if live_v > 0:
                options.append((4, live_v - 1))
            version = d.weighted(options)
        membership = None
        if version == live_v and not d.flag(20):
            # The live version again: a consistent cloud resends the live records as they are. Now and then a
            # whole snapshot at that version whose records differ from the live ones by membership only: one
            # live record left out, or one added (the seed refuses both, snapshot_version_conflict).
            live = v.live(project)
            membership = d.weighted([(6, None), (5 if live else 0, "left out"), (1, "added")])
            if membership is not None:
                after = None
            candidates = [live[k] for k in sorted(live) if after is None or k > after]
            if membership == "left out" and candidates:
                candidates.pop(d.index(len(candidates)))
            elif membership == "added":
                fresh = [k for k in KEYS if k not in live]
                if fresh:
                    candidates = sorted(candidates + [record(d.one(fresh), epoch=v.epochs[0] if v.epochs else 1)],
                                        key=lambda r: r["key"])
            if membership is not None:
                frame = {"opId": f"page-{project}", "attemptId": attempt, "projectId": project, "after": None,
                         "recordVersion": version, "records": candidates, "complete": True}
                return {"op": "page", "frame": frame}
        else:
            candidates = []
            keys = [k for k in KEYS if after is None or k > after]
            known = set(v.live(project)) | (set(v.staged(project)) if mine else set())
            for k in keys:
                if d.index(100) < (70 if k in known else 35):
                    current = v.current(project, k, staged=mine) or v.current(project, k, staged=False)
                    candidates.append(cls.record(d, k, current, v.epochs, f"{project}@{version}#{v.applied}"))
        n = len(candidates)
        take = d.weighted([(6, min(n, 2)), (2, min(n, 1)), (1, 0), (1, n)])
        records = candidates[:take]
        complete = take == n if not d.flag(10) else not (take == n)
        frame = {"opId": f"page-{project}", "attemptId": attempt, "projectId": project, "after": after,
                 "recordVersion": version, "records": records, "complete": complete}
        return {"op": "page", "frame": frame}

    # -- delivery -----------------------------------------------------------

    @classmethod
    def delivery(cls, d: _Draw, v: _View) -> dict:
        stream = v.stream or STREAMS[0]
        if d.flag(6):
            stream = d.one([s for s in STREAMS if s != stream] or [stream])
        receipts = v.state.receipts if stream == v.stream else {}
        consumed = sorted(n for (s, n) in receipts if s == stream)
        superseded = v.superseded() if stream == v.stream else []
        mode = d.weighted([(30, "next"), (4 if consumed else 0, "replay"), (3 if consumed else 0, "conflict"),
                           (4, "gap")])
        if mode in ("replay", "conflict"):
            sequence = d.weighted([(4, consumed[-1]), (2, d.one(consumed)),
                                   (3 if superseded else 0, d.one(superseded or consumed))])
            frame = dict(wire.encode(receipts[(stream, sequence)].request))
            frame["opId"] = f"d-{sequence}"
            if v.attempt is not None and d.flag(50):
                frame["reconciliationAttemptId"] = v.attempt
            if mode == "conflict":
                how = d.index(3)
                if how == 0:
                    frame["state"] = _moved(frame["state"], "relist")
                elif how == 1:
                    frame["recordVersion"] += 1
                else:
                    frame["projectId"] = d.one([p for p in PROJECTS + (STRANGER,) if p != frame["projectId"]])
            return {"op": "delivery", "frame": frame}
        sequence = v.applied + (1 if mode == "next" else d.weighted([(3, 2), (1, 3)]))
        staging = v.attempt is not None
        if staging:
            complete = [p for p, sp in v.stage.items() if sp.complete]
            choices = sorted(complete or v.stage) or list(PROJECTS)
            project = d.weighted([(12, d.one(choices)), (1, d.one(PROJECTS + (STRANGER,)))])
            sp = v.stage.get(project)
            base = sp.record_version if sp is not None and sp.record_version is not None else 0
            existing = v.staged(project)
        else:
            live = sorted(v.live_versions) or list(PROJECTS)
            project = d.weighted([(12, d.one(live)), (2, d.one(PROJECTS + (STRANGER,)))])
            base = v.live_versions.get(project, 0)
            existing = v.live(project)
        record_version = max(1, d.weighted([(16, base + 1), (2, base), (2, base + 2)]))
        key = cls.key(d, existing)
        state = cls.record(d, key, existing.get(key), v.epochs, f"{project}@{record_version}#{sequence}")
        frame = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": record_version, "state": state,
                 "delivery": {"streamId": stream, "sequence": sequence}}
        if staging:
            recon = d.weighted([(16, v.attempt), (1, None), (1, d.one(ATTEMPTS))])
        else:
            recon = d.weighted([(16, None), (1, d.one(ATTEMPTS))])
        if recon is not None:
            frame["reconciliationAttemptId"] = recon
        return {"op": "delivery", "frame": frame}

    # -- commit -------------------------------------------------------------

    @staticmethod
    def commit(d: _Draw, v: _View, anticipate: Optional[dict] = None) -> dict:
        attempt = v.attempt or ATTEMPTS[0]
        if d.flag(8):
            attempt = d.one(ATTEMPTS)
        stream = v.stream or STREAMS[0]
        hw = d.weighted([(24, (stream, v.applied)), (1, (stream, v.applied + 1)),
                         (1 if v.applied else 0, (stream, v.applied - 1)),
                         (1, (d.one([s for s in STREAMS if s != stream] or [stream]), v.applied))])
        versions = {p: (sp.record_version if sp.record_version is not None else 0) for p, sp in v.stage.items()}
        versions.update(anticipate or {})
        how = d.weighted([(24, "true"), (1, "bump"), (1, "drop"), (1, "extra")])
        if how == "bump" and versions:
            p = d.one(sorted(versions))
            versions[p] += 1
        elif how == "drop" and versions:
            versions.pop(d.one(sorted(versions)))
        elif how == "extra":
            versions[d.one(PROJECTS + (STRANGER,))] = 0
        return {"op": "commit", "frame": {
            "attemptId": attempt, "highWater": {"streamId": hw[0], "sequence": hw[1]},
            "versions": [{"projectId": p, "recordVersion": n} for p, n in sorted(versions.items())]}}

    # -- value store --------------------------------------------------------

    @staticmethod
    def store(d: _Draw, v: _View) -> dict:
        if d.flag(8):  # (4 until the fast-forwards took steps from it: credential_store_unavailable got rare)
            return {"op": "store.off"}
        play = v.in_play()
        which = d.weighted([(5 if play else 0, "current"), (3 if play else 0, "next"), (2, "random")])
        if which == "random":
            project, key = d.one(PROJECTS), d.one(KEYS)
            gen = 1 + d.index(3)
            ref = d.weighted([(3, ref_for(key, gen)), (1, {"kind": "staged", "stagingId": staging_id(key, gen, 1)})])
        else:
            project, key, rec = d.one(play)
            h = rec["head"]
            if which == "next" or h["valueRef"] is None:
                ref = ref_for(key, h["generation"] + 1)
            else:
                ref = h["valueRef"]
        org = v.org or ORG
        value = draw_value(d)
        what = d.weighted([(30, "put"), (3, "wrong"), (2, "garbage"), (2, "version"), (3, "missing"), (3, "error"),
                           (12 if ref["kind"] == "legacy" else 0, "typed")])
        if what in ("missing", "error"):
            return {"op": "store.fail", "projectId": project, "key": key, "ref": ref, "mode": what}
        out = {"op": "store.put", "projectId": project, "key": key, "ref": ref}
        raw = stored_envelope(d, ref, org, project, key, value, wrong=what == "wrong")
        if what == "version" and ref["kind"] == "legacy":
            out["reportedVersion"] = ref["ssmVersion"] + 1
        if what == "garbage":
            raw = d.one(["{not json", json.dumps({"v": 3, "kind": "project-env"}), "[]"])
        if what == "typed":
            raw = typed_legacy_envelope(d, project, key, value)
        out["raw"] = raw if what in ("garbage", "typed") else _Gen.restyle(d, raw)
        return out

    # -- reads, close, restart ---------------------------------------------------

    @staticmethod
    def read(d: _Draw, v: _View) -> dict:
        what = d.weighted([(4, "snapshot"), (3, "status"), (2, "receipts"), (3, "extension")])
        if what == "extension":
            return _Gen.ready_or_diagnostics(d, v)
        if what != "snapshot":
            return {"op": what}
        return {"op": "snapshot", "projectIds": _Gen.project_ids(d, v)}

    @staticmethod
    def ready_or_diagnostics(d: _Draw, v: _View) -> dict:
        """``ready`` with a short wait, or ``diagnostics`` of the ids a snapshot would ask for
        (docs/protocol.md section 6), as ``project_ids`` draws them: sorted, in a task's order, one
        twice, one missing, a stranger."""
        wait = d.weighted([(3, 0), (1, 1), (1, 5), (8, None)])  # a wait that times out: 5 ms is enough
        if wait is not None:
            return {"op": "ready", "timeoutMs": wait}
        return {"op": "diagnostics", "projectIds": _Gen.project_ids(d, v)}

    # -- invalid requests -----------------------------------------------------

    @classmethod
    def invalid(cls, d: _Draw, v: _View) -> dict:
        kind = d.index(16)
        if kind == 0:
            return {"op": "explode"}
        if kind == 1:
            return {"op": "snapshot"}
        if kind == 2:
            return {"op": "status", "verbose": True}
        if kind == 3:
            req = cls.begin(d, v)
            req["frame"]["attempt"]["attemptId"] = "-bad"
            return req
        if kind == 4:
            req = cls.begin(d, v)
            req["frame"]["projectIds"] = ["p1", "p1"]
            return req
        if kind == 5:
            req = cls.page(d, v)
            req["frame"]["records"] = [record("B"), record("A")]
            req["frame"]["after"] = None
            return req
        if kind == 6:
            req = cls.page(d, v)
            req["frame"]["recordVersion"] = True
            return req
        if kind == 7:
            req = cls.delivery(d, v)
            req["frame"]["state"]["head"]["tombstone"] = not req["frame"]["state"]["head"]["tombstone"]
            return req
        if kind == 8:
            req = cls.delivery(d, v)
            req["frame"]["delivery"]["sequence"] = 0
            return req
        if kind == 9:
            req = cls.delivery(d, v)
            req["frame"]["reconciliationAttemptId"] = None
            return req
        if kind == 10:
            req = cls.commit(d, v)
            req["duringFetch"] = []
            return req
        if kind == 11:
            req = cls.commit(d, v)
            req["frame"]["versions"] = list(reversed(req["frame"]["versions"])) + [
                {"projectId": "p0", "recordVersion": 0}]
            return req
        if kind == 12:
            return {"op": "store.fail", "projectId": "p1", "key": "A", "ref": ref_for("A", 1), "mode": "sometimes"}
        if kind == 13:
            return {"op": "store.put", "projectId": "p1", "key": "A", "ref": ref_for("A", 1), "raw": "x",
                    "reportedVersion": 2}
        if kind == 14:
            return {"op": "reset", "config": {"ackPageBytes": -1}}
        return {"op": "status", "id": "seven"}

    # -- production-shaped inputs -----------------------------------------------------

    @staticmethod
    def task_order(d: _Draw, ids: Sequence[str]) -> list[str]:
        """``ids`` in the order a task names them: each next one drawn from the rest (all zeros: as given)."""
        rest, out = list(ids), []
        while rest:
            out.append(rest.pop(d.index(len(rest))))
        return out

    @staticmethod
    def odd_projects(d: _Draw) -> list[str]:
        """A begin's projects with one of ``ODD_PROJECTS`` (ids across the Segment rule) among ``p1`` / ``p2``,
        in a task's order: snapshots of them then have an order other than sorted to keep."""
        odd = d.one(ODD_PROJECTS)
        return _Gen.task_order(d, d.weighted([(3, ["p1", "p2"]), (2, ["p1"]), (1, [])]) + [odd])

    @staticmethod
    def project_ids(d: _Draw, v: _View) -> list[str]:
        """The ids a task loader reads with (``snapshot``; ``diagnostics`` takes the same): mostly the
        replica's projects, sorted or in a task's order (the lead project first: its entries come first and
        win duplicate keys); sometimes one named twice (fails closed, per the seed), one missing, a stranger."""
        live = sorted(v.live_versions)
        how = d.weighted([(6, "sorted"), (5, "task"), (2, "twice"), (1, "first"), (1, "stranger"), (1, "none")])
        if how == "sorted":
            return live
        if how == "first":
            return live[:1]
        if how == "none":
            return []
        ids = _Gen.task_order(d, live)
        if how != "task":
            extra = STRANGER if how == "stranger" else d.one(ids or list(PROJECTS))
            ids.insert(d.index(len(ids) + 1), extra)
        return ids

    @staticmethod
    def restyle(d: _Draw, raw: str) -> str:
        """An envelope's text as another writer would store it: mostly Python's compact ASCII escapes (as
        built); sometimes JavaScript's ``JSON.stringify`` (non-ASCII as UTF-8 text, each lone surrogate
        escaped), indented, or with its keys in another order. The replica parses it: all mean the same."""
        how = d.weighted([(12, "ascii"), (4, "js"), (1, "indented"), (1, "reordered")])
        if how == "ascii":
            return raw
        parsed = json.loads(raw)
        if how == "indented":
            return json.dumps(parsed, indent=2)
        if how == "reordered":
            return json.dumps(dict(reversed(list(parsed.items()))), separators=(",", ":"))
        text = json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
        return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

    @staticmethod
    def near_ack_bound(d: _Draw, v: _View, request: dict, bound: int) -> dict:
        """Often, a page of the open attempt whose acknowledgement is exactly ``bound`` bytes, or one byte
        over or under: its ``opId`` (1 to 128 characters, echoed in the ack) is sized for it, counted with
        the seed's ``pageFits`` rule (``coverage.page_ack_bytes``), and when no length fits with all its
        records, its first ones only (then not ``complete``: the cloud sends the rest in later pages).
        Unchanged when nothing fits."""
        frame = request["frame"]
        if v.stream is None or v.attempt is None or frame.get("attemptId") != v.attempt or not d.flag(70):
            return request
        delta = d.weighted([(4, 0), (3, 1), (2, -1)])
        applied = {"streamId": v.stream, "sequence": v.applied}
        records = frame["records"]
        for take in range(len(records), -1, -1):
            trimmed = dict(frame, opId="", records=records[:take],
                           complete=frame["complete"] if take == len(records) else False)
            length = bound + delta - page_ack_bytes(trimmed, trimmed["records"], v.epochs, applied)
            if 1 <= length <= 128:
                trimmed["opId"] = (f"page-{frame['projectId']}-" + "0" * 128)[:length]
                return dict(request, frame=trimmed)
        return request

    @classmethod
    def reconciled(cls, d: _Draw, key: str, current: Optional[dict], kept: Sequence[int]) -> dict:
        """A record in a clean reconciliation's page: mostly one move ahead of the one held (or a first
        save), sometimes as held, sometimes a conflicting twin (same counters, another binding: F2),
        sometimes several moves at once (a combined move that bumps the revision or the generation: the
        cloud moved the record more than once since the replica last heard)."""
        how = d.weighted([(6, "advance"), (2 if current else 0, "same"), (1 if current else 0, "twin"),
                          (6 if current else 0, "combined")])
        if how == "advance":
            return cls.advance(d, key, current, kept)
        assert current is not None  # the other ways weigh 0 without a record held
        if how == "combined":
            ahead = [m for m in moves_of(current) if m.startswith(("revision", "generation"))]
            return combined_move(current, d.spread(ahead))
        return current if how == "same" else _moved(current, "twin")

    @classmethod
    def clean_reconciliation(cls, d: _Draw, rng: random.Random, v: _View) -> list[dict]:
        """A whole reconciliation as a healthy cloud sends it, so that a fast-forward starts from a replica
        that serves installed values: a fresh attempt on the current stream and policy (now and then
        narrowed), its projects in a task's order (an odd id now and then); per project, an answer for
        every value it will read, mostly the correct envelope (the classes of value in turn,
        ``RECONCILED_VALUES``, in every writer's style, ``restyle``), then one complete page of its
        records (``reconciled``); then the commit, and the task loader reads the snapshot in the task's
        order. Choices past the project set come from ``rng`` (a reconciliation makes far more of them
        than a block holds)."""
        stream, org = v.stream or STREAMS[0], v.org or ORG
        epochs = list(v.epochs) if v.activated else [1, 2]
        if epochs and v.activated and d.flag(25):
            epochs = epochs[1:]  # the policy narrowed: what the retired epoch approved is withheld (F1, F2)
        attempt = d.one([a for a in ATTEMPTS if a != v.attempt])
        projects = d.weighted([(6, ["p1", "p2"]), (2, ["p1"]), (5, None)])
        projects = cls.odd_projects(d) if projects is None else cls.task_order(d, projects)
        out = [{"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": attempt},
                                         "projectIds": projects},
                "keptPolicyEpochs": epochs, "orgId": org}]
        versions, turn = {}, rng.randrange(len(RECONCILED_VALUES))
        for project in projects:
            dd = _Draw(rng.randbytes(96))
            live = v.live(project)
            records = [cls.reconciled(dd, key, live.get(key), epochs) for key in ALL_KEYS
                       if key in live or dd.index(100) < 30]
            for r in records:
                ref = r["head"]["valueRef"]
                if ref is None or r["binding"] is not None or r["policyEpoch"] not in epochs:
                    continue
                key, value = r["key"], RECONCILED_VALUES[turn % len(RECONCILED_VALUES)]
                turn += 1
                staged = ref["kind"] == "staged"
                if not staged and legacy_parameter_name("/", project, key) is None:  # the key is no Segment
                    continue  # no legacy name: value_reference_invalid, nothing to read
                # Mostly the right envelope; one in five another answer, as ``machine._missing_values`` gives.
                answer = dd.weighted([(20, "correct"), (4, "wrong"), (0 if staged else 1, "version"),
                                      (0 if staged else 10, "typed"), (1, "missing"), (1, "error")])
                if answer in ("missing", "error"):
                    out.append({"op": "store.fail", "projectId": project, "key": key, "ref": ref, "mode": answer})
                    continue
                raw = stored_envelope(dd, ref, org, project, key, value, wrong=answer == "wrong")
                if answer == "typed":  # the fields in turn (a reconciliation makes many: each is reached)
                    raw = typed_legacy_envelope(dd, project, key, value, field=tuple(LEGACY_FIELD_TYPES)[turn % 5])
                put = {"op": "store.put", "projectId": project, "key": key, "ref": ref,
                       "raw": raw if answer == "typed" else cls.restyle(dd, raw)}
                if answer == "version":
                    put["reportedVersion"] = ref["ssmVersion"] + 1
                out.append(put)
            versions[project] = v.live_versions.get(project, 0) + 1
            out.append({"op": "page", "frame": {"opId": f"page-{project}", "attemptId": attempt, "projectId": project,
                                                "after": None, "recordVersion": versions[project],
                                                "records": records, "complete": True}})
        out.append({"op": "commit", "frame": {
            "attemptId": attempt, "highWater": {"streamId": stream, "sequence": v.applied},
            "versions": [{"projectId": p, "recordVersion": n} for p, n in sorted(versions.items())]}})
        out.append({"op": "snapshot", "projectIds": list(projects)})  # the task loader, in its task's order
        return out

    #: Where a fast-forward takes the cursor: from two below a power of ten to one past it. A delivery
    #: costs ~0.4 ms CPU in all (model 0.05 ms, SQLite 0.3 ms, the harness), but every later step's
    #: state check reads back and compares every receipt (~80 us each), so an example past 1,000 costs
    #: ~1.3 s, one past 100 ~0.2 s: ``FFWD_BUDGET`` caps them per run. 1,000 is not last: Hypothesis
    #: draws many 255 bytes, which the last option would take.
    FFWD_TARGETS = ((12, 10), (2, 1000), (3, 100))
    #: Examples per run that may go past 100 and past 1,000 (``machine.LockstepMachine.ffwd_scales``).
    FFWD_BUDGET = {100: 12, 1000: 3}
    #: The deliveries of a fast-forward, each consumed and receipted, none changing a record, a record
    #: version or a value (so that cutting a fast-forward short, as the minimizer does, changes nothing
    #: else): ``stranger``, a project the replica does not hold (refused ``project_not_in_replica``; live
    #: only); ``same``, a record as held (installed or a tombstone: nothing to read again) at the current
    #: version (applied: answered with what is retained); ``conflict``, a key the project lacks at the
    #: current version (refused ``record_version_conflict``).
    FFWD_KINDS = ("stranger", "same", "conflict")

    @staticmethod
    def fast_forward(d: _Draw, scales: Collection[int] = (10, 100, 1000)
                     ) -> tuple[Callable[[int], int], tuple[int, ...]]:
        """How many deliveries a fast-forward sends (towards one of ``scales``: a function of the cursor
        it starts from), and the weights of ``FFWD_KINDS`` among them. Drawn first in the rule's block,
        so that shrinking lowers the target early."""
        scale = d.weighted([(w, n) for w, n in _Gen.FFWD_TARGETS if n in scales])
        target, extra = scale - 2 + d.index(4), 1 + d.index(3)
        mix = tuple(1 + d.index(4) for _ in _Gen.FFWD_KINDS)
        return (lambda applied: target - applied if target > applied else extra), mix

    @staticmethod
    def after_fast_forward(d: _Draw, v: _View) -> Optional[dict]:
        """Often, right after a fast-forward: the receipts read (listed in sequence order, not text
        order), or the retransmission of a consumed sequence at a decimal boundary (9, 10, 99, 100, 999,
        1,000: answered from its receipt, compared as a number)."""
        what = d.weighted([(2, None), (1, "receipts"), (2, "replay")])
        consumed = v.consumed()
        if what == "receipts" or (what == "replay" and not consumed):
            return {"op": "receipts"}
        if what is None:
            return None
        edges = [n for n in (9, 10, 99, 100, 999, 1000) if (v.stream, n) in v.state.receipts]
        sequence = d.one(edges or consumed)
        assert v.stream is not None  # a consumed sequence is on the current stream
        frame = dict(wire.encode(v.state.receipts[(v.stream, sequence)].request), opId=f"d-{sequence}")
        if v.attempt is not None:
            frame["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": frame}

    @staticmethod
    def ffwd_delivery(rng: random.Random, v: _View, mix: Sequence[int]) -> Optional[dict]:
        """The next delivery of a fast-forward (``FFWD_KINDS``, drawn with ``rng``): live while the gate is
        open, else into a complete project of the open attempt. None when there is nowhere to deliver."""
        if v.stream is None or (v.attempt is None and not v.gate_open):
            return None
        rows: dict[tuple[str, str], Union[LiveRow, StageRow]]
        if v.attempt is None:
            version = {p: n for p, n in v.live_versions.items() if n >= 1}
            rows = {(p, k): row for (p, k), row in v.state.records.items()}
        else:
            version = {p: sp.record_version for p, sp in v.stage.items()
                       if sp.complete and sp.record_version is not None and sp.record_version >= 1}
            rows = {(p, k): row for (a, p, k), row in v.state.stage_records.items() if a == v.attempt}
        settled = sorted((p, k) for (p, k), row in rows.items()
                         if p in version and (row.mat.kind is MatKind.INSTALLED or row.state.head.tombstone))
        free = [(p, k) for p in sorted(version) for k in ALL_KEYS if (p, k) not in rows]
        options = {"stranger": v.attempt is None, "same": bool(settled), "conflict": bool(free)}
        kinds = [(w, k) for w, k in zip(mix, _Gen.FFWD_KINDS) if options[k]]
        if not kinds:
            return None
        kind = rng.choices([k for _, k in kinds], weights=[w for w, _ in kinds])[0]
        if kind == "stranger":
            project, record_version, state = STRANGER, 1, record(rng.choice(ALL_KEYS))
        elif kind == "same":
            project, key = rng.choice(settled)
            record_version, state = version[project], wire.encode(rows[(project, key)].state)
        else:
            project, key = rng.choice(free)
            record_version, state = version[project], record(key, 1, 0, True)
        sequence = v.applied + 1
        frame = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": record_version, "state": state,
                 "delivery": {"streamId": v.stream, "sequence": sequence}}
        if v.attempt is not None:
            frame["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": frame}

    @staticmethod
    def moved_delivery(rng: random.Random, v: _View) -> Optional[dict]:
        """The next delivery of a burst of moves (``machine.do_delivery``, drawn with ``rng``): a record the
        replica holds (live while the gate is open, else staged in a complete project of the open attempt)
        moved by one of the combined moves it can make (``records.moves_of``, uniformly: the rng's bytes are,
        Hypothesis's are not), at the project's next record version. None when there is nothing to move."""
        if v.stream is None or (v.attempt is None and not v.gate_open):
            return None
        rows: dict[tuple[str, str], Union[LiveRow, StageRow]]
        if v.attempt is None:
            version = {p: n for p, n in v.live_versions.items() if n >= 1}
            rows = {(p, k): row for (p, k), row in v.state.records.items() if p in version}
        else:
            version = {p: sp.record_version for p, sp in v.stage.items()
                       if sp.complete and sp.record_version is not None and sp.record_version >= 1}
            rows = {(p, k): row for (a, p, k), row in v.state.stage_records.items()
                    if a == v.attempt and p in version}
        if not rows:
            return None
        project, key = rng.choice(sorted(rows))
        current = wire.encode(rows[(project, key)].state)
        state = combined_move(current, rng.choice(moves_of(current)))
        sequence = v.applied + 1
        frame = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": version[project] + 1, "state": state,
                 "delivery": {"streamId": v.stream, "sequence": sequence}}
        if v.attempt is not None:
            frame["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": frame}

    # -- the consistent cloud -------------------------------------------------------

    @staticmethod
    def advance(d: _Draw, key: str, current: Optional[dict], kept: Sequence[int] = (1, 2)) -> dict:
        """A record one reachable head move ahead of ``current`` (a first save when there is none).

        Weighted toward moves that leave a value to fetch (a rotation, a
        relisting, a restore, a rebinding), so reads and their races happen.
        """
        if current is None:
            epoch = d.weighted([(8, kept[0] if kept else 1), (1, 2), (1, None)])
            return d.weighted([(8, record(key, epoch=epoch)), (1, record(key, 1, 0, True))])
        if current["head"]["tombstone"]:
            move = d.weighted([(4, "restore"), (1, "relist")])
        elif current["binding"] is not None:
            move = d.weighted([(4, "bind"), (1, "rotate"), (1, "relist")])
        elif kept and current["policyEpoch"] not in kept:  # approved again under a kept epoch
            move = d.weighted([(4, "upgrade"), (1, "rotate"), (1, "relist"), (1, "delete")])
        else:
            move = d.weighted([(4, "rotate"), (2, "relist"), (2, "upgrade"), (1, "delete"), (1, "withhold"),
                               (1, "omit")])
        moved = _moved(current, move)
        if move == "upgrade":
            later = [e for e in kept if current["policyEpoch"] is not None and e > current["policyEpoch"]]
            if later and not d.flag(20):
                moved["policyEpoch"] = later[0]
        return moved

    @classmethod
    def fresh_begin(cls, d: _Draw, v: _View) -> dict:
        fresh = [a for a in ATTEMPTS if a != v.attempt]
        stream = v.stream or STREAMS[0]
        if v.activated and d.flag(10):
            stream = d.one([s for s in STREAMS if s != stream])
        projects = d.weighted([(5, ["p1", "p2"]), (4, ["p1"]), (1, ["p2"]), (1, []), (2, None)])
        projects = cls.odd_projects(d) if projects is None else projects
        current = tuple(v.epochs) if v.activated else (1, 2)
        # Mostly the same policy; sometimes it narrows (the oldest kept epoch retired), or anything.
        # Narrowing is likelier while an installed value depends on the epoch it retires: that
        # is when a policy change must withdraw something (findings F1 and F2).
        installed = {row.state.policy_epoch for row in v.state.records.values() if row.mat.kind is MatKind.INSTALLED}
        narrow = 5 if current and current[0] in installed else 2
        epochs = list(d.weighted([(8, current), (narrow, current[1:])] + [(1, e) for e in EPOCH_SETS]))
        return {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": d.one(fresh)},
                                         "projectIds": projects},
                "keptPolicyEpochs": epochs, "orgId": d.weighted([(30, v.org or ORG), (1, OTHER_ORG)])}

    @classmethod
    def next_page(cls, d: _Draw, v: _View, project: str) -> dict:
        """The next canonical page of ``project`` for the open attempt."""
        sp = v.stage[project]
        live_v = v.live_versions.get(project, 0)
        if sp.record_version is not None and not sp.complete and sp.last_key is not None:
            version, after = sp.record_version, sp.last_key
        else:
            # Sometimes the cloud's snapshot lags behind a delivery the replica already applied.
            version = d.weighted([(7, live_v + 1), (3, live_v), (1 if live_v > 0 else 0, live_v - 1)])
            after = None
        live = v.live(project)
        if version == live_v:
            candidates = [live[k] for k in sorted(live) if after is None or k > after]
        else:
            candidates = []
            for k in KEYS:
                if after is not None and k <= after:
                    continue
                current = v.current(project, k, staged=True) or live.get(k)
                if d.index(100) < (85 if current is not None else 35):
                    # A lagging snapshot is likelier for a record kept under an epoch this begin no
                    # longer keeps: its retained state must be judged again (finding F2).
                    rejudged = current is not None and current.get("policyEpoch") not in v.epochs
                    how = d.weighted([(14, "advance"), (6 if current else 0, "same"),
                                      ((8 if rejudged else 2) if current else 0, "older")])
                    if how == "same":
                        assert current is not None  # "same" weighs 0 without a record held
                        candidates.append(current)
                    elif how == "older":  # a lagging snapshot: an older state of the record
                        assert current is not None  # as "same"
                        candidates.append(_moved(current, "older"))
                    else:
                        candidates.append(cls.advance(d, k, current, v.epochs))
        n = len(candidates)
        take = d.weighted([(6, min(n, 2)), (3, min(n, 1)), (1, n)])
        frame = {"opId": f"page-{project}", "attemptId": v.attempt, "projectId": project, "after": after,
                 "recordVersion": version, "records": candidates[:take], "complete": take == n}
        return {"op": "page", "frame": frame}

    @classmethod
    def next_delivery(cls, d: _Draw, v: _View) -> dict:
        """The next delivery of the stream: one record advanced, at the next record version."""
        staging = v.attempt is not None
        if staging:
            project = d.one(sorted(p for p, sp in v.stage.items() if sp.complete))
            base = v.stage[project].record_version or 0
            existing = v.staged(project)
        else:
            # Sometimes the stream carries a project this replica does not hold.
            project = d.weighted([(15, d.one(sorted(v.live_versions))), (1, d.one(PROJECTS + (STRANGER,)))])
            base = v.live_versions.get(project, 0)
            existing = v.live(project)
        key = cls.key(d, existing)
        sequence = v.applied + d.weighted([(15, 1), (1, 2)])  # sometimes one overtakes another
        frame = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": base + 1, "state": cls.advance(d, key, existing.get(key), v.epochs),
                 "delivery": {"streamId": v.stream, "sequence": sequence}}
        if staging:
            frame["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": frame}

    @classmethod
    def cloud(cls, d: _Draw, v: _View) -> dict:
        """What a consistent cloud sends next: begin, the next page, the commit, the next delivery."""
        serving = v.gate_open and v.attempt is None and len(v.state.values) > 0
        if v.activated and d.flag(35 if serving else 12):
            # A task loader reads what is served (None unless open with no attempt), in its task's order;
            # likelier while values are installed, so that each class of value is served and compared.
            return {"op": "snapshot", "projectIds": cls.project_ids(d, v)}
        if not v.activated:
            return cls.fresh_begin(d, v)
        if v.applied and d.flag(6):
            # At-least-once delivery: the last delivery (or an earlier one) arrives again,
            # often one whose record a snapshot or a later delivery has moved since.
            consumed, superseded = v.consumed() or [v.applied], v.superseded()
            sequence = d.weighted([(4, v.applied), (2, d.one(consumed)),
                                   (3 if superseded else 0, d.one(superseded or consumed))])
            receipt = v.state.receipts.get((v.stream, sequence)) if v.stream is not None else None
            if receipt is not None:
                frame = dict(wire.encode(receipt.request), opId=f"d-{sequence}")
                if v.attempt is not None:
                    frame["reconciliationAttemptId"] = v.attempt
                return {"op": "delivery", "frame": frame}
        if v.attempt is None:
            if not v.gate_open or not v.live_versions or d.flag(12):
                return cls.fresh_begin(d, v)
            return cls.next_delivery(d, v)
        incomplete = sorted(p for p, sp in v.stage.items() if not sp.complete)
        complete = len(incomplete) < len(v.stage)
        if incomplete and not (complete and d.flag(15)):
            return cls.next_page(d, v, d.one(incomplete))
        if complete and d.flag(35):
            return cls.next_delivery(d, v)
        return cls.commit(d, v)

    @classmethod
    def advance_delivery(cls, d: _Draw, v: _View, frame: dict) -> dict:
        """The delivery after ``frame``'s (a page's or delivery's): its record (or first record) advanced."""
        project = frame.get("projectId")
        record = frame.get("state") if "state" in frame else (frame.get("records") or [None])[0]
        if not isinstance(record, dict) or project is None:
            return cls.delivery(d, v)
        staged = v.attempt is not None
        base = (v.stage[project].record_version or 0) if staged and project in v.stage \
            else v.live_versions.get(project, 0)
        if frame.get("recordVersion", 0) > base:  # the outer delivery's own version, applied before its read
            base = frame["recordVersion"]
        if record["head"]["tombstone"] or record["binding"] is not None:
            state = cls.advance(d, record["key"], record, v.epochs)
        else:  # mostly a new value: the read in flight is for a reference no longer current
            state = _moved(record, d.weighted([(4, "rotate"), (1, "upgrade"), (1, "relist")]))
        sequence = v.applied + 1
        inner = {"kind": wire.APPLY_KIND, "opId": f"d-{sequence}", "projectId": project,
                 "recordVersion": base + 1, "state": state,
                 "delivery": {"streamId": v.stream or STREAMS[0], "sequence": sequence}}
        if staged:
            inner["reconciliationAttemptId"] = v.attempt
        return {"op": "delivery", "frame": inner}

    @classmethod
    def reconcile(cls, d: _Draw, v: _View, frame: dict) -> list[dict]:
        """A whole reconciliation of the delivery's project (begin, its page, the commit) under fewer epochs.

        Run inside a live delivery's read: the delivery's first transaction
        already made its record live (pending), so the page resends the live
        records with it; the commit then makes it withheld under the new
        epochs, and the read in flight must not install onto it (finding F1).
        """
        project, version = frame["projectId"], frame["recordVersion"]
        records = v.live(project)
        records[frame["state"]["key"]] = frame["state"]
        attempt = d.one([a for a in ATTEMPTS if a != v.attempt])
        epochs = list(d.weighted([(1, v.epochs[1:]), (1, (2,)), (1, v.epochs)]))
        stream = v.stream or STREAMS[0]
        return [
            {"op": "begin", "frame": {"attempt": {"streamId": stream, "attemptId": attempt}, "projectIds": [project]},
             "keptPolicyEpochs": epochs, "orgId": v.org or ORG},
            {"op": "page", "frame": {"opId": f"page-{project}", "attemptId": attempt, "projectId": project,
                                     "after": None, "recordVersion": version,
                                     "records": [records[k] for k in sorted(records)], "complete": True}},
            {"op": "commit", "frame": {"attemptId": attempt, "highWater": {"streamId": stream, "sequence": v.applied},
                                       "versions": [{"projectId": project, "recordVersion": version}]}},
        ]

    # -- duringFetch ----------------------------------------------------------

    @classmethod
    def nested(cls, d: _Draw, v: _View, outer: dict, anticipate: dict) -> list[dict]:
        """Requests to run inside ``outer``'s value-store read.

        Weighted toward the races that matter: a commit that would now
        succeed (it promotes a record still pending), the open attempt begun
        again (it wipes the staged row the operation will answer with), the
        same delivery run to its end first.
        """
        frame = outer["frame"]
        others_complete = all(sp.complete for p, sp in v.stage.items() if p != frame.get("projectId"))
        commit_now = outer["op"] == "page" and frame.get("complete") is True and others_complete
        staged_delivery = outer["op"] == "delivery" and v.attempt is not None
        live_delivery = outer["op"] == "delivery" and v.attempt is None and v.gate_open
        pattern = d.weighted([(6, None), (2 if outer["op"] == "page" and v.attempt else 0, "narrow"),
                              (2 if live_delivery else 0, "reconcile"),
                              (4 if outer["op"] == "delivery" else 0, "advance")])
        if pattern == "narrow":
            # The attempt begun again under fewer kept epochs, then the same page: the read in
            # flight must not install onto the record now withheld (finding F1, adversarial).
            epochs = d.weighted([(1, v.epochs[1:]), (1, (2,)), (1, ())])
            return [cls.begin_again(v, epochs),
                    json.loads(json.dumps({k: x for k, x in outer.items() if k != "duringFetch"}))]
        if pattern == "reconcile":
            return cls.reconcile(d, v, frame)
        if pattern == "advance":
            # The next delivery moves the very record being read for: the read's answer is stale.
            return [cls.advance_delivery(d, v, frame)]
        out: list[dict] = []
        for _ in range(d.weighted([(3, 1), (1, 2)])):
            kind = d.weighted([(20 if staged_delivery else 4, "begin_again"), (3, "begin"),
                               (12 if commit_now else 4, "commit"), (2, "close"), (3, "restart"),
                               (3, "delivery"), (3, "advance"), (1, "store"), (1, "status"), (2, "snapshot"),
                               (1, "page"), (2 if out else 0, "same")])
            if kind == "begin_again":
                # The same attempt again, sometimes keeping fewer epochs (the race of finding F1).
                epochs = d.weighted([(3, None), (1, v.epochs[1:]), (1, (2,))])
                out.append(cls.begin_again(v, epochs))
            elif kind == "same":
                out.append(json.loads(json.dumps({k: x for k, x in outer.items() if k != "duringFetch"})))
            elif kind == "advance":
                out.append(cls.advance_delivery(d, v, frame))
            elif kind == "begin":
                out.append(cls.begin(d, v))
            elif kind == "commit":
                out.append(cls.commit(d, v, anticipate))
                if d.flag(50):  # a task loader reads while the operation is still in its read
                    out.append({"op": "snapshot", "projectIds": sorted(set(v.stage) | set(anticipate))})
            elif kind == "snapshot":
                out.append({"op": "snapshot", "projectIds": sorted(v.live_versions)})
            elif kind in ("close", "restart", "status"):
                out.append({"op": kind})
            elif kind == "delivery":
                if outer["op"] == "delivery" and d.flag(50):
                    out.append(json.loads(json.dumps(outer)))  # the same delivery, run to its end inside
                else:
                    out.append(cls.delivery(d, v))
            elif kind == "store":
                out.append(cls.store(d, v))
            else:
                out.append(cls.page(d, v))
        return out
