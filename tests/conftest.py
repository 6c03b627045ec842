"""Hypothesis profiles: `dev` locally, `ci` when CI is set, `nightly` on request.

`pytest --hypothesis-profile NAME` still wins: the Hypothesis plugin loads it
after this file.
"""

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

# Each profile names its parent, so none depends on which profile Hypothesis
# happened to auto-load when it was imported.
default = settings.get_profile("default")
settings.register_profile("dev", parent=default, max_examples=50)
# Replaces Hypothesis's built-in `ci` profile (auto-loaded when CI is set) but
# inherits from it, so its other CI defaults (e.g. the too_slow health-check
# suppression) still apply.
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    print_blob=True,
)
settings.register_profile("nightly", parent=default, max_examples=5000, deadline=None)

settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def scratch():
    """A directory for SQLite files, on tmpfs when there is one (fsyncs then cost nothing); removed after.

    The lockstep's own default does the same (``lockstep.context._scratch_dir``).
    """
    from envreplica.conformance.lockstep.context import _scratch_dir

    path = Path(_scratch_dir())
    yield path
    shutil.rmtree(path, ignore_errors=True)
