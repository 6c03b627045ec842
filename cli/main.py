"""The ``envreplica`` command: check, conformance, simulate, diagram, replay, report, verify, schema, adapter, migrate, recover, lock.

``check`` is the full gate: it model-checks a named bounds suite under a
variant (the invariant table and the coverage table; each property's
shortest counterexample written as an ITF trace, the paired writer
migration's too, each with its HTML page beside it; a violation, or a
"sometimes" property never witnessed, fails), then runs the lockstep of
``conformance.replica`` against the built-in SQLite implementation
(``ci``-sized, crashes after any commit included), then the concurrent
stage of ``conformance.concurrent`` (several processes on one file, then
threads on one replica object, each history linearizable against the model),
and prints one summary table with
one exit status (``--model-only`` skips both, ``--no-concurrent`` the last). ``conformance --adapter COMMAND``
holds any implementation speaking docs/protocol.md section 5 against the
model: saved traces first (``--traces DIR``), then generated ones; a
divergence is printed as the shrunk readable steps, named as the finding one
fix explains, and written as JSON lines and ITF (``--out``, its page beside
it), optionally as JUnit XML (``--junit``), and exits 1.
``simulate`` takes seeded random walks with the gate moved by the
``transitions`` machine. ``diagram`` draws the gate machine from the declared table, a trace's gate path
highlighted. ``replay`` reruns a trace and shows where it parts: an ITF trace on
the model, or a ``.jsonl`` file of adapter requests on the model and an
implementation (the built-in SQLite one, or ``--adapter COMMAND``). ``report`` writes a trace as one
self-contained HTML page to step through (``check --report`` / ``conformance --report``: the whole run).
``schema`` prints the contract (docs/protocol.md) as JSON Schema, or one definition of it. ``lock`` runs a
command holding the projection lock (``impl.lock``, docs/lock.md): the command's exit status, or 2 and one line
when the lock is busy, lost, or its path cannot be used.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Optional
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envreplica.checker import itf
from envreplica.cli.errors import (INTERNAL_ERROR_EXIT, INTERRUPTED_EXIT, USER_ERROR_EXIT, UsageError, guarded,
                                   input_file)
from envreplica.checker.coverage import UNREACHABLE, Coverage, print_coverage_table
from envreplica.checker.progress import Tick
from envreplica.checker.run import run
from envreplica.cli.check_options import DEFAULT_BOUNDS, CheckPlan, Protocol, plan_of
from envreplica.cli.progress import Board, Stages, open_pipe_stages, relay
from envreplica.model.presets import PRESETS, suite
from envreplica.model.state import Variant
from envreplica.spec import properties as P

console = Console(width=None if sys.stdout.isatty() else 150)


def _short(value, width: int = 150) -> str:
    import json

    text = json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def print_counterexample(violation, out=console) -> None:
    """A counterexample as numbered steps: action, result, gate."""
    out.print(f"[bold red]{violation.prop.name}[/] violated after {violation.length} steps: "
              f"{violation.prop.statement}")
    for i, s in enumerate(violation.steps):
        if s.action is None:
            out.print(f"  #0 init  gate={s.state.replica.authority.gate.value}")
            continue
        action = itf.action_json(s.action)
        op = action.pop("op")
        result = itf.result_json(s.result)
        out.print(f"  #{i} [bold]{op}[/] {_short(action)}", highlight=False)
        out.print(f"      -> {_short(result)}   gate={s.state.replica.authority.gate.value}", highlight=False)


def cmd_check(args) -> int:
    """The full gate: the model check, then the lockstep against the built-in implementation; or the stages of
    the protocols ``--protocol`` selects (``cli.check_options``)."""
    import time

    started = time.perf_counter()
    if args.model_stage:  # the child of _BackgroundModelCheck: the model checks alone, and their own times
        args.plan = CheckPlan.from_json(args.plan)
        args.bounds = args.plan.bounds(Protocol.REPLICA) or DEFAULT_BOUNDS[Protocol.REPLICA]
        stages = open_pipe_stages(args.progress_fd) if args.progress_fd is not None else _stages(args)
        try:
            return _model_stage(args, started, stages)
        finally:
            stages.close()
    plan = args.plan = plan_of(args)
    args.bounds = plan.bounds(Protocol.REPLICA) or DEFAULT_BOUNDS[Protocol.REPLICA]  # the replica's, for its pages
    if plan.alone and plan.of(Protocol.MIGRATION):  # the paired writer migration's model, alone
        with _stages(args) as stages:
            return _migration_check(args, str(plan.bounds(Protocol.MIGRATION)), stages=stages)
    if plan.alone:  # the projection lock's model, alone
        with _stages(args) as stages:
            return _lock_check(args, str(plan.bounds(Protocol.LOCK)), stages=stages)
    if getattr(args, "report", None) and plan.of(Protocol.REPLICA) is None:  # its page is the replica's run's
        raise UsageError(f"--report writes the page of the replica's model check and lockstep, and --protocol "
                         f"{','.join(r.protocol.value for r in plan.runs)} does not select the replica: add replica "
                         f"to --protocol, or drop --report")
    _outputs_writable(getattr(args, "report", None))
    with _stages(args) as stages:
        background = None if args.model_only or args.serial else _model_check_in_background(args, stages)
        try:
            return _gate(args, started, background, stages)
        finally:
            if background is not None:
                background.stop()  # after an interrupt or an error here, the child does not run on alone


def _stages(args, command: str = "check") -> Stages:
    """The progress of a command's stages (``cli.progress``): rows on a terminal, heartbeat lines elsewhere,
    nothing with ``--quiet``."""
    return Stages(console, f"envreplica {command}", quiet=getattr(args, "quiet", False), timer=True)


def _model_stage(args, started: float, stages: Board) -> int:
    """``check --model-stage``, the child of ``_BackgroundModelCheck``: the model checks it is given (and the
    migration lockstep, when it is given that: ``_migration_lockstep_in_gate_process``), with their results on standard
    output for the gate, their progress on ``stages``."""
    import time

    plan: CheckPlan = args.plan
    rc = _model_check(args, stages) if plan.bounds(Protocol.REPLICA) is not None else 0
    print(f"{_MODEL_SECONDS}{time.perf_counter() - started:.3f}")
    migration_bounds, lock_bounds = plan.bounds(Protocol.MIGRATION), plan.bounds(Protocol.LOCK)
    if migration_bounds is not None:
        migration_started = time.perf_counter()
        migration_rc = _migration_check(args, migration_bounds, gate=True, stages=stages)
        print(f"{_MIGRATION_RESULT}{migration_rc} {time.perf_counter() - migration_started:.3f}")
    if lock_bounds is not None:
        lock_started = time.perf_counter()
        lock_rc = _lock_check(args, lock_bounds, gate=True, stages=stages)
        print(f"{_LOCK_RESULT}{lock_rc} {time.perf_counter() - lock_started:.3f}")
    if plan.lockstep(Protocol.MIGRATION) is not None:  # after the model checks, on this core (the lockstep has
        print(_MIGRATION_LOCKSTEP_RESULT + json.dumps(_migration_lockstep(args, stages)))  # the other)
    return rc


def _broken_properties(result, spec) -> list[str]:
    """The properties a suite's runs broke (the migration's or the lock's ``SuiteRun``), by name: each violated
    invariant or step property, and the bounded-liveness one (``spec.RECOVERABLE``) where a run left states stuck."""
    stuck = any(r.liveness is not None and not r.liveness.ok for r in result.runs)
    return sorted({p for r in result.runs for p in r.result.violations} | ({spec.RECOVERABLE[0]} if stuck else set()))


def _migration_lockstep_in_gate_process(args) -> bool:
    """Whether the gate runs the migration lockstep in its own process (after the replica's lockstep, the lock
    lockstep and the concurrent stages) rather than in the model-check child (after the model checks). The
    migration's model check runs in the child either way.

    Where it goes balances the two cores (compiled, at the default bounds, ``bench/bench_gate.py``): the child's
    share is the replica's model check (about 26 s), the migration's (about 2 s) and the lock's (about 8 s), the
    gate's the replica's lockstep (about 24 s), the lock lockstep and the concurrent stages (about 8 s); the
    migration lockstep (about 5 s) goes to the lighter side, which is the gate's own when the lock's stages run,
    else the child (as before the lock came)."""
    return args.plan.bounds(Protocol.LOCK) is not None


def _gate(args, started: float, background: Optional["_BackgroundModelCheck"], board: Stages) -> int:
    """The gate's stages in this process, the model check's from ``background`` (or here when None); their
    progress on ``board`` (closed before the summary: the verdict is the last line). The stages are those of
    the protocols ``args.plan`` selects (``cli.check_options``)."""
    import time

    plan: CheckPlan = args.plan
    replica_bounds = plan.bounds(Protocol.REPLICA)
    migration_bounds, lock_bounds = plan.bounds(Protocol.MIGRATION), plan.bounds(Protocol.LOCK)
    migration_profile = None if args.model_only else plan.lockstep(Protocol.MIGRATION)
    model_rc = 0  # the replica's model check's exit status (0 when it does not run)
    migration = None  # (exit status, seconds) of the migration's model check
    lock = None  # (exit status, seconds) of the lock's model check
    migration_lockstep: Optional[dict] = None  # the migration lockstep's row (_migration_lockstep)
    if background is None:
        model_rc = _model_check(args, board) if replica_bounds is not None else 0
        model_seconds = time.perf_counter() - started
        if migration_bounds is not None:
            migration_started = time.perf_counter()
            migration = (_migration_check(args, migration_bounds, gate=True, stages=board),
                         time.perf_counter() - migration_started)
        if lock_bounds is not None:
            lock_started = time.perf_counter()
            lock = (_lock_check(args, lock_bounds, gate=True, stages=board), time.perf_counter() - lock_started)
        if migration_profile is not None:
            migration_lockstep = _migration_lockstep(args, board)
    summary = _Rows()  # the summary table's rows after the model check's
    failed = False
    report = None  # the lockstep's report (for --report)
    where: dict[str, str] = {}  # a failed stage's trace (the verdict names it), by the stage's row name
    replica_profile = None if args.model_only else plan.lockstep(Protocol.REPLICA)
    if plan.of(Protocol.REPLICA) is not None and replica_profile is None:  # the replica's locksteps skipped: why
        why = "--model-only" if args.model_only else "--lockstep-profile replica=none"
        for stage in ("lockstep", "concurrent processes", "concurrent threads"):
            summary.add_row(stage, f"skipped ({why})", "[dim]skipped[/]", "")
    if replica_profile is not None:
        report = _replica_lockstep(args, summary, board, where)
        failed = failed or not report.ok
    if not args.model_only and plan.lockstep(Protocol.LOCK) is not None:
        failed = _lock_lockstep(summary, board, where, args.lock_side or LOCK_SIDE,
                                plan.examples(Protocol.LOCK)) or failed
    if replica_profile is not None and args.no_concurrent:
        summary.add_row("concurrent processes", "skipped (--no-concurrent)", "[dim]skipped[/]", "")
        summary.add_row("concurrent threads", "skipped (--no-concurrent)", "[dim]skipped[/]", "")
    elif replica_profile is not None:
        failed = _concurrent_stage(args, summary, board, where) or failed
    if background is not None and _migration_lockstep_in_gate_process(args) and migration_profile is not None:
        migration_lockstep = _migration_lockstep(args, board)
    if background is not None:
        console.print("\n[bold]model check[/] (ran beside the lockstep, on the other core):")
        model_rc, output, model_seconds, migration, lock, child_migration_lockstep = background.join()
        if not _migration_lockstep_in_gate_process(args):
            migration_lockstep = child_migration_lockstep
        board.close()
        if model_rc not in (0, 1):  # no verdict: it could not run as asked, or it crashed (not a finding)
            return _without_verdict(model_rc, output)
        sys.stdout.write(output)
        sys.stdout.flush()
    board.close()  # every stage has ended: no row or heartbeat line after the results
    failed = failed or model_rc != 0
    if migration_bounds is not None:
        if migration is None:  # the child died before it reported the migration's check
            migration = (1, 0.0)
        failed = failed or migration[0] != 0
    if lock_bounds is not None:
        if lock is None:  # the child died before it reported the lock's check
            lock = (1, 0.0)
        failed = failed or lock[0] != 0
    table = Table(title=f"envreplica check: the gate (variant {args.variant})")
    for col in ("stage", "what", "result", "seconds"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    stages: list[tuple[str, ...]] = []
    if replica_bounds is not None:
        stages.append(("model check", f"bounds {replica_bounds}", _verdict(model_rc == 0), f"{model_seconds:.1f}"))
    if migration is not None:
        stages.append(("migration model check", f"bounds {migration_bounds} (paired writer migration)",
                       _verdict(migration[0] == 0), f"{migration[1]:.1f}"))
    if lock is not None:
        stages.append(("lock model check", f"bounds {lock_bounds} (projection lock)", _verdict(lock[0] == 0),
                       f"{lock[1]:.1f}"))
    if migration_profile is not None:
        if migration_lockstep is None:  # the child died before it reported the migration lockstep
            migration_lockstep = {"status": 1, "what": "did not report", "seconds": 0.0}
        failed = failed or migration_lockstep["status"] != 0
        if migration_lockstep.get("trace"):
            where["migration lockstep"] = f"its divergence's trace: {migration_lockstep['trace']}"
    stages += summary.rows
    if migration_lockstep is not None:
        stages.append(("migration lockstep", migration_lockstep["what"], _verdict(migration_lockstep["status"] == 0),
                       f"{migration_lockstep['seconds']:.1f}"))
    for row in stages:
        table.add_row(*row)
    console.print(table)
    if args.report:  # one HTML page of the run (envreplica.report)
        from envreplica.report import write_check_report

        console.print(f"report written to [bold]{write_check_report(args, stages, report)}[/]")
    if failed:
        console.print(_gate_failure(stages, where, args), highlight=False)
    elif args.model_only:
        console.print("[bold green]PASS[/]: every property holds at these bounds (lockstep skipped)")
    else:
        console.print("[bold green]PASS[/]: every property holds at these bounds, and the implementation "
                      "agrees with the model")
    return 1 if failed else 0


def _replica_lockstep(args, summary: "_Rows", board: Stages, where: dict[str, str]):
    """The replica's lockstep (``conformance.replica``) against the built-in SQLite implementation at the plan's
    profile: its output, its rows in ``summary`` (the lockstep and its coverage); its report."""
    from envreplica.conformance.replica import lockstep_settings, run_lockstep

    profile = args.plan.lockstep(Protocol.REPLICA)
    console.print(f"\n[bold]lockstep[/]: the model against the built-in SQLite implementation "
                  f"(variant {args.variant}, profile {profile})")
    print("envreplica check: the lockstep's scratch replicas are sealed under the public TEST key "
          "(test data only; removed afterwards)", file=sys.stderr)
    # No factory: run_lockstep's default, SQLite in a scratch directory it removes afterwards.
    with board.stage("lockstep") as progress:
        report = run_lockstep(
            None,
            variant=Variant(args.variant),
            settings=lockstep_settings(profile, max_examples=args.plan.examples(Protocol.REPLICA)),
            out_dir=Path(args.out),
            progress=progress,
        )
    _print_lockstep(report)
    _page_beside(report.itf_path, args)
    if report.itf_path is not None:
        where["lockstep"] = f"its divergence's trace: {report.itf_path}"
    missing = _coverage(report.coverage, args, "lockstep coverage", "reachable but not reached")
    summary.add_row("lockstep", f"SQLite vs model: {report.examples:,} examples, {report.steps:,} steps, "
                                f"{report.steps_per_second:,.0f} steps/s", _verdict(report.ok),
                    f"{report.seconds:.1f}")
    reachable = [r for r in report.coverage.rows() if r[1] not in {c.value for c in UNREACHABLE}]
    summary.add_row("lockstep coverage", f"{len(reachable) - len(missing)}/{len(reachable)} reachable items reached",
                    "[green]complete[/]" if not missing else f"[yellow]missing: {', '.join(i for _, i in missing)}[/]",
                    "")
    return report


def _gate_failure(rows: list[tuple[str, ...]], where: dict[str, str], args) -> str:
    """The gate's last line when a stage failed: a sentence naming the stages that failed and where their traces
    are (``where``, by the stage's row; a model check's are in ``--out``)."""
    failed = [f"{name} ({where.get(name, f'its traces in {args.out}')})" for name, *cells in rows
              if cells[1] == _verdict(False)]
    if not failed:  # every row passed, yet the gate failed: say so rather than name none
        failed = [f"a stage the table does not show as failed (its traces in {args.out})"]
    listed = failed[0] if len(failed) == 1 else ", ".join(failed[:-1]) + f" and {failed[-1]}"
    return (f"[bold red]FAIL[/]: the gate failed at {escape(listed)}; the table above has each stage's figures, "
            f"and the output above each stage's findings")


#: Items not reached that a coverage line names (``--coverage`` lists every one).
COVERAGE_LISTED = 8


def _coverage(coverage, args, title: str, missing_label: str) -> list:
    """A coverage table (``--coverage``), or one line saying how much of it was reached; its unreached items."""
    if getattr(args, "coverage", False):
        return print_coverage_table(coverage, console, title, missing_label)
    unreachable = {code.value for code in UNREACHABLE}
    reachable = [row for row in coverage.rows() if row[1] not in unreachable]
    missing = coverage.unreached()
    listed = ", ".join(item for _, item in missing[:COVERAGE_LISTED])
    more = f" and {len(missing) - COVERAGE_LISTED} more" if len(missing) > COVERAGE_LISTED else ""
    console.print(f"{title}: {len(reachable) - len(missing)}/{len(reachable)} reachable items reached"
                  + (f"; [yellow]{missing_label}:[/] {escape(listed)}{more}" if missing else "")
                  + " (--coverage lists them)", highlight=False)
    return missing


class _Rows:
    """Rows of the summary table, kept until the model check (which may finish last) is known."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)


