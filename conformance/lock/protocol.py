"""The lock adapter protocol's words (docs/protocol.md, section 12): requests, ``hello``, events, observations.

Models: the JSON an adapter of the projection lock exchanges with the harness, and its reading in the lockstep's
terms (``harness.Event``, ``harness.Observation``). What each op does is docs/protocol.md's; this module only
builds and reads the lines, and refuses (``ProtocolError``) an answer the harness cannot read, naming the field.

* ``hello`` declares the implementation: its ``design`` (``seed``: ``projection-lock.js``'s steps, an
  ``owner.json`` of ``{pid, started_at}``; ``claim``: the CLAIM design of ``impl.lock``, owner files and tickets
  named by nonces), the model's steps it pauses at (``steps``), ``maxTries`` (the tries before busy when the
  implementation fixes them, as the seed's 80; null: ``reset`` sets them), the world it can stage (``world``:
  ``zombie``, ``namespace``, ``reuse``, ``stale``), whether a busy answer names whom it waited for
  (``busyNames``), and how its filesystem numbers a new directory (``inodes``: ``reuse``, the lowest free number,
  as ext4 mostly does; ``fresh``, a number never used, as tmpfs does; null: the design compares none).
* An event (``spawn``, ``step``, ``leave``): the steps taken (``[{"step", "call"}]``), where the process stopped
  (``at``: a step name, ``"inside"``, or null when its call ended), the name the next step acts on (``path``), and
  the call's ``answer`` (``{"answer", "busy": {"nonce", "judged"} | null, "error"}``).
* The observation: ``inside`` (the slots of live processes inside the operation), ``lock`` (null: no ``L``; else
  ``{"owner": "none" | "empty" | {"pid", "start", "ns", "nonce"?}}``), ``moved`` (the seed's ``L.stale-*``, each
  as ``lock``), ``tickets`` (``{"seq", "nonce", "pid", "start", "ns"}``), ``temps`` (nonces), ``others`` (any
  other name beside or in ``L``).

Leaves out on purpose: the transport (section 5's JSON lines: ``conformance.external``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from envreplica.conformance.lock import harness
from envreplica.model import lock as ml
from envreplica.spec.lock import Answer, Call, Effect

PROTOCOL = "envreplica-lock/1"
#: The ops (docs/protocol.md, 12.2).
OPS = ("hello", "reset", "spawn", "step", "leave", "kill", "reuse-pid", "reap", "observe")
#: What of the world an adapter can stage (``hello.world``).
WORLD = ("zombie", "namespace", "reuse", "stale")
DESIGNS = ("seed", "claim")
#: The first PID namespace's inode number an adapter reports in a ``claim`` record (``pidns``); the model's ``ns``
#: is the difference.
PIDNS_BASE = harness.PIDNS_BASE
#: The nonce of the lock a process dead before the first state left (``model.lock.GONE``), for a ``claim`` design.
GONE_NONCE = "ffffffffffffffff"


#: The seed's steps (``projection-lock.js``'s calls as ``model.lock`` names them), the ``LEAVE`` move aside.
SEED_STEPS = frozenset({ml.Pc.MKDIR, ml.Pc.CREATE, ml.Pc.WRITE, ml.Pc.RMDIR_FAILED, ml.Pc.STAT, ml.Pc.READ,
                        ml.Pc.KILL, ml.Pc.PROC, ml.Pc.STAT_AGAIN, ml.Pc.RENAME_STALE, ml.Pc.UNLINK_STALE,
                        ml.Pc.RMDIR_STALE, ml.Pc.WAIT, ml.Pc.ENTER, ml.Pc.UNLINK_RELEASE, ml.Pc.RMDIR_RELEASE})


class ProtocolError(ValueError):
    """An answer the harness cannot read (its field named)."""


@dataclass(frozen=True)
class Declaration:
    """What ``hello`` declared (see the module)."""

    implementation: str
    design: str
    steps: frozenset[str]
    max_tries: Optional[int]
    world: frozenset[str]
    busy_names: bool
    inodes: Optional[str] = None  # how the adapter's filesystem numbers a new directory: "reuse", "fresh", or unsaid


def _need(doc: Any, key: str, kind: Any, where: str) -> Any:
    if not isinstance(doc, dict) or key not in doc:
        raise ProtocolError(f"{where} has no {key!r}: got {str(doc)[:120]}")
    value = doc[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ProtocolError(f"{where}'s {key!r} must be an integer, not {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise ProtocolError(f"{where}'s {key!r} must be {getattr(kind, '__name__', kind)}, not {value!r}")
    return value


def parse_hello(doc: Any) -> Declaration:
    """``hello``'s result read, or ``ProtocolError``."""
    if _need(doc, "protocol", str, "hello") != PROTOCOL:
        raise ProtocolError(f"hello answered protocol {doc['protocol']!r}; the harness speaks {PROTOCOL!r}")
    design = _need(doc, "design", str, "hello")
    if design not in DESIGNS:
        raise ProtocolError(f"hello's design must be one of {', '.join(DESIGNS)}, not {design!r}")
    steps = _need(doc, "steps", list, "hello")
    known = {pc.value for pc in ml.Pc}
    odd = [s for s in steps if s not in known]
    if odd:
        raise ProtocolError(f"hello's steps must be the model's step names (model.lock.Pc): {odd!r} are not")
    tries = doc.get("maxTries")
    if tries is not None and (isinstance(tries, bool) or not isinstance(tries, int) or tries < 0):
        raise ProtocolError(f"hello's maxTries must be null or an integer >= 0, not {tries!r}")
    world = doc.get("world", [])
    if not isinstance(world, list) or any(w not in WORLD for w in world):
        raise ProtocolError(f"hello's world must list some of {', '.join(WORLD)}: got {world!r}")
    inodes = doc.get("inodes")
    if inodes is not None and inodes not in {i.value for i in ml.Inodes}:
        raise ProtocolError(f"hello's inodes must be null or one of {', '.join(i.value for i in ml.Inodes)}, not "
                            f"{inodes!r}")
    return Declaration(str(doc.get("implementation", "?")), design, frozenset(steps), tries, frozenset(world),
                       bool(doc.get("busyNames", False)), inodes)


