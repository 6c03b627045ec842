"""Strings in divergence messages: escaped to printable ASCII, and where two of them part.

``escape`` writes a string with every code point outside printable ASCII as
an escape (``\\uXXXX`` in the Basic Multilingual Plane, surrogates included;
``\\UXXXXXXXX`` above it, so that a real astral character never reads as two
lone surrogates); ``code_point`` names one code point; ``text_difference``
says where two strings first differ, which code point each side has there,
and both strings escaped, cut around that place to one readable line (with
how much was cut). ``values_shown`` says whether a divergence may show the
values an implementation holds.

Leaves out on purpose: hiding values in general. The values a lockstep
compares are the harness's own test data (every one came from its
``store.put``); the one place a real value could be read, an implementation on
a real store (``--store ssm``), is kept by length only (``values_shown``).
"""

from __future__ import annotations

import unicodedata
from typing import Any, Optional

#: Code points shown before the first difference, and after it (each side), when a string is cut.
BEFORE = 16
AFTER = 16

#: Written in code point order: printable ASCII, then the rest of the Basic Multilingual Plane. (Compared as
#: text, not numbers: a new integer in envreplica's sources would change the literals the lockstep's
#: derandomized draws mix in, ``conformance.literals``.)
_FIRST_PRINTABLE, _LAST_PRINTABLE, _LAST_BMP = " ", "~", "\uffff"


def _printable_ascii(ch: str) -> bool:
    return _FIRST_PRINTABLE <= ch <= _LAST_PRINTABLE


def escape(text: str) -> str:
    """``text`` as printable ASCII: ``"`` and ``\\`` escaped, every other code point outside 0x20-0x7E as
    ``\\uXXXX`` (lone surrogates too) or ``\\UXXXXXXXX`` (beyond U+FFFF)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif _printable_ascii(ch):
            out.append(ch)
        elif ch <= _LAST_BMP:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def quoted(text: str) -> str:
    """``text`` escaped, in double quotes."""
    return f'"{escape(text)}"'


def brief(text: str, width: int = 40) -> str:
    """``text`` quoted and escaped, its first ``width`` code points only when longer (its length said)."""
    if len(text) <= width:
        return quoted(text)
    return f"{quoted(text[:width])}… ({_chars(len(text))})"


def code_point(ch: Optional[str]) -> str:
    """One code point as ``U+XXXX`` and what it is: itself (printable ASCII), ``lone surrogate``,
    ``control``, or its Unicode name (``replacement character``); None: the end of the text."""
    if ch is None:
        return "nothing (the text ends there)"
    number = f"U+{ord(ch):04X}"
    if _printable_ascii(ch):
        return f"{number} {quoted(ch)}"
    category = unicodedata.category(ch)
    if category == "Cs":
        return f"{number} (lone surrogate)"
    if category == "Cc":
        return f"{number} (control)"
    name = unicodedata.name(ch, "").lower()
    return f"{number} ({name})" if name else number


def _chars(n: int) -> str:
    return f"{n:,} char" + ("" if n == 1 else "s")


def _window(text: str, start: int, end: int) -> str:
    """``text[start:end]`` quoted, with an ellipsis on each side that was cut."""
    return ("…" if start > 0 else "") + quoted(text[start:end]) + ("…" if end < len(text) else "")


def text_difference(model: str, impl: str) -> str:
    """Where two strings first differ, the code point of each there, and both escaped (cut around it).

    For example ``differs at index 1 (of 3 chars): model U+D800 (lone surrogate), implementation U+FFFD
    (replacement character); model "a\\ud800b", implementation "a\\ufffdb"``. Longer strings are shown from
    ``BEFORE`` code points before the difference to ``AFTER`` after it, and the message says how many
    characters were cut."""
    i = next((n for n, (a, b) in enumerate(zip(model, impl)) if a != b), min(len(model), len(impl)))
    if len(model) == len(impl):
        sizes = f"of {_chars(len(model))}"
    else:
        sizes = f"model {_chars(len(model))}, implementation {_chars(len(impl))}"
    head = (f"differs at index {i} ({sizes}): model {code_point(model[i] if i < len(model) else None)}, "
            f"implementation {code_point(impl[i] if i < len(impl) else None)}")
    start = max(0, i - BEFORE)
    m_end, i_end = min(len(model), i + AFTER + 1), min(len(impl), i + AFTER + 1)
    text = f"{head}; model {_window(model, start, m_end)}, implementation {_window(impl, start, i_end)}"
    cut_after = (len(model) - m_end, len(impl) - i_end)
    if start or any(cut_after):
        after = (f"{cut_after[0]:,} after" if cut_after[0] == cut_after[1]
                 else f"after: model {cut_after[0]:,}, implementation {cut_after[1]:,}")
        text += f" (cut: {_chars(start)} before, {after})"
    return text


def values_shown(impl: Any) -> bool:
    """Whether a divergence may show the values ``impl`` holds: yes, unless it reads a real value store.

    A lockstep's values are its own test data; an in-process driver on AWS SSM (``--store ssm``: it
    refuses the public test key, ``SqliteDriver(forbid_test_key=True)``, or its store is an ``SsmStore``)
    could hold a real one, so its values are shown by length only. (Over the adapter protocol values are
    compared through ``state``, which the reference adapter offers only with ``--test-key``, refused with
    ``--store ssm``.)"""
    if getattr(impl, "_forbid_test_key", False):
        return False
    return type(getattr(impl, "store", None)).__name__ != "SsmStore"