#: A line of a ``--model-stage`` child: the replica model check's own seconds (the parent strips it).
_MODEL_SECONDS = "envreplica-model-check-seconds: "
#: The line of a ``--model-stage`` child that ran the migration's check too: its exit status and seconds.
_MIGRATION_RESULT = "envreplica-migration-check: "
#: The line of a ``--model-stage`` child that ran the lock's check too: its exit status and seconds.
_LOCK_RESULT = "envreplica-lock-check: "
#: The last line of a ``--model-stage`` child that ran the migration lockstep: its row, as JSON.
_MIGRATION_LOCKSTEP_RESULT = "envreplica-migration-lockstep: "


#: Seconds the gate waits, once its model-check process has ended, for the last of its progress (a guard only).
RELAY_GRACE_SECONDS = 2.0


class _BackgroundModelCheck:
    """The model check (``envreplica check --model-stage``) in a child process, its output kept for later.

    The model check and the lockstep are independent and each single-threaded,
    so on a machine with two cores the gate runs them side by side. Its progress reaches ``stages`` while it
    runs: the child writes each tick to a pipe (``--progress-fd``, ``cli.progress.PipeStages``) that a thread
    here relays (``cli.progress.relay``).
    """

    def __init__(self, args, stages: Optional[Stages] = None) -> None:
        import subprocess
        import tempfile
        import threading
        import time

        self.started = time.perf_counter()
        self.output = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        plan: CheckPlan = args.plan
        if _migration_lockstep_in_gate_process(args) or args.model_only:  # the gate runs it itself, or none runs
            plan = plan.without(Protocol.MIGRATION, check=False)
        argv = ["check", "--model-stage", "--quiet", "--plan", plan.to_json(), "--variant", args.variant,
                "--out", args.out]
        argv += ["--workers", str(args.workers)] if args.workers else []
        argv += ["--ray", args.ray] if args.ray else []
        argv += ["--symmetry"] if getattr(args, "symmetry", False) else []
        argv += ["--report", args.report] if getattr(args, "report", None) else []  # the child saves its record
        argv += ["--no-trace-pages"] if getattr(args, "no_trace_pages", False) else []
        code = "import sys; from envreplica.cli.main import main; sys.exit(main(sys.argv[1:]))"
        env = dict(os.environ, COLUMNS=os.environ.get("COLUMNS", str(console.width)))
        self.relay: Optional[threading.Thread] = None
        self.stop_relay = threading.Event()
        if stages is None or stages.quiet:
            self.process = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=self.output,
                                            stderr=subprocess.STDOUT, env=env)
            return
        reading, writing = os.pipe()
        try:
            self.process = subprocess.Popen([sys.executable, "-c", code, *argv, "--progress-fd", str(writing)],
                                            stdout=self.output, stderr=subprocess.STDOUT, env=env,
                                            pass_fds=(writing,))
        finally:
            os.close(writing)  # the child's now: the pipe ends when the child does
        lines = os.fdopen(reading, encoding="utf-8", errors="replace")
        self.relay = threading.Thread(target=relay, args=(lines, stages, self.stop_relay),
                                      name="model-check-progress", daemon=True)
        self.relay.start()

    def join(self) -> tuple[int, str, float, Optional[tuple[int, float]], Optional[tuple[int, float]],
                            Optional[dict]]:
        """The child's exit status, output and seconds, the migration check's and the lock check's (status,
        seconds) and the migration lockstep's row, each if it ran there."""
        import time

        rc = self.process.wait()
        self._end_relay()
        if rc in (INTERRUPTED_EXIT, -signal.SIGINT):  # Ctrl-C reached the child, whatever this process saw
            raise KeyboardInterrupt
        seconds = time.perf_counter() - self.started  # if the child died before reporting its own
        self.output.seek(0)
        lines = self.output.read().splitlines(keepends=True)
        self.output.close()
        migration = lock = migration_lockstep = None
        for i in reversed(range(len(lines))):  # the result lines, wherever the stages' output put them
            if lines[i].startswith(_MIGRATION_LOCKSTEP_RESULT):
                migration_lockstep = json.loads(lines.pop(i)[len(_MIGRATION_LOCKSTEP_RESULT):])
            elif lines[i].startswith(_MIGRATION_RESULT):
                status, took = lines.pop(i)[len(_MIGRATION_RESULT):].split()
                migration = (int(status), float(took))
            elif lines[i].startswith(_LOCK_RESULT):
                status, took = lines.pop(i)[len(_LOCK_RESULT):].split()
                lock = (int(status), float(took))
        for i, line in enumerate(lines):
            if line.startswith(_MODEL_SECONDS):
                seconds = float(lines.pop(i)[len(_MODEL_SECONDS):])
                break
        return rc, "".join(lines), seconds, migration, lock, migration_lockstep

    def stop(self) -> None:
        """End the child if it still runs (idempotent)."""
        import subprocess

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # it did not end: kill it
                self.process.kill()
                self.process.wait()
        self._end_relay()
        if not self.output.closed:
            self.output.close()

    def _end_relay(self) -> None:
        """The child has ended: its last ticks relayed (within ``RELAY_GRACE_SECONDS``: a process it forked may
        hold the pipe open), none after."""
        relayed = getattr(self, "relay", None)  # None: no progress pipe (or a test made the object bare)
        if relayed is not None:
            relayed.join(timeout=RELAY_GRACE_SECONDS)
            self.stop_relay.set()
            self.relay = None


def _without_verdict(rc: int, output: str) -> int:
    """The gate's exit status when its model-check process ended with ``rc``, neither 0 (it holds) nor 1 (it
    found something): its output (``output``) goes to standard error, where its own last line says why (a user
    error's one line, exit 2; a bug's traceback and one line, exit 3). A process ended by a signal or another
    status said nothing of it: one line here does (exit 3)."""
    sys.stdout.flush()
    sys.stderr.write(output)
    sys.stderr.flush()
    if rc in (USER_ERROR_EXIT, INTERNAL_ERROR_EXIT):
        return rc
    try:
        how = f"was ended by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
    except ValueError:
        how = f"was ended by signal {-rc}"
    print(f"envreplica check: internal error: the model check's process {how} before its verdict, so nothing was "
          f"checked (killed from outside, or out of memory?); run it again, and report it if it recurs",
          file=sys.stderr)
    return INTERNAL_ERROR_EXIT


