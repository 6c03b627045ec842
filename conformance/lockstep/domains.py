"""The lockstep's small domains: what requests are built from, and the invariants a variant breaks.

Small on purpose: operations must interact. Rule kinds (``KINDS``), streams,
attempts, projects, env keys, kept-epoch sets, withhold reasons, values,
and the few other constants the generators and the machine use;
``KNOWN_VIOLATIONS`` lists the invariants a variant's model itself breaks.
How requests are drawn from these is in ``generate``; nothing here depends
on Hypothesis.
"""

from __future__ import annotations

from envreplica.model.state import Variant

#: The rule kinds swarm testing chooses among.
KINDS = ("cloud", "begin", "page", "delivery", "commit", "close", "restart", "read", "store", "invalid")

STREAMS = ("s1", "s2")
ATTEMPTS = ("a1", "a2", "a3")
PROJECTS = ("p1", "p2")
STRANGER = "p3"  # a project no begin names
ORG, OTHER_ORG = "o1", "o2"
#: Env keys, in wire (ASCII) order. ``L`` and ``M`` keep their values as legacy
#: SSM versions; ``_X`` too, but is not a Segment, so it has no legacy name
#: (``value_reference_invalid``).
KEYS = ("A", "B", "L", "M", "_X")
LEGACY_KEYS = ("L", "M", "_X")
EPOCH_SETS = ((1, 2), (1,), (2,), (1, 2, 3), ())
REASONS = ("legal_hold", "held")
VALUES = ("v1", "v2")
#: Every other class of string the wire allows as a value, drawn now and then (``draw_value``): empty, NUL,
#: lone surrogates (JavaScript's JSON.stringify writes them; the seed serves them as U+FFFD, finding F3),
#: non-BMP and other non-ASCII text, and a value of 72 KB (beyond a SQLite page, beyond 64 KiB).
HARD_VALUES = ("", "a\x00b", "bad\ud800", "\udc00x\ud83d", "\U0001F600 é\u2028", "€" * 24_000)
#: An ack bound that fits one page record, not two (226-byte ack + 326 per record).
SMALL_ACK = 600
OTHER_KEY_HEX = bytes(range(1, 33)).hex()
NESTED_ID_BASE = 100000

#: Invariants a variant's model itself breaks (docs/findings.md): not asserted there.
KNOWN_VIOLATIONS: dict[Variant, frozenset] = {
    Variant.SEED: frozenset({"served_values_are_live_bound_kept"}),
    Variant.FIX_F1: frozenset({"served_values_are_live_bound_kept"}),
    Variant.FIXED: frozenset(),
}


def draw_value(d, i: int = 0) -> str:
    """The value of the ``i``-th record of a request: ``VALUES`` (the shrink target) or, four times in ten,
    one of ``HARD_VALUES``. Drawn from the block's tail (``_Draw.weighted``), so a page's later records get
    values of every class too."""
    return d.weighted([(5, VALUES[0]), (4, VALUES[1])] + [(1, v) for v in HARD_VALUES], tail=i)
