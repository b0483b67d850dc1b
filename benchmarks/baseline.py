"""An earlier version of a self-contained module (preprocess.py, a family's decode.py) loaded from git, to time it
side by side with today's in one run: `load_at(REV, "edge_deploy/lanedet/preprocess.py")`."""
from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
LANE = "edge_deploy/lanedet/lane.py"  # decoders import it flat when no package is around them


def load_at(rev: str, path: str) -> ModuleType:
    """The module of `path` as it was at git revision `rev` (with lane.py of that revision importable beside it)."""
    folder = Path(tempfile.mkdtemp(prefix="baseline_"))
    for source in (path, LANE):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{source}"], check=True, capture_output=True,
                              text=True).stdout
        (folder / Path(source).name).write_text(text)
    sys.path.insert(0, str(folder))
    try:
        name = f"baseline_{Path(path).stem}_{rev[:7]}"
        spec = importlib.util.spec_from_file_location(name, folder / Path(path).name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


def load_package_at(rev: str, package: str, *also: str) -> ModuleType:
    """A subpackage of edge_deploy (e.g. "edge_deploy/geometry") as it was at git revision `rev`, imported under a
    parent package of its own (with the modules in `also`, e.g. "edge_deploy/errors.py", its relative imports
    reach)."""
    parent = f"baseline_{rev[:7]}_{Path(package).name}"
    folder = Path(tempfile.mkdtemp(prefix="baseline_"))
    (folder / parent).mkdir()
    (folder / parent / "__init__.py").write_text("")
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev, package], check=True,
                           capture_output=True, text=True).stdout.split()
    for source in [*names, *also]:
        target = folder / parent / Path(source).relative_to(Path(package).parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{source}"], check=True,
                                         capture_output=True, text=True).stdout)
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(f"{parent}.{Path(package).name}")
    finally:
        sys.path.remove(str(folder))
