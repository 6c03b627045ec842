"""The built wheel, installed as a user installs it, runs every command's main path.

The editable install in .venv resolves imports through a finder that points at the repository, so it hides
packaging mistakes: a subpackage the wheel leaves out still imports there. (Issue 40: the wheel lacked
``envreplica.conformance.migration``; ``envreplica check`` exited 1 with "internal error: ModuleNotFoundError",
and ``conformance --protocol migration`` and ``adapter --protocol migration`` exited 3.) Here a clean copy of
the repository is built into a wheel (``pip wheel``, compiled by mypyc where it can be, as a user's is), the
wheel is installed with its dependencies into a fresh virtual environment outside the repository, and each
command runs from a folder outside it:

* the wheel holds every package folder (every folder with an ``__init__.py`` under the folders
  ``[tool.setuptools.package-dir]`` maps) and every file of them that is not Python (templates, the schema):
  a subpackage or a data file added later and left out fails here;
* ``check`` at its smallest budgets runs every protocol's stages (the replica's model check, the migration's
  model check, the lockstep, the concurrent stages, the migration lockstep) and passes; ``check`` under
  ``--variant seed`` finds F1 (exit 1) and writes its trace, which ``report`` renders;
* ``conformance`` through the built-in adapters (the replica's SQLite implementation and model; the
  migration's model and ``impl.paired``) passes; ``adapter --protocol migration`` answers a hello;
* ``schema`` prints the contract;
* ``migrate`` moves two stores together and ``recover`` refuses to roll back a completed migration, and
  restores a crashed one.

Budgets are counts (examples, bounds), never seconds; the timeouts are a safety net only.
"""

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUBPACKAGES = ["spec", "model", "checker", "cli", "impl", "conformance", "reliability", "report"]
GENERIC = [*SUBPACKAGES, "tests"]
#: What the clean copy leaves out: what a checkout never holds, and what a build or a run leaves in one.
LEFT_OUT = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache",
            ".mypy_cache", "out", "site", "node_modules", "*.so", "compiled.json")
#: The master key the stores below are sealed with (conformance.migration.disk.KEY: the public test key).
KEY_HEX = bytes(range(32)).hex()


def _env(**extra: str) -> dict[str, str]:
    # Not the suite's PYTHONPATH, nor ENVREPLICA_PURE_PYTHON (make test sets it for the suite): the install
    # compiles, and the commands run, as a user's would.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "ENVREPLICA_PURE_PYTHON",
                                                              "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


