"""Scratch directories of the reliability harnesses."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Union

__all__ = ["scratch_directory"]


@contextlib.contextmanager
def scratch_directory(workdir: Optional[Union[str, os.PathLike[str]]], prefix: str) -> Iterator[Path]:
    """A fresh directory (inside ``workdir`` when given, created if need be), removed afterwards, whatever happens."""
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=None if workdir is None else os.fspath(workdir)))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
