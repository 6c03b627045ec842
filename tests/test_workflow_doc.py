"""The documented GitHub Actions workflow (docs/github-actions/envreplica-gate.yml), tried by running its steps.

The workflow is parsed as YAML and its ``run:`` steps are run here, in
order, in a scratch directory standing for the implementation's checkout,
the way the runner would: ``bash --noprofile --norc -eo pipefail`` (what
``shell: bash`` means on GitHub), with the workflow's ``env:`` plus what the
runner sets (``CI``, ``GITHUB_WORKSPACE``, ``GITHUB_STEP_SUMMARY``). Left out:
steps that ``uses:`` an action (checkout, setup-python, upload-artifact) and
the install step (envreplica is installed here); the example count is cut
with the workflow's own ``ENVREPLICA_MAX_EXAMPLES``. Then every path the upload
step names must exist: the JUnit XML parses, the log says PASS, the traces
directory exists (empty when the implementation agrees), the HTML report
when ``envreplica conformance`` has ``--report``. A second run with an adapter
that flips the ``ok`` of commit results fails with exit 1, traces written and
a JUnit failure. The workflow's second job, ``typescript``, runs the same way
with the seed's own file through envreplica's TypeScript kit (this checkout
standing for its ``.envreplica``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from adapter_requests import BROKEN_ADAPTER

yaml = pytest.importorskip("yaml")  # PyYAML: in the test extra

WORKFLOW = Path(__file__).resolve().parents[1] / "docs" / "github-actions" / "envreplica-gate.yml"
BIN = Path(sys.executable).parent
SMALL = "20"  # examples per run here (the workflow's default is the ci profile's 800)



def _workflow() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict)
    return doc


def _job(doc: dict, name: str = "conformance") -> dict:
    assert set(doc["jobs"]) == {"conformance", "typescript"}
    return doc["jobs"][name]


def _has_report_flag() -> bool:
    out = subprocess.run([str(BIN / "envreplica"), "conformance", "--help"], capture_output=True, text=True)
    return "--report" in out.stdout


class Runner:
    """Runs a workflow's ``run:`` steps locally in ``workspace``."""

    def __init__(self, doc: dict, workspace: Path, overrides: dict[str, str], job: str = "conformance"):
        self.doc, self.job = doc, _job(doc, job)
        self.workspace = workspace
        self.summary = workspace.parent / f"{workspace.name}-summary.md"
        self.env = dict(os.environ)
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"  # `envreplica` as after pip install
        self.env.update({k: str(v) for k, v in (doc.get("env") or {}).items()})
        self.env.update({k: str(v) for k, v in (self.job.get("env") or {}).items()})
        self.env.update(CI="true", GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(workspace),
                        GITHUB_STEP_SUMMARY=str(self.summary))
        self.env.update(overrides)
        self.env.pop("PYTEST_ADDOPTS", None)
        self.report = _has_report_flag()
        self.notes: list[str] = []

    def shell(self, step: dict) -> list[str]:
        shell = step.get("shell") or ((self.job.get("defaults") or self.doc.get("defaults") or {})
                                      .get("run", {}).get("shell"))
        assert shell == "bash", f"a run step with shell {shell!r}: only bash is tried here"
        return ["bash", "--noprofile", "--norc", "-eo", "pipefail"]

    def run_step(self, step: dict) -> subprocess.CompletedProcess:
        script = step["run"]
        assert "${{" not in script, f"step {step.get('name')!r} has an expression this runner cannot evaluate"
        if not self.report and "--report" in script:
            script = script.replace(" --report out/report.html", "")
            self.notes.append("envreplica conformance has no --report yet: the step ran without it")
        path = self.workspace.parent / f"{self.workspace.name}-{step.get('id', 'step')}.sh"
        path.write_text(script)
        env = dict(self.env, **{k: str(v) for k, v in (step.get("env") or {}).items()})
        return subprocess.run([*self.shell(step), str(path)], cwd=self.workspace, env=env, capture_output=True,
                              text=True, timeout=120)

    def run_all(self) -> dict[str, subprocess.CompletedProcess]:
        done = {}
        for step in self.job["steps"]:
            if "uses" in step or step.get("id") == "install":
                continue
            result = self.run_step(step)
            done[step.get("id") or step["name"]] = result
            if result.returncode != 0:
                break
        return done