def _model_check_in_background(args, stages: Optional[Stages] = None) -> Optional[_BackgroundModelCheck]:
    """The model check in a child process when there is a second core for it, else None."""
    if (os.cpu_count() or 1) < 2:
        return None
    return _BackgroundModelCheck(args, stages)


def _concurrent_stage(args, summary, stages: Stages, where: dict[str, str]) -> bool:
    """The concurrent lockstep (``conformance.concurrent``): processes on one file, then threads on one
    replica object; True when either failed (``where`` then names its written history)."""
    profile = "nightly" if args.plan.lockstep(Protocol.REPLICA) == "nightly" else "ci"  # its dev budget is ci's
    processes = _concurrent_run(args, summary, profile, "processes", "histories on one file", stages=stages,
                                where=where)
    threads = _concurrent_run(args, summary, profile, "threads",
                              "writers, readers and readiness waiters on one replica",
                              histories=THREAD_HISTORIES if profile == "ci" else None, stages=stages, where=where)
    return processes or threads


#: Histories of the threaded stage in ``ci`` (a count; ``nightly`` takes the profile's own budget).
THREAD_HISTORIES = 200


def _concurrent_run(args, summary, profile: str, mode: str, what_runs: str, histories: Optional[int] = None,
                    stages: Optional[Stages] = None, where: Optional[dict[str, str]] = None) -> bool:
    """One mode of the concurrent stage, printed and added to the summary; True when it failed."""
    from envreplica.conformance.concurrent import run_concurrent

    console.print(f"\n[bold]concurrent {mode}[/]: {what_runs}, linearizable against the model "
                  f"(variant {args.variant}, profile {args.plan.lockstep(Protocol.REPLICA)})")
    with (stages or _stages(args)).stage(f"concurrent {mode}") as progress:
        report = run_concurrent(Variant(args.variant), profile=profile, out_dir=Path(args.out), mode=mode,
                                histories=histories, progress=progress)
    what = (f"{report.histories:,} histories, {report.ops:,} ops, {report.overlapping:,} overlapping, "
            f"{report.interleaved:,} interleaved (seed {report.seed})")
    if report.ok:
        console.print(f"[green]linearizable[/]: {what}", highlight=False)
    else:
        failure = report.failures[0]
        console.print(f"not linearizable: {failure.message()}", highlight=False, markup=False)
        if failure.path is not None:
            console.print(f"  written to {failure.path}", highlight=False, markup=False)
            if where is not None:
                where[f"concurrent {mode}"] = f"its history: {failure.path}"
    summary.add_row(f"concurrent {mode}", what, _verdict(report.ok), f"{report.total_seconds:.1f}")
    return not report.ok


def _verdict(ok: bool) -> str:
    return "[green]PASS[/]" if ok else "[bold red]FAIL[/]"


def _print_lockstep(report, out=console) -> None:
    """A lockstep report: one line when it passed; the shrunk steps and the trace files when not.
    Then how the implementation's tables were held (``LockstepReport.tables``)."""
    tables = "\n  ".join(t for t in (getattr(report, "tables", ""), getattr(report, "extensions", "")) if t)
    if report.ok:
        out.print(f"[green]no divergence[/] in {report.examples:,} examples, {report.steps:,} steps "
                  f"({report.steps_per_second:,.0f} steps/s, {report.seconds:.1f} s)")
        if tables:
            out.print(f"  {tables}", highlight=False, markup=False)
        return
    if tables:
        out.print(f"  {tables}", highlight=False, markup=False)
    if getattr(report, "adapter_failure", None):
        out.print(f"[bold red]ADAPTER FAILED[/] after {report.examples:,} examples, {report.steps:,} steps: nothing "
                  f"after it was judged: {escape(report.adapter_failure)}", highlight=False)
        return
    out.print(f"[bold red]DIVERGENCE[/] under variant {report.variant}: first seen after {report.found_after_examples} "
              f"examples ({report.found_after_seconds or 0:.1f} s, {report.found_steps} steps), shrunk to "
              f"{report.shrunk_steps} steps in {report.seconds:.1f} s in all")
    out.print(report.failure, highlight=False, markup=False)
    if report.trace_path is not None:
        out.print(f"  requests written to [bold]{report.trace_path}[/] (envreplica replay {report.trace_path})")
    if report.itf_path is not None:
        out.print(f"  ITF trace written to [bold]{report.itf_path}[/]")


def _outputs_writable(*files: Optional[str]) -> None:
    """Each output file's directory exists (made if missing) and is writable, or ``OSError`` (exit 2)
    now, before the run: a path that fails only after a divergence was found would hide it behind 2."""
    for file in files:
        if not file:
            continue
        directory = Path(file).parent
        directory.mkdir(parents=True, exist_ok=True)
        if Path(file).is_dir():
            raise IsADirectoryError(21, "is a directory, not a file to write", file)
        if not os.access(directory, os.W_OK):
            raise PermissionError(13, "its directory is not writable", file)


def _adapter_rule(section: str = "5.1") -> str:
    """What an adapter must do, said after "the adapter broke ...": the rule and what to do."""
    return (f"an adapter answers every request with one line on standard output, a JSON object carrying the "
            f"request's id (docs/protocol.md section {section}); fix the adapter and run the gate again")


def _page_beside(trace, args) -> None:
    """The page of a trace ``--out`` wrote, written beside it (``NAME.html``), unless ``--no-trace-pages``."""
    if trace is None or getattr(args, "no_trace_pages", False):
        return
    from envreplica.report.run import write_beside

    page, problem = write_beside(Path(trace))
    if page is not None:
        console.print(f"  page written to [bold]{page}[/] (envreplica report)", highlight=False)
    else:
        console.print(f"  [yellow]no page written[/] beside {trace}: {problem}", highlight=False)


def _timeouts(args) -> tuple[float, float]:
    """``conformance``'s seconds for each answer and for an adapter process's first answer: ``--timeout``
    (default ``DEFAULT_TIMEOUT``) and ``--start-timeout`` (default: ``--timeout`` when given, else
    ``START_TIMEOUT``, for an adapter that compiles at start); each above 0, or ``UsageError``."""
    from envreplica.conformance.external import DEFAULT_TIMEOUT, START_TIMEOUT

    for option, value in (("--timeout", args.timeout), ("--start-timeout", args.start_timeout)):
        if value is not None and not value > 0:
            raise UsageError(f"{option} takes seconds above 0, not {value:g}: the seconds to wait for an answer")
    timeout = args.timeout if args.timeout is not None else DEFAULT_TIMEOUT
    start = args.start_timeout if args.start_timeout is not None else \
        args.timeout if args.timeout is not None else START_TIMEOUT
    return timeout, start


def _waiting_for_start(stages: Stages, command: str, op: str, start: float):
    """Say what the run waits for while an adapter starts (one line, then a progress row or heartbeat lines):
    the ``waiting`` hook of ``external.SubprocessDriver``."""
    import math

    console.print(f"waiting up to {start:g} s for the adapter's first answer (`{op}`): {command}", highlight=False,
                  markup=False)

    def waiting(op: str, waited: float, limit: float) -> None:
        stages.update("adapter start-up", Tick(int(waited), math.ceil(limit), "s",
                                               note=f"waiting for the adapter's first answer (`{op}`)"))

    return waiting


def _first_answer_hint(timed_out: bool) -> str:
    """What to do when an adapter's first answer did not come in time."""
    return ("; an adapter that needs longer to start (it compiles, say) is given it with --start-timeout SECONDS"
            if timed_out else "")


def _started_adapter(command: str, timeout: float, start_timeout: Optional[float] = None,
                     stages: Optional[Stages] = None):
    """The adapter, started and answering a ``reset`` with one JSON line (the lockstep's first driver), or
    ``UsageError`` (exit 2): a gate that could not run is not a divergence. What it answers is the lockstep's
    to judge. ``start_timeout`` bounds the first answer (``external.SubprocessDriver``'s default: at least
    ``START_TIMEOUT``); ``stages`` shows the wait."""
    from envreplica.conformance.external import AdapterError, AdapterTimeout, SubprocessDriver

    driver = None
    waiting = None if stages is None or start_timeout is None else \
        _waiting_for_start(stages, command, "reset", start_timeout)
    try:
        driver = SubprocessDriver(command, timeout=timeout, start_timeout=start_timeout, waiting=waiting)
        driver.handle({"id": 0, "op": "reset"})
    except AdapterError as error:
        if driver is not None:
            driver.close()
        raise UsageError(f"the adapter could not be run, so nothing was checked: it broke on its first request "
                         f"(`reset`): {error}; {_adapter_rule()}"
                         f"{_first_answer_hint(isinstance(error, AdapterTimeout) and error.first)}") from None
    finally:
        if stages is not None:
            stages.end("adapter start-up")
    return driver


def _through_started_adapter(args, variant, shared_type, broken_type, section: str, through) -> int:
    """What ``_migration_conformance`` and ``_lock_conformance`` share: the outputs checked writable, the adapter
    started and declared (``shared_type``, the protocol's ``AdapterShared``; a break on its ``hello``, its
    ``broken_type``, is exit 2 naming docs/protocol.md section ``section``), then ``through``'s exit status (the
    lockstep through the started adapter, its progress on the command's stages)."""
    _outputs_writable(args.junit, getattr(args, "report", None))
    timeout, start = _timeouts(args)
    with _stages(args, "conformance") as stages:
        try:
            shared = shared_type(args.adapter, variant, timeout=timeout, start_timeout=start,
                                 waiting=_waiting_for_start(stages, args.adapter, "hello", start))
        except broken_type as error:
            raise UsageError(f"the adapter could not be run, so nothing was checked: it broke on its first request "
                             f"(`hello`): {error}; {_adapter_rule(section)}"
                             f"{_first_answer_hint(error.timed_out and error.request <= 1)}") from None
        finally:
            stages.end("adapter start-up")
        return through(args, shared, variant, stages)


def _migration_conformance(args) -> int:
    """``envreplica conformance --protocol migration``: the migration lockstep through an adapter (docs/protocol.md,
    section 11); exit 0 when it agrees, 1 on a divergence, 2 when the adapter could not be run."""
    from envreplica.conformance.migration.adapter_side import AdapterBroken, AdapterShared
    from envreplica.model.migration import MigrationVariant

    if args.variant not in {v.value for v in MigrationVariant}:
        raise UsageError(f"--protocol migration takes --variant seed or fixed, not {args.variant!r} (the replica's)")
    if args.traces:
        raise UsageError("--traces replays the replica's saved requests; --protocol migration has none to replay")
    variant = MigrationVariant(args.variant)
    return _through_started_adapter(args, variant, AdapterShared, AdapterBroken, "11", _migration_lockstep_through)


