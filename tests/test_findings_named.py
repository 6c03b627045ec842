"""A divergence the fixed variant explains says which finding it is (``conformance.replica.findings``).

The implementation here is the model itself with one fix left out (``ModelDriver(left_out=...)``): held to
``fixed``, the lockstep finds a divergence, and replaying it beside the model without each fix names the one
the implementation lacks, first in the failure text (once). A divergence that no one fix explains (a commit
answered the other way round) names nothing. The model without a fix is the variant it was with that finding
back: ``has_fix`` gives each variant exactly its fixes (the checker's state spaces are pinned elsewhere). The
seed's own TypeScript is named F3 (its sealing) or F1/F2 in ``tests/test_typescript_kit.py``.

Budgets are example counts (the ``ci`` profile of the lockstep).
"""

from __future__ import annotations

import pytest

from adapter_requests import FlipsCommits
from envreplica.conformance.drivers import ModelDriver
from envreplica.conformance.replica import lockstep_settings, run_lockstep
from envreplica.model.state import ModelConfig, has_fix
from envreplica.spec.variants import FINDING_TITLES, FIXES, Finding, Variant


def test_each_variant_runs_exactly_its_fixes():
    for variant in Variant:
        cfg = ModelConfig(variant=variant)
        assert {f for f in Finding if has_fix(cfg, f)} == FIXES[variant]
        for finding in FIXES[variant]:
            left = ModelConfig(variant=variant, left_out=frozenset({finding}))
            assert {f for f in Finding if has_fix(left, f)} == FIXES[variant] - {finding}


@pytest.mark.parametrize("finding", [Finding.F1, Finding.F3, pytest.param(Finding.F2, marks=pytest.mark.slow)])
def test_a_divergence_is_named_as_the_fix_the_implementation_lacks(finding, tmp_path):
    report = run_lockstep(lambda: ModelDriver("fixed", left_out={finding}), variant=Variant.FIXED,
                          settings=lockstep_settings("ci"), out_dir=tmp_path)
    assert not report.ok
    assert report.finding is not None and report.finding.startswith(f"{finding.value}: {FINDING_TITLES[finding]}")
    assert report.failure.startswith(report.finding + "\n") and report.failure.count(finding.value + ":") == 1
    assert f'"finding": "{finding.value}: ' in (tmp_path / "lockstep-fixed.itf.json").read_text()


class FlipCommit(FlipsCommits, ModelDriver):
    """The model, but every successful commit answers ``ok: false``: no fix of the seed's explains it."""


def test_a_divergence_no_fix_explains_is_not_named():
    report = run_lockstep(lambda: FlipCommit("fixed"), variant=Variant.FIXED, settings=lockstep_settings("dev"))
    assert not report.ok and report.finding is None
    assert report.failure.startswith("lockstep divergence under variant fixed")


def test_seed_has_no_fix_to_leave_out():
    """Under ``seed`` nothing is fixed: a divergence there is never named (no replay is made)."""
    report = run_lockstep(lambda: FlipCommit("seed"), variant=Variant.SEED, settings=lockstep_settings("dev"))
    assert not report.ok and report.finding is None
