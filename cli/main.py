"""The ``envreplica`` command: check, simulate, diagram, replay, adapter, migrate.

``check`` model-checks a named bounds suite under a variant, prints the
invariant table and the coverage table, writes each property's shortest
counterexample as an ITF trace, and exits 1 on a violation (or on a
"sometimes" property never witnessed, which would make the pass vacuous).
``simulate`` takes seeded random walks with the gate moved by the
``transitions`` machine. ``diagram`` draws the gate machine from the declared table, a trace's gate path
highlighted. ``replay`` reruns a trace on the model and shows where it parts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envreplica.checker import itf
from envreplica.checker.coverage import UNREACHABLE, Coverage
from envreplica.checker.run import run
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
    variant = Variant(args.variant)
    bounds_suite = suite(args.bounds, variant)
    out_dir = Path(args.out)
    failed = False
    total_cov = Coverage()
    verdicts: dict[str, list[str]] = {p.name: [] for p in P.ALL}
    summary = Table(title=f"envreplica check --bounds {args.bounds} --variant {variant.value}")
    for col in ("bounds", "mode", "distinct states", "transitions", "depth", "complete", "seconds", "states/s"):
        summary.add_column(col, justify="right" if col not in ("bounds", "mode") else "left")
    for bounds in bounds_suite:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=None),
                      TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                      transient=True, disable=args.quiet) as progress:
            task = progress.add_task(f"{bounds.name} ({bounds.mode.value})", total=None, info="")

            def report(r, task=task):
                progress.update(task, info=f"{r.states:,} states  depth {r.depth}  {r.states_per_second:,.0f}/s")

            done = run(bounds, progress=report)
        r = done.result
        total_cov.merge(done.coverage)
        summary.add_row(bounds.name, bounds.mode.value, f"{r.states:,}", f"{r.transitions:,}", str(r.depth),
                        "yes" if r.complete else f"to depth {bounds.max_depth}", f"{r.seconds:.1f}",
                        f"{r.states_per_second:,.0f}")
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
            console.print(f"  trace written to [bold]{path}[/]  (envreplica replay {path}; "
                          f"envreplica diagram --trace {path})\n")
    console.print(summary)

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

    cov = Table(title="coverage (all bounds of the suite together)")
    for col in ("group", "item", "count"):
        cov.add_column(col, justify="right" if col == "count" else "left")
    unreachable = {c.value: why for c, why in UNREACHABLE.items()}
    for group, item, n in total_cov.rows():
        shown = f"{n:,}" if n else ("[dim]unreachable[/]" if item in unreachable else "[yellow]0[/]")
        cov.add_row(group, item, shown)
    console.print(cov)
    for item, why in unreachable.items():
        console.print(f"[dim]unreachable {item}: {why}[/]")
    unreached = total_cov.unreached()
    if unreached:
        console.print(f"[yellow]not reached at these bounds:[/] {', '.join(i for _, i in unreached)}")
    if never:
        console.print(f"[red]vacuity: never witnessed: {', '.join(never)}[/]")
        failed = True
    console.print("[bold red]FAIL[/]" if failed else "[bold green]PASS[/]: every property holds at these bounds")
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
    console.print(table)
    return 1 if failed else 0


def cmd_diagram(args) -> int:
    from envreplica.spec.diagram import render

    data = render(args.format, Path(args.trace) if args.trace else None)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_bytes(data)
        console.print(f"wrote {args.output}")
    else:
        sys.stdout.buffer.write(data)
    return 0


def cmd_replay(args) -> int:
    doc = itf.load(Path(args.file))
    meta = doc.get("#meta", {})
    replayed = itf.replay(doc)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="envreplica", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="model-check the protocol within named bounds")
    c.add_argument("--bounds", default="default", help=f"one of: {', '.join(PRESETS)}")
    c.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant])
    c.add_argument("--out", default="out/traces", help="where counterexample traces go")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=cmd_check)
    m = sub.add_parser("simulate", help="random walks over the model, beyond the checker's depth")
    m.add_argument("--bounds", default="default", help=f"one of: {', '.join(PRESETS)}")
    m.add_argument("--variant", default=Variant.FIXED.value, choices=[v.value for v in Variant])
    m.add_argument("--walks", type=int, default=200)
    m.add_argument("--depth", type=int, default=60)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--engine", default="machine", choices=["machine", "table"], help="what moves the gate")
    m.add_argument("--out", default="out/traces")
    m.set_defaults(func=cmd_simulate)
    d = sub.add_parser("diagram", help="draw the gate machine from the declared table")
    d.add_argument("--format", default="svg", choices=["svg", "png", "dot"])
    d.add_argument("--trace", help="an ITF trace whose gate path to highlight")
    d.add_argument("--output", help="file to write (default: standard output)")
    d.set_defaults(func=cmd_diagram)
    r = sub.add_parser("replay", help="replay an ITF trace against the model")
    r.add_argument("file")
    r.set_defaults(func=cmd_replay)
    from envreplica.conformance import adapter

    adapter.register(sub)
    try:
        from envreplica.impl import writer
    except ImportError:  # pragma: no cover - the writer contract is optional until it lands
        writer = None
    if writer is not None and hasattr(writer, "register"):
        writer.register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
