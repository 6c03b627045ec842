"""The lockstep's small domains: what requests are built from, and the invariants a variant breaks.

Small on purpose: operations must interact. Rule kinds (``KINDS``), streams,
attempts, projects, env keys, kept-epoch sets, withhold reasons, values,
and the few other constants the generators and the machine use;
``KNOWN_VIOLATIONS`` lists the invariants a variant's model itself breaks.
How requests are drawn from these is in ``generate``; nothing here depends
on Hypothesis.
"""

from __future__ import annotations

from envreplica.spec.variants import Finding, Variant

#: The rule kinds swarm testing chooses among.
KINDS = ("cloud", "begin", "page", "delivery", "commit", "close", "restart", "read", "store", "invalid",
         "ffwd")

STREAMS = ("s1", "s2")
ATTEMPTS = ("a1", "a2", "a3")
PROJECTS = ("p1", "p2")
#: Project ids across the Segment rule, one of which a begin names now and then beside ``PROJECTS``, so a
#: task's order is not the sorted one (code-point order: "0" < "P1" < "p-_.9" < "p1" < "p10" < "p2" < "z99..."):
#: uppercase before lowercase, punctuation, a digit first, the text order of "p10" against "p2", 64 characters.
ODD_PROJECTS = ("P1", "p10", "0", "p-_.9", "z" + "9" * 63)
STRANGER = "p3"  # a project no begin names
ORG, OTHER_ORG = "o1", "o2"
#: A staged key of 128 characters, the longest the Key rule allows: a leading underscore and digits.
KEY_128 = "_9" + "aZ_0" * 31 + "zz"
#: Legacy keys at the Segment rule's length bound: 64 characters has a legacy name, 65 does not
#: (``value_reference_invalid``, though every character is one a Segment allows).
LEGACY_64 = "M" + "1" * 63
LEGACY_65 = "L" + "0" * 64
#: Env keys, in wire (ASCII) order: the small domain pages and deliveries draw from. ``L`` and ``M`` keep
#: their values as legacy SSM versions; ``_X`` too, but is not a Segment, so it has no legacy name
#: (``value_reference_invalid``).
KEYS = ("A", "B", "L", "M", "_X")
#: Keys at the Key and Segment rules' bounds, drawn now and then (a delivery's key, one in ten) and by
#: every clean reconciliation and fast-forward (``ALL_KEYS``): not in ``KEYS``, whose pages would then
#: mostly carry them (measured: the rarest races of the ci profile, fewer than half as often).
LONG_KEYS = (LEGACY_65, LEGACY_64, KEY_128)
ALL_KEYS = tuple(sorted(KEYS + LONG_KEYS))
LEGACY_KEYS = ("L", LEGACY_65, "M", LEGACY_64, "_X")
EPOCH_SETS = ((1, 2), (1,), (2,), (1, 2, 3), ())
REASONS = ("legal_hold", "held")
VALUES = ("v1", "v2")
#: Every other class of string the wire allows as a value, drawn now and then (``draw_value``): empty, NUL,
#: lone surrogates (JavaScript's JSON.stringify writes them; the seed serves them as U+FFFD, finding F3): a
#: high one, a low one then a high one at the end, a reversed pair (low before high); non-BMP and other
#: non-ASCII text; a value of 72 KB (beyond a SQLite page, beyond 64 KiB) and one of exactly 262,144 UTF-8
#: bytes (the default ``ackPageBytes``; two-byte characters, so fewer characters than bytes).
HARD_VALUES = ("", "a\x00b", "bad\ud800", "\udc00x\ud83d", "\ude00\ud83d", "\U0001F600 é\u2028",
               "€" * 24_000, "é" * 100_000 + "x" * 62_144)
#: An ack bound that fits one page record, not two (226-byte ack + 326 per record). Pages are then sent with
#: acknowledgements just under, exactly at and just over it (``generate._Gen.near_ack_bound``).
SMALL_ACK = 600
OTHER_KEY_HEX = bytes(range(1, 33)).hex()
NESTED_ID_BASE = 100000

#: Invariants a variant's model itself breaks (docs/findings.md): not asserted there.
KNOWN_VIOLATIONS: dict[Variant, frozenset] = {
    Variant.SEED: frozenset({"served_values_are_live_bound_kept"}),
    Variant.FIX_F1: frozenset({"served_values_are_live_bound_kept"}),
    Variant.FIXED: frozenset(),
}
#: Invariants each finding breaks on the model when its fix is left out (``ModelConfig.left_out``).
FINDING_VIOLATIONS: dict[Finding, frozenset] = {
    Finding.F1: frozenset({"served_values_are_live_bound_kept"}),
    Finding.F2: frozenset({"served_values_are_live_bound_kept"}),
    Finding.F3: frozenset(),
}


def draw_value(d, i: int = 0) -> str:
    """The value of the ``i``-th record of a request: ``VALUES`` (the shrink target) or, 15 times in 37,
    one of ``HARD_VALUES`` (the 256 KiB one half as often as the others: each step that holds it costs
    ~2 ms). Drawn from the block's tail (``_Draw.weighted``), so a page's later records get values of
    every class too."""
    hard = [(2, v) for v in HARD_VALUES[:-1]] + [(1, HARD_VALUES[-1])]
    return d.weighted([(12, VALUES[0]), (10, VALUES[1])] + hard, tail=i)