def hello_of(decl: Declaration) -> dict[str, Any]:
    """A declaration as ``hello`` answers it."""
    return {"protocol": PROTOCOL, "implementation": decl.implementation, "design": decl.design,
            "steps": sorted(decl.steps), "maxTries": decl.max_tries, "world": sorted(decl.world),
            "busyNames": decl.busy_names, "inodes": decl.inodes}


# -- requests


def reset_of(cfg: ml.LockBounds, first: ml.LockState) -> dict[str, Any]:
    """``reset`` to the model's first state under ``cfg``: its processes, tries, and the lock (a dead process's)."""
    lock: dict[str, Any] = {"state": "absent"}
    if cfg.stale:
        lock = {"state": "owner", "pid": ml.GONE_PID, "start": 1, "ns": 0, "nonce": GONE_NONCE}
    return {"op": "reset", "processes": [{"pid": p.pid, "start": p.start, "ns": p.ns} for p in first.procs],
            "maxTries": cfg.max_tries, "lock": lock}


# -- events


def event_json(event: harness.Event) -> dict[str, Any]:
    """An event as an adapter answers it."""
    out: dict[str, Any] = {"taken": [{"step": s, "call": c} for s, c in zip(event.taken, event.calls)],
                           "at": event.at}
    if event.path is not None:
        out["path"] = event.path
    if event.ended is not None:
        e = event.ended
        out["answer"] = {"answer": e.answer.value if e.answer is not None else None,
                         "busy": {"nonce": e.busy_nonce, "judged": e.busy_judged} if e.busy_named else None,
                         "error": e.error}
    return out


def event_of(doc: Any, where: str) -> harness.Event:
    """An event read (``ProtocolError`` naming the field)."""
    taken = _need(doc, "taken", list, where)
    steps, calls = [], []
    calls_known = {c.value for c in Call}
    for t in taken:
        step = _need(t, "step", str, f"{where}'s taken")
        call = t.get("call") if isinstance(t, dict) else None
        if call is not None and call not in calls_known:
            raise ProtocolError(f"{where}'s taken step {step!r} names call {call!r}, not one of spec.lock.Call's")
        steps.append(step)
        calls.append(call)
    if not isinstance(doc, dict) or "at" not in doc:
        raise ProtocolError(f"{where} has no 'at'")
    at = doc["at"]
    if at is not None and not isinstance(at, str):
        raise ProtocolError(f"{where}'s 'at' must be a step name, 'inside' or null, not {at!r}")
    path = doc.get("path")
    ended = None
    if at is None:
        answer = _need(doc, "answer", dict, where)
        word = answer.get("answer")
        try:
            value = Answer(word) if word is not None else None
        except ValueError:
            raise ProtocolError(f"{where}'s answer {word!r} is not one of {', '.join(a.value for a in Answer)}") \
                from None
        busy = answer.get("busy")
        if busy is not None and not isinstance(busy, dict):
            raise ProtocolError(f"{where}'s busy must be null or {{nonce, judged}}, not {busy!r}")
        ended = harness.Ended(value, str(answer.get("error") or ""),
                              busy.get("nonce") if busy else None, bool(busy.get("judged", True)) if busy else True,
                              busy is not None)
    return harness.Event(tuple(steps), tuple(calls), at, ended, path if isinstance(path, str) else None)


