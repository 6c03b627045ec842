"""JUnit XML for conformance runs, for CI systems that show test reports.

One ``<testsuite>`` per file; one ``<testcase>`` per run (a lockstep run under
one variant, or the replay of one saved trace). A failing case holds a
``<failure>`` whose ``message`` is the divergence in one line and whose text
is the readable shrunk trace (and where the JSON-lines / ITF files were
written). A run whose adapter broke (``adapter_failure``: no verdict) is an
``<error>``, not a ``<failure>``. Written with ``xml.etree.ElementTree``; the
coverage table goes in ``<system-out>`` of the suite.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence, Union

__all__ = ["JUnitCase", "case_from_report", "write_junit"]


@dataclass
class JUnitCase:
    """One test case of the report."""

    name: str
    classname: str = "envreplica.conformance"
    seconds: float = 0.0
    failure: Optional[str] = None  # the readable trace; None when the case passed
    message: Optional[str] = None  # the one-line reason of the failure
    output: Optional[str] = None  # anything else worth keeping (paths, counts)
    error: bool = False  # the harness could not run the case (not a divergence)


def case_from_report(name: str, report, classname: str = "envreplica.conformance.replica") -> JUnitCase:
    """A case for one ``LockstepReport``."""
    output = (f"examples={report.examples} steps={report.steps} seconds={report.seconds:.2f} "
              f"steps/s={report.steps / report.seconds if report.seconds else 0:.0f}")
    for line in (getattr(report, "tables", ""), getattr(report, "extensions", "")):
        if line:
            output += f"\n{line}"  # table by table, or why the run held responses only; extensions not offered
    failure = None
    if not report.ok:
        failure = report.failure or "divergence"
        if report.trace_path is not None:
            failure += f"\n\nrequests (JSON lines): {report.trace_path}"
        if getattr(report, "itf_path", None) is not None:
            failure += f"\nITF trace: {report.itf_path}"
    return JUnitCase(name=name, classname=classname, seconds=report.seconds, failure=failure,
                     message=getattr(report, "divergence", None) if not report.ok else None, output=output,
                     error=bool(getattr(report, "adapter_failure", None)))  # the adapter broke: not a verdict


def _clean(text: str) -> str:
    """Text XML 1.0 can hold (control characters other than tab/newline/return dropped)."""
    return "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 0x20)


def write_junit(path: Union[str, Path], cases: Sequence[JUnitCase], *, suite: str = "envreplica conformance",
                system_out: Optional[str] = None) -> Path:
    """Write ``cases`` as a JUnit XML file at ``path``; returns the path."""
    path = Path(path)
    failures = sum(1 for c in cases if c.failure is not None and not c.error)
    errors = sum(1 for c in cases if c.error)
    root = ET.Element("testsuites", {
        "name": suite, "tests": str(len(cases)), "failures": str(failures), "errors": str(errors),
        "time": f"{sum(c.seconds for c in cases):.3f}",
    })
    ts = ET.SubElement(root, "testsuite", {
        "name": suite, "tests": str(len(cases)), "failures": str(failures), "errors": str(errors),
        "skipped": "0", "time": f"{sum(c.seconds for c in cases):.3f}",
        "timestamp": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "hostname": socket.gethostname(),
    })
    for case in cases:
        tc = ET.SubElement(ts, "testcase", {"name": case.name, "classname": case.classname,
                                            "time": f"{case.seconds:.3f}"})
        if case.failure is not None:
            tag = "error" if case.error else "failure"
            lines = case.failure.strip().splitlines()
            message = case.message or (lines[-1] if lines else tag)
            el = ET.SubElement(tc, tag, {"message": _clean(message)[:500],
                                         "type": "LockstepError" if case.error else "LockstepDivergence"})
            el.text = _clean(case.failure)
        if case.output:
            ET.SubElement(tc, "system-out").text = _clean(case.output)
    if system_out:
        ET.SubElement(ts, "system-out").text = _clean(system_out)
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path
