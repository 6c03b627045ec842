"""The data of a trace: its literals by kind, the trace with some of them replaced, shorter names.

Models: what the lockstep's data pass (``run._shrink_data``) may change in a
trace once its steps are minimal. Three kinds of literal (``KINDS``), each
found at the places the generator writes it (``generate``) and replaced at all
of them at once:

- ``key``: a record's ``key`` (pages, deliveries, nested ones too), a page's
  ``after``, a ``store.put`` / ``store.fail`` target's ``key``, and the
  ``key`` inside a stored envelope (``raw``);
- ``project``: a begin's ``projectIds``, a page's or delivery's
  ``projectId``, a commit's ``versions[].projectId``, a snapshot's or
  diagnostics' ``projectIds``, a ``store.put`` / ``store.fail`` target's
  ``projectId``, and the ``projectId`` inside a stored envelope;
- ``value``: the ``value`` of a stored envelope (a string).

An envelope is rewritten in the style it was written in (``_STYLES``: compact
ASCII, compact with its keys in another order, JavaScript's ``JSON.stringify``
with lone surrogates escaped, indented), so nothing else of it changes; text
in no known style is left as it is. The value-store parameter names
(``{prefix}/projects/{projectId}/env/{key}...``) are derived by both sides
from the project and key, so they follow.

``names`` proposes an order-preserving renaming of a kind's literals (the
shortest names, in the same code-point order, each of the same class: a Key
stays a Key, a key that is no Segment, so has no legacy parameter name, stays
one; a project stays a Segment; not ``strict``, a key need only stay a Key):
keys within a page stay strictly ascending and after its ``after``, commits'
versions stay sorted by project, and every equality and inequality between
literals stays. ``between`` proposes one literal's shorter name between its
neighbours. Whether a candidate still diverges the same way is the replay's
to say (``run._shrink_data``).

Leaves out on purpose: stream, attempt, organisation and staging ids (short
already, or fixed by the StagingId rule) and op ids (an acknowledgement's
size, which the ack bound counts, holds the page's ``opId``).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from typing import Any, Callable, Optional, Sequence

from envreplica.spec import wire

KINDS = ("key", "project", "value")

#: A lone surrogate in a Python string (json.loads joins escaped pairs; only lone ones stay).
_LONE = re.compile("[\ud800-\udfff]")

_STYLES: tuple[Callable[[Any], str], ...] = (
    lambda doc: json.dumps(doc, separators=(",", ":")),
    lambda doc: _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}",
                          json.dumps(doc, ensure_ascii=False, separators=(",", ":"))),
    lambda doc: json.dumps(doc, indent=2),
    lambda doc: json.dumps(doc),
)

#: The envelope field that holds each kind.
_ENVELOPE_FIELD = {"key": "key", "project": "projectId", "value": "value"}


def _envelope(raw: str, field: str, rename: Callable[[str], str]) -> str:
    """``raw`` (a stored envelope's text) with its top-level ``field`` renamed, in the style it was written."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    if not isinstance(doc, dict) or not isinstance(doc.get(field), str):
        return raw
    new = rename(doc[field])
    if new == doc[field]:
        return raw
    for dump in _STYLES:
        if dump(doc) == raw:
            return dump(dict(doc, **{field: new}))
    return raw


def _renamed(value: Any, rename: Callable[[str], str]) -> Any:
    return rename(value) if isinstance(value, str) else value


def _rewrite(request: Any, kind: str, rename: Callable[[str], str]) -> Any:
    """One request (a copy) with every literal of ``kind`` passed through ``rename``; nested ones too."""
    if not isinstance(request, dict):
        return request
    request = json.loads(json.dumps(request))
    op, frame = request.get("op"), request.get("frame")
    frame = frame if isinstance(frame, dict) else {}
    if kind == "key":
        if op == "page":
            if isinstance(frame.get("after"), str):
                frame["after"] = rename(frame["after"])
            records = frame.get("records")
            for r in records if isinstance(records, list) else ():
                if isinstance(r, dict) and "key" in r:
                    r["key"] = _renamed(r["key"], rename)
        elif op == "delivery" and isinstance(frame.get("state"), dict) and "key" in frame["state"]:
            frame["state"]["key"] = _renamed(frame["state"]["key"], rename)
    elif kind == "project":
        if op == "begin" and isinstance(frame.get("projectIds"), list):
            frame["projectIds"] = [_renamed(p, rename) for p in frame["projectIds"]]
        elif op in ("page", "delivery") and "projectId" in frame:
            frame["projectId"] = _renamed(frame["projectId"], rename)
        elif op == "commit" and isinstance(frame.get("versions"), list):
            for entry in frame["versions"]:
                if isinstance(entry, dict) and "projectId" in entry:
                    entry["projectId"] = _renamed(entry["projectId"], rename)
        elif op in ("snapshot", "diagnostics") and isinstance(request.get("projectIds"), list):
            request["projectIds"] = [_renamed(p, rename) for p in request["projectIds"]]
    if op in ("store.put", "store.fail"):
        if kind in ("key", "project"):
            field = "key" if kind == "key" else "projectId"
            if field in request:
                request[field] = _renamed(request[field], rename)
        if op == "store.put" and isinstance(request.get("raw"), str):
            request["raw"] = _envelope(request["raw"], _ENVELOPE_FIELD[kind], rename)
    if isinstance(request.get("duringFetch"), list):
        request["duringFetch"] = [_rewrite(n, kind, rename) for n in request["duringFetch"]]
    return request


def rewrite(requests: Sequence[Any], kind: str, mapping: dict[str, str]) -> list:
    """``requests`` with each literal of ``kind`` that ``mapping`` names replaced, everywhere at once."""
    return [_rewrite(r, kind, lambda s: mapping.get(s, s)) for r in requests]


def literals(requests: Sequence[Any], kind: str) -> list[str]:
    """The distinct literals of ``kind`` in ``requests``, in code-point order."""
    seen: set[str] = set()

    def note(text: str) -> str:
        seen.add(text)
        return text

    for r in requests:
        _rewrite(r, kind, note)
    return sorted(seen)


# ---------------------------------------------------------------------------
# Shorter names
# ---------------------------------------------------------------------------


def _class(text: str, kind: str, strict: bool = True) -> Optional[tuple[bool, ...]]:
    """What a new name of ``text`` must keep; None: not renamed (not of the kind's rule, or a value).
    A key keeps whether it is a Segment (has a legacy parameter name) unless not ``strict``."""
    if kind == "key":
        if wire.KEY.regex.fullmatch(text) is None:
            return None
        return (wire.SEGMENT.regex.fullmatch(text) is not None,) if strict else ()
    if kind == "project":
        return () if wire.SEGMENT.regex.fullmatch(text) is not None else None
    return None


#: The characters names are made of: a key is a Key (``_`` first for one that is no Segment), a project a
#: Segment, in lowercase so that the two read apart.
_ALPHABETS = {"key": ("ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
              "project": ("abcdefghijklmnopqrstuvwxyz", "0123456789abcdefghijklmnopqrstuvwxyz")}


@functools.cache
def _candidates(kind: str) -> tuple[str, ...]:
    """Names of one and two characters, shortest first, then in code-point order."""
    first, rest = _ALPHABETS[kind]
    two = ("".join(p) for p in itertools.product(first, rest))
    return tuple(sorted(itertools.chain(first, two), key=lambda s: (len(s), s)))


def _name(kind: str, like: tuple[bool, ...], above: Optional[str], below: Optional[str],
          taken: frozenset[str] = frozenset(), strict: bool = True) -> Optional[str]:
    """The first candidate name strictly between ``above`` and ``below`` of class ``like``, not ``taken``."""
    for c in _candidates(kind):
        if (above is None or c > above) and (below is None or c < below) and c not in taken \
                and _class(c, kind, strict) == like:
            return c
    return None


def names(found: Sequence[str], kind: str, strict: bool = True) -> Optional[dict[str, str]]:
    """An order-preserving renaming of ``found``: each literal of ``kind`` its shortest name of its class
    (``_class``; of the kind's rule only, unless ``strict``), above the previous one's and below the next
    literal kept (one with no class, or with no short name of its class in its place, is kept as it is).
    None when it would shorten nothing."""
    ordered = sorted(set(found))
    kept = {old for old in ordered if _class(old, kind) is None}
    while True:
        mapping: dict[str, str] = {}
        previous: Optional[str] = None
        for at, old in enumerate(ordered):
            new: Optional[str] = old
            if old not in kept:
                below = next((o for o in ordered[at + 1:] if o in kept), None)
                new = _name(kind, _class(old, kind, strict) or (), previous, below, strict=strict)
            if new is None:
                kept.add(old)  # no short name fits here: kept, and the others placed around it
                break
            mapping[old] = new
            previous = new
        else:
            break
    if sum(map(len, mapping.values())) >= sum(map(len, mapping)):
        return None
    return mapping


def between(found: Sequence[str], old: str, kind: str, strict: bool = True) -> Optional[str]:
    """A shorter name for ``old`` alone, of its class (``_class``, ``strict`` as in ``names``), strictly
    between its neighbours in ``found``."""
    like = _class(old, kind, strict)
    if like is None:
        return None
    ordered = sorted(set(found))
    at = ordered.index(old)
    above = ordered[at - 1] if at > 0 else None
    below = ordered[at + 1] if at + 1 < len(ordered) else None
    new = _name(kind, like, above, below, frozenset(ordered), strict)
    return new if new is not None and len(new) < len(old) else None


def shrink_text(text: str, works: Callable[[str], bool], left: Callable[[], bool]) -> str:
    """The shortest text ``works`` keeps: ``""``, else ``text`` with chunks cut while it works (halves, then
    quarters..., then single characters, each from the start), while ``left()``."""
    if works(""):
        return ""
    size = len(text) // 2
    while size >= 1 and left():
        start = 0
        while start < len(text) and left():
            cut = text[:start] + text[start + size:]
            if cut != text and works(cut):
                text = cut
            else:
                start += size
        size //= 2
    return text