def _upload_paths(doc: dict, job: str = "conformance") -> list[str]:
    (upload,) = [s for s in _job(doc, job)["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload.get("if") == "always()", "artifacts must be uploaded when the gate fails too"
    return [line.strip() for line in upload["with"]["path"].splitlines() if line.strip()]


def test_workflow_shape():
    doc = _workflow()
    job = _job(doc)
    uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
    assert uses == ["actions/checkout", "actions/setup-python", "actions/upload-artifact"]
    install = [s for s in job["steps"] if s.get("id") == "install"]
    assert len(install) == 1 and "pip install" in install[0]["run"]
    assert doc["env"]["ENVREPLICA_PIP_SPEC"].startswith("envreplica @ git+https://github.com/")
    assert "--junit out/junit.xml" in job["steps"][[s.get("id") for s in job["steps"]].index("gate")]["run"]
    assert set(_upload_paths(doc)) >= {"out/junit.xml", "out/conformance/", "out/report.html"}


def test_workflow_steps_run_locally(tmp_path):
    doc = _workflow()
    assert doc["env"]["ADAPTER_CMD"] == "envreplica adapter --impl sqlite --test-key"  # envreplica's own
    workspace = tmp_path / "impl"
    workspace.mkdir()
    runner = Runner(doc, workspace, {"ENVREPLICA_MAX_EXAMPLES": SMALL})
    done = runner.run_all()
    gate = done["gate"]
    assert list(done) == ["build", "gate"]
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-2000:]
    for note in runner.notes:
        print(f"note: {note}")
    log = (workspace / "out" / "conformance.log").read_text()
    assert f"{SMALL} examples of up to" in log and "PASS: the implementation agrees with the model" in log
    for path in _upload_paths(doc):
        target = workspace / path
        if path == "out/report.html" and not runner.report:
            print("note: out/report.html not checked: envreplica conformance has no --report yet")
            continue
        assert target.exists(), f"the upload step names {path}, which the gate did not write"
    root = ET.parse(workspace / "out" / "junit.xml").getroot()
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert [c.get("name") for c in root.iter("testcase")] == ["lockstep[fixed]"]
    assert not any((workspace / "out" / "conformance").iterdir())  # no divergence, no traces
    if runner.report:
        assert (workspace / "out" / "report.html").stat().st_size > 0
    summary = runner.summary.read_text()
    assert "**PASS: the implementation agrees with the model** (exit 0)" in summary


def test_workflow_gate_step_fails_on_a_divergence(tmp_path):
    doc = _workflow()
    workspace = tmp_path / "impl"
    workspace.mkdir()
    (workspace / "broken_adapter.py").write_text(BROKEN_ADAPTER)
    command = f"{shlex.quote(sys.executable)} broken_adapter.py --impl sqlite --test-key"
    runner = Runner(doc, workspace, {"ENVREPLICA_MAX_EXAMPLES": SMALL, "ADAPTER_CMD": command})
    (gate,) = [s for s in _job(doc)["steps"] if s.get("id") == "gate"]
    result = runner.run_step(gate)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert "DIVERGENCE at step" in result.stdout
    traces = workspace / "out" / "conformance"
    assert (traces / "lockstep-fixed.jsonl").exists() and (traces / "lockstep-fixed.itf.json").exists()
    root = ET.parse(workspace / "out" / "junit.xml").getroot()
    assert root.get("failures") == "1"
    assert "**FAIL: the implementation parts from the model" in runner.summary.read_text()
    if runner.report:
        assert (workspace / "out" / "report.html").exists()


def test_typescript_job_shape():
    doc = _workflow()
    job = _job(doc, "typescript")
    uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
    assert uses == ["actions/checkout", "actions/checkout", "actions/setup-python", "actions/setup-node",
                    "actions/upload-artifact"]
    (envreplica,) = [s for s in job["steps"] if s.get("with", {}).get("path") == ".envreplica"]
    assert envreplica["uses"].startswith("actions/checkout@")
    setup_node = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/setup-node@")][0]
    assert setup_node["with"]["node-version"] == "20"
    (install,) = [s for s in job["steps"] if s.get("id") == "install"]
    assert "pip install ./.envreplica" in install["run"] and "npm ci" in install["run"]
    assert set(_upload_paths(doc, "typescript")) >= {"out/junit.xml", "out/conformance/", "out/report.html"}


def test_typescript_job_runs_locally_on_the_seed(tmp_path):
    from typescript_kit import ROOT, require_kit, seed_source

    require_kit()
    doc = _workflow()
    workspace = tmp_path / "host"
    (workspace / "lib").mkdir(parents=True)
    (workspace / "lib" / "project-env-replica.ts").write_text(seed_source().read_text(encoding="utf-8"))
    (workspace / ".envreplica").symlink_to(ROOT)  # what the job checks out, with the kit's packages installed
    runner = Runner(doc, workspace, {"ENVREPLICA_MAX_EXAMPLES": SMALL, "ENVREPLICA_VARIANT": "seed"}, job="typescript")
    done = runner.run_all()
    assert list(done) == ["gate"]
    gate = done["gate"]
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-2000:]
    log = (workspace / "out" / "conformance.log").read_text()
    assert "envreplica-ts-adapter.js --source lib/project-env-replica.ts" in log
    assert "PASS: the implementation agrees with the model (variant seed)" in log
    assert "tables: compared table by table" in log
    for path in _upload_paths(doc, "typescript"):
        assert (workspace / path).exists(), path
