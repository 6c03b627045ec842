"""``envreplica report``: a trace, or a whole check run, as one self-contained HTML page.

Models: a reviewer's reading of a counterexample (``checker.itf``), of a
lockstep divergence (``conformance.replica.traces.write_trace``), of any
protocol's (``traces.READERS``: the replica's, and the paired writer
migration's in ``migration``), and of a ``check`` / ``conformance`` run: the
verdicts and figures, then per trace the finding or broken property, its
steps (action, parameters, result, gate, the seed function it runs), what
each step changed table by table, the gate diagram with the trace's path,
and, for a divergence, the model and the implementation side by side where
they part; the coverage last. ``traces`` reads the files, ``tables`` the
states and their differences, ``gatesvg`` the diagram, ``html`` the page
(Jinja2, ``templates/``), ``run`` the run pages and the page written beside
a trace (``write_beside``).

Leaves out on purpose: a server, scripts or styles from elsewhere (the page
is one file), and hiding values (traces hold test values: shown, capped).
"""

from envreplica.report.run import (
    ModelCheckRecord,
    page_path_of,
    write_beside,
    write_check_report,
    write_conformance_report,
    write_trace_report,
)
from envreplica.report.traces import SEED_FUNCTIONS, ReportInputError, read, resolve

__all__ = ["ModelCheckRecord", "ReportInputError", "SEED_FUNCTIONS", "page_path_of", "read", "resolve", "write_beside",
           "write_check_report", "write_conformance_report", "write_trace_report"]
