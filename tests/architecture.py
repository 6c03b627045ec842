"""Who imports whom in the ``envreplica`` package, read from the sources, and the layer rule it must follow.

The rule (``docs/architecture.md``): every import runs down the layers

    spec  <  model, impl  <  checker  <  conformance  <  report, reliability  <  cli

(a module may import its own folder's modules and any folder of a lower layer; two folders of one layer import
neither each other), and no modules import each other round a cycle, within a folder or across them.

The graph is read statically (``ast``), never by importing: every ``import`` and ``from ... import`` in a module,
at any depth (a function-level import, one inside ``if TYPE_CHECKING:``, one in a ``try``), is an arrow from that
module. ``from envreplica.X import name`` is an arrow to the module ``envreplica.X.name`` when there is one, else
to ``envreplica.X`` (the package's ``__init__``); importing a submodule is no arrow to its parent packages (Python
runs their ``__init__`` first, but nothing in them is used by the import). The one block left out is a module's
top-level ``if __name__ == "__main__":``: it runs only when the file is the program (``python -m ...``), never
when anything imports the module, so it is the program's arrow, not the module's (``conformance/adapter.py``
hands its command line to ``cli/adapter.py`` there).

The package's modules are found as ``setup.py`` finds its packages: ``[tool.setuptools.package-dir]`` in
``pyproject.toml`` maps each import name (``envreplica.conformance``) to a folder (``conformance/``); every
``*.py`` under it is a module, named by its path.

``python tests/architecture.py`` writes ``docs/architecture.svg`` (and prints what the check finds);
``tests/test_architecture.py`` holds the package to the rule and the committed picture to the graph.
"""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "envreplica"

#: Each top-level folder's layer, lowest first: a module may import its own folder and any folder of a lower rank.
#: ``reliability/`` drives the implementation through the conformance drivers and adapters (crashes, torn writes,
#: hostile adapters, the lock's stress): a tester of ``impl/`` like ``conformance/``, built on it, so above it;
#: nothing below the command line uses it, so beside ``report/`` (neither imports the other).
RANKS: Mapping[str, int] = {
    "spec": 0,
    "model": 1, "impl": 1,
    "checker": 2,
    "conformance": 3,
    "report": 4, "reliability": 4,
    "cli": 5,
}

#: Modules whose layer is not their folder's, and why. The pytest plugin is a front end (pytest's command line,
#: as ``cli/`` is envreplica's): it writes the HTML report, so it stands above ``report/``; it keeps its path,
#: which is the name of its public entry point (``pyproject.toml``: ``[project.entry-points.pytest11]``).
LAYER_OF_MODULE: Mapping[str, str] = {
    f"{PACKAGE}.conformance.pytest_plugin": "cli",
}


@dataclass(frozen=True)
class Import:
    """One arrow: ``source`` imports ``target`` (module names), at ``path:line``."""

    source: str
    target: str
    path: str
    line: int

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Problem:
    """What breaks the rule: ``kind`` ``"against the grain"``, ``"module cycle"`` or ``"layer cycle"``; the
    arrows that make it (each with its file and line); one sentence."""

    kind: str
    sentence: str
    imports: tuple[Import, ...]

    def __str__(self) -> str:
        return "\n".join([f"{self.kind}: {self.sentence}",
                          *(f"    {i.where()}: {i.source} imports {i.target}" for i in self.imports)])


# ---------------------------------------------------------------------------
# Reading the graph


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Import name -> folder, as ``pyproject.toml`` maps them."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return {name: root / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def modules(dirs: Mapping[str, Path]) -> dict[str, Path]:
    """Every module under the mapped folders: its name -> its file (a package is its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for name, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([name, *parts])] = path
    return found


def _is_main_block(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either order)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare) or len(node.test.ops) != 1:
        return False
    sides = [node.test.left, *node.test.comparators]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return isinstance(node.test.ops[0], ast.Eq) and names == ["__name__"] and texts == ["__main__"]


def _resolve(name: str, known: Mapping[str, Path]) -> Optional[str]:
    """The known module ``name`` is, or is inside (``a.b.c`` -> ``a.b`` when ``c`` is a name in it)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, known: Mapping[str, Path], shown: Callable[[Path], str] = str
               ) -> list[Import]:
    """The arrows from ``module`` (its source at ``path``) to the modules in ``known``: every import at any depth
    but in a top-level ``if __name__ == "__main__":``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    body = [node for node in tree.body if not _is_main_block(node)]
    found: list[Import] = []
    for top in body:
        for node in ast.walk(top):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                           for alias in node.names]
            for target in targets:
                resolved = _resolve(target, known) if target.split(".")[0] == PACKAGE else None
                if resolved is not None and resolved != module:
                    found.append(Import(module, resolved, shown(path), node.lineno))
    return found


def package_graph(root: Path = ROOT) -> list[Import]:
    """Every arrow between the package's modules, in file and line order (paths relative to ``root``)."""
    known = modules(package_dirs(root))
    arrows: list[Import] = []
    for module, path in known.items():
        arrows += imports_of(module, path, known, shown=lambda p: str(p.relative_to(root)))
    return sorted(set(arrows), key=lambda i: (i.path, i.line, i.target))


# ---------------------------------------------------------------------------
# The rule


def layer_of(module: str) -> str:
    """The layer a module sits in: its top-level folder (``envreplica.X...`` -> ``X``), or ``LAYER_OF_MODULE``'s."""
    return LAYER_OF_MODULE.get(module) or module.split(".")[1]


