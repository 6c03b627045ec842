"""The pytest plugin (``conformance/pytest_plugin.py``): ``pytest --envreplica-adapter "CMD"`` in a project's suite.

Each test runs pytest in a subprocess (``pytester.runpytest_subprocess``) in
a scratch project holding a test of its own, so the plugin is loaded the way
a project gets it: through the ``pytest11`` entry point of the installed
package, with no ``-p``. Against the project's own adapter
(``envreplica adapter --impl sqlite --test-key``) the item
``envreplica::conformance[fixed]`` passes beside the project's test; against
a wrapper that flips the ``ok`` of commit results it fails with the shrunk
steps and the trace paths, no traceback; without the option there is no
item. Example counts are small (``--envreplica-max-examples``): these pin the
plumbing, tests/test_conformance_cli.py and tests/test_lockstep.py the gate.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from adapter_requests import BROKEN_ADAPTER

pytest_plugins = ["pytester"]

PY = shlex.quote(sys.executable)
_SCRIPT = Path(sys.executable).with_name("envreplica")
#: The project's own adapter, as a CI job would name it (the console script beside this Python).
OWN_ADAPTER = (f"{shlex.quote(str(_SCRIPT))} adapter --impl sqlite --test-key" if _SCRIPT.exists()
               else f"{PY} -m envreplica.conformance.adapter --impl sqlite --test-key")


#: The scratch project's own tests: one plain, one on the plugin's fixture.
OWN_TESTS = textwrap.dedent("""
    def test_own():
        assert 1 + 1 == 2


    def test_reset_through_the_fixture(envreplica_driver, envreplica_adapter):
        assert "adapter" in envreplica_adapter
        assert envreplica_driver.handle({"id": 1, "op": "reset"}) == {"id": 1, "ok": True, "result": {}}
""")

HAS_REPORT = importlib.util.find_spec("envreplica.report") is not None


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch) -> pytest.Pytester:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)  # the entry point must load
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    # The inner run's collection order is what these tests read: pytest-randomly (which shuffles this suite) stays
    # out of it, as in a project that does not install it.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    pytester.makepyfile(test_own=OWN_TESTS)
    return pytester


def test_without_the_option_there_is_no_item(project):
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, skipped=1)  # the fixture's test skips: no adapter given
    assert "envreplica::" not in result.stdout.str()
    assert "envreplica conformance" not in result.stdout.str()
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--help")
    result.stdout.fnmatch_lines(["*envreplica conformance gate*", "*--envreplica-adapter=CMD*",
                                 "*--envreplica-profile*", "*--envreplica-report=FILE*"])


def test_own_adapter_passes_beside_the_projects_tests(project, tmp_path):
    junit = tmp_path / "junit.xml"
    report = tmp_path / "report.html"
    result = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--envreplica-adapter", OWN_ADAPTER, "--envreplica-max-examples", "30",
        "--envreplica-out", str(tmp_path / "traces"), "--envreplica-report", str(report),
        f"--junitxml={junit}")
    out = result.stdout.str()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*envreplica: adapter * variant fixed, profile ci*",
                                 "*test_own.py::test_own PASSED*",
                                 "envreplica::conformance?fixed? PASSED*",
                                 "*= envreplica conformance =*",
                                 "envreplica::conformance?fixed?: no divergence in * examples, * steps*"])
    assert not (tmp_path / "traces").exists()  # nothing is written when they agree
    case = [c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "conformance[fixed]"]
    assert len(case) == 1 and case[0].find("failure") is None
    props = {p.get("name"): p.get("value") for p in case[0].iter("property")}
    assert int(props["envreplica_examples"]) >= 30 and int(props["envreplica_steps"]) > 0
    if HAS_REPORT:
        assert report.exists() and "conformance" in report.read_text(errors="replace")
    else:
        assert not report.exists()
        assert "not written: the report generator (envreplica.report) is not available" in out


def test_divergent_adapter_fails_with_the_shrunk_steps(project, tmp_path):
    script = tmp_path / "broken_adapter.py"
    script.write_text(BROKEN_ADAPTER)
    traces = tmp_path / "traces"
    command = f"{PY} {shlex.quote(str(script))} --impl sqlite --test-key"
    result = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "--envreplica-adapter", command, "--envreplica-max-examples", "30",
        "--envreplica-out", str(traces), "test_own.py::test_own")
    out = result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*_ envreplica::conformance?fixed? _*",
        "the implementation parts from the envreplica model (variant fixed): *response*.result.ok*",
        "lockstep divergence under variant fixed, shrunk to * steps:",
        "  #1 reset {}",
        "  DIVERGENCE at step #*",
        f"requests (JSON lines): {traces / 'lockstep-fixed.jsonl'}",
        "  replay: envreplica replay * --adapter *",
        f"ITF trace: {traces / 'lockstep-fixed.itf.json'}",
    ])
    failure = out.split("= FAILURES =")[1].split("Captured stdout")[0]
    assert "Traceback" not in failure and "runtest" not in failure and ".py:" not in failure
    assert (traces / "lockstep-fixed.jsonl").exists() and (traces / "lockstep-fixed.itf.json").exists()
    result.stdout.fnmatch_lines(["FAILED envreplica::conformance?fixed? - the implementation parts*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_an_adapter_that_breaks_mid_run_fails_naming_the_step(project):
    """An adapter that exits at its first ``delivery`` (``tests/broken_adapters.py``): the item fails at once with
    one paragraph naming the step and what broke, not as a divergence, never Hypothesis's "Flaky"."""
    proxy = Path(__file__).with_name("broken_adapters.py")
    command = shlex.join([sys.executable, str(proxy), "exit", "op:delivery", "--", sys.executable, "-m",
                          "envreplica.cli.main", "adapter", "--impl", "model"])
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--envreplica-adapter", command,
                                          "--envreplica-max-examples", "6", "test_own.py::test_own")
    out = result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "the adapter broke (variant fixed), so nothing after it was judged: the adapter broke on step #* "
        "(`delivery`) of example *, request * to the adapter process: the adapter exited with status 1*",
        "*envreplica::conformance?fixed?: ADAPTER FAILED in * examples*"])
    assert "Traceback" not in out and "Flaky" not in out and "DIVERGENCE" not in out, out


