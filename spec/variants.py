"""Which reading of the seed a replica runs: the seed as written, or with its fixes.

Shared by the model and the implementation because it names a contract
choice (which findings of ``docs/findings.md`` are fixed), not a decision:
each side implements each variant on its own. ``Finding`` names the
findings one by one and ``FIXES`` the ones each variant fixes, so that a
model can run a variant with one fix left out (``model.state.ModelConfig``'s
``left_out``): that is how a divergence is named as the finding it is
(``conformance.replica.findings``).
"""

from __future__ import annotations

import enum


class Variant(str, enum.Enum):
    """Which protocol a replica runs: the seed as written, or the seed with its fixes."""

    SEED = "seed"  # the seed exactly as written (findings F1, F2 and F3 reproduce)
    FIX_F1 = "fix-f1"  # the seed with only F1 fixed (F2 still reproduces)
    FIXED = "fixed"  # the seed with F1, F2 and F3 fixed: every property holds


class Finding(str, enum.Enum):
    """A finding of docs/findings.md in the replica's seed: each has one fix (``# FIX(Fn)`` in the model)."""

    F1 = "F1"  # a value read before a policy change is installed after it
    F2 = "F2"  # a retained older or conflicting record keeps its installed value across a policy change
    F3 = "F3"  # a value with a lone surrogate is served as U+FFFD


#: The findings each variant fixes.
FIXES: dict[Variant, frozenset[Finding]] = {
    Variant.SEED: frozenset(),
    Variant.FIX_F1: frozenset({Finding.F1}),
    Variant.FIXED: frozenset(Finding),
}
#: What each finding is, in one line (docs/findings.md's headings).
FINDING_TITLES: dict[Finding, str] = {
    Finding.F1: "a value read before a policy change is installed after it",
    Finding.F2: "a retained older or conflicting record keeps its installed value across a policy change",
    Finding.F3: "a value with a lone surrogate is served as U+FFFD",
}