def _migration_lockstep_through(args, shared, variant, stages: Stages) -> int:
    """The migration lockstep through ``shared`` (the adapter, started and declared), its progress on ``stages``
    (closed before the verdict, the last line); ``_migration_conformance``'s exit status."""
    from envreplica.conformance.junit import JUnitCase, write_junit
    from envreplica.conformance.migration.run import run_migration_lockstep

    decl = shared.decl
    fixes = ", ".join(sorted(f.value for f in shared.cfg.fixes)) or "none"
    faults = ", ".join(sorted(f.value for f in decl.faults)) or "none"
    console.print(f"[bold]migration lockstep[/]: {decl.implementation} ({args.adapter!r}) against the migration "
                  f"model, variant {variant.value} (fixes: {fixes}; reading {decl.reading}; faults: {faults}; "
                  f"steps: {len(decl.steps)}; modes: {', '.join(decl.modes)}; exit statuses "
                  f"{'compared' if decl.exit_status else 'not compared'})", highlight=False)
    try:
        with stages.stage("migration lockstep") as progress:
            report = run_migration_lockstep(args.profile, max_examples=args.max_examples, step_count=args.steps,
                                            out_dir=Path(args.out), shared=shared, progress=progress)
    finally:
        shared.close()
    stages.close()
    reached, total = report.coverage.reached(shared.required)
    missing = report.coverage.unreached(shared.required)
    harness = report.key == "harness"
    figures = (f"{report.examples:,} examples, {report.moves:,} moves, {report.moves_per_second:,.1f} moves/s; "
               f"coverage {reached}/{total} required items"
               + (f" (not reached at this budget: {', '.join(missing)})" if missing else ""))
    if report.ok:
        console.print(f"[green]no divergence[/]: {figures}", highlight=False)
    elif harness:
        console.print(f"[bold red]ADAPTER FAILED[/]: nothing after it was judged: {escape(report.divergence or '')}",
                      highlight=False)
    else:
        console.print(f"[bold red]DIVERGENCE[/] ({report.key}) after {report.found_after_examples} examples",
                      highlight=False)
        print(report.failure)  # its first line names the finding, when one explains it
        if report.trace_path is not None:
            console.print(f"trace: {report.trace_path}")
        if report.itf_path is not None:
            console.print(f"ITF trace: {report.itf_path} (envreplica report {report.itf_path})")
            _page_beside(report.itf_path, args)
    if args.coverage:
        console.print("coverage:", highlight=False)
        for group, item, n in report.coverage.rows():
            need = item in shared.required.get(group, frozenset())
            console.print(f"  {group:<10} {item:<36} {n:>6}{'' if need else '  (not required)'}", highlight=False)
    else:
        console.print(f"coverage: {reached}/{total} required items reached (--coverage lists them)", highlight=False)
    if args.junit:
        output = (f"examples={report.examples} moves={report.moves} seconds={report.seconds:.2f} "
                  f"moves/s={report.moves_per_second:.1f} coverage={reached}/{total}")
        failure = None if report.ok else (report.failure or report.divergence or "divergence")
        if failure and report.trace_path is not None:
            failure += f"\n\ntrace (JSON lines): {report.trace_path}"
        case = JUnitCase(name=f"migration lockstep[{variant.value}]", classname="envreplica.conformance.migration",
                         seconds=report.seconds, failure=failure, error=harness,
                         message=None if report.ok else report.divergence, output=output)
        cov_text = "\n".join(f"{g}\t{i}\t{n}" for g, i, n in report.coverage.rows())
        written = write_junit(args.junit, [case], suite="envreplica conformance --protocol migration",
                              system_out=cov_text)
        console.print(f"JUnit: {written}")
    if getattr(args, "report", None):
        from envreplica.report.migration import write_migration_report

        page = write_migration_report(Path(args.report), report, decl, variant, args.adapter, shared.required)
        console.print(f"report: {page}")
    if report.adapter_failure:  # one line on stderr, exit 2: an adapter that broke is not a divergence
        raise UsageError(f"{report.adapter_failure}; nothing after it was judged (not a verdict); "
                         f"{_adapter_rule('11')}")
    if harness:
        raise UsageError(f"the adapter failed during the run, so nothing after it was judged: {report.divergence}")
    if report.ok:  # the items not reached are named above (the figures' line)
        console.print(f"[bold green]PASS[/]: the implementation agrees with the migration model (variant "
                      f"{variant.value}): {report.examples:,} examples, {report.moves:,} moves; coverage "
                      f"{reached}/{total} required items", highlight=False)
        return 0
    trace = report.itf_path or report.trace_path
    console.print(f"[bold red]FAIL[/]: the implementation parts from the migration model (variant {variant.value}, "
                  f"{report.key}"
                  + (f"; {report.finding.split(':', 1)[0]}" if report.finding else "")
                  + f") after {report.found_after_examples} examples"
                  + (escape(f"; its trace: {trace} (envreplica report {trace})") if trace is not None else ""),
                  highlight=False)
    return 1


#: ``envreplica conformance --protocol lock``: examples per profile (each of ``conformance.lock.run``'s
#: ``STEPS_PER_EXAMPLE`` moves at most).
LOCK_CONFORMANCE_EXAMPLES = {"dev": 20, "ci": 100, "nightly": 1000}


def _lock_conformance(args) -> int:
    """``envreplica conformance --protocol lock``: the lock lockstep through an adapter (docs/protocol.md, section
    12); exit 0 when it agrees, 1 on a divergence (named as the finding one fix explains, under ``fixed``), 2 when
    the adapter could not be run or broke (naming the move)."""
    from envreplica.conformance.lock.adapter_side import AdapterBroken, AdapterShared
    from envreplica.model import lock as ml

    if args.variant not in {v.value for v in ml.Variant}:
        raise UsageError(f"--protocol lock takes --variant seed or fixed, not {args.variant!r} (the replica's)")
    if args.traces:
        raise UsageError("--traces replays the replica's saved requests; --protocol lock has none to replay")
    variant = ml.Variant(args.variant)
    return _through_started_adapter(args, variant, AdapterShared, AdapterBroken, "12", _lock_lockstep_through)


def _lock_lockstep_through(args, shared, variant, stages: Stages) -> int:
    """The lock lockstep through ``shared`` (the adapter, started and declared), its progress on ``stages``
    (closed before the verdict, the last line); ``_lock_conformance``'s exit status."""
    from envreplica.conformance.junit import JUnitCase, write_junit
    from envreplica.conformance.lock.coverage import required_for
    from envreplica.conformance.lock.run import STEPS_PER_EXAMPLE, run_lock_lockstep
    from envreplica.conformance.lock.findings import finding_of
    from envreplica.conformance.lock.traces import write_trace

    decl = shared.decl
    examples = args.max_examples if args.max_examples is not None else LOCK_CONFORMANCE_EXAMPLES[args.profile]
    steps = args.steps if args.steps is not None else STEPS_PER_EXAMPLE
    required = required_for(decl.design, shared.bounds[0].max_tries)
    held = "the seed's steps" if not shared.bounds[0].fixes else f"the {variant.value} variant's steps"
    console.print(f"[bold]lock lockstep[/]: {decl.implementation} ({args.adapter!r}, the {decl.design} design) "
                  f"against the lock model: {held}" + (", and the properties of spec.lock on every move"
                                                       if shared.properties else "") +
                  f" (bounds {', '.join(b.name for b in shared.bounds)}; {examples} examples of up to {steps} "
                  f"moves; tries before busy {shared.bounds[0].max_tries})", highlight=False)
    try:
        with stages.stage("lock lockstep") as progress:
            report = run_lock_lockstep(examples, steps=steps, bounds=shared.bounds, side=shared.side,
                                       properties=shared.properties, progress=progress)
    finally:
        shared.close()
    stages.close()
    missing = report.coverage.unreached(required)
    finding = None
    itf_path = None
    if report.adapter_failure:
        console.print(f"[bold red]ADAPTER FAILED[/]: {escape(report.adapter_failure)}", highlight=False)
    elif report.divergence is not None:
        d = report.divergence
        finding = finding_of(d, variant)
        if d.key == "property":  # both sides took every move alike: the implementation breaks it as the model does
            console.print(f"[bold red]PROPERTY BROKEN[/] on moves the implementation took as the model did, after "
                          f"{report.found_after_examples} examples, {len(d.moves)} moves:", highlight=False)
        else:
            console.print(f"[bold red]DIVERGENCE[/] ({d.key}) after {report.found_after_examples} examples, "
                          f"{len(d.moves)} moves:", highlight=False)
        if finding:
            print(f"finding {finding}")
        print("\n".join(report.trace(d.cfg)))
        name = f"lock-{variant.value}-{d.cfg.name if d.cfg else 'lockstep'}-{d.key}"
        meta = {"variant": variant.value, "key": d.key, "adapter": args.adapter,
                "implementation": decl.implementation, "moves": len(d.moves)}
        if finding:
            meta["finding"] = finding.split(":")[0]
        trace, itf_path = write_trace(Path(args.out), name, d, meta)
        console.print(f"trace: {trace}")
        console.print(f"ITF trace: {itf_path} (envreplica report {itf_path})")
        _page_beside(itf_path, args)
    else:
        console.print(f"[green]PASS[/]: {report.examples:,} examples, {report.moves:,} moves, "
                      f"{report.moves_per_second:,.1f} moves/s; coverage {len(required) - len(missing)}/"
                      f"{len(required)} required items"
                      + (f" (not reached at this budget: {', '.join(missing)})" if missing else ""), highlight=False)
    if args.coverage:
        console.print("coverage:", highlight=False)
        for item, n in sorted(report.coverage.counts.items()):
            console.print(f"  {item:<48} {n:>6}{'' if item in required else '  (not required)'}", highlight=False)
    else:
        console.print(f"coverage: {len(required) - len(missing)}/{len(required)} required items reached "
                      f"(--coverage lists them)", highlight=False)
    ok = report.passed and not report.adapter_failure
    if args.junit:
        output = (f"examples={report.examples} moves={report.moves} seconds={report.seconds:.2f} "
                  f"moves/s={report.moves_per_second:.1f} coverage={len(required) - len(missing)}/{len(required)}")
        failure = None
        if report.adapter_failure:
            failure = report.adapter_failure
        elif report.divergence is not None:
            failure = (f"{finding}\n" if finding else "") + "\n".join(report.trace(report.divergence.cfg))
        case = JUnitCase(name=f"lock lockstep[{variant.value}]", classname="envreplica.conformance.lock",
                         seconds=report.seconds, failure=failure, error=bool(report.adapter_failure),
                         message=None if ok else (report.adapter_failure or (report.divergence.reason
                                                                             if report.divergence else None)),
                         output=output)
        cov_text = "\n".join(f"lock\t{i}\t{n}" for i, n in sorted(report.coverage.counts.items()))
        written = write_junit(args.junit, [case], suite="envreplica conformance --protocol lock",
                              system_out=cov_text)
        console.print(f"JUnit: {written}")
    if getattr(args, "report", None):
        from envreplica.report.lock_run import write_lock_report

        page = write_lock_report(Path(args.report), report, decl, variant, args.adapter, required, itf_path,
                                 finding)
        console.print(f"report: {page}")
    if report.adapter_failure:  # one line on stderr, exit 2: an adapter that broke is not a divergence
        raise UsageError(f"{report.adapter_failure}; nothing after it was judged (not a verdict); "
                         f"{_adapter_rule('12')}")
    if ok:
        console.print(f"[bold green]PASS[/]: the implementation agrees with the lock model (variant {variant.value}): "
                      f"{report.examples:,} examples, {report.moves:,} moves", highlight=False)
        return 0
    console.print(f"[bold red]FAIL[/]: the implementation parts from the lock model (variant {variant.value}"
                  + (f"; {finding.split(':', 1)[0]}" if finding else "") + ")"
                  + (escape(f"; its trace: {itf_path} (envreplica report {itf_path})") if itf_path else ""),
                  highlight=False)
    return 1


def cmd_conformance(args) -> int:
    """Hold an external implementation (``--adapter``) against the model."""
    if args.protocol == "migration":
        return _migration_conformance(args)
    if args.protocol == "lock":
        return _lock_conformance(args)
    with _stages(args, "conformance") as stages:
        return _replica_conformance(args, stages)