def test_items_follow_selection_and_variants(project):
    args = ("-p", "no:cacheprovider", "--collect-only", "-q", "--envreplica-adapter", OWN_ADAPTER,
            "--envreplica-variant", "fixed", "--envreplica-variant", "seed")
    result = project.runpytest_subprocess(*args)
    result.stdout.fnmatch_lines(["test_own.py::test_own", "*test_reset_through_the_fixture",
                                 "envreplica::conformance[[]fixed[]]", "envreplica::conformance[[]seed[]]"])
    result = project.runpytest_subprocess(*args, "-k", "not envreplica")
    assert "envreplica::" not in result.stdout.str()
    result = project.runpytest_subprocess(*args, "-m", "envreplica")
    result.stdout.fnmatch_lines(["envreplica::conformance[[]fixed[]]", "envreplica::conformance[[]seed[]]",
                                 "*2/4 tests collected (2 deselected)*"])
    assert "test_own.py" not in result.stdout.str()


def test_adapter_that_cannot_start_fails_in_one_paragraph(project):
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--envreplica-adapter", "/nonexistent/adapter",
                                          "--envreplica-max-examples", "3", "test_own.py::test_own")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["the adapter could not be run (variant fixed), so nothing was compared: "
                                 "*could not start the adapter '/nonexistent/adapter'*",
                                 "*envreplica::conformance?fixed?: ADAPTER ERROR in 0 examples*"])
    assert "Traceback" not in result.stdout.str()


def test_variant_choices_are_the_models():
    from envreplica.conformance.pytest_plugin import VARIANTS
    from envreplica.model.state import Variant

    assert set(VARIANTS) == {v.value for v in Variant}


# ---------------------------------------------------------------------------
# Every protocol, and saved traces replayed (--envreplica-protocol, --envreplica-replay)
# ---------------------------------------------------------------------------


def _adapter_command(*args: str) -> str:
    """One of the project's adapters, as a CI job would name it."""
    if _SCRIPT.exists():
        return " ".join([shlex.quote(str(_SCRIPT)), "adapter", *args])
    return " ".join([PY, "-m", "envreplica.cli.main", "adapter", *args])


SEED_MODEL = _adapter_command("--impl", "model", "--variant", "seed")
MIGRATION_SEED_MODEL = _adapter_command("--protocol", "migration", "--impl", "model", "--variant", "seed")
MIGRATION_FIXED_MODEL = _adapter_command("--protocol", "migration", "--impl", "model", "--variant", "fixed")


def test_a_saved_replica_trace_replays_through_the_plugin(project, tmp_path):
    """The trace of a model run (the model without F3's fix, held to ``fixed``) replays through an adapter: the
    seed's model parts where the trace does under ``fixed`` and agrees under ``seed``; the project's own adapter
    agrees under ``fixed``."""
    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.replica import lockstep_settings, run_lockstep
    from envreplica.spec.variants import Finding

    saved = tmp_path / "saved"
    made = run_lockstep(lambda: ModelDriver("fixed", left_out={Finding.F3}), variant="fixed",
                        settings=lockstep_settings("ci"), out_dir=saved)
    assert not made.ok and made.finding and made.finding.startswith("F3:")
    trace = saved / "lockstep-fixed.itf.json"
    args = ("-p", "no:cacheprovider", "--envreplica-replay", str(trace), "-m", "envreplica", "-k", "replay")
    result = project.runpytest_subprocess("--envreplica-adapter", SEED_MODEL, *args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["the implementation parts from the envreplica model replaying *lockstep-fixed.itf.json "
                                 "(replica, variant fixed): *",
                                 f"replayed * of {made.shrunk_steps} requests through the adapter*",
                                 "  DIVERGENCE at step #*"])
    assert "Traceback" not in result.stdout.str()
    result = project.runpytest_subprocess("--envreplica-adapter", SEED_MODEL, "--envreplica-variant", "seed", *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["envreplica::replay?lockstep-fixed.itf.json?: agrees replaying * actions*"])
    result = project.runpytest_subprocess("--envreplica-adapter", OWN_ADAPTER, *args)
    result.assert_outcomes(passed=1)


