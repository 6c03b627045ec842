"""A real (non-editable) install ships one package, `envreplica`, and nothing generic.

The editable install in .venv resolves imports through a finder that points at
the repo, so it can hide packaging mistakes; this test builds and installs a
copy of the repo into a fresh venv and imports from there.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUBPACKAGES = ["spec", "model", "checker", "cli", "impl", "conformance", "reliability"]
GENERIC = [*SUBPACKAGES, "tests"]


def run(*args: object, cwd: Path | None = None) -> str:
    # and not ENVREPLICA_PURE_PYTHON, which make test sets for the suite: the install compiles as a user's would
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "ENVREPLICA_PURE_PYTHON")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.slow
def test_non_editable_install_is_one_namespaced_package(tmp_path: Path) -> None:
    # Build from a clean copy: no stale build/ or egg-info, and nothing written to the repo.
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
            ".hypothesis", ".pytest_cache", "out", "node_modules", "*.so", "compiled.json",
        ),
    )
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # --no-deps: only mypy-extensions, whose mypyc_attr the value types' modules import
    run(python, "-m", "pip", "install", "--quiet", "--no-deps", src, "mypy-extensions")

    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())

    # (a) one package with every subpackage under it
    for sub in SUBPACKAGES:
        assert (site / "envreplica" / sub / "__init__.py").is_file(), f"envreplica/{sub} missing"
    # the contract's JSON Schema ships with the package (envreplica schema prints it)
    assert (site / "envreplica" / "spec" / "contract.schema.json").is_file()
    # (b) no generic top-level names, and no editable redirection into the repo
    leaked = [name for name in GENERIC if (site / name).exists() or (site / f"{name}.py").exists()]
    assert not leaked, f"generic top-level names in site-packages: {leaked}"
    assert not list(site.glob("__editable__*")), "install is editable"

    # (c) importable from outside the repo, and from the venv, not the repo
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run(python, "-I", "-c", "import envreplica.spec.gate as m; print(m.__file__)", cwd=elsewhere)
    module = Path(out.strip()).resolve()
    assert module.is_relative_to(venv.resolve()), module
    assert not module.is_relative_to(REPO), module

    # (d) the install compiled the model (setup.py) where it can: under CI, which installs a C compiler, it must
    status = run(python, "-I", "-c", "from envreplica.spec import compiled; print(compiled.STATUS)", cwd=elsewhere)
    if os.environ.get("CI"):
        assert status.startswith("compiled (mypyc): built from these sources"), status
        assert (site / "envreplica" / "spec" / "compiled.json").is_file()


def test_every_docstring_is_valid_utf_8() -> None:
    """``help()`` and pydoc print docstrings as UTF-8: a lone surrogate in one (``"\\ud800"`` written
    unescaped in a docstring) makes ``help(module)`` raise UnicodeEncodeError, and Cython refuses the file."""
    import ast

    bad = []
    for package in SUBPACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False) or ""
                    try:
                        doc.encode("utf-8")
                    except UnicodeEncodeError as error:
                        where = getattr(node, "lineno", 1)
                        bad.append(f"{path.relative_to(REPO)}:{where} {getattr(node, 'name', '<module>')}: {error}")
    assert not bad, "docstrings that are not valid UTF-8 (escape the backslash: ``\"\\\\ud800\"``):\n" + "\n".join(bad)
