"""What the pytest-xdist workers of one run share (scripts/test.sh runs the suite with `-n 3 --dist loadfile`).

Every worker runs session fixtures for itself, and tests of two workers run at the same time. Here:
- `made_once`: a costly session fixture (a converted artifact, a checkpoint) made once per run: the first
  worker that needs it makes it in the directory the workers share (the parent of their base temp
  directories), under an exclusive lock; the others wait for it and read where it is;
- `exclusive`: a lock for tests that use something of the whole machine (a fixed port, /run/systemd):
  two such tests never run at the same time.
A run without workers makes things in its own temp directory and takes no lock, as before.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

Made = TypeVar("Made", Path, tuple[Path, ...])


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The directory the xdist workers of this run share (None in a run without workers)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return tmp_path_factory.getbasetemp().parent


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, whatever happens inside
        yield


@contextmanager
def exclusive(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    """Hold the run's lock `name` (no other worker holds it meanwhile); nothing without workers."""
    root = shared_root(tmp_path_factory)
    if root is None:
        yield
        return
    with _locked(root / f"exclusive-{name}.lock"):
        yield


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Made]) -> Made:
    """`make(work)` in an empty directory `work`, once per run; its result (a path or a tuple of paths).

    A `make` that raises (or skips) records nothing: the next worker that asks tries again and fails the same way.
    """
    root = shared_root(tmp_path_factory)
    if root is None:
        return make(tmp_path_factory.mktemp(name))
    work, record = root / name, root / f"{name}.json"
    with _locked(root / f"{name}.lock"):
        if not record.exists():
            shutil.rmtree(work, ignore_errors=True)  # a half-made one of a worker whose make() failed
            work.mkdir()
            made = make(work)
            paths = [str(made)] if isinstance(made, Path) else [str(p) for p in made]
            record.write_text(json.dumps({"paths": paths, "tuple": not isinstance(made, Path)}))
        saved = json.loads(record.read_text())
    paths = [Path(p) for p in saved["paths"]]
    return tuple(paths) if saved["tuple"] else paths[0]  # type: ignore[return-value]