def test_a_saved_migration_trace_replays_through_the_plugin(project, tmp_path):
    """The migration model check's counterexample (F4, under ``seed``) replays through the migration adapter: the
    seed's model agrees under the trace's own variant and parts under ``fixed``; a replica adapter does not take
    it."""
    import contextlib
    import io

    from envreplica.cli.main import main

    saved = tmp_path / "saved"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["check", "--bounds", "migration", "--variant", "seed", "--out", str(saved),
                     "--no-trace-pages"]) == 1
    trace = saved / "migration-seed-writers-never_result_and_recovery.itf.json"
    args = ("-p", "no:cacheprovider", "--envreplica-protocol", "migration", "--envreplica-replay", str(trace), "-m",
            "envreplica", "-k", "replay")
    result = project.runpytest_subprocess("--envreplica-adapter", MIGRATION_SEED_MODEL, *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*replay?migration-seed-writers-never_result_and_recovery.itf.json?: agrees "
                                 "replaying 24 of 24 actions * (migration, variant seed)"])
    result = project.runpytest_subprocess("--envreplica-adapter", MIGRATION_SEED_MODEL, "--envreplica-variant",
                                          "fixed", *args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["the implementation parts from the envreplica model replaying * (migration, variant "
                                 "fixed): recover#1 plan: *"])
    result = project.runpytest_subprocess("--envreplica-adapter", MIGRATION_FIXED_MODEL, "--envreplica-variant",
                                          "fixed", *args)
    result.assert_outcomes(passed=1)  # the fixed steps refuse where the seed's went on: the moves after, not enabled
    result = project.runpytest_subprocess("--envreplica-adapter", OWN_ADAPTER, "-p", "no:cacheprovider",
                                          "--envreplica-replay", str(trace), "-m", "envreplica", "-k", "replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["the trace cannot be replayed through an adapter: * a trace of the migration "
                                 "protocol, but the adapter speaks the replica one*"])


def test_the_migration_protocol_runs_the_migration_lockstep(project, tmp_path):
    result = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--envreplica-adapter", MIGRATION_SEED_MODEL, "--envreplica-protocol",
        "migration", "--envreplica-variant", "seed", "--envreplica-variant", "fixed", "--envreplica-max-examples",
        "60", "--envreplica-out", str(tmp_path / "out"), "-m", "envreplica")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*envreplica: adapter * protocol migration, variant seed, fixed*",
                                 "envreplica::conformance?seed? PASSED*", "envreplica::conformance?fixed? FAILED*",
                                 "the implementation parts from the envreplica migration model (variant fixed): *",
                                 "F4: a recovery can be selected after the migration's result is published *",
                                 f"ITF trace: {tmp_path / 'out' / 'migration-lockstep.itf.json'}"])
    assert "Traceback" not in result.stdout.str()


LOCK_IMPL = _adapter_command("--protocol", "lock", "--impl", "lock")
LOCK_WITHOUT_TRUE_ANSWERS = _adapter_command("--protocol", "lock", "--impl", "model", "--variant", "fixed", "--without",
                                             "true-answers")


def test_the_lock_protocol_runs_the_lock_lockstep(project, tmp_path):
    """``--envreplica-protocol lock``: impl.lock through its adapter agrees with the lock model; the model less
    the true-answers fix is caught, named F14, its ITF trace written."""
    passed = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--envreplica-adapter", LOCK_IMPL, "--envreplica-protocol", "lock",
        "--envreplica-max-examples", "20", "--envreplica-out", str(tmp_path / "ok"), "-m", "envreplica")
    passed.assert_outcomes(passed=1)
    passed.stdout.fnmatch_lines(["envreplica::conformance?fixed? PASSED*"])
    failed = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--envreplica-adapter", LOCK_WITHOUT_TRUE_ANSWERS, "--envreplica-protocol",
        "lock", "--envreplica-max-examples", "150", "--envreplica-out", str(tmp_path / "out"), "-m", "envreplica")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["envreplica::conformance?fixed? FAILED*",
                                 "*the implementation parts from the envreplica lock model (variant fixed): finding "
                                 "F14*", f"ITF trace: {tmp_path / 'out'}*.itf.json*"])
    assert "Traceback" not in failed.stdout.str()


@pytest.mark.parametrize("args, says", [
    (("--envreplica-protocol", "migration", "--envreplica-variant", "fix-f1"), "takes --envreplica-variant seed or"),
    (("--envreplica-protocol", "lock", "--envreplica-variant", "fix-f1"), "lock takes --envreplica-variant seed or"),
    (("--envreplica-replay", "nowhere.itf.json"), "no such file or directory"),
])
def test_bad_protocol_options_are_usage_errors(project, args, says):
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--envreplica-adapter", OWN_ADAPTER, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str()
