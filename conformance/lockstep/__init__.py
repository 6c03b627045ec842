"""Deprecated: the replica's lockstep moved to ``envreplica.conformance.replica`` (issue 41: a folder per protocol,
``conformance/replica/``, ``conformance/migration/``, ``conformance/lock/``). Import it from there.

This package stays one release so that code outside this repository that imports
``envreplica.conformance.lockstep`` (or one of its modules: ``...lockstep.run``, ``...lockstep.machine``, ...)
keeps working, with a ``DeprecationWarning`` naming the new path. It re-exports the new package's names, and each
of its modules under the old name is the new module itself (the same objects: a patch of
``envreplica.conformance.lockstep.run.SHRINK_CALLS`` is a patch of ``envreplica.conformance.replica.run``'s).
Nothing in envreplica imports it (``tests/test_architecture.py`` reads the graph; ``tests/test_architecture.py``
holds the shim to this).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

from envreplica.conformance import replica as _replica
from envreplica.conformance.replica import *  # noqa: F401,F403  (the old package's names)
from envreplica.conformance.replica import __all__  # noqa: F401

warnings.warn("envreplica.conformance.lockstep is deprecated and will be removed in the next release: import "
              "envreplica.conformance.replica instead", DeprecationWarning, stacklevel=2)

# every name the new package holds (its private ones too: the old package's users reached for ``_scratch_dir``),
# but this module's own (its name, path, spec, ...)
globals().update({name: value for name, value in vars(_replica).items() if name not in globals()})
for _module in pkgutil.iter_modules(_replica.__path__):
    _new = importlib.import_module(f"{_replica.__name__}.{_module.name}")
    sys.modules[f"{__name__}.{_module.name}"] = _new
    globals()[_module.name] = _new
