"""The conformance gate inside a project's own pytest run: ``pytest --envreplica-adapter "CMD"``.

Registered through the ``pytest11`` entry point ``envreplica`` (installing
envreplica is enough; with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set, load it
with ``-p envreplica``; ``-p no:envreplica`` turns it off). Without
``--envreplica-adapter`` it adds nothing: no test items, nothing run.

With it, the session gets one test item per ``--envreplica-variant`` (default
``fixed``), ``envreplica::conformance[VARIANT]``, beside the project's own
tests. The item runs the lockstep of the protocol the adapter speaks
(``--envreplica-protocol``: the replica's, ``envreplica.conformance.replica``
against ``SubprocessDriver(CMD)``, what ``envreplica conformance --adapter CMD``
runs; or the paired writer migration's, ``envreplica.conformance.migration``
through ``AdapterShared(CMD)``, what ``conformance --protocol migration`` runs):
it passes when the implementation agrees with the model; it fails with the
shrunk divergence as readable steps, the finding it is when one explains it,
and the paths of its JSON-lines and ITF traces (no Python traceback:
``repr_failure``).

With ``--envreplica-replay FILE`` (a saved ITF trace, or a directory of them;
repeatable), each trace is one more item, ``envreplica::replay[NAME]``: its
actions, read from ``mbt::actionTaken`` and ``mbt::nondetPicks``
(``envreplica.conformance.replay``), go through the adapter beside the model,
as a quint-connect driver replays a Quint trace; it passes when they agree at
every step (the variant: ``--envreplica-variant`` when given, one item each,
else the trace's own). An
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

* ``--envreplica-adapter CMD``: the adapter command (docs/protocol.md section 5, or 11);
* ``--envreplica-protocol replica|migration|lock``: which protocol it speaks (default ``replica``);
* ``--envreplica-variant NAME``: the model variant (repeatable; default ``fixed``; the migration's: ``seed``
  or ``fixed``);
* ``--envreplica-replay FILE``: replay a saved ITF trace (or each in a directory) through the adapter;
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

__all__ = ["ConformanceItem", "EnvreplicaCollector", "ConformanceFailed", "ReplayItem"]

PROFILES = ("dev", "ci", "nightly")
VARIANTS = ("fixed", "seed", "fix-f1")  # model.state.Variant's values (not imported here: see above)
PROTOCOLS = ("replica", "migration", "lock")
MIGRATION_VARIANTS = ("fixed", "seed")  # model.migration.MigrationVariant's values (and model.lock.Variant's)
#: The lock lockstep's examples per profile (``envreplica conformance --protocol lock``'s budgets).
LOCK_EXAMPLES = {"dev": 20, "ci": 100, "nightly": 1000}

_NOTES = pytest.StashKey[list]()  # lines for the terminal summary


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("envreplica", "envreplica conformance gate")
    group.addoption("--envreplica-adapter", metavar="CMD", default=None,
                    help="hold this adapter command (docs/protocol.md section 5) against the envreplica model: "
                         "adds the test items envreplica::conformance[VARIANT]")
    group.addoption("--envreplica-protocol", default="replica", choices=PROTOCOLS,
                    help="which protocol the adapter speaks: the replica's (docs/protocol.md section 5; default), "
                         "the paired writer migration's (section 11) or the projection lock's (section 12)")
    group.addoption("--envreplica-variant", action="append", default=None, choices=VARIANTS, metavar="NAME",
                    help=f"model variant to hold the adapter against, repeatable (one item each): "
                         f"{', '.join(VARIANTS)} (default: fixed; the migration's: seed or fixed)")
    group.addoption("--envreplica-replay", action="append", default=None, metavar="FILE",
                    help="replay a saved ITF trace (envreplica check / conformance --out), or each *.itf.json of a "
                         "directory, through the adapter beside the model: one item envreplica::replay[NAME] each "
                         "(repeatable)")
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
    protocol = config.getoption("envreplica_protocol", default="replica")
    variants = config.getoption("envreplica_variant", default=None) or []
    if protocol in ("migration", "lock") and any(v not in MIGRATION_VARIANTS for v in variants):
        raise pytest.UsageError(f"--envreplica-protocol {protocol} takes --envreplica-variant seed or fixed, not "
                                f"{', '.join(v for v in variants if v not in MIGRATION_VARIANTS)} (the replica's)")
    replays = config.getoption("envreplica_replay", default=None) or []
    if replays and _adapter(config) is None:
        raise pytest.UsageError("--envreplica-replay replays a trace through an adapter: give --envreplica-adapter "
                                "CMD too")
    for given in replays:
        if not Path(given).exists():
            raise pytest.UsageError(f"--envreplica-replay {given}: no such file or directory; give an .itf.json trace "
                                    f"(envreplica check / conformance --out writes them) or a directory of them")


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
        given = self.config.getoption("envreplica_variant")
        seen: list[str] = []
        for v in given or ["fixed"]:
            if v not in seen:
                seen.append(v)
        items: list = [ConformanceItem.from_parent(self, name=f"conformance[{v}]", variant=v) for v in seen]
        for trace in _replay_files(self.config):
            for v in (seen if given else [None]):
                name = f"replay[{trace.name}{'-' + v if v and len(seen) > 1 else ''}]"
                items.append(ReplayItem.from_parent(self, name=name, trace=trace, variant=v))
        return items

    def reportinfo(self):
        return self.path, None, "envreplica"


def _replay_files(config: pytest.Config) -> list[Path]:
    """The traces ``--envreplica-replay`` names: each file, and each ``*.itf.json`` of each directory."""
    out: list[Path] = []
    for given in config.getoption("envreplica_replay") or []:
        path = Path(given)
        for trace in (sorted(path.glob("*.itf.json")) if path.is_dir() else [path]):
            if trace not in out:
                out.append(trace)
    return out


class ConformanceFailed(Exception):
    """The implementation parted from the model (or the adapter could not be run); ``text`` is readable."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Reported(pytest.Item):
    """How an envreplica item reports itself: a ``ConformanceFailed`` as its own text (no traceback), its place as
    ``envreplica::NAME``."""

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailed):
            return excinfo.value.text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"envreplica::{self.name}"