def _replica_conformance(args, stages: Stages) -> int:
    """``envreplica conformance`` (the replica's protocol): saved traces, then the lockstep, its progress on
    ``stages`` (closed before the verdict, the last line)."""
    import time

    from envreplica.conformance.drivers import ModelDriver
    from envreplica.conformance.external import AdapterError, AdapterFailure, SubprocessDriver
    from envreplica.conformance.junit import JUnitCase, case_from_report, write_junit
    from envreplica.conformance.replica import format_steps, lockstep_settings, read_requests, replay_steps, run_lockstep

    variant = Variant(args.variant)
    timeout, start = _timeouts(args)
    out_dir = Path(args.out)
    cases: list = []
    failed = False
    parted: list[Path] = []  # the saved traces the implementation parted on
    summary = Table(title=f"envreplica conformance --variant {variant.value}")
    for col in ("run", "result", "examples", "steps", "steps/s", "seconds"):
        summary.add_column(col, justify="left" if col in ("run", "result") else "right")

    if args.traces:
        files = sorted(Path(args.traces).glob("*.jsonl"))
        if not files:
            console.print(f"[yellow]no *.jsonl traces in {args.traces}[/]")
        impl = None
        for path in files:
            started = time.perf_counter()
            requests = read_requests(path)
            if not requests or not isinstance(requests[0], dict) or requests[0].get("op") != "reset":
                requests = [{"id": 0, "op": "reset"}] + requests  # every trace starts from a fresh replica
            name = f"trace {path.name}"
            try:
                if impl is None:
                    try:
                        impl = SubprocessDriver(args.adapter, timeout=timeout, start_timeout=start)
                    except AdapterError as error:
                        raise AdapterFailure(f"the start of the adapter for saved trace {path.name}", str(error))
                steps, divergence = replay_steps(requests, impl, ModelDriver(variant),
                                                 adapter_failures=f"saved trace {path.name}")
            except AdapterFailure as broke:  # the run stops: the cases so far, this one an error; exit 2
                if impl is not None:
                    impl.close()
                cases.append(JUnitCase(name=name, classname="envreplica.conformance.traces",
                                       seconds=time.perf_counter() - started, failure=str(broke),
                                       message=str(broke), error=True))
                if args.junit:
                    console.print(f"JUnit XML written to [bold]{write_junit(args.junit, cases)}[/]")
                raise UsageError(f"{broke}; nothing after it was judged (not a verdict); {_adapter_rule()}") from None
            if impl is not None and not impl.alive:
                impl.close()
                impl = None
            seconds = time.perf_counter() - started
            if divergence is None:
                console.print(f"[green]agree[/]   {path} ({len(steps)} requests)")
                summary.add_row(name, _verdict(True), "", str(len(steps)), "", f"{seconds:.1f}")
                cases.append(JUnitCase(name=name, classname="envreplica.conformance.traces", seconds=seconds))
                continue
            failed = True
            text = format_steps(steps, divergence["reason"],
                                header=f"saved trace {path} parts at step #{divergence['index']}:")
            console.print(f"[bold red]PARTS[/]   {path}")
            parted.append(path)
            console.print(text, highlight=False, markup=False)
            summary.add_row(name, _verdict(False), "", str(len(steps)), "", f"{seconds:.1f}")
            cases.append(JUnitCase(name=name, classname="envreplica.conformance.traces", seconds=seconds,
                                   failure=text, message=divergence["reason"]))
        if impl is not None:
            impl.close()

    _outputs_writable(args.junit, getattr(args, "report", None))
    # the lockstep's first driver: not started twice
    first_driver = [_started_adapter(args.adapter, timeout, start, stages)]
    settings = lockstep_settings(args.profile, max_examples=args.max_examples, step_count=args.steps)
    console.print(f"[bold]lockstep[/]: {args.adapter!r} against the model (variant {variant.value}, "
                  f"profile {args.profile}, {settings.max_examples} examples of up to "
                  f"{settings.stateful_step_count} steps)")
    try:
        with stages.stage("lockstep") as progress:
            report = run_lockstep(
                lambda: first_driver.pop() if first_driver else SubprocessDriver(args.adapter, timeout=timeout,
                                                                                 start_timeout=start),
                variant=variant, settings=settings, out_dir=out_dir, progress=progress)
    finally:
        for unused in first_driver:
            unused.close()
    stages.close()
    _print_lockstep(report)
    _page_beside(report.itf_path, args)
    failed = failed or not report.ok
    verdict = "[bold red]ADAPTER FAILED[/]" if report.adapter_failure else _verdict(report.ok)
    summary.add_row(f"lockstep {variant.value}", verdict, f"{report.examples:,}", f"{report.steps:,}",
                    f"{report.steps_per_second:,.0f}", f"{report.seconds:.1f}")
    cases.append(case_from_report(f"lockstep[{variant.value}]", report))
    missing = _coverage(report.coverage, args, "lockstep coverage", "reachable but not reached")
    console.print(summary)
    if args.junit:
        cov_text = "\n".join(f"{g}\t{i}\t{n}" for g, i, n in report.coverage.rows())
        path = write_junit(args.junit, cases, system_out=cov_text)
        console.print(f"JUnit XML written to [bold]{path}[/]")
    if missing:
        console.print(f"[yellow]coverage: {len(missing)} reachable items not reached at this profile[/]")
    if args.report:  # one HTML page of the run (envreplica.report)
        from envreplica.report import write_conformance_report

        console.print(f"report written to [bold]{write_conformance_report(args, report, cases)}[/]")
    if report.adapter_failure:  # one line on stderr, exit 2: an adapter that broke is not a divergence
        raise UsageError(f"{report.adapter_failure}; nothing after it was judged (not a verdict); {_adapter_rule()}")
    if not failed:
        console.print(f"[bold green]PASS[/]: the implementation agrees with the model (variant {variant.value})")
        return 0
    parts = [f"saved trace {escape(str(path))}" for path in parted]
    if not report.ok:
        trace = report.itf_path or report.trace_path
        parts.append("the lockstep" + (escape(f" (its divergence's trace: {trace})") if trace is not None else ""))
    console.print(f"[bold red]FAIL[/]: the implementation parts from the model (variant {variant.value}) at "
                  f"{' and '.join(parts)}", highlight=False)
    return 1


#: Examples of the lock lockstep in the gate (``conformance.lock``: about 26 moves each).
LOCK_LOCKSTEP_EXAMPLES = 200
#: The gate's lock users (``--lock-side``): threads, the cheaper (processes cost 3 to 4.6 times as much a move,
#: docs/lock.md; a ``conformance.lock.sides.Side`` value, not imported here: it loads Hypothesis).
LOCK_SIDE = "threads"


def _lock_lockstep(summary, stages: Optional[Stages] = None, where: Optional[dict[str, str]] = None,
                   side: str = LOCK_SIDE, examples: Optional[int] = None) -> bool:
    """The lock lockstep (``conformance.lock``): ``impl.lock`` held to the lock model's ``fixed`` variant, move by
    move, ``examples`` examples (default ``LOCK_LOCKSTEP_EXAMPLES``), its lock users ``side``
    (``conformance.lock.sides.Side``: threads of the harness, or processes forked from it), its coverage of the
    "sometimes" items asserted; its row in ``summary``; True when it failed. Its progress on ``stages``."""
    from envreplica.conformance.lock import run_lock_lockstep
    from envreplica.conformance.lock.coverage import SOMETIMES
    from envreplica.conformance.lock.sides import Side

    users = {Side.THREADS: "a thread of the harness", Side.PROCESSES: "a process forked from the harness, killed "
                                                                      "with SIGKILL"}[Side(side)]
    examples = LOCK_LOCKSTEP_EXAMPLES if examples is None else examples
    console.print(f"\n[bold]lock lockstep[/]: impl.lock against the lock model (fixed), {examples} "
                  f"examples, each lock user {users}, paused at every filesystem call")
    with (stages or Stages(console, "envreplica check", quiet=True)).stage("lock lockstep") as progress:
        report = run_lock_lockstep(examples, side=Side(side).factory, progress=progress)
    unreached = report.coverage.unreached()
    sometimes = report.coverage.sometimes()
    what = (f"impl.lock vs model ({side}): {report.examples:,} examples, {report.moves:,} moves; sometimes items "
            f"{sum(1 for n in SOMETIMES if sometimes[n])}/{len(SOMETIMES)}")
    if not report.passed:
        console.print(f"[bold red]DIVERGENCE[/] after {report.examples:,} examples, {len(report.counterexample)} "
                      f"moves:", highlight=False)
        console.print("\n".join(report.trace()), highlight=False, markup=False)
        if where is not None:
            where["lock lockstep"] = "its moves printed above"
    elif unreached:
        console.print(f"[bold red]COVERAGE[/]: not reached at this budget: {', '.join(unreached)} (a pass that "
                      f"never reaches them proves nothing)", highlight=False)
    else:
        console.print(f"[green]PASS[/]: {what}; every required item reached", highlight=False)
    ok = report.passed and not unreached
    summary.add_row("lock lockstep", what, _verdict(ok), f"{report.seconds:.1f}")
    return not ok


def _migration_lockstep(args, stages: Optional[Board] = None) -> dict:
    """The migration lockstep (``conformance.migration``) at the plan's profile (``--lockstep-profile
    migration=PROFILE``): it prints its coverage and any divergence; its row for the gate's table (status, what,
    seconds)."""
    from envreplica.conformance.migration.run import run_migration_lockstep

    profile = str(args.plan.lockstep(Protocol.MIGRATION))
    console.print(f"\n[bold]migration lockstep[/]: impl.paired against the migration model (profile "
                  f"{profile}; stores sealed under the public TEST key, removed afterwards)")
    with (stages or _stages(args)).stage("migration lockstep") as progress:
        report = run_migration_lockstep(profile, max_examples=args.plan.examples(Protocol.MIGRATION),
                                        out_dir=Path(args.out), progress=progress)
    reached, total = report.coverage.reached()
    missing = report.coverage.unreached()
    tour = f" ({report.tour_examples} of them the coverage tour)" if report.tour_examples else ""
    if report.ok:
        console.print(f"[green]PASS[/]: {report.examples:,} examples{tour}, {report.moves:,} moves, "
                      f"{report.moves_per_second:,.0f} moves/s; coverage {reached}/{total} required items"
                      + (f" (not reached at this budget: {', '.join(missing)})" if missing else ""))
    else:
        console.print(f"[bold red]DIVERGENCE[/] ({report.key}) after {report.found_after_examples} examples")
        print(report.failure)
        if report.trace_path is not None:
            console.print(f"trace: {report.trace_path}")
        if report.itf_path is not None:
            console.print(f"ITF trace: {report.itf_path}")
            _page_beside(report.itf_path, args)
    what = (f"paired migration vs model: {report.examples:,} examples, {report.moves:,} moves, "
            f"{report.moves_per_second:,.0f} moves/s, coverage {reached}/{total}")
    trace = report.itf_path or report.trace_path
    return {"status": 0 if report.ok else 1, "what": what, "seconds": round(report.seconds, 3),
            **({"trace": str(trace)} if trace is not None else {})}


def _seed_or_fixed(args, gate: bool, variants, model: str):
    """The variant of ``variants`` (a protocol's, seed or fixed) that ``model``'s check runs: ``--variant``'s; in
    the ``gate`` (beside the replica's check), a replica-only variant such as fix-f1 takes the fixed one; any other
    replica variant is refused."""
    if gate and args.variant != variants.SEED.value:
        return variants.FIXED
    if args.variant not in (variants.SEED.value, variants.FIXED.value):
        raise UsageError(f"--variant {args.variant} is the replica's; {model} takes seed or fixed")
    return variants(args.variant)


def _migration_check(args, name: str, gate: bool = False, stages: Optional[Board] = None) -> int:
    """The paired writer migration's model check (``checker.migration``) at bounds suite ``name``: a table,
    each violation's and each stuck state's shortest trace, the "sometimes" properties never witnessed.
    In the ``gate`` (beside the replica's check), a replica-only variant such as fix-f1 takes the fixed one."""
    from envreplica.checker import migration as cm
    from envreplica.model import migration as mm
    from envreplica.spec import migration as spec

    variant = _seed_or_fixed(args, gate, mm.MigrationVariant, "the paired writer migration's model")
    console.print(f"\n[bold]migration model check[/]: the paired writer migration and its recovery "
                  f"(bounds {name}, variant {variant.value}; reading {mm.Reading()})")
    with (stages or _stages(args)).stage("migration model check") as progress:
        result = cm.run_suite(mm.suite(name, variant), progress=progress)
    table = Table(title=f"envreplica check --bounds {name} --variant {variant.value} (paired writer migration)")
    for col in ("bounds", "migrate", "recover", "crashes", "writes", "distinct states", "depth",
                "operator closure", "stuck", "seconds"):
        table.add_column(col, justify="left" if col == "bounds" else "right")
    for r in result.runs:
        b, live = r.bounds, r.liveness
        table.add_row(b.name, str(b.migrations), str(b.recoveries), str(b.crashes), str(b.writes),
                      f"{r.result.states:,}", str(r.result.depth), f"{live.closure:,}" if live else "-",
                      str(len(live.stuck)) if live else "-", f"{r.seconds:.1f}")
    console.print(table)
    for r in result.runs:
        for prop_name, violation in r.result.violations.items():
            console.print(f"[bold red]VIOLATED[/] {prop_name} at bounds {r.bounds.name}, {violation.length} steps: "
                          f"{violation.prop.statement}", highlight=False)
            console.print("\n".join(cm.trace_lines(violation)), highlight=False, markup=False)
            _migration_trace(args, name, variant, r.bounds.name, prop_name, violation)
        if r.stuck is not None:
            assert r.liveness is not None  # a stuck state's path is searched for after the liveness check
            name_, sentence = spec.RECOVERABLE
            console.print(f"[bold red]VIOLATED[/] {name_} at bounds {r.bounds.name}: {len(r.liveness.stuck):,} "
                          f"reached states from which no rerun or recovery settles; the shortest path to one, "
                          f"{r.stuck.length} steps: {sentence}", highlight=False)
            console.print("\n".join(cm.trace_lines(r.stuck)), highlight=False, markup=False)
            _migration_trace(args, name, variant, r.bounds.name, name_, r.stuck)
    _print_verdicts("properties of the paired writer migration (spec.migration)", spec, result)
    props = len(spec.INVARIANTS) + len(spec.STEP_PROPERTIES) + 1
    if result.ok:
        console.print(f"[bold green]PASS[/]: {props} properties hold (bounded liveness among them), "
                      f"{len(spec.SOMETIMES)} sometimes properties witnessed")
    else:
        broken = _broken_properties(result, spec)
        console.print(f"[bold red]FAIL[/]: the paired writer migration ({variant.value}, bounds {name})"
                      + (f" breaks {', '.join(broken)} (traces in {args.out})" if broken else "")
                      + (" and" if broken and result.missed else "")
                      + (f" never witnesses {', '.join(result.missed)}" if result.missed else ""), highlight=False)
    return 0 if result.ok else 1