def run(*args: object, cwd: Path | None = None, status: int = 0, timeout: int = 600,
        env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``args`` run to its end (``input`` on its standard input); it must exit with ``status``."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout, input=input)
    assert proc.returncode == status, (f"{args} exited {proc.returncode}, not {status}:\n"
                                       f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def package_folders(root: Path) -> dict[str, Path]:
    """Every package the repository holds: its import name -> its folder (each folder with an ``__init__.py``
    under a folder that ``[tool.setuptools.package-dir]`` maps, at any depth)."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    found = {}
    for name, folder in mapping.items():
        for init in (root / folder).rglob("__init__.py"):
            found[".".join([name, *init.parent.relative_to(root / folder).parts])] = init.parent
    return found


def _in_wheel(wheel: Path) -> set[str]:
    """The wheel's files as installed paths (``envreplica/...``): its ``NAME.data/purelib/`` prefix dropped."""
    names = set()
    for name in zipfile.ZipFile(wheel).namelist():
        parts = name.split("/")
        if parts[0].endswith(".data") and len(parts) > 2 and parts[1] in ("purelib", "platlib"):
            parts = parts[2:]
        names.add("/".join(parts))
    return names


def _copy(tmp_path: Path) -> Path:
    """A clean copy of the checkout (no build or run left in it; its links kept as links)."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(*LEFT_OUT))
    return src


@pytest.mark.slow
def test_the_built_wheel_installed_elsewhere_runs_every_command(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    bin_ = venv / "bin"
    python, envreplica = bin_ / "python", bin_ / "envreplica"
    dist = tmp_path / "dist"
    run(python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, src, timeout=1800)
    [wheel] = dist.glob("envreplica-*.whl")

    # (a) every package and every file of them that is not Python, in the wheel
    shipped = _in_wheel(wheel)
    packages = package_folders(src)
    assert set(package_folders(REPO)) <= set(packages)  # the copy left no package out
    missing = [name for name in sorted(packages) if f"{name.replace('.', '/')}/__init__.py" not in shipped]
    assert not missing, f"packages the wheel leaves out: {missing}"
    data = {f"{name.replace('.', '/')}/{path.relative_to(folder)}"
            for name, folder in packages.items() for path in folder.iterdir() if path.is_file()
            and path.suffix != ".py"}
    data |= {f"{name.replace('.', '/')}/{path.relative_to(folder)}"  # files in a folder that is no package
             for name, folder in packages.items() for sub in folder.iterdir()
             if sub.is_dir() and not (sub / "__init__.py").exists() for path in sub.rglob("*") if path.is_file()}
    assert data, "no data files found: the search is wrong (report/templates, spec/contract.schema.json)"
    assert not sorted(data - shipped), f"files the wheel leaves out: {sorted(data - shipped)}"
    # (b) one package, `envreplica`: no generic top-level names
    dist_info = "-".join(wheel.name.split("-")[:2]) + ".dist-info"
    leaked = sorted({n.split("/")[0] for n in shipped} - {"envreplica", dist_info})
    assert not leaked, f"top-level names in the wheel other than envreplica: {leaked}"

    run(python, "-m", "pip", "install", "--quiet", wheel, timeout=1800)  # with its dependencies
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    assert not [n for n in GENERIC if (site / n).exists() or (site / f"{n}.py").exists()]
    assert not list(site.glob("__editable__*")), "install is editable"

    # (c) imported from the virtual environment, not the repository
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    module = Path(run(python, "-I", "-c", "import envreplica.conformance.migration.run as m; print(m.__file__)",
                      cwd=elsewhere).stdout.strip()).resolve()
    assert module.is_relative_to(venv.resolve()) and not module.is_relative_to(REPO), module

    # (d) compiled by mypyc where it can be: under CI, which installs a C compiler, it must be
    status = run(python, "-I", "-c", "from envreplica.spec import compiled; print(compiled.STATUS)",
                 cwd=elsewhere).stdout
    if os.environ.get("CI"):
        assert status.startswith("compiled (mypyc): built from these sources"), status
        assert (site / "envreplica" / "spec" / "compiled.json").is_file()

    def envr(*args: object, status: int = 0, **kw: object) -> subprocess.CompletedProcess[str]:
        return run(envreplica, *args, cwd=elsewhere, status=status, **kw)  # type: ignore[arg-type]

    assert envr("--version").stdout.strip() == "envreplica 0.1.0"

    # (e) the gate, every protocol's stage, at its smallest budgets
    gate = envr("check", "--bounds", "tiny", "--bounds", "lock-tiny", "--lockstep-examples", "5",
                "--lockstep-profile", "migration=dev", "--lockstep-examples", "migration=2", "--out", "out/check")
    said = gate.stdout
    for stage in ("model check", "migration model check", "lock model check", "lockstep", "lock lockstep",
                  "concurrent processes", "concurrent threads", "migration lockstep"):
        assert f"│ {stage} " in said, f"no {stage!r} row:\n{said[-3000:]}"
    assert "FAIL" not in said and said.rstrip().splitlines()[-1].startswith("PASS"), said[-3000:]

    # (f) a finding (F1 under the seed's variant) is exit 1, its trace written; report renders it
    found = envr("check", "--bounds", "cloud", "--variant", "seed", "--model-only", "--protocol", "replica",
                 "--out", "out/seed", status=1)
    assert "served_values_are_live_bound_kept" in found.stdout, found.stdout[-3000:]
    trace = elsewhere / "out" / "seed" / "seed-cloud-served_values_are_live_bound_kept.itf.json"
    assert trace.is_file(), sorted((elsewhere / "out" / "seed").iterdir())
    envr("report", trace, "--output", "page.html")
    page = (elsewhere / "page.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "served_values_are_live_bound_kept" in page

    # (g) conformance through the built-in adapters, both protocols
    for adapter in (f"{envreplica} adapter --impl sqlite --test-key", f"{envreplica} adapter --impl model"):
        done = envr("conformance", "--adapter", adapter, "--max-examples", "5", "--out", "out/conformance")
        assert "PASS: the implementation agrees with the model" in done.stdout, done.stdout[-3000:]
    for impl in ("model", "paired"):
        done = envr("conformance", "--protocol", "migration", "--max-examples", "3", "--out", "out/migration",
                    "--adapter", f"{envreplica} adapter --protocol migration --impl {impl}")
        assert "PASS" in done.stdout and "FAIL" not in done.stdout, done.stdout[-3000:]
    hello = envr("adapter", "--protocol", "migration",
                 input='{"id": 1, "op": "hello", "protocol": "envreplica-migration/1"}\n').stdout
    answer = json.loads(hello.splitlines()[0])
    assert answer["ok"] and answer["result"]["protocol"] == "envreplica-migration/1", hello

    # (h) the contract's schema
    schema = json.loads(envr("schema").stdout)
    assert "PageFrame" in schema["$defs"]
    assert json.loads(envr("schema", "PageFrame").stdout)["$schema"].startswith("https://json-schema.org/")

    # (i) two stores migrated together; a completed migration is never rolled back; a crashed one is restored
    key = _env(ENVREPLICA_MASTER_KEY=KEY_HEX)
    build = ("import shutil, sys; from pathlib import Path; from envreplica.conformance.migration.disk import build_v1\n"
             "for root in map(Path, sys.argv[1:]):\n"
             "    root.mkdir(); build_v1(root / 'run.db'); shutil.copyfile(root / 'run.db', root / 'resource.db')\n")
    run(python, "-I", "-c", build, "done", "crashed", cwd=elsewhere)
    version = ("import sys; from envreplica.impl import paired as P\n"
               "print(*[P.facts_of(p).version for p in sys.argv[1:]])")

    def versions(root: str) -> str:
        return run(python, "-I", "-c", version, f"{root}/run.db", f"{root}/resource.db", cwd=elsewhere).stdout.strip()

    assert versions("done") == "1 1"
    envr("migrate", "--db", "done/run.db", "--db", "done/resource.db", env=key)
    assert versions("done") == "2 2"
    refused = envr("recover", "--request", "done/run.db.paired-v2.request.json", status=2, env=key)
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert versions("done") == "2 2"
    crash = ("import sys; from envreplica.impl import paired as P; from envreplica.conformance.migration.disk import KEY\n"
             "def hook(step):\n"
             "    if step == 'apply resource': raise KeyboardInterrupt\n"
             "try: P.migrate_paired(['crashed/run.db', 'crashed/resource.db'], master_key=KEY, hook=hook)\n"
             "except KeyboardInterrupt: print('crashed')\n")
    assert run(python, "-I", "-c", crash, cwd=elsewhere).stdout.strip() == "crashed"
    envr("recover", "--request", "crashed/run.db.paired-v2.request.json", env=key)
    assert versions("crashed") == "1 1"


def test_every_package_folder_is_found() -> None:
    """The wheel test's own search (``package_folders``) finds every package the repository has, the nested
    ones too: it cannot pass by finding nothing."""
    found = package_folders(REPO)
    assert {f"envreplica.{name}" for name in SUBPACKAGES} <= set(found)
    assert {"envreplica.conformance.migration", "envreplica.conformance.replica",
            "envreplica.conformance.concurrent"} <= set(found)


def test_every_docstring_is_valid_utf_8() -> None:
    """``help()`` and pydoc print docstrings as UTF-8: a lone surrogate in one (``"\\ud800"`` written
    unescaped in a docstring) makes ``help(module)`` raise UnicodeEncodeError, and Cython refuses the file."""
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
