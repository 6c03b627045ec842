"""The conformance gate inside a project's own pytest run: ``pytest --envreplica-adapter "CMD"``.

Registered through the ``pytest11`` entry point ``envreplica`` (installing
envreplica is enough; with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set, load it
with ``-p envreplica``; ``-p no:envreplica`` turns it off). Without
``--envreplica-adapter`` it adds nothing: no test items, nothing run.

With it, the session gets one test item per ``--envreplica-variant`` (default
``fixed``), ``envreplica::conformance[VARIANT]``, beside the project's own
tests. The item runs the lockstep of ``envreplica.conformance.lockstep``
(what ``envreplica conformance --adapter CMD`` runs) against
``SubprocessDriver(CMD)``: it passes when the implementation agrees with the
model; it fails with the shrunk divergence as readable steps and the paths of
its JSON-lines and ITF traces (no Python traceback: ``repr_failure``). An
adapter that breaks (it dies, stalls past the timeout, writes a line that is
not a JSON object, answers another id) fails it at once with one paragraph
naming the step that broke ("ADAPTER FAILED"): nothing after it is judged or
shrunk.

The items are added by ``pytest_collection_modifyitems`` (``tryfirst``, so
``-k`` / ``-m`` / ``--deselect`` still apply to them) under a ``Collector``
named ``envreplica`` whose parent is the session; no file is collected and
nothing is read from the project's tree. ``pytest --junitxml`` reports them
like any test, with the run's examples, steps and seconds as properties.

Options (``pytest --help``, group "envreplica conformance gate"):

* ``--envreplica-adapter CMD``: the adapter command (docs/protocol.md section 5);
* ``--envreplica-variant NAME``: the model variant (repeatable; default ``fixed``);
* ``--envreplica-profile dev|ci|nightly``: the example budget (default ``ci``);
* ``--envreplica-max-examples N``, ``--envreplica-steps N``: override the profile's;
* ``--envreplica-timeout SECONDS``: per response (default 30);
* ``--envreplica-out DIR``: where a divergence's traces go (default: a
  directory ``envreplica`` under pytest's basetemp);
* ``--envreplica-report FILE``: the HTML report of the run (the page of
  ``envreplica conformance --report``; with several variants one page each,
  ``FILE-VARIANT.html``), written by ``envreplica.report`` when that module is
  installed (else the item's output and the terminal summary say it was not).

Fixtures: ``envreplica_adapter`` is the command (the test is skipped when no
``--envreplica-adapter`` was given); ``envreplica_driver`` a started
``SubprocessDriver`` for it, closed after the test, for a project's own checks.

This module imports only pytest at import time: it is loaded by every pytest
run of an environment where envreplica is installed.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

import pytest

__all__ = ["ConformanceItem", "EnvreplicaCollector", "ConformanceFailed"]

PROFILES = ("dev", "ci", "nightly")
VARIANTS = ("fixed", "seed", "fix-f1")  # model.state.Variant's values (not imported here: see above)

_NOTES = pytest.StashKey[list]()  # lines for the terminal summary


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("envreplica", "envreplica conformance gate")
    group.addoption("--envreplica-adapter", metavar="CMD", default=None,
                    help="hold this adapter command (docs/protocol.md section 5) against the envreplica model: "
                         "adds the test items envreplica::conformance[VARIANT]")
    group.addoption("--envreplica-variant", action="append", default=None, choices=VARIANTS, metavar="NAME",
                    help=f"model variant to hold the adapter against, repeatable (one item each): "
                         f"{', '.join(VARIANTS)} (default: fixed)")
    group.addoption("--envreplica-profile", default="ci", choices=PROFILES,
                    help="example budget of the lockstep: dev, ci or nightly (default: ci)")
    group.addoption("--envreplica-max-examples", type=int, default=None, metavar="N",
                    help="override the profile's example count")
    group.addoption("--envreplica-steps", type=int, default=None, metavar="N",
                    help="steps per generated trace (default: the profile's)")
    group.addoption("--envreplica-timeout", type=float, default=30.0, metavar="SECONDS",
                    help="seconds to wait for each adapter response (default: 30)")
    group.addoption("--envreplica-out", metavar="DIR", default=None,
                    help="where a divergence's JSON-lines and ITF traces go (default: envreplica/ under "
                         "pytest's basetemp)")
    group.addoption("--envreplica-report", metavar="FILE", default=None,
                    help="write an HTML report of the conformance runs (needs envreplica.report)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "envreplica: a conformance run of the envreplica gate (--envreplica-adapter)")
    config.stash[_NOTES] = []


def _adapter(config: pytest.Config) -> Optional[str]:
    command = config.getoption("envreplica_adapter", default=None)
    return command if command else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Append the conformance items (before the deselection plugins see the list)."""
    command = _adapter(config)
    if command is None:
        return
    collector = EnvreplicaCollector.from_parent(session, name="envreplica", nodeid="envreplica")
    # Collected through the hooks, as a file's items are: the terminal counts them ("N items collected").
    report = collector.ihook.pytest_make_collect_report(collector=collector)
    config.hook.pytest_collectreport(report=report)
    if report.passed:
        items.extend(report.result)


