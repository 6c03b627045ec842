"""The implementation is an encoding of the seed of its own: nothing under ``impl/`` uses the model.

Issue 9, "two independent encodings": were ``envreplica.impl`` to import a
decision of ``envreplica.model``, a bug there would be in both sides of the
lockstep at once and the lockstep would agree with itself. Two checks, each
shown to fail on a planted import:

* ``test_no_impl_source_imports_the_model``: every ``impl/**/*.py`` parsed
  (``ast``), every import anywhere in it (module level, in a function, in a
  ``try`` or an ``if``, absolute or relative) resolved to the module it
  names; none may be ``envreplica.model`` or below, nor any
  ``envreplica.*`` module outside ``impl`` and the shared contract
  (``spec.domain``, ``spec.wire``, ``spec.variants``, and ``spec.frozen`` that
  ``spec.domain`` uses).
* ``test_importing_every_impl_module_loads_no_model_module``: a fresh
  interpreter imports every ``impl`` module and reports ``sys.modules``: no
  ``envreplica.model*`` (so no transitive import either), and no
  ``envreplica`` module beyond the allowed ones.

Leaves out: ``importlib.import_module`` / ``__import__`` with computed
names (no impl module uses either; the subprocess check would still see
what they load at import time).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import envreplica.impl

IMPL_DIR = Path(envreplica.impl.__file__).resolve().parent
PACKAGE = "envreplica.impl"
#: What ``impl`` may import of envreplica beyond itself: the shared contract only (``spec.frozen``, which
#: ``spec.domain``'s value types use for their hash, and ``spec.compiled``, which ``envreplica.spec`` runs first to
#: choose compiled or interpreted modules, hold no decision of the protocol).
CONTRACT = frozenset({"envreplica", "envreplica.spec", "envreplica.spec.domain", "envreplica.spec.wire",
                      "envreplica.spec.variants", "envreplica.spec.frozen", "envreplica.spec.compiled"})


def _impl_files() -> list[Path]:
    return sorted(p for p in IMPL_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def _module_of(path: Path) -> str:
    rel = path.relative_to(IMPL_DIR).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PACKAGE, *parts])


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree``, wherever it sits."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # ``from envreplica import model`` names a module too
                yield node.lineno, f"{target}.{alias.name}"


def _forbidden(name: str) -> bool:
    """An envreplica module ``impl`` must not import (``envreplica.model`` above all)."""
    if name == "envreplica.model" or name.startswith("envreplica.model."):
        return True
    if not name.startswith("envreplica."):
        return False
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        return False
    return name not in CONTRACT and not any(name.startswith(c + ".") for c in CONTRACT - {"envreplica",
                                                                                           "envreplica.spec"})


def forbidden_imports(path: Path, source: str) -> list[str]:
    """The forbidden imports of one file's source, as 'file:line: module'."""
    module = _module_of(path)
    tree = ast.parse(source, filename=str(path))
    out = []
    for line, name in _imported(tree, module, path.name == "__init__.py"):
        # ``from envreplica.spec import wire`` yields envreplica.spec and envreplica.spec.wire: judge the leaf.
        if _forbidden(name):
            out.append(f"{path.name}:{line}: {name}")
    return out


def test_no_impl_source_imports_the_model():
    files = _impl_files()
    assert len(files) >= 10, files  # the scan found the package
    problems = [p for f in files for p in forbidden_imports(f, f.read_text(encoding="utf-8"))]
    assert problems == [], "impl imports outside the shared contract:\n" + "\n".join(problems)


@pytest.mark.parametrize("planted", [
    "from envreplica.model.rules import state_order\n",
    "import envreplica.model.store as store\n",
    "from envreplica import model\n",
    "def f():\n    from envreplica.model.replica import page_fits\n    return page_fits\n",
    "try:\n    from ..model import rules\nexcept ImportError:\n    rules = None\n",
    "from ..model.state import ModelConfig\n",
    "from envreplica.spec.gate import Gate\n",
    "from envreplica.spec import properties\n",
], ids=["from-module", "import-as", "from-package", "in-function", "relative-in-try", "relative", "spec-gate",
        "spec-properties"])
def test_the_scan_sees_a_planted_import(planted):
    """The scan is not vacuous: each way of importing the model (or a non-contract module) is caught."""
    path = IMPL_DIR / "decisions.py"
    source = path.read_text(encoding="utf-8") + "\n" + planted
    assert forbidden_imports(path, source), planted


def test_allowed_imports_pass_the_scan():
    path = IMPL_DIR / "decisions.py"
    for ok in ("from envreplica.spec import wire\n", "from envreplica.spec.domain import Head\n",
               "from envreplica.spec.variants import Variant\n", "from . import rows\n",
               "from envreplica.impl.rows import AuthorityRow\n", "import json\n"):
        assert forbidden_imports(path, ok) == [], ok


_PROBE = """
import importlib, importlib.machinery, json, pathlib, sys
root = pathlib.Path(sys.argv[1])
plant = sys.argv[2:4]  # [module, code]: that module's source gets the code appended when it is imported


class _Planted(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        return compile(self.get_source(fullname) + "\\n" + plant[1] + "\\n", self.path, "exec")


class _Plant:
    def find_spec(self, name, path=None, target=None):
        if not plant or name != plant[0]:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = _Planted(name, spec.origin)
        return spec


sys.meta_path.insert(0, _Plant())
names = []
for path in sorted(root.rglob("*.py")):
    if "__pycache__" in path.parts:
        continue
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    names.append(".".join(["envreplica.impl", *parts]))
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(m for m in sys.modules if m.startswith("envreplica"))}))
"""


def _loaded_after_importing_impl(*plant: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(IMPL_DIR), *plant], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _offenders(loaded: list[str]) -> list[str]:
    return [m for m in loaded if _forbidden(m)]


def test_importing_every_impl_module_loads_no_model_module():
    report = _loaded_after_importing_impl()
    assert "envreplica.impl.replica" in report["imported"] and "envreplica.impl.decisions" in report["imported"]
    assert _offenders(report["loaded"]) == [], report["loaded"]


@pytest.mark.parametrize("module, code", [
    ("envreplica.impl.decisions", "from envreplica.model.rules import state_order"),
    ("envreplica.impl.rows", "def _later():\n    from envreplica.model import store\n_later()"),
    ("envreplica.impl.valuestores", "import envreplica.conformance.readback"),  # transitively loads the model
], ids=["decisions-direct", "rows-in-function", "valuestores-transitive"])
def test_the_subprocess_check_sees_a_planted_import(module, code):
    """The probe with one impl module's source planted with an import (in the child only; no file changes)."""
    report = _loaded_after_importing_impl(module, code)
    offenders = _offenders(report["loaded"])
    assert any(m.startswith("envreplica.model") for m in offenders), offenders


def test_no_spec_module_imports_the_model():
    """The spec judges the model: no module under ``spec/`` (the properties above all) imports
    ``envreplica.model``, anywhere in its source. What a read serves is ``spec.serving``, the seed's read
    stated over the state; the model's own read is a step the properties judge."""
    import envreplica.spec

    spec_dir = Path(envreplica.spec.__file__).resolve().parent
    found = []
    for path in sorted(p for p in spec_dir.rglob("*.py") if "__pycache__" not in p.parts):
        rel = path.relative_to(spec_dir).with_suffix("")
        module = ".".join(["envreplica.spec", *[p for p in rel.parts if p != "__init__"]])
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            if name == "envreplica.model" or name.startswith("envreplica.model."):
                found.append(f"{path.name}:{line}: {name}")
    assert found == [], found
