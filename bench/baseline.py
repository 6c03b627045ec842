"""Another git revision of envreplica, importable beside this checkout, for before/after benchmarks.

``worktree(rev)`` checks ``rev`` out with ``git worktree`` into a temporary
directory named ``envreplica`` (the package is the repository's root) and
yields the directory to put first on ``PYTHONPATH``: a subprocess started
with it imports ``rev``'s code, one started without it this checkout's (the
editable install). Both use this virtual environment's libraries, so the two
differ in envreplica's code only. ``probe(code, args, pythonpath)`` runs one
such subprocess and returns the JSON object its last line prints.
"""

from __future__ import annotations

import contextlib
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


def probe(code: str, args: list, pythonpath: Optional[str]) -> dict:
    """Run ``code`` with ``args`` in a fresh interpreter (``rev``'s envreplica first when ``pythonpath``)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=tempfile.gettempdir(),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
