"""The finding a migration lockstep divergence is: the finding (F4, F5 or F6, docs/migration.md) whose fixes'
absence from the model explains it.

Models: a divergence under bounds that fix findings (``protocol.FINDING_FIXES``: the fixes each finding needs)
replayed once per finding those bounds fix, on fresh sides, against the model with that finding's fixes left out
(``example.replay_moves`` with the bounds less them). When the implementation then agrees with the model at every
move, the divergence is that finding: the implementation lacks its fixes. The replica's lockstep names its
findings (F1 to F3) the same way (``conformance.replica.findings``).

Leaves out on purpose: a divergence that needs two findings' fixes left out at once (it stays unnamed: no one
finding explains it), and a replay that stops short of the divergence's moves (names nothing).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from envreplica.conformance.migration.example import World, replay_moves
from envreplica.conformance.migration.protocol import FINDING_FIXES, FINDING_TITLES
from envreplica.conformance.migration.sides import Move


def finding_of(shared: World, moves: Sequence[Move]) -> Optional[str]:
    """The finding a divergence is: the finding (F4, F5 or F6) whose fixes' absence from the model makes ``moves``
    replay with no divergence (one replay per finding the run's bounds fix); None when no one finding explains it."""
    cfg = shared.cfg
    for finding, fixes in FINDING_FIXES.items():
        if not fixes & cfg.fixes:
            continue
        found, example = replay_moves(shared, moves, replace(cfg, fixes=cfg.fixes - fixes))
        if found is None and len(example.moves) == len(moves):
            names = " and ".join(f"Fix.{fix.name}" for fix in sorted(fixes & cfg.fixes, key=lambda f: f.value))
            return f"{finding}: {FINDING_TITLES[finding]} (the implementation answers as the model without " \
                   f"{names}: docs/migration.md#{finding.lower()})"
    return None