# -- observations


def _nonce(instance: Any, nonce_of: dict[Any, str]) -> str:
    """The nonce of an observation's instance: the map's, or the nonce of an instance no call drew (``("?", N)``)."""
    if isinstance(instance, tuple) and len(instance) == 2 and instance[0] == "?":
        return str(instance[1])
    return nonce_of.get(instance, str(instance))


def _owner_json(seen: Optional[tuple[object, ...]], nonce_of: dict[Any, str]) -> Any:
    if seen is None:
        return None
    if seen == harness.NO_OWNER:
        return {"owner": "none"}
    if seen == harness.EMPTY_OWNER:
        return {"owner": "empty"}
    instance, pid, start, ns = seen
    owner: dict[str, Any] = {"pid": pid, "start": start, "ns": ns}
    if instance is not None:
        owner["nonce"] = _nonce(instance, nonce_of)
    return {"owner": owner}


def observation_json(obs: harness.Observation, nonce_of: dict[Any, str]) -> dict[str, Any]:
    """An observation as an adapter answers it (``nonce_of``: the model's instance -> its nonce)."""
    return {"inside": sorted(obs.inside), "lock": _owner_json(obs.lock, nonce_of),
            "moved": [_owner_json(m, nonce_of) for m in obs.moved],
            "tickets": [{"seq": t[0], "nonce": _nonce(t[6], nonce_of), "pid": t[3], "start": t[4], "ns": t[5]}
                        for t in obs.tickets],
            "temps": sorted(_nonce(i, nonce_of) for i in obs.temps), "others": list(obs.others)}


def _owner_of(doc: Any, claimed: bool, instances: dict[str, tuple[int, int]], where: str) -> Any:
    if doc is None:
        return None
    owner = _need(doc, "owner", (str, dict), where)
    if owner == "none":
        return None if claimed else harness.NO_OWNER
    if owner == "empty":
        return harness.EMPTY_OWNER
    if not isinstance(owner, dict):
        raise ProtocolError(f"{where}'s owner must be 'none', 'empty' or a record, not {owner!r}")
    pid, start, ns = (_need(owner, k, int, f"{where}'s owner") for k in ("pid", "start", "ns"))
    nonce = owner.get("nonce")
    instance = None if not claimed else instances.get(str(nonce), ("?", nonce))
    return (instance, pid, start, ns)


def observation_of(doc: Any, claimed: bool, instances: dict[str, tuple[int, int]]) -> harness.Observation:
    """An adapter's observation in the lockstep's words (``claimed``: the model's design names owners by nonce)."""
    where = "observe"
    inside = _need(doc, "inside", list, where)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in inside):
        raise ProtocolError(f"observe's inside must list process numbers, not {inside!r}")
    lock = _owner_of(doc.get("lock"), claimed, instances, "observe's lock")
    moved = tuple(sorted((_owner_of(m, False, instances, "observe's moved") for m in doc.get("moved") or []),
                         key=repr))
    tickets = []
    for t in doc.get("tickets") or []:
        tickets.append((_need(t, "seq", int, "a ticket"), str(_need(t, "nonce", str, "a ticket")),
                        _need(t, "pid", int, "a ticket"), _need(t, "start", int, "a ticket"),
                        _need(t, "ns", int, "a ticket")))
    temps = frozenset(instances.get(str(n), ("?", n)) for n in doc.get("temps") or [])
    others = tuple(str(o) for o in doc.get("others") or [])
    return harness.Observation(frozenset(inside), lock, harness.ranked(tickets, instances), temps, others, moved)


def effect_of(word: Any) -> Effect:
    try:
        return Effect(word)
    except ValueError:
        raise ProtocolError(f"effect must be one of {', '.join(e.value for e in Effect)}, not {word!r}") from None


__all__ = ["DESIGNS", "Declaration", "OPS", "PROTOCOL", "ProtocolError", "WORLD", "event_json", "event_of",
           "hello_of", "observation_json", "observation_of", "parse_hello", "reset_of"]
