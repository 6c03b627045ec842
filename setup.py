"""The build's two steps beyond pyproject.toml: find the packages, and compile the checker's hot path with mypyc.

The packages are found, never listed: every folder with an ``__init__.py``
under a folder that ``[tool.setuptools.package-dir]`` maps (``conformance/``
is ``envreplica.conformance``, so ``conformance/migration/`` is
``envreplica.conformance.migration``), at any depth. A subpackage added later
ships with no edit here; a list by hand once left one out of the wheel
(issue 40), which the editable install hid. ``tests/test_packaging.py``
builds the wheel and checks it holds every one.


``spec/compiled.py`` lists the modules and says how they are chosen at run
time. Here, ``build_ext`` (run by ``pip install``, editable or not, and by
``make compiled`` as ``python setup.py build_ext --inplace``) compiles them
when mypyc imports and a C compiler answers; otherwise, or with
``ENVREPLICA_PURE_PYTHON=1``, or when any part of the build fails, it says
why in one line and the package installs as pure Python. A build that
succeeds writes ``spec/compiled.json`` (the sources' digests), without which
the compiled modules are never used.

mypyc names a module by its folders, and this checkout's folders are not
named as the package is (``model/`` is ``envreplica.model``): it compiles
them through ``docs/.api/envreplica/``, whose links name each folder by its
import name (``make typecheck`` runs mypy there for the same reason).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _compiled_module():  # type: ignore[no-untyped-def]
    """``spec/compiled.py``, loaded by path: the package is not importable while it is being built."""
    spec = importlib.util.spec_from_file_location("_envreplica_compiled", ROOT / "spec" / "compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


COMPILED = _compiled_module()
def packages(root: Path = ROOT) -> list[str]:
    """Every package under the folders ``[tool.setuptools.package-dir]`` maps (import name -> folder): each
    folder there with an ``__init__.py``, at any depth, named by its import name."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    found = []
    for name, folder in config["tool"]["setuptools"]["package-dir"].items():
        for init in sorted((root / folder).rglob("__init__.py")):
            found.append(".".join([name, *init.parent.relative_to(root / folder).parts]))
    return found


#: A stand-in so that setuptools runs build_ext (and tags the wheel for this platform); replaced when it runs.
PLACEHOLDER = Extension(COMPILED.GROUP + "__mypyc", sources=[], optional=True)


def _why_not() -> str | None:
    """Why this machine cannot compile (None: it can try)."""
    if os.environ.get(COMPILED.PURE_ENV) == "1":
        return f"{COMPILED.PURE_ENV}=1"
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (pip install mypy)"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler} is not on PATH)"
    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h; on Debian: apt install python3-dev)"
    return None


def _say(message: str) -> None:
    print(f"envreplica: {message}", file=sys.stderr)


class BuildCompiled(build_ext):
    """``build_ext`` that compiles ``COMPILED.MODULES`` with mypyc, or nothing, and records what it built."""

    def finalize_options(self) -> None:
        # Before setuptools prepares each extension: the placeholder becomes mypyc's extensions, or none.
        self.distribution.ext_modules = self._extensions()
        super().finalize_options()

    def _extensions(self) -> list[Extension]:
        why = _why_not()
        if why is not None:
            _say(f"the model runs interpreted: {why}")
            return []
        try:
            extensions = self._mypycify()
        except (Exception, SystemExit) as exc:  # mypyc exits on a type error: the build goes on without it
            _say(f"the model runs interpreted: mypyc failed ({exc!r})")
            return []
        for ext in extensions:
            ext.optional = True  # a C compiler that fails leaves a pure-Python install, not a failed one
        return extensions

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        missing = [ext.name for ext in self.extensions if not Path(self._output(ext.name)).is_file()]
        if missing:
            _say(f"the model runs interpreted: {', '.join(missing)} did not build")
            return
        record = Path(self._output(COMPILED.GROUP + "__mypyc")).parent / COMPILED.RECORD
        record.write_text(json.dumps(COMPILED.record(ROOT), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        _say(f"the model is compiled: {len(COMPILED.MODULES)} modules by mypyc ({record.name} written)")

    def _output(self, name: str) -> str:
        """Where an extension ends up: beside its source in place (editable, --inplace), else in build_lib."""
        if self.inplace or getattr(self, "editable_mode", False):
            build_py = self.get_finalized_command("build_py")
            package, _, base = name.rpartition(".")
            filename = self.get_ext_filename(base)
            return os.path.join(build_py.get_package_dir(package), os.path.basename(filename))
        return self.get_ext_fullpath(name)

    def _mypycify(self) -> list[Extension]:
        from mypyc.build import mypycify

        api = ROOT / "docs" / ".api"
        paths = [str(api / COMPILED.source_of(m, Path("envreplica"))) for m in COMPILED.MODULES]
        with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as config:
            # The package's own [tool.mypy] is for checking it; compiling needs only where modules are.
            config.write("[mypy]\nexplicit_package_bases = True\nnamespace_packages = True\n"
                         f"mypy_path = {api}\nignore_missing_imports = True\nfollow_imports = silent\n")
        try:
            return list(mypycify(["--config-file", config.name, *paths], opt_level="3", group_name=COMPILED.GROUP))
        finally:
            os.unlink(config.name)


setup(packages=packages(), ext_modules=[PLACEHOLDER], cmdclass={"build_ext": BuildCompiled})
