"""The finding a lockstep divergence is: the fix of docs/findings.md whose absence from the model explains it.

Models: a divergence under a variant that fixes findings (``spec.variants.FIXES``: ``fixed`` fixes F1, F2 and
F3; ``fix-f1`` F1) replayed once per fix, on a fresh implementation beside the model with that one fix left
out (``ModelDriver(left_out=...)``, ``ModelConfig.left_out``). When the implementation then agrees with the
model at every step, the divergence is that finding: the implementation answers as the seed does there. The
migration lockstep names its findings (F4 to F6) the same way (``conformance.migration.findings``).

Leaves out on purpose: a divergence that needs two fixes left out at once (it stays unnamed: no one finding
explains it), and the invariants the left-out fix lets the model break (``domains.FINDING_VIOLATIONS``: not
asserted on that replay, as ``KNOWN_VIOLATIONS`` for the variant itself).
"""

from __future__ import annotations

from typing import Collection, Optional, Sequence

from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.replica.compare import replay_steps
from envreplica.spec.variants import FINDING_TITLES, FIXES, Finding


def finding_sentence(finding: Finding) -> str:
    """The line that names ``finding`` (the first line of a divergence it explains)."""
    return (f"{finding.value}: {FINDING_TITLES[finding]} (the implementation answers as the model without "
            f"FIX({finding.value}): docs/findings.md, {finding.value})")


def finding_of(run, steps: Sequence[dict], quiet: Collection = ()) -> Optional[str]:
    """The sentence naming the finding the divergent ``steps`` are (``finding_sentence``), or None.

    ``run`` is the lockstep's ``context._Run`` (its implementation driver, variant and state checks); one
    replay per finding its variant fixes, in the order of ``Finding``, each through ``compare.replay_steps``'
    checks. A replay the implementation could not take (it died) names nothing.
    """
    requests = [s["request"] for s in steps]
    for finding in Finding:
        if finding not in FIXES[run.variant]:
            continue
        try:
            impl = run.driver()
            got, divergence = replay_steps(requests, impl, ModelDriver(run.variant, left_out={finding}),
                                           variant=run.variant, state_check=run.state_check,
                                           probe=run.probe(impl), defer=quiet)
        except Exception:  # the implementation could not be driven: no finding is named from it
            run.discard()
            continue
        if getattr(impl, "alive", True) is False:
            run.discard()
        if divergence is None and len(got) == len(requests):
            return finding_sentence(finding)
    return None