def _lock_check(args, name: str, gate: bool = False, stages: Optional[Board] = None) -> int:
    """The projection lock's model check (``checker.lock``) at bounds suite ``name``: a table, each violation's and
    each stuck state's shortest trace (the finding it is, under ``seed``), the "sometimes" properties never
    witnessed. In the ``gate``, a replica-only variant such as fix-f1 takes the fixed one."""
    from envreplica.checker import lock as cl
    from envreplica.model import lock as ml
    from envreplica.spec import lock as spec

    variant = _seed_or_fixed(args, gate, ml.Variant, "the projection lock's model")
    console.print(f"\n[bold]lock model check[/]: the projection lock, a kill at any step "
                  f"(bounds {name}, variant {variant.value})")
    with (stages or _stages(args)).stage("lock model check") as progress:
        result = cl.run_suite(ml.suite(name, variant), progress=progress)
    from envreplica.spec.compiled import choose

    table = Table(title=f"envreplica check --protocol lock --bounds {name} --variant {variant.value}",
                  caption=f"the model ran {choose()}")  # compiled by mypyc with the replica's, or interpreted
    for col in ("bounds", "processes", "calls", "kills", "pid reuses", "distinct states", "depth", "closure",
                "stuck", "seconds", "states/s"):
        table.add_column(col, justify="left" if col == "bounds" else "right")
    for r in result.runs:
        b, live = r.bounds, r.liveness
        table.add_row(b.name, str(b.processes), str(b.calls), str(b.crashes), str(b.reuses),
                      f"{r.result.states:,}", str(r.result.depth), f"{live.closure:,}" if live else "-",
                      str(len(live.stuck)) if live else "-", f"{r.seconds:.1f}",
                      f"{r.result.states / r.seconds:,.0f}" if r.seconds else "-")
    console.print(table)
    for r in result.runs:
        for prop_name, violation in r.result.violations.items():
            named = _lock_findings_named(prop_name, r.bounds)
            console.print(f"[bold red]VIOLATED[/] {prop_name} at bounds {r.bounds.name}, {violation.length} steps"
                          f"{named}: {violation.prop.statement}", highlight=False)
            console.print("\n".join(cl.trace_lines(violation)), highlight=False, markup=False)
            _lock_trace(args, name, variant, r.bounds, prop_name, violation)
        if r.stuck is not None:
            assert r.liveness is not None
            name_, sentence = spec.RECOVERABLE
            named = _lock_findings_named(name_, r.bounds)
            console.print(f"[bold red]VIOLATED[/] {name_} at bounds {r.bounds.name}: {len(r.liveness.stuck):,} "
                          f"reached states from which the processes alone never settle; the shortest path to one, "
                          f"{r.stuck.length} steps{named}: {sentence}", highlight=False)
            console.print("\n".join(cl.trace_lines(r.stuck)), highlight=False, markup=False)
            _lock_trace(args, name, variant, r.bounds, name_, r.stuck)
    _print_verdicts("properties of the projection lock (spec.lock)", spec, result)
    props = len(spec.INVARIANTS) + len(spec.STEP_PROPERTIES) + 1
    if result.ok:
        console.print(f"[bold green]PASS[/]: the projection lock: {props} properties hold (bounded liveness among "
                      f"them), {len(spec.SOMETIMES)} sometimes properties witnessed, {result.states:,} states")
    else:
        broken = _broken_properties(result, spec)
        console.print(f"[bold red]FAIL[/]: the projection lock ({variant.value}) breaks {', '.join(broken) or 'no property'}"
                      + (f"; never witnessed: {', '.join(result.missed)}" if result.missed else "")
                      + f" (traces in {args.out})", highlight=False)
    return 0 if result.ok else 1


def _print_verdicts(title: str, spec, result) -> None:
    """A suite's verdict on each property of ``spec`` (a protocol's spec module: ``INVARIANTS``,
    ``STEP_PROPERTIES``, ``RECOVERABLE``, ``SOMETIMES``) over ``result``'s bounds, then each "sometimes" property
    no bounds witnessed (the migration's and the lock's checks)."""
    verdicts = Table(title=title)
    for col in ("property", "kind", "verdict", "statement"):
        verdicts.add_column(col)
    for prop in (*spec.INVARIANTS, *spec.STEP_PROPERTIES):
        broken = [r.bounds.name for r in result.runs if prop.name in r.result.violations]
        verdicts.add_row(prop.name, prop.kind, f"[red]violated ({', '.join(broken)})[/]" if broken
                         else "[green]holds[/]", prop.statement)
    stuck = [r.bounds.name for r in result.runs if r.liveness is not None and not r.liveness.ok]
    verdicts.add_row(spec.RECOVERABLE[0], "bounded liveness",
                     f"[red]violated ({', '.join(stuck)})[/]" if stuck else "[green]holds[/]", spec.RECOVERABLE[1])
    for prop in spec.SOMETIMES:
        seen = [r.bounds.name for r in result.runs if prop.name not in r.missed]
        verdicts.add_row(prop.name, "sometimes", f"[green]witnessed ({', '.join(seen)})[/]" if seen
                         else "[red]never witnessed[/]", prop.statement)
    console.print(verdicts)
    for prop_name in result.missed:
        console.print(f"[bold red]NEVER WITNESSED[/] {prop_name} (at no bounds of the suite): a pass would be vacuous")


def _lock_findings_named(prop: str, bounds) -> str:
    """The findings a violation of ``prop`` at ``bounds`` is, in words: the one finding of a run that is ``fixed``
    less one fix; under the seed, the findings whose flaw breaks ``prop``."""
    from envreplica.checker import lock as cl

    alone = cl.finding_of(bounds.fixes)
    if alone is not None:
        return f" (finding {alone.id}: {alone.title}; docs/findings.md)"
    if bounds.fixes:
        return ""
    found = cl.findings_breaking(prop)
    return f" (the seed's flaw{'s' if len(found) > 1 else ''} {', '.join(f.id for f in found)}; docs/findings.md)" \
        if found else ""


def _lock_trace(args, suite_name: str, variant, bounds, prop: str, violation) -> None:
    """A lock counterexample (or a stuck state's path) written as an ITF trace to ``--out``, its page beside."""
    from envreplica.checker import lock as cl

    meta = {"variant": variant.value, "suite": suite_name, "bounds": bounds.name, "violated": prop,
            "fixes": sorted(f.value for f in bounds.fixes)}
    alone = cl.finding_of(bounds.fixes)
    found = (alone,) if alone is not None else cl.findings_breaking(prop) if not bounds.fixes else ()
    if found:
        meta["finding"] = ", ".join(f.id for f in found)
    path = cl.write_trace(Path(args.out) / f"lock-{variant.value}-{bounds.name}-{prop}.itf.json", violation, meta)
    console.print(f"  trace written to [bold]{path}[/] (envreplica report {path})", highlight=False)
    _page_beside(path, args)
    if getattr(args, "report", None):
        from envreplica.report.run import add_trace

        add_trace(args.report, path)


def _migration_trace(args, suite_name: str, variant, bounds: str, prop: str, violation) -> None:
    """A migration counterexample (or a stuck state's path) written as an ITF trace to ``--out``, its page beside."""
    from envreplica.checker import migration as cm

    path = cm.write_trace(Path(args.out) / f"migration-{variant.value}-{bounds}-{prop}.itf.json", violation,
                          {"variant": variant.value, "suite": suite_name, "bounds": bounds, "violated": prop})
    console.print(f"  trace written to [bold]{path}[/] (envreplica report {path})", highlight=False)
    _page_beside(path, args)
    if getattr(args, "report", None):  # the gate's page shows it beside the replica's counterexamples
        from envreplica.report.run import add_trace

        add_trace(args.report, path)


def _model_check(args, stages: Optional[Board] = None) -> int:
    """The replica's model check at ``--bounds``: each bounds searched (its progress on ``stages``), the tables,
    each violation's shortest trace; 1 when a property is violated or a "sometimes" property never witnessed."""
    stages = stages or _stages(args)
    variant = Variant(args.variant)
    bounds_suite = suite(args.bounds, variant)
    out_dir = Path(args.out)
    failed = False
    total_cov = Coverage()
    collision = 0.0  # TLC's estimate, summed over the bounds
    verdicts: dict[str, list[str]] = {p.name: [] for p in P.ALL}
    record = None  # --report: what the page needs of the model check (it may run in a child process)
    if getattr(args, "report", None):
        from envreplica.report import ModelCheckRecord

        record = ModelCheckRecord(args)
    from envreplica.spec.compiled import choose

    summary = Table(title=f"envreplica check --bounds {args.bounds} --variant {variant.value}",
                    caption=f"the model ran {choose()}")  # compiled by mypyc or interpreted, and why
    for col in ("bounds", "mode", "distinct states", "transitions", "depth", "complete", "seconds", "states/s"):
        summary.add_column(col, justify="right" if col not in ("bounds", "mode") else "left")
    for bounds in bounds_suite:
        with stages.stage(f"model check {bounds.name}") as progress:
            def report(r, progress=progress):
                progress(Tick(r.states, None, "states", note=f"depth {r.depth}"))

            done = run(bounds, progress=report, workers=args.workers, ray=args.ray,
                       symmetry=getattr(args, "symmetry", False))
        r = done.result
        total_cov.merge(done.coverage)
        collision += r.collision_probability
        summary.add_row(bounds.name, bounds.mode.value, f"{r.states:,}", f"{r.transitions:,}", str(r.depth),
                        "yes" if r.complete else f"to depth {bounds.max_depth}", f"{r.seconds:.1f}",
                        f"{r.states_per_second:,.0f}")
        if record is not None:
            record.add_bounds(bounds, r)
        for p in P.ALL:
            if p.kind in ("invariant", "step"):
                verdicts[p.name].append("VIOLATED" if p.name in r.violations else "holds")
            else:
                verdicts[p.name].append("witnessed" if p.name in r.witnessed else "not seen")
        for name, violation in r.violations.items():
            failed = True
            path = itf.write(out_dir / f"{variant.value}-{bounds.name}-{name}.itf.json", violation.steps,
                             f"{name}: {violation.prop.statement}",
                             {"variant": variant.value, "bounds": bounds.name, "violated": name,
                              "ackPageBytes": bounds.ack_page_bytes})
            print_counterexample(violation)
            if record is not None:
                record.add_trace(path)
            console.print(f"  trace written to [bold]{path}[/]  (envreplica replay {path}; "
                          f"envreplica diagram --trace {path})")
            _page_beside(path, args)
            console.print()
    console.print(summary)
    console.print(f"visited sets of 64-bit fingerprints: estimated probability that two distinct states "
                  f"shared one (and a state went unexplored) {collision:.1e} (TLC's states x transitions / 2^64)")

    table = Table(title="properties")
    table.add_column("property")
    table.add_column("kind")
    for b in bounds_suite:
        table.add_column(b.name)
    table.add_column("statement", overflow="fold")
    for p in P.ALL:
        cells = verdicts[p.name]
        styled = [f"[red]{c}[/]" if c in ("VIOLATED",) else f"[yellow]{c}[/]" if c == "not seen" else f"[green]{c}[/]"
                  for c in cells]
        table.add_row(p.name, p.kind, *styled, p.statement)
    console.print(table)
    never = [p.name for p in P.SOMETIMES if all(c == "not seen" for c in verdicts[p.name])]

    _coverage(total_cov, args, "coverage (all bounds of the suite together)", "not reached at these bounds")
    if never:
        console.print(f"[red]vacuity: never witnessed: {', '.join(never)}[/]")
        failed = True
    if record is not None:
        record.save(verdicts, total_cov, collision, failed)
    if failed:
        violated = [name for name, cells in verdicts.items() if "VIOLATED" in cells]
        console.print(f"[bold red]FAIL[/]: the replica's model check (bounds {args.bounds}, variant {variant.value})"
                      + (f" finds {', '.join(violated)} violated (traces in {args.out})" if violated else "")
                      + (" and" if violated and never else "")
                      + (f" never witnesses {', '.join(never)} (a pass would be vacuous)" if never else ""),
                      highlight=False)
    else:
        console.print("[bold green]PASS[/]: every property holds at these bounds")
    return 1 if failed else 0