class EnvreplicaCollector(pytest.Collector):
    """The parent of the conformance items: not a file, nothing to read."""

    def collect(self) -> list:
        variants = self.config.getoption("envreplica_variant") or ["fixed"]
        seen: list[str] = []
        for v in variants:
            if v not in seen:
                seen.append(v)
        return [ConformanceItem.from_parent(self, name=f"conformance[{v}]", variant=v) for v in seen]

    def reportinfo(self):
        return self.path, None, "envreplica"


class ConformanceFailed(Exception):
    """The implementation parted from the model (or the adapter could not be run); ``text`` is readable."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ConformanceItem(pytest.Item):
    """One lockstep run of the adapter against the model under one variant."""

    def __init__(self, *, variant: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant = variant
        self.add_marker("envreplica")

    # -- running ------------------------------------------------------------------

    def _out_dir(self) -> Path:
        given = self.config.getoption("envreplica_out")
        if given:
            return Path(given)
        factory = getattr(self.config, "_tmp_path_factory", None)  # pytest's tmp_path plugin
        if factory is not None:
            return factory.getbasetemp() / "envreplica"
        return Path("out") / "envreplica"

    def runtest(self) -> None:
        from envreplica.conformance.external import SubprocessDriver
        from envreplica.conformance.lockstep import lockstep_settings, run_lockstep
        from envreplica.spec.variants import Variant

        config = self.config
        command = _adapter(config)
        assert command is not None, "items are collected only when --envreplica-adapter names a command"
        profile = config.getoption("envreplica_profile")
        timeout = config.getoption("envreplica_timeout")
        settings = lockstep_settings(profile, max_examples=config.getoption("envreplica_max_examples"),
                                     step_count=config.getoption("envreplica_steps"))
        out_dir = self._out_dir()
        print(f"envreplica lockstep: {command!r} against the model (variant {self.variant}, profile {profile}, "
              f"{settings.max_examples} examples of up to {settings.stateful_step_count} steps)")
        report = run_lockstep(lambda: SubprocessDriver(command, timeout=timeout), variant=Variant(self.variant),
                              settings=settings, out_dir=out_dir)
        for key, value in (("examples", report.examples), ("steps", report.steps),
                           ("seconds", round(report.seconds, 3))):
            self.user_properties.append((f"envreplica_{key}", value))
        missing = report.coverage.unreached()
        verdict = ("no divergence" if report.ok else "ADAPTER ERROR" if _never_ran(report)
                   else "ADAPTER FAILED" if report.adapter_failure else "DIVERGENCE")
        summary = (f"{self.nodeid}: {verdict} in {report.examples:,} "
                   f"examples, {report.steps:,} steps ({report.steps_per_second:,.0f} steps/s, "
                   f"{report.seconds:.1f} s); coverage: {len(missing)} reachable items not reached")
        config.stash[_NOTES].append(summary)
        print(summary)
        for line in (report.tables, report.extensions):
            if line:
                print(f"  {line}")
        self._write_html_report(report)
        if not report.ok:
            raise ConformanceFailed(self._failure_text(report, command))

    def _failure_text(self, report, command: str) -> str:
        if _never_ran(report):
            return (f"the adapter could not be run (variant {report.variant}), so nothing was compared: "
                    f"{report.divergence}\n  command: {command}")
        if report.adapter_failure:  # it broke mid-run: not a verdict, nothing after it judged or shrunk
            return (f"the adapter broke (variant {report.variant}), so nothing after it was judged: "
                    f"{report.adapter_failure}\n  command: {command}")
        lines = [f"the implementation parts from the envreplica model (variant {report.variant}): "
                 f"{report.divergence}"]
        if report.found_after_examples is not None:
            lines.append(f"first seen after {report.found_after_examples} examples "
                         f"({report.found_after_seconds or 0:.1f} s, {report.found_steps} steps), shrunk to "
                         f"{report.shrunk_steps} steps")
        for line in (report.tables, report.extensions):
            if line:
                lines.append(line)
        lines += ["", (report.failure or "").rstrip()]
        if report.trace_path is not None:
            lines += ["", f"requests (JSON lines): {report.trace_path}",
                      f"  replay: envreplica replay {shlex.quote(str(report.trace_path))} "
                      f"--variant {report.variant} --adapter {shlex.quote(command)}"]
        if report.itf_path is not None:
            lines.append(f"ITF trace: {report.itf_path}")
        return "\n".join(lines)

    def _write_html_report(self, report) -> None:
        target = self.config.getoption("envreplica_report")
        if not target:
            return
        path = Path(target)
        variants = self.config.getoption("envreplica_variant") or ["fixed"]
        if len(set(variants)) > 1:  # one page per run: FILE-VARIANT.html
            path = path.with_name(f"{path.stem}-{self.variant}{path.suffix}")
        note = write_html_report(path, report, _adapter(self.config) or "", self.variant,
                                 self.config.getoption("envreplica_timeout"))
        print(note)
        self.config.stash[_NOTES].append(note)

    # -- reporting ----------------------------------------------------------------

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailed):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"envreplica::{self.name}"


def _never_ran(report) -> bool:
    """The adapter failed before answering anything (it could not start, or died at once)."""
    return not report.ok and report.steps == 0 and (bool(getattr(report, "adapter_failure", None))
                                                    or (report.divergence or "").startswith("AdapterError"))


def write_html_report(path: Path, report, command: str, variant: str, timeout: float) -> str:
    """The HTML page of one lockstep run (``report``, a ``LockstepReport``) at ``path``; one line saying what
    happened.

    Written by ``envreplica.report`` (``report.run.write_conformance_report``, the
    page of ``envreplica conformance --report``) when it is installed; its
    absence, or an error writing the page, is said in the line: the
    conformance verdict does not depend on the report.
    """
    from types import SimpleNamespace

    from envreplica.conformance.junit import case_from_report

    try:
        from envreplica.report import run as html_report
    except ImportError as error:
        return (f"envreplica: --envreplica-report {path} not written: the report generator "
                f"(envreplica.report) is not available in this installation ({error})")
    writer = getattr(html_report, "write_conformance_report", None)
    if writer is None:
        return f"envreplica: --envreplica-report {path} not written: envreplica.report has no conformance report"
    args = SimpleNamespace(report=str(path), adapter=command, variant=variant, timeout=timeout)
    try:
        written = writer(args, report, [case_from_report(f"lockstep[{variant}]", report)])
    except Exception as error:  # the report is a by-product: say what went wrong, keep the verdict
        return f"envreplica: --envreplica-report {path} not written: {type(error).__name__}: {error}"
    return f"envreplica: HTML report written to {written or path}"


def pytest_report_header(config: pytest.Config) -> Optional[str]:
    command = _adapter(config)
    if command is None:
        return None
    variants = ", ".join(config.getoption("envreplica_variant") or ["fixed"])
    return f"envreplica: adapter {command!r}, variant {variants}, profile {config.getoption('envreplica_profile')}"


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    notes = config.stash.get(_NOTES, [])
    if notes:
        terminalreporter.section("envreplica conformance")
        for line in notes:
            terminalreporter.write_line(line)


# -- fixtures for a project's own checks -------------------------------------------------


@pytest.fixture
def envreplica_adapter(request: pytest.FixtureRequest) -> str:
    """The ``--envreplica-adapter`` command; the test is skipped when none was given."""
    command = _adapter(request.config)
    if command is None:
        pytest.skip("no --envreplica-adapter given")
    return command


@pytest.fixture
def envreplica_driver(envreplica_adapter: str, request: pytest.FixtureRequest):
    """A ``SubprocessDriver`` running the adapter (``handle(request) -> response``), closed after the test."""
    from envreplica.conformance.external import SubprocessDriver

    driver = SubprocessDriver(envreplica_adapter, timeout=request.config.getoption("envreplica_timeout"))
    try:
        yield driver
    finally:
        driver.close()