def against_the_grain(arrows: Iterable[Import], ranks: Mapping[str, int] = RANKS,
                      layer: Callable[[str], str] = layer_of) -> list[Problem]:
    """Every arrow to a layer not below its own (up, or sideways into another folder of the same rank), and every
    arrow from or to a layer the ranks do not name."""
    problems = []
    for i in arrows:
        a, b = layer(i.source), layer(i.target)
        if a == b:
            continue
        if a not in ranks or b not in ranks:
            unknown = a if a not in ranks else b
            problems.append(Problem("against the grain", f"{unknown} is in no layer (name it in RANKS)", (i,)))
        elif ranks[b] >= ranks[a]:
            way = "up" if ranks[b] > ranks[a] else "sideways"
            problems.append(Problem("against the grain", f"{a} (rank {ranks[a]}) imports {b} (rank {ranks[b]}): "
                                                         f"{way}", (i,)))
    return problems


def _cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def cycles(arrows: Sequence[Import], layer: Callable[[str], str] = layer_of) -> list[Problem]:
    """Every cycle of modules, and every cycle of layers (folders), each with the arrows inside it."""
    problems = []
    for kind, node in (("module cycle", lambda m: m), ("layer cycle", layer)):
        edges: dict[str, set[str]] = defaultdict(set)
        for i in arrows:
            if node(i.source) != node(i.target):
                edges[node(i.source)].add(node(i.target))
        for component in _cycles(edges):
            members = set(component)
            inside = tuple(i for i in arrows if node(i.source) in members and node(i.target) in members
                           and node(i.source) != node(i.target))
            problems.append(Problem(kind, " <-> ".join(component), inside))
    return problems


def check(arrows: Sequence[Import], ranks: Mapping[str, int] = RANKS,
          layer: Callable[[str], str] = layer_of) -> list[Problem]:
    """Everything that breaks the rule: arrows against the grain, then cycles of modules and of layers."""
    return [*against_the_grain(arrows, ranks, layer), *cycles(arrows, layer)]


# ---------------------------------------------------------------------------
# The picture


def part_of(module: str) -> str:
    """The box a module is drawn in: its top-level folder, or its folder's subpackage (``conformance.migration``);
    a module with a layer of its own (``LAYER_OF_MODULE``) is a box of its own."""
    if module in LAYER_OF_MODULE:
        return module.split(".", 1)[1]
    parts = module.split(".")[1:]
    if len(parts) >= 2 and _packages().get(".".join([PACKAGE, *parts[:2]]), Path()).name == "__init__.py":
        return ".".join(parts[:2])
    return parts[0]


@functools.lru_cache(maxsize=1)
def _packages() -> dict[str, Path]:
    return modules(package_dirs())


def dot_source(arrows: Sequence[Import], ranks: Mapping[str, int] = RANKS,
               part: Callable[[str], str] = part_of, layer: Callable[[str], str] = layer_of) -> str:
    """The house in one picture (Graphviz ``dot``): one box per folder or protocol subfolder, grouped by layer
    (the top row imports, the bottom row is imported), one arrow per pair of boxes labelled with its number of
    imports. Boxes of one folder share a cluster; imports inside one box are not drawn."""
    counts: Counter[tuple[str, str]] = Counter()
    parts: dict[str, str] = {}
    for i in arrows:
        a, b = part(i.source), part(i.target)
        parts[a], parts[b] = layer(i.source), layer(i.target)
        if a != b:
            counts[(a, b)] += 1
    for module in _packages():
        parts.setdefault(part(module), layer(module))
    lines = ['digraph architecture {', '  rankdir=TB; newrank=true; nodesep=0.25; ranksep=0.6;',
             '  node [shape=box, style="rounded,filled", fillcolor="#f4f4f4", fontname="Helvetica", fontsize=11];',
             '  edge [color="#5a6f8a", fontname="Helvetica", fontsize=9, arrowsize=0.6];',
             '  label="envreplica: who imports whom (arrows point at what is imported; '
             'python tests/architecture.py draws it)"; labelloc=b; fontname="Helvetica"; fontsize=10;']
    by_layer: dict[str, list[str]] = defaultdict(list)
    for name, lay in sorted(parts.items()):
        by_layer[lay].append(name)
    for lay in sorted(by_layer, key=lambda x: (-ranks.get(x, 99), x)):
        lines.append(f'  subgraph "cluster_{lay}" {{ label="{lay}/ (layer {ranks.get(lay, "?")})"; '
                     f'style="rounded"; color="#9aa7b8"; fontsize=10;')
        for name in by_layer[lay]:
            lines.append(f'    "{name}";')
        lines.append('  }')
    for rank in sorted(set(ranks.values())):  # the folders of one layer side by side
        same = sorted(f'"{lay}"' for lay in by_layer if ranks.get(lay) == rank and lay in parts)
        if len(same) > 1:
            lines.append(f'  {{ rank=same; {"; ".join(same)}; }}')
    for (a, b), n in sorted(counts.items()):
        lines.append(f'  "{a}" -> "{b}" [label="{n}"];')
    lines.append('}')
    return "\n".join(lines) + "\n"


def render_svg(source: str) -> tuple[bytes, Optional[str]]:
    """The picture as SVG, and the renderer that drew it (``spec.diagram.render``: graphviz-pure first)."""
    from envreplica.spec import diagram

    svg = diagram.render(source, "svg")
    return svg, (diagram.last_renderer.name if diagram.last_renderer else None)


SVG = ROOT / "docs" / "architecture.svg"


def main() -> int:
    arrows = package_graph()
    problems = check(arrows)
    for problem in problems:
        print(problem)
    svg, renderer = render_svg(dot_source(arrows))
    SVG.write_bytes(svg)
    print(f"{len(arrows)} imports between {len(modules(package_dirs()))} modules; {len(problems)} problems; "
          f"{SVG.relative_to(ROOT)} drawn by {renderer}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
