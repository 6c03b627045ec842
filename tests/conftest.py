"""Hypothesis profiles and the suite's test budget: `dev` locally, `ci` when CI is set or asked for, `nightly`.

The budget (``BUDGET``) is ``ENVREPLICA_TEST_BUDGET`` when set (``make test-all`` sets ``ci``: the whole suite
at CI's counts on any machine), else ``ci`` under ``CI``, else ``dev`` (a contributor's ``make test``). It
names the Hypothesis profile loaded here, and ``tests/budget.py`` reads it for the batteries whose counts are
their own (the lockstep's examples): a count, never the clock. `pytest --hypothesis-profile NAME` still wins
for Hypothesis: its plugin loads that after this file.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Each profile names its parent, so none depends on which profile Hypothesis
# happened to auto-load when it was imported.
# No profile has a deadline or the too_slow health check: a verdict never depends on the clock, and a busy machine
# (CI's, or a laptop building something else) fails nothing that an idle one passes.
default = settings.get_profile("default")
UNTIMED = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", parent=default, max_examples=50, **UNTIMED)
# Replaces Hypothesis's built-in `ci` profile (auto-loaded when CI is set) but
# inherits from it, so its other CI defaults (e.g. the too_slow health-check
# suppression) still apply.
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    derandomize=True,
    database=None,
    max_examples=200,
    print_blob=True,
    **UNTIMED,
)
settings.register_profile("nightly", parent=default, max_examples=5000, **UNTIMED)

import budget  # noqa: E402  (tests/budget.py: ENVREPLICA_TEST_BUDGET, else CI, decides)

settings.load_profile(budget.BUDGET if budget.BUDGET in budget.BUDGETS else "dev")


def pytest_configure(config):
    budget.check()

# Every answer an external adapter gives the test suite (the reference adapter, the model adapter, the TypeScript
# kit, each fake one) is held to its op's response definition (conformance.answers, docs/protocol.md section 9),
# whatever the environment says: here in process, and in each `envreplica` the tests start (the environment).
# tests/test_schema.py counts the answers a lockstep checked, so the check cannot be off unnoticed.
os.environ["ENVREPLICA_CHECK_ANSWERS"] = "1"
from envreplica.conformance import answers  # noqa: E402  (after the environment is set)

answers.CHECK_ANSWERS = True


@pytest.fixture
def scratch():
    """A directory for SQLite files, on tmpfs when there is one (fsyncs then cost nothing); removed after.

    The lockstep's own default does the same (``replica.context._scratch_dir``).
    """
    from envreplica.conformance.replica.context import _scratch_dir

    path = Path(_scratch_dir())
    yield path
    shutil.rmtree(path, ignore_errors=True)


# Heaviest first (tests/durations.json): pytest-xdist's `loadscope` hands each worker a test file (or class) at a
# time, in collection order, so a long file drawn last leaves the other worker idle until it ends (minutes at the
# end of a session). After pytest-randomly's shuffle, the files that durations.json weighs move to the front,
# heaviest first (longest processing time first, the classic schedule for two machines); every other file keeps
# its random place after them, and the tests of each file their random order.
DURATIONS = Path(__file__).with_name("durations.json")


def _tier_weights() -> dict[str, dict[str, float]]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
        return {tier: {str(k): float(v) for k, v in data.get(tier, {}).items()} for tier in ("fast", "slow")}
    except (OSError, ValueError, AttributeError, TypeError):
        return {"fast": {}, "slow": {}}  # an unreadable file only loses the ordering, never a test


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle (its hook runs first)
def pytest_collection_modifyitems(config, items):
    weights = _tier_weights()

    # a file is one unit of xdist's loadscope: its weight is the sum of the tiers of it this session runs (make
    # test-all runs both in one session)
    tiers: dict[str, set[str]] = {}
    for item in items:
        tiers.setdefault(item.nodeid.split("::", 1)[0], set()).add("slow" if item.get_closest_marker("slow")
                                                                   else "fast")
    file_weight = {path: sum(weights[tier].get(path, 0.0) for tier in present) for path, present in tiers.items()}
    items.sort(key=lambda item: -file_weight[item.nodeid.split("::", 1)[0]])  # stable: ties keep their order