def cmd_simulate(args) -> int:
    from envreplica.checker.simulate import simulate
    from envreplica.model.state import GateEngine

    variant = Variant(args.variant)
    failed = False
    table = Table(title=f"envreplica simulate --bounds {args.bounds} --variant {variant.value} "
                        f"(gate moved by the transitions machine)")
    for col in ("bounds", "walks", "steps", "distinct states", "steps/s", "violations"):
        table.add_column(col)
    for bounds in suite(args.bounds, variant):
        sim = simulate(bounds, args.walks, args.depth, seed=args.seed, engine=GateEngine(args.engine))
        table.add_row(bounds.name, str(sim.walks), f"{sim.steps:,}", f"{sim.distinct:,}",
                      f"{sim.steps_per_second:,.0f}", ", ".join(sim.violations) or "none")
        for name, violation in sim.violations.items():
            failed = True
            print_counterexample(violation)
            path = itf.write(Path(args.out) / f"sim-{variant.value}-{bounds.name}-{name}.itf.json", violation.steps,
                             f"{name}: {violation.prop.statement}", {"variant": variant.value, "bounds": bounds.name,
                                                                     "violated": name, "ackPageBytes": bounds.ack_page_bytes})
            console.print(f"  walk written to [bold]{path}[/]")
            _page_beside(path, args)
    console.print(table)
    return 1 if failed else 0


def cmd_diagram(args) -> int:
    # No renderer (spec.diagram.render): one line on stderr, the DOT source instead (to stdout, or to
    # --output's FILE.dot), exit 2 as for any command that could not run as asked (cli.errors).
    from envreplica.cli.errors import USER_ERROR_EXIT
    from envreplica.spec import diagram

    trace = input_file(Path(args.trace), "a trace to draw (.itf.json or .jsonl)") if args.trace else None
    output = Path(args.output) if args.output else None
    try:
        data = diagram.gate_diagram(args.format, trace)
    except diagram.RendererUnavailable as error:
        source = diagram.gate_diagram("dot", trace)
        if output is None:
            print(f"envreplica diagram: {error}; the DOT source follows", file=sys.stderr, flush=True)
            sys.stdout.buffer.write(source)
            sys.stdout.flush()
        else:
            if output.is_dir():  # as when it renders: one line, exit 2 (cli.errors)
                raise IsADirectoryError(21, "Is a directory", str(output))
            dot_path = output.with_suffix(".dot")
            dot_path.parent.mkdir(parents=True, exist_ok=True)
            dot_path.write_bytes(source)
            print(f"envreplica diagram: {error}; wrote the DOT source to {dot_path}", file=sys.stderr)
        return USER_ERROR_EXIT
    if args.verbose and diagram.last_renderer is not None:
        print(f"envreplica diagram: rendered with {diagram.last_renderer}", file=sys.stderr)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(data)
        console.print(f"wrote {args.output}")
    else:
        sys.stdout.buffer.write(data)
    return 0


_REPLAY_INPUT = ("an .itf.json trace (written by `envreplica check` or `envreplica conformance`) or a .jsonl of "
                 "adapter requests")


def cmd_replay(args) -> int:
    path = input_file(Path(args.file), _REPLAY_INPUT)
    if path.suffix == ".jsonl":
        return _replay_requests(args)
    try:
        doc = itf.load(path)
    except ValueError as error:  # not UTF-8, not JSON, or no ITF trace: the line names which
        raise UsageError(f"{error}; give {_REPLAY_INPUT}") from None
    meta = doc.get("#meta", {})
    protocol = meta.get(itf.PROTOCOL, itf.REPLICA) if isinstance(meta, dict) else itf.REPLICA
    if protocol != itf.REPLICA:  # its states are another model's: itf.replay reruns the replica's
        raise UsageError(f"{path} is a trace of the {protocol} protocol (its #meta.protocol), and replay reruns the "
                         f"replica's; envreplica report {path} steps through it")
    try:
        replayed = itf.replay(doc)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as error:  # ENVREPLICA_TRACEBACK=1 shows it
        raise UsageError(f"{path}: its states do not fit an ITF trace of this model ({type(error).__name__}: "
                         f"{error}); give {_REPLAY_INPUT}") from error
    console.print(f"replaying {args.file}: {meta.get('description', '')} "
                  f"(variant {meta.get('variant', 'fixed')})")
    for i, (action, result, st) in enumerate(replayed.steps):
        if action is None:
            continue
        data = itf.action_json(action)
        op = data.pop("op")
        console.print(f"  #{i} [bold]{op}[/] {_short(data)}", highlight=False)
        console.print(f"      -> {_short(itf.result_json(result))}   gate={st.authority.gate.value}", highlight=False)
    violated = []
    prev = replayed.steps[0][2]
    for action, result, st in replayed.steps[1:]:
        for p in P.INVARIANTS:
            if not p.check(st) and p.name not in violated:
                violated.append(p.name)
        if action is not None and result is not None:
            for p in P.STEP_PROPERTIES:
                if not p.check(prev, action, result, st) and p.name not in violated:
                    violated.append(p.name)
        prev = st
    if replayed.diverged_at is not None:
        console.print(f"[red]the model parts from the trace at state #{replayed.diverged_at}: "
                      f"{', '.join(replayed.differing_vars)} differ[/]")
    else:
        console.print("[green]the model reproduces every state of the trace[/]")
    if violated:
        console.print(f"[red]violated on replay: {', '.join(violated)}[/]")
    return 1 if violated or replayed.diverged_at is not None else 0


def _replay_requests(args) -> int:
    """Replay a JSON-lines file of adapter requests on the model and an implementation."""
    from envreplica.conformance.drivers import TEST_MASTER_KEY, ModelDriver, SqliteDriver
    from envreplica.conformance.replica import (
        _scratch_dir,
        format_steps,
        read_requests,
        replay_steps,
    )

    import shutil

    variant = Variant(args.variant or Variant.FIXED.value)
    try:
        requests = read_requests(Path(args.file))
    except ValueError as error:  # a line that is not JSON, or not UTF-8
        raise UsageError(f"{error}; give a .jsonl of adapter requests, one JSON object per line") from None
    if not requests:
        raise UsageError(f"{args.file} holds no requests, so there is nothing to replay; give a .jsonl of adapter "
                         f"requests, one JSON object per line (`envreplica conformance --out` writes them)")
    scratch = None
    if args.adapter:
        from envreplica.conformance.external import SubprocessDriver

        impl: SubprocessDriver | SqliteDriver = SubprocessDriver(args.adapter)
        what = repr(args.adapter)
    else:
        scratch = _scratch_dir()
        print("envreplica replay: the scratch replica is sealed under the public TEST key", file=sys.stderr)
        impl = SqliteDriver(variant, Path(scratch) / "replica.db", master_key=TEST_MASTER_KEY)
        what = "the built-in SQLite implementation"
    console.print(f"replaying {args.file}: {len(requests)} adapter requests on the model and {what} "
                  f"(variant {variant.value})")
    try:
        steps, divergence = replay_steps(requests, impl, ModelDriver(variant))
    finally:
        impl.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    console.print(format_steps(steps, divergence["reason"] if divergence else None), highlight=False, markup=False)
    if divergence is not None:
        console.print(f"[red]the implementation parts from the model at step #{divergence['index']}[/]")
        return 1
    console.print("[green]the implementation and the model agree on every step[/]")
    return 0


def cmd_report(args) -> int:
    """One trace file (a counterexample, a lockstep divergence) as one self-contained HTML page."""
    from envreplica.report import ReportInputError, write_trace_report

    from envreplica.report.run import page_path_of

    input_file(Path(args.file), "an .itf.json trace, or a lockstep .jsonl with its .itf.json beside it")
    out = Path(args.output) if args.output else page_path_of(Path(args.file))  # beside the trace
    try:
        path = write_trace_report(Path(args.file), out, adapter=args.adapter, timeout=args.timeout)
    except ReportInputError as error:
        raise UsageError(str(error)) from None
    console.print(f"report written to [bold]{path}[/]")
    return 0


def cmd_verify(args) -> int:
    """Check a replica at rest: SQLite's integrity, then every row, set and seal under the master key."""
    from envreplica.impl.anchor import FileAnchor
    from envreplica.impl.replica import SqliteReplica
    from envreplica.impl import files
    from envreplica.impl.sealing import Sealer, load_master_key

    # the path first: a wrong path is the error to report, with or without a key
    files.refuse_unusable(files.probe(args.db), what="the replica to verify", missing_ok=False)
    if args.test_key:
        print("envreplica verify: opening with the public TEST key (--test-key)", file=sys.stderr)
        from envreplica.conformance.drivers import TEST_MASTER_KEY

        key = TEST_MASTER_KEY
    else:
        key = load_master_key()
    anchor = FileAnchor(args.anchor) if args.anchor else None
    replica = SqliteReplica(args.db, sealer=Sealer(key), reader=None, create=False, anchor=anchor)
    try:
        problems = replica.verify()
    finally:
        replica.close()
    if problems:
        for problem in problems:
            console.print(f"[red]tampered or damaged[/]: {problem}", highlight=False, markup=True)
        console.print(f"[bold red]FAIL[/]: {args.db} does not verify ({len(problems)} problem(s)); the replica "
                      f"serves nothing until it is replaced (move it aside: the host re-creates it and the cloud "
                      f"re-sends a snapshot)")
        return 1
    what = "with the anchor" if anchor else "without an anchor: a whole-file rollback cannot be seen"
    console.print(f"[bold green]ok[/]: {args.db} verifies (SQLite integrity, every row's tag, every set's digest, "
                  f"every sealed value; {what})")
    return 0


def cmd_schema(args) -> int:
    """The contract's JSON Schema: the whole document, or one definition as a standalone schema."""
    from envreplica.spec import schema

    if args.list:
        sys.stdout.write("".join(f"{name}\n" for name in schema.definitions()))
        return 0
    if args.name is None:
        text = schema.shipped_path().read_text(encoding="utf-8")
    else:
        try:
            text = schema.render(schema.standalone(args.name))
        except KeyError as error:
            raise UsageError(f"{error.args[0]} (envreplica schema --list prints them)") from None
    sys.stdout.write(text)
    return 0