class ConformanceItem(_Reported):
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
        from envreplica.conformance.replica import lockstep_settings, run_lockstep
        from envreplica.spec.variants import Variant

        config = self.config
        command = _adapter(config)
        assert command is not None, "items are collected only when --envreplica-adapter names a command"
        if config.getoption("envreplica_protocol") == "migration":
            return self._run_migration(command)
        if config.getoption("envreplica_protocol") == "lock":
            return self._run_lock(command)
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

    def _run_lock(self, command: str) -> None:
        """The lock lockstep through the adapter (``envreplica conformance --protocol lock``, docs/protocol.md
        section 12)."""
        from envreplica.conformance.lock.adapter_side import AdapterBroken, AdapterShared
        from envreplica.conformance.lock.run import run_lock_lockstep
        from envreplica.conformance.lock.findings import finding_of
        from envreplica.conformance.lock.traces import write_trace
        from envreplica.model import lock as ml

        config = self.config
        profile = config.getoption("envreplica_profile")
        examples = config.getoption("envreplica_max_examples") or LOCK_EXAMPLES[profile]
        variant = ml.Variant(self.variant)
        print(f"envreplica lock lockstep: {command!r} against the lock model (variant {self.variant}, profile "
              f"{profile}, {examples} examples)")
        try:
            shared = AdapterShared(command, variant, timeout=max(config.getoption("envreplica_timeout"), 30.0))
        except AdapterBroken as error:
            config.stash[_NOTES].append(f"{self.nodeid}: ADAPTER ERROR: {error}")
            raise ConformanceFailed(f"the adapter could not be run (protocol lock, variant {self.variant}), so "
                                    f"nothing was compared: {error}\n  command: {command}") from None
        try:
            steps = config.getoption("envreplica_steps")
            report = run_lock_lockstep(examples, bounds=shared.bounds, side=shared.side,
                                       properties=shared.properties, **({"steps": steps} if steps else {}))
        finally:
            shared.close()
        for key, value in (("examples", report.examples), ("moves", report.moves),
                           ("seconds", round(report.seconds, 3))):
            self.user_properties.append((f"envreplica_{key}", value))
        verdict = ("no divergence" if report.passed and not report.adapter_failure
                   else "ADAPTER FAILED" if report.adapter_failure else "DIVERGENCE")
        summary = (f"{self.nodeid}: {verdict} in {report.examples:,} examples, {report.moves:,} moves "
                   f"({report.seconds:.1f} s)")
        config.stash[_NOTES].append(summary)
        print(summary)
        if report.adapter_failure:
            raise ConformanceFailed(f"the adapter failed during the run (protocol lock, variant {self.variant}), so "
                                    f"nothing after it was judged: {report.adapter_failure}\n  command: {command}")
        if report.divergence is not None:
            d = report.divergence
            finding = finding_of(d, variant)
            meta = {"variant": self.variant, "key": d.key, "adapter": command, "moves": len(d.moves)}
            if finding:
                meta["finding"] = finding.split(":")[0]
            trace, itf = write_trace(self._out_dir(), f"lock-{self.variant}-{d.cfg.name if d.cfg else 'lockstep'}-"
                                     f"{d.key}", d, meta)
            lines = [f"the implementation parts from the envreplica lock model (variant {self.variant})"
                     + (f": finding {finding}" if finding else ""), "", *report.trace(d.cfg), "",
                     f"trace (JSON lines): {trace}", f"ITF trace: {itf} (envreplica report {itf})"]
            raise ConformanceFailed("\n".join(lines))

    def _run_migration(self, command: str) -> None:
        """The migration lockstep through the adapter (``envreplica conformance --protocol migration``)."""
        from envreplica.conformance.migration.adapter_side import AdapterBroken, AdapterShared
        from envreplica.conformance.migration.run import run_migration_lockstep
        from envreplica.model.migration import MigrationVariant

        config = self.config
        profile = config.getoption("envreplica_profile")
        print(f"envreplica migration lockstep: {command!r} against the migration model (variant {self.variant}, "
              f"profile {profile})")
        try:
            shared = AdapterShared(command, MigrationVariant(self.variant),
                                   timeout=max(config.getoption("envreplica_timeout"), 30.0))
        except AdapterBroken as error:
            config.stash[_NOTES].append(f"{self.nodeid}: ADAPTER ERROR: {error}")
            raise ConformanceFailed(f"the adapter could not be run (protocol migration, variant {self.variant}), so "
                                    f"nothing was compared: {error}\n  command: {command}") from None
        try:
            report = run_migration_lockstep(profile, max_examples=config.getoption("envreplica_max_examples"),
                                            step_count=config.getoption("envreplica_steps"),
                                            out_dir=self._out_dir(), shared=shared)
        finally:
            shared.close()
        for key, value in (("examples", report.examples), ("moves", report.moves),
                           ("seconds", round(report.seconds, 3))):
            self.user_properties.append((f"envreplica_{key}", value))
        harness = report.key == "harness"
        reached, total = report.coverage.reached(shared.required)
        verdict = "no divergence" if report.ok else "ADAPTER ERROR" if harness else "DIVERGENCE"
        summary = (f"{self.nodeid}: {verdict} in {report.examples:,} examples, {report.moves:,} moves "
                   f"({report.moves_per_second:,.1f} moves/s, {report.seconds:.1f} s); coverage {reached}/{total} "
                   f"required items")
        config.stash[_NOTES].append(summary)
        print(summary)
        target = config.getoption("envreplica_report")
        if target:
            note = write_migration_html_report(Path(target), report, shared, self.variant, command)
            print(note)
            config.stash[_NOTES].append(note)
        if harness:
            raise ConformanceFailed(f"the adapter failed during the run (protocol migration, variant "
                                    f"{self.variant}), so nothing after it was judged: {report.divergence}\n"
                                    f"  command: {command}")
        if not report.ok:
            lines = [f"the implementation parts from the envreplica migration model (variant {self.variant}): "
                     f"{report.divergence}", "", (report.failure or "").rstrip()]
            if report.trace_path is not None:
                lines += ["", f"trace (JSON lines): {report.trace_path}"]
            if report.itf_path is not None:
                lines += [f"ITF trace: {report.itf_path}",
                          f"  replay: pytest --envreplica-adapter {shlex.quote(command)} --envreplica-protocol "
                          f"migration --envreplica-replay {shlex.quote(str(report.itf_path))}"]
            raise ConformanceFailed("\n".join(lines))

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


