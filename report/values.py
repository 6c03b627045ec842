"""Values of a trace as short text: ITF values decoded, nested records flattened, long text capped.

Models: what a reader of a report sees of one value. ``unitf`` turns the
lockstep trace's ITF encoding back into wire JSON (``None`` variants, big
integers); ``show`` writes any value (ITF or plain JSON) as one line of text
(strings as JSON, so an empty or odd string is visible); ``flatten`` lists a
record's leaves as dotted paths; ``cap`` keeps the first ``CAP`` characters
and says how long the whole was.

Leaves out on purpose: hiding values. Traces hold test values only (the
model's, or the lockstep's, sealed under the public test key); they are shown,
capped.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

#: Characters of a value shown before it is cut.
CAP = 80

_NONE = {"tag": "None", "value": {"#tup": []}}


def is_none(value: Any) -> bool:
    return isinstance(value, dict) and value == _NONE


def is_variant(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"tag", "value"} and isinstance(value["tag"], str)


def unitf(value: Any) -> Any:
    """An ITF-encoded wire value (``conformance.replica.traces._itf``) back as wire JSON: ``checker.itf``'s
    decoding (imported when first asked: a report's other values need none of the checker)."""
    from envreplica.checker.itf import itf_to_json

    return itf_to_json(value)


def safe(text: str) -> str:
    """``text`` writable as UTF-8: lone surrogates (a test value may hold one) as ``\\udXXX`` escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _text(s: str) -> str:
    """A string as JSON text (quoted, control characters escaped), safe to write."""
    return safe(json.dumps(s, ensure_ascii=False))


def show(value: Any) -> str:
    """One value as one line: ITF (variants, ``#map``, ``#set``, ``#tup``, ``#bigint``) or plain JSON."""
    if value is None or is_none(value):
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        if set(value) == {"#bigint"}:
            return str(value["#bigint"])
        if set(value) == {"#set"}:
            return "{" + ", ".join(show(v) for v in value["#set"]) + "}"
        if set(value) == {"#tup"}:
            return "(" + ", ".join(show(v) for v in value["#tup"]) + ")"
        if set(value) == {"#map"}:
            return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in value["#map"]) + "}"
        if is_variant(value):
            inner = value["value"]
            if isinstance(inner, dict) and not any(k.startswith("#") for k in inner):
                return f"{value['tag']}(" + ", ".join(f"{k}={show(v)}" for k, v in inner.items()) + ")"
            if inner == {"#tup": []}:
                return value["tag"]
            return f"{value['tag']}({show(inner)})"
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return _text(repr(value))


def key_part(value: Any) -> str:
    """One component of a row key: a string as itself, anything else as ``show``."""
    if isinstance(value, str):
        return safe(value)
    return show(value)


def _is_record(value: Any) -> bool:
    return isinstance(value, dict) and not is_variant(value) and not any(k.startswith("#") for k in value)


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, shown value) for each leaf of a record; a variant at the top gives its ``tag`` first."""
    if not prefix and is_variant(value) and _is_record(value["value"]):
        yield "tag", value["tag"]
        yield from flatten(value["value"])
        return
    if _is_record(value) and value:
        for k, v in value.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return
    yield (prefix or "value"), show(value)


def cap(text: str, limit: int = CAP) -> str:
    """``text`` cut to ``limit`` characters, with its full length said."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def cap_leaves(value: Any, limit: int = CAP) -> Any:
    """A JSON value with every long string capped (for the parameters shown in full)."""
    if isinstance(value, str):
        return cap(value, limit)
    if isinstance(value, dict):
        return {str(k): cap_leaves(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [cap_leaves(v, limit) for v in value]
    return value


def pretty(value: Any, limit: int = CAP) -> str:
    """A JSON value indented, long strings capped."""
    return safe(json.dumps(cap_leaves(value, limit), indent=1, ensure_ascii=False))


def one_line(value: Any, width: int = 160) -> str:
    """A JSON value on one line, cut to ``width``."""
    if value is None:
        return "—"
    return cap(safe(json.dumps(cap_leaves(value), separators=(",", ":"), ensure_ascii=False)), width)