def cmd_lock(args) -> int:
    """Run a command holding the projection lock at PATH (impl.lock); its exit status, or 2 for the lock's errors."""
    from envreplica.cli.errors import USER_ERROR_EXIT
    from envreplica.impl.lock import LockLost, run_holding

    command = args.argv
    if "--" in command:  # options between PATH and "--" (argparse leaves them in the remainder)
        head, command = command[:command.index("--")], command[command.index("--") + 1:]
        _LOCK_OPTIONS.parse_args(head, namespace=args)
    if not command:
        raise UsageError("no command to run: envreplica lock PATH -- COMMAND [ARGS...]")
    if args.max_tries < 0 or args.wait < 0:
        raise UsageError(f"--max-tries and --wait must not be negative (got {args.max_tries}, {args.wait})")
    try:  # a command that cannot start: OSError, one line (guarded)
        status = run_holding(args.path, command, max_tries=args.max_tries, wait=args.wait)
    except LockLost as lost:
        print(f"envreplica lock: {lost} (the command exited {_exit_status(lost.result)})", file=sys.stderr)
        return USER_ERROR_EXIT
    return _exit_status(status)


def _lock_options() -> argparse.ArgumentParser:
    """``envreplica lock``'s options (also read between PATH and ``--``)."""
    options = argparse.ArgumentParser(prog="envreplica lock", add_help=False)
    options.add_argument("--max-tries", type=int, default=80, metavar="N",
                         help="how many waits before giving up busy (default: 80)")
    options.add_argument("--wait", type=float, default=0.05, metavar="SECONDS",
                         help="the pause between two tries (default: 0.05)")
    return options


_LOCK_OPTIONS = _lock_options()


def _exit_status(returncode: object) -> int:
    """A child's return code as a shell reports it: a signal N is 128 + N."""
    if not isinstance(returncode, int):
        return 0
    return returncode if returncode >= 0 else 128 - returncode


def _version() -> str:
    """The installed distribution's version (the one pyproject.toml states)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("envreplica")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``envreplica`` command line: every command's options (each command's function under ``func``)."""
    parser = argparse.ArgumentParser(
        prog="envreplica",
        description="Prove a gated secrets replica safe, and hold an implementation to that proof: model checks, "
                    "a lockstep conformance gate, and the reference implementation on SQLite.")
    parser.add_argument("--version", action="version", version=f"envreplica {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    from envreplica.cli import check_options

    c = sub.add_parser("check", help="model-check the protocols within named bounds, then hold the built-in "
                                     "implementations to them (the gate)")
    check_options.register(c)
    c.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant],
                   help="the replica's variants; the migration's and the lock's models take seed or fixed")
    c.add_argument("--lock-side", default=None, choices=["threads", "processes"],
                   help="the lock lockstep's lock users: threads of the harness (default, the cheaper) or processes "
                        "forked from it, each kill a real SIGKILL (docs/lock.md); only where the lock lockstep runs")
    c.add_argument("--out", default="out/traces",
                   help="where counterexample and divergence traces go (ITF, each with its page beside it)")
    c.add_argument("--no-trace-pages", action="store_true",
                   help="do not write NAME.html beside each trace --out writes (envreplica report FILE does later)")
    c.add_argument("--quiet", action="store_true",
                   help="no progress: no rows on a terminal, no heartbeat lines (every few seconds) elsewhere")
    c.add_argument("--coverage", action="store_true",
                   help="print the coverage tables in full (default: one line each saying how much was reached; "
                        "--report's page has them whatever this says)")
    c.add_argument("--model-only", action="store_true", help="the model check only (skip the lockstep)")
    c.add_argument("--model-stage", action="store_true", help=argparse.SUPPRESS)  # the background child
    c.add_argument("--progress-fd", type=int, default=None, help=argparse.SUPPRESS)  # its progress pipe
    c.add_argument("--serial", action="store_true",
                   help="run the model check before the lockstep, not beside it in a second process")
    c.add_argument("--no-concurrent", action="store_true",
                   help="skip the concurrent stage (processes on one file, threads on one replica)")
    c.add_argument("--workers", type=int, default=None, metavar="N",
                   help="model-check with N worker processes (checker.parallel: the same results as one); "
                        "with --ray, N actors (default: one per CPU of the cluster)")
    c.add_argument("--symmetry", action="store_true",
                   help="symmetry reduction: states equal up to renaming interchangeable project ids "
                        "(and, for the adversary, attempt, stream and organisation ids) are explored once "
                        "(model.symmetry); same verdicts and counterexample lengths, fewer states")
    c.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="model-check on a Ray cluster: 'auto', HOST:PORT, or 'local' to start one here "
                        "(needs the ray extra: pip install 'envreplica[ray]')")
    c.add_argument("--report", metavar="FILE", default=None,
                   help="also write the run as one self-contained HTML page: verdicts, coverage, figures, "
                        "and each counterexample or divergence to step through (envreplica report)")
    c.set_defaults(func=cmd_check)
    from envreplica.conformance.external import DEFAULT_TIMEOUT, START_TIMEOUT

    k = sub.add_parser("conformance", help="hold an implementation (an adapter command) against the model")
    k.add_argument("--adapter", required=True,
                   help="command that serves the adapter protocol on stdin/stdout, e.g. "
                        "'envreplica adapter --impl sqlite --test-key'")
    k.add_argument("--protocol", default="replica", choices=["replica", "migration", "lock"],
                   help="which protocol the adapter speaks: the replica's (default), the paired writer "
                        "migration's (docs/protocol.md, section 11: the migration lockstep through the adapter), or "
                        "the projection lock's (section 12: the lock lockstep through the adapter)")
    k.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant],
                   help="the model variant the implementation is held against (default: fixed; the migration's: "
                        "seed or fixed)")
    # The profiles' sizes live in conformance.replica.run (not imported here: it loads Hypothesis).
    k.add_argument("--profile", default="ci", choices=["dev", "ci", "nightly"],
                   help="Hypothesis profile: how many generated traces (default: ci, derandomized)")
    k.add_argument("--max-examples", type=int, default=None, help="override the profile's example count")
    k.add_argument("--steps", type=int, default=None, help="steps per generated trace (default: the profile's)")
    k.add_argument("--traces", help="a directory of saved *.jsonl traces to replay first")
    k.add_argument("--junit", help="write a JUnit XML report to this file")
    k.add_argument("--out", default="out/conformance",
                   help="where a divergence's trace files go (JSON lines and ITF, the ITF's page beside it)")
    k.add_argument("--no-trace-pages", action="store_true",
                   help="do not write NAME.html beside the divergence's ITF trace (envreplica report FILE does later)")
    k.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"seconds to wait for each answer (default: {DEFAULT_TIMEOUT:g}); given, it bounds an adapter "
                        f"process's first answer too, unless --start-timeout says otherwise")
    k.add_argument("--start-timeout", type=float, default=None, metavar="SECONDS",
                   help=f"seconds to wait for an adapter process's first answer (`reset`, or `hello` for the "
                        f"migration protocol), for an adapter that compiles at start (default: --timeout when given, "
                        f"else {START_TIMEOUT:g})")
    k.add_argument("--quiet", action="store_true",
                   help="no progress: no rows on a terminal, no heartbeat lines (every few seconds) elsewhere")
    k.add_argument("--coverage", action="store_true",
                   help="print the coverage table in full (default: one line saying how much was reached)")
    k.add_argument("--report", metavar="FILE", default=None,
                   help="also write the run as one self-contained HTML page (its divergence replayed on the "
                        "adapter, so the page shows both sides' tables)")
    k.set_defaults(func=cmd_conformance)
    m = sub.add_parser("simulate", help="random walks over the gated replica's model, beyond the checker's depth "
                                        "(the replica's alone: the other protocols are model-checked whole)")
    m.add_argument("--bounds", default="default", help=f"the replica's bounds, one of: {', '.join(PRESETS)}")
    m.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant])
    m.add_argument("--walks", type=int, default=200)
    m.add_argument("--depth", type=int, default=60)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--engine", default="machine", choices=["machine", "table"], help="what moves the gate")
    m.add_argument("--out", default="out/traces", help="where a violating walk's ITF trace goes (its page beside it)")
    m.add_argument("--no-trace-pages", action="store_true", help="do not write NAME.html beside each trace")
    m.set_defaults(func=cmd_simulate)
    d = sub.add_parser("diagram", help="draw the gate machine from the declared table")
    d.add_argument("--format", default="svg", choices=["svg", "png", "dot"])
    d.add_argument("--trace", help="an ITF trace whose gate path to highlight")
    d.add_argument("--output", help="file to write (default: standard output)")
    d.add_argument("--verbose", "-v", action="store_true", help="say which Graphviz renderer drew it (on stderr)")
    d.set_defaults(func=cmd_diagram)
    r = sub.add_parser("replay", help="replay a replica's ITF trace against its model, or a .jsonl of the replica's "
                                      "adapter requests against the model and an implementation (another "
                                      "protocol's trace, named by its #meta.protocol: envreplica report FILE)")
    r.add_argument("file")
    r.add_argument("--variant", default=None, choices=[v.value for v in Variant],
                   help="variant for a .jsonl replay (default: fixed)")
    r.add_argument("--adapter", help="for a .jsonl replay: an adapter command instead of the built-in SQLite")
    r.set_defaults(func=cmd_replay)
    rp = sub.add_parser("report", help="a trace (a counterexample, or a lockstep divergence, of any protocol) as "
                                       "one self-contained HTML page to step through")
    rp.add_argument("file", help="an .itf.json trace (envreplica check / conformance, any protocol: its "
                                 "#meta.protocol says which), or a lockstep .jsonl beside its .itf.json")
    rp.add_argument("-o", "--output", help="the HTML file to write (default: NAME.html beside the trace)")
    rp.add_argument("--adapter", help="for a lockstep divergence: replay it on this adapter command too, to show "
                                      "the implementation's tables beside the model's (needs its 'state' op: "
                                      "--test-key)")
    rp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each adapter response")
    rp.set_defaults(func=cmd_report)
    v = sub.add_parser("verify", help="check a replica at rest (integrity, tags, digests, seals); exit 1 if tampered")
    from envreplica.cli.errors import path_option

    v.add_argument("--db", required=True, metavar="PATH", type=path_option, help="the replica's SQLite file")
    v.add_argument("--anchor", metavar="FILE", help="the replica's rollback anchor file, if it has one")
    v.add_argument("--test-key", action="store_true", help="open with the public test key (conformance replicas)")
    v.set_defaults(func=cmd_verify)
    sc = sub.add_parser("schema", help="print the contract's JSON Schema (draft 2020-12), or one definition of it",
                        description="The contract of docs/protocol.md as JSON Schema: frames, results, value-store "
                                    "envelopes, adapter requests and responses, the state document.")
    sc.add_argument("name", nargs="?", help="one definition, printed as a standalone schema (e.g. PageFrame, "
                                            "Request, Response, StateDocument); default: the whole document")
    sc.add_argument("--list", action="store_true", help="print the definitions' names, one per line")
    sc.set_defaults(func=cmd_schema)
    lk = sub.add_parser("lock", parents=[_LOCK_OPTIONS], help="run a command holding the projection lock at PATH (lock.md)",
                        description="Run COMMAND while holding the projection lock at PATH (a directory the lock "
                                    "makes; its names go beside it): one process at a time across the processes "
                                    "of this machine; a lock whose owner is proved dead is taken over. Exit status: "
                                    "the command's; 2 with one line when the lock is busy, the path cannot be "
                                    "used, or the lock was lost while the command ran.")
    lk.add_argument("path", metavar="PATH", help="the lock path (its parent must be a writable directory)")
    lk.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                    help="the command to run holding the lock")
    lk.set_defaults(func=cmd_lock)
    from envreplica.cli import adapter

    adapter.register(sub)
    from envreplica.cli import migrate, recover

    migrate.register(sub)
    recover.register(sub)
    return parser


def main(argv=None) -> int:
    from envreplica.checker.collector import full_collections_deferred

    args = build_parser().parse_args(argv)
    # every command keeps what it builds to its end (states, examples, traces): the collector's full collections
    # would walk it again and again to free nothing (the replica's lockstep 10% faster without; checker.collector)
    with full_collections_deferred():
        return guarded(f"envreplica {args.command}", args.func, args)


if __name__ == "__main__":  # pragma: no cover
    from envreplica.cli import entry

    sys.exit(entry(main))
