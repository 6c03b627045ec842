"""Which reading of the seed a replica runs: the seed as written, or with its fixes.

Shared by the model and the implementation because it names a contract
choice (which findings of ``docs/findings.md`` are fixed), not a decision:
each side implements each variant on its own.
"""

from __future__ import annotations

import enum


class Variant(str, enum.Enum):
    """Which protocol a replica runs: the seed as written, or the seed with its fixes."""

    SEED = "seed"  # the seed exactly as written (findings F1, F2 and F3 reproduce)
    FIX_F1 = "fix-f1"  # the seed with only F1 fixed (F2 still reproduces)
    FIXED = "fixed"  # the seed with F1, F2 and F3 fixed: every property holds
