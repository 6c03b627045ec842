"""Hypothesis profiles and the suite's test budget: `dev` locally, `ci` when CI is set or asked for, `nightly`.

The budget (``BUDGET``) is ``ENVREPLICA_TEST_BUDGET`` when set (``make test-all`` sets ``ci``: the whole suite
at CI's counts on any machine), else ``ci`` under ``CI``, else ``dev`` (a contributor's ``make test``). It
names the Hypothesis profile loaded here, and ``tests/budget.py`` reads it for the batteries whose counts are
their own (the lockstep's examples): a count, never the clock. `pytest --hypothesis-profile NAME` still wins
for Hypothesis: its plugin loads that after this file.
"""

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

    The lockstep's own default does the same (``lockstep.context._scratch_dir``).
    """
    from envreplica.conformance.replica.context import _scratch_dir

    path = Path(_scratch_dir())
    yield path
    shutil.rmtree(path, ignore_errors=True)
