"""Another git revision of envreplica, importable beside this checkout, for before/after benchmarks.

``worktree(rev)`` checks ``rev`` out with ``git worktree`` into a temporary
directory named ``envreplica`` (the package is the repository's root) and
yields the directory to put first on ``PYTHONPATH``: a subprocess started
with it imports ``rev``'s code, one started without it this checkout's (the
editable install). Both use this virtual environment's libraries, so the two
differ in envreplica's code only. ``probe(code, args, pythonpath)`` runs one
such subprocess and returns the JSON object its last line prints.

``compiled(rev, modules)`` is ``worktree(rev)`` with ``modules`` compiled by
Cython in that temporary tree (the same source, untyped: Cython 3 with
``annotation_typing=False``, so a ``str`` annotation admits a ``str`` Enum), for
measuring what compiling the model as it is would give. It needs Cython and a
C compiler (``pip install cython``; ``apt install gcc python3-dev``) and never
writes to this checkout: a compiled module next to its ``.py`` here would be
imported instead of it, stale after the next edit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[str]:
    """``rev`` checked out; yields the ``PYTHONPATH`` entry under which ``import envreplica`` is ``rev``'s."""
    with tempfile.TemporaryDirectory(prefix="envreplica-baseline-") as tmp:
        tree = Path(tmp) / "envreplica"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), rev], check=True,
                       capture_output=True)
        try:
            yield tmp
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False,
                           capture_output=True)


#: Run with a tree first on ``PYTHONPATH``: the file each module (given as ``model/replica.py``) was imported from.
_WHERE_IMPORTED = """
import importlib, json, sys
names = {m: "envreplica." + m[:-3].replace("/", ".") for m in sys.argv[1:]}
print(json.dumps({m: importlib.import_module(n).__file__ for m, n in names.items()}))
"""


class CompileError(RuntimeError):
    """Cython is missing, or could not compile a module (the message says which, and what to install)."""


@contextlib.contextmanager
def compiled(rev: str, modules: list[str]) -> Iterator[str]:
    """``worktree(rev)`` with ``modules`` (paths such as ``model/replica.py``) compiled in place by Cython.

    Each module is checked to import as an extension from that tree (``CompileError`` if not).
    """
    if importlib.util.find_spec("Cython") is None:
        raise CompileError("Cython is not installed in this environment: pip install cython (and a C compiler: "
                           "apt install gcc python3-dev), then run this again")
    with worktree(rev) as pythonpath:
        tree = Path(pythonpath) / "envreplica"
        done = subprocess.run([sys.executable, "-m", "Cython.Build.Cythonize", "-3", "-i", "-j",
                               str(os.cpu_count() or 1), "-X", "annotation_typing=False", *modules], cwd=tree,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise CompileError(f"Cython could not compile {rev}'s {' '.join(modules)}:\n{done.stdout[-2000:]}"
                               f"{done.stderr[-2000:]}")
        found = probe(_WHERE_IMPORTED, modules, pythonpath)
        stray = {m: where for m, where in found.items() if not where.startswith(str(tree)) or where.endswith(".py")}
        if stray:
            raise CompileError(f"the compiled tree imported these from elsewhere, or as Python: {stray}")
        yield pythonpath


def probe(code: str, args: list, pythonpath: Optional[str], set_env: Optional[dict] = None) -> dict:
    """Run ``code`` with ``args`` in a fresh interpreter (``rev``'s envreplica first when ``pythonpath``).

    ``set_env``: variables set for that interpreter (a value of None removes one)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    for name, value in (set_env or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=tempfile.gettempdir(),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
