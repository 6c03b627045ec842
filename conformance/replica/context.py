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

from envreplica.checker.progress import ProgressHook, Tick
from envreplica.conformance.drivers import Driver
from envreplica.conformance.external import (GENERATED_EXTENSIONS, AdapterError, AdapterFailure, ProtocolBreak,
                                             StateProbe, probe_extensions)
from envreplica.conformance.replica.coverage import LockstepCoverage
from envreplica.spec.variants import Variant


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
                 out_dir: Optional[Path], state_check: bool, trace_name: Optional[str] = None,
                 progress: Optional[ProgressHook] = None, budget: Optional[int] = None) -> None:
        self.variant = Variant(variant)
        self._scratch: list[str] = []  # directories the default factory made (removed by close)
        self.impl_factory = impl_factory or _default_impl_factory(self.variant, self._scratch)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.state_check = state_check
        self.trace_name = trace_name or f"lockstep-{self.variant.value}"
        self.coverage = LockstepCoverage()
        self.examples = 0
        self.steps = 0
        self.checks = 0  # state read-backs compared with the model's state
        self.checks_skipped = 0  # read-backs skipped: neither side had moved since the last (``change_mark``)
        self.failure: Optional[dict] = None  # the last failing example's steps and divergence
        self.last_steps: list = []
        self.trace_path: Optional[Path] = None  # the failing example's JSON lines, once written
        self.itf_path: Optional[Path] = None  # and its ITF trace
        self._driver: Optional[Driver] = None
        self.started = time.perf_counter()
        self.first_failure: Optional[tuple[int, float, int]] = None  # (examples, seconds, steps) when first seen
        #: An external implementation's tables, read with the ``state`` op (``external.StateProbe``).
        self.state_probe = StateProbe()
        self.external = False  # a driver of this run reads its tables over the protocol
        #: docs/protocol.md section 6 requests the implementation offers (an external one is asked once).
        self.offers: dict[str, bool] = {name: True for name in GENERATED_EXTENSIONS}
        self._probed = False
        #: told how far the run has got (``checker.progress``): after each step and example, each replay of a
        #: divergence's minimization; ``budget`` the examples Hypothesis generates (its shrinking runs more)
        self.progress = progress
        self.budget = budget

    def report_progress(self) -> None:
        """Tell ``progress`` the examples and steps so far (after each step and each example: an example through
        an adapter may take seconds)."""
        if self.progress is None:
            return
        if self.first_failure is None:
            self.progress(Tick(self.examples, self.budget, "examples", self.steps, "steps"))
        else:  # Hypothesis shrinks: its examples go past the budget
            self.progress(Tick(self.examples, None, "examples", self.steps, "steps",
                               note=f"shrinking the divergence first seen at example {self.first_failure[0]:,}"))

    def probe(self, impl: Driver) -> Optional[StateProbe]:
        """The run's ``StateProbe`` when ``impl`` is read over the protocol (an external adapter), else None."""
        if not self.state_check or not getattr(impl, "state_by_request", False):
            return None
        self.external = True
        return self.state_probe

    def tables(self) -> str:
        """How this run held the implementation's tables, for the report."""
        if not self.state_check:
            return "tables: not compared (state check off): responses only"
        if self.external:
            return self.state_probe.describe()
        return "tables: read back in process from the implementation's replica after each step"

    def driver(self) -> Driver:
        """The implementation's driver, built when there is none (the first example, or after ``discard``).
        An external adapter that cannot be started, or breaks on the extension probe, is ``AdapterFailure``:
        the run stops."""
        if self._driver is None:
            try:
                driver = self.impl_factory()
            except AdapterError as error:
                raise AdapterFailure(f"the start of an adapter process for example {self.examples + 1}", str(error),
                                     error.request) from None
            if getattr(driver, "state_by_request", False):
                self.external = self.state_check
                if not self._probed:  # out of band, before its first example (which starts with a reset)
                    try:
                        self.offers = probe_extensions(driver)
                        self._probed = True
                    except ProtocolBreak:  # an answer the generated steps will hold to its definition
                        pass
                    except AdapterError as error:
                        with contextlib.suppress(Exception):
                            getattr(driver, "close")()  # a SubprocessDriver (``state_by_request``) closes
                        raise AdapterFailure("the extension probe (`reset`, `ready`, `diagnostics`, a `page` with "
                                             "`crashAfterCommit`) before the first example", str(error),
                                             error.request) from None
                    except Exception:  # the probe's own trouble: the extensions are generated, and held as asked
                        pass
            self._driver = driver
        return self._driver

    def offered(self, name: str) -> bool:
        """Whether the implementation offers the extension ``name`` (``ready``, ``diagnostics``, ``crashAfterCommit``)."""
        return self.offers.get(name, True)

    def extensions(self) -> str:
        """Which extensions the run generated, for the report."""
        missing = [name for name, yes in self.offers.items() if not yes]
        if not missing:
            return ""
        return (f"extensions: the adapter does not offer {', '.join(missing)} (docs/protocol.md section 6); "
                f"not generated, so not held")

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
