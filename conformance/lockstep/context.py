"""One run's shared context, ``_Run``: the implementation driver, counters, coverage, the last failure.

Shared by every example of one ``run_lockstep`` (the bare ``LockstepMachine``
makes its own). Apart from ``run`` so that ``machine`` can use it without
importing the runner; ``_scratch_dir`` is here too (the CLI's replay uses it).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from envreplica.conformance.drivers import Driver
from envreplica.conformance.lockstep.coverage import LockstepCoverage
from envreplica.model.state import Variant


def _scratch_dir() -> str:
    """A temporary directory, on tmpfs when there is one (SQLite fsyncs are then free)."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="envreplica-lockstep-", dir=base)


def _default_impl_factory(variant: Variant, scratch: list) -> Callable[[], Driver]:
    """The built-in SQLite implementation, each driver on a file in a fresh scratch directory."""
    from envreplica.conformance.drivers import TEST_MASTER_KEY, SqliteDriver

    def factory() -> Driver:
        directory = _scratch_dir()
        scratch.append(directory)
        return SqliteDriver(variant, os.path.join(directory, "replica.db"), master_key=TEST_MASTER_KEY)

    return factory


class _Run:
    """Shared by every example of one ``run_lockstep``."""

    def __init__(self, impl_factory: Optional[Callable[[], Driver]], variant: Variant,
                 out_dir: Optional[Path], state_check: bool, trace_name: Optional[str] = None) -> None:
        self.variant = Variant(variant)
        self._scratch: list[str] = []  # directories the default factory made (removed by close)
        self.impl_factory = impl_factory or _default_impl_factory(self.variant, self._scratch)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.state_check = state_check
        self.trace_name = trace_name or f"lockstep-{self.variant.value}"
        self.coverage = LockstepCoverage()
        self.examples = 0
        self.steps = 0
        self.failure: Optional[dict] = None  # the last failing example's steps and divergence
        self.last_steps: list = []
        self.trace_path: Optional[Path] = None  # the failing example's JSON lines, once written
        self.itf_path: Optional[Path] = None  # and its ITF trace
        self._driver: Optional[Driver] = None
        self.started = time.perf_counter()
        self.first_failure: Optional[tuple[int, float, int]] = None  # (examples, seconds, steps) when first seen

    def driver(self) -> Driver:
        if self._driver is None:
            self._driver = self.impl_factory()
        return self._driver

    def discard(self) -> None:
        """Drop the implementation driver (it died); the next example builds a new one."""
        driver, self._driver = self._driver, None
        with contextlib.suppress(Exception):
            close = getattr(driver, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        """Close the driver; remove the scratch directories of the default factory."""
        import shutil

        self.discard()
        while self._scratch:
            shutil.rmtree(self._scratch.pop(), ignore_errors=True)