class ReplayItem(_Reported):
    """One saved trace replayed through the adapter beside the model (``envreplica.conformance.replay``)."""

    def __init__(self, *, trace: Path, variant: Optional[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trace = trace
        self.variant = variant  # None: the trace's own
        self.add_marker("envreplica")

    def runtest(self) -> None:
        from envreplica.conformance.external import AdapterError
        from envreplica.conformance.migration.adapter_side import AdapterBroken
        from envreplica.conformance.replay import TraceNotReplayable, replay

        config = self.config
        command = _adapter(config)
        assert command is not None, "items are collected only when --envreplica-adapter names a command"
        try:
            result = replay(self.trace, command, self.variant, config.getoption("envreplica_timeout"),
                            protocol=config.getoption("envreplica_protocol"))
        except TraceNotReplayable as error:
            raise ConformanceFailed(f"the trace cannot be replayed through an adapter: {error}") from None
        except (AdapterError, AdapterBroken) as error:
            raise ConformanceFailed(f"the adapter could not be run, so nothing was compared: {error}\n"
                                    f"  command: {command}") from None
        summary = (f"{self.nodeid}: {'agrees' if result.ok else 'DIVERGENCE'} replaying {result.replayed} of "
                   f"{result.actions} actions of {self.trace} ({result.protocol}, variant {result.variant})")
        config.stash[_NOTES].append(summary)
        print(summary)
        for line in result.skipped:
            print(f"  not replayed: {line}")
        if result.ok:  # a failure shows the steps in its report
            print(result.text)
        else:
            raise ConformanceFailed(f"the implementation parts from the envreplica model replaying {self.trace} "
                                    f"({result.protocol}, variant {result.variant}): {result.divergence}\n\n"
                                    f"{result.text}")


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


def write_migration_html_report(path: Path, report, shared, variant: str, command: str) -> str:
    """The HTML page of one migration lockstep run at ``path`` (``report.migration.write_migration_report``, the
    page of ``envreplica conformance --protocol migration --report``); one line saying what happened (as
    ``write_html_report``: the verdict does not depend on the page)."""
    try:
        from envreplica.model.migration import MigrationVariant
        from envreplica.report.migration import write_migration_report
    except ImportError as error:
        return (f"envreplica: --envreplica-report {path} not written: the report generator "
                f"(envreplica.report) is not available in this installation ({error})")
    try:
        written = write_migration_report(path, report, shared.decl, MigrationVariant(variant), command,
                                         shared.required)
    except Exception as error:  # the report is a by-product: say what went wrong, keep the verdict
        return f"envreplica: --envreplica-report {path} not written: {type(error).__name__}: {error}"
    return f"envreplica: HTML report written to {written}"


def pytest_report_header(config: pytest.Config) -> Optional[str]:
    command = _adapter(config)
    if command is None:
        return None
    variants = ", ".join(config.getoption("envreplica_variant") or ["fixed"])
    return (f"envreplica: adapter {command!r}, protocol {config.getoption('envreplica_protocol')}, variant "
            f"{variants}, profile {config.getoption('envreplica_profile')}")


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
