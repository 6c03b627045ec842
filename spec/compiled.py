"""Which modules run compiled by mypyc, and the switch back to their interpreted source.

Models: nothing of the protocol. The checker's hot path (the model's states,
actions and steps, the properties it evaluates, the coverage hooks and the
search) can be compiled to C by mypyc: ``setup.py`` does it when ``pip
install`` or ``make compiled`` (which ``make check`` and ``make test`` run)
finds mypyc and a C compiler. Each module of ``MODULES`` then has an
extension module beside its source (``model/state.cpython-311-...so``), which
Python imports in its place; all of them share one library, ``GROUP``'s. The
source stays the one truth: the same files run interpreted, with the same
states, verdicts and counterexamples (``tests/test_compiled.py``).

The compiled modules are used only when all of these hold, decided once per
process by ``choose`` (each package of ``MODULES`` calls it first):

* ``ENVREPLICA_PURE_PYTHON`` is not ``1`` (set, it forces the interpreted
  modules: for debugging, and for the comparison in
  ``bench/bench_checker.py``);
* the build left its record, ``compiled.json`` beside this file (the
  sources' SHA-256 digests and the extension suffix it built for);
* every source is still the one compiled: a module edited since the build
  is never run stale. Then the whole group runs interpreted, with one
  warning naming the changed file and the command that rebuilds it.

Otherwise a finder placed first on ``sys.meta_path`` hands each module of
``MODULES`` its ``.py`` file. ``STATUS`` says which way it went and why
(``envreplica check`` prints it).

Leaves out on purpose: partial use (a group is compiled together or not at
all: the modules call each other natively), and compiling anything off the
hot path (the implementation, the conformance gate, the migration model).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence

#: The modules mypyc compiles: every module a replica check runs per transition, and the projection lock's model
#: (its spec and model: ``tests/test_lock_model.py`` holds the two ways to the same states and traces).
MODULES: tuple[str, ...] = (
    "envreplica.spec.frozen",
    "envreplica.spec.domain",
    "envreplica.spec.serving",
    "envreplica.spec.properties",
    "envreplica.model.fmap",
    "envreplica.model.state",
    "envreplica.model.rules",
    "envreplica.model.store",
    "envreplica.model.replica",
    "envreplica.model.actions",
    "envreplica.model.generate",
    "envreplica.spec.lock",
    "envreplica.model.lock",
    "envreplica.checker.bfs",
    "envreplica.checker.coverage",
    "envreplica.checker.run",
)
#: The shared library's module (``GROUP + "__mypyc"``), beside this file.
GROUP = "envreplica.spec.compiled_model"
#: The build's record, beside this file.
RECORD = "compiled.json"
#: Set to ``1``: run the interpreted modules even where a build is there.
PURE_ENV = "ENVREPLICA_PURE_PYTHON"
#: What rebuilds a stale or missing build in a checkout.
REBUILD = "make compiled"



def source_of(module: str, root: Path) -> Path:
    """``envreplica.model.state`` -> ``ROOT/model/state.py`` (each package is a top-level folder of the checkout)."""
    parts = module.split(".")
    return root.joinpath(*parts[1:-1], parts[-1] + ".py")


def digests(root: Path, modules: Sequence[str] = MODULES) -> dict[str, str]:
    """Each module's source SHA-256, hex."""
    return {m: hashlib.sha256(source_of(m, root).read_bytes()).hexdigest() for m in modules}


def record(root: Path) -> dict[str, object]:
    """What a build writes to ``RECORD``: the sources it compiled and the extension suffix it built for."""
    return {"suffix": importlib.machinery.EXTENSION_SUFFIXES[0], "sources": digests(root)}


@dataclass(frozen=True)
class Status:
    """Which way ``choose`` went."""

    compiled: bool  # True: the extension modules run
    reason: str  # why, in words (a build's absence, the switch, a stale source)

    def __str__(self) -> str:
        return ("compiled (mypyc)" if self.compiled else "interpreted") + f": {self.reason}"


def _decide(spec_dir: Path) -> Status:
    if os.environ.get(PURE_ENV) == "1":
        return Status(False, f"{PURE_ENV}=1")
    try:
        built = json.loads((spec_dir / RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Status(False, f"no compiled build ({REBUILD}, or pip install with mypyc and a C compiler)")
    except (OSError, ValueError) as exc:
        return Status(False, f"the build's record {spec_dir / RECORD} is unreadable ({exc}): {REBUILD} rebuilds it")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if built.get("suffix") != suffix:
        return Status(False, f"built for {built.get('suffix')}, this Python loads {suffix}: {REBUILD} rebuilds it")
    sources = built.get("sources", {})
    if set(sources) != set(MODULES):
        return Status(False, f"the build compiled other modules than spec/compiled.py lists: {REBUILD} rebuilds it")
    root = spec_dir.parent
    try:
        now = digests(root)
    except OSError as exc:  # a source missing or unreadable: nothing to hold the build to
        return Status(False, f"a compiled module's source cannot be read ({exc}): {REBUILD} rebuilds it")
    for module, digest in now.items():
        if sources[module] != digest:
            changed = source_of(module, root).relative_to(root)
            return Status(False, f"{changed} changed since the build: running interpreted until {REBUILD}")
    return Status(True, "built from these sources")


class _Interpreted:
    """A meta-path finder that gives each module of ``MODULES`` its ``.py`` source, never its extension."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MODULES or not path:
            return None
        name = fullname.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, name + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


STATUS: Optional[Status] = None


def choose() -> Status:
    """Decide once per process whether ``MODULES`` run compiled; if not, make sure they load from source."""
    global STATUS
    if STATUS is None:
        STATUS = _decide(Path(__file__).resolve().parent)
        if not STATUS.compiled:
            sys.meta_path.insert(0, _Interpreted())
            if "changed since the build" in STATUS.reason:
                print(f"envreplica: the compiled model is stale ({STATUS.reason})", file=sys.stderr)
    return STATUS


def loaded() -> dict[str, bool]:
    """For each module of ``MODULES`` imported so far: whether it runs compiled (an extension module)."""
    return {m: not str(getattr(sys.modules[m], "__file__", "")).endswith(".py")
            for m in MODULES if m in sys.modules}
