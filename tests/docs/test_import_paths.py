"""Every import path the README and docs/ name still imports (issue 57: the root was regrouped into core/, artifact/,
tls/, synthetic/; a documented path that moved must keep working or the page must change).

Read from the pages as text: `from edge_deploy... import A, B`, `import edge_deploy...`, and each backticked dotted
name `edge_deploy.x.y`. The few dotted names that are keys, not Python paths, are listed with what they are."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Dotted names the pages use that are not import paths: the plug-in entry-point group, and the config.pbtxt
# parameters install writes under the edge_deploy. prefix (lanedet/contract.py).
NOT_PATHS = {"edge_deploy.families", "edge_deploy.family", "edge_deploy.family_package", "edge_deploy.role",
             "edge_deploy.runtime", "edge_deploy.pipeline", "edge_deploy.preprocess", "edge_deploy.decode",
             "edge_deploy.detection", "edge_deploy.fused_preprocess", "edge_deploy.manifest_sha256",
             "edge_deploy.ort_threads"}

FROM_IMPORT = re.compile(r"\bfrom (edge_deploy(?:\.\w+)*) import ([\w ,]+)")
IMPORT = re.compile(r"(?<![\w.])import (edge_deploy(?:\.\w+)*)")
DOTTED = re.compile(r"`(edge_deploy(?:\.\w+)+)")


def documented() -> set[tuple[str, str]]:
    """(what the pages write, the page) for every path they name."""
    found = set()
    for page in PAGES:
        text = page.read_text()
        for module, names in FROM_IMPORT.findall(text):
            found |= {(f"{module}:{name.split(' as ')[0].strip()}", page.name) for name in names.split(",")
                      if name.strip()}
        found |= {(module, page.name) for module in IMPORT.findall(text)}
        found |= {(name, page.name) for name in DOTTED.findall(text) if name not in NOT_PATHS}
    return found


def resolve(path: str) -> object:
    """`pkg.mod:name` or a dotted `pkg.mod.attr...`: the module imported (from this checkout's package: an editable
    install of another checkout would answer for a module this one no longer has), then the attributes looked up."""
    module, _, name = path.partition(":")
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not ".".join(parts[:cut]).startswith(exc.name):
                raise  # a missing dependency of a module that exists, not a missing module
            continue
        origin = Path(getattr(found, "__file__", None) or ROOT / "edge_deploy").resolve()
        if not origin.is_relative_to(ROOT / "edge_deploy"):
            raise ModuleNotFoundError(f"{'.'.join(parts[:cut])} comes from {origin}, outside this checkout")
        for attribute in parts[cut:] + ([name] if name else []):
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(path)


PATHS = sorted(documented())


def test_the_pages_name_import_paths() -> None:
    """The reader finds what the pages show (so the test below is not vacuous): the public names and moved modules'
    neighbours among them."""
    names = {path for path, _ in PATHS}
    assert {"edge_deploy:LaneDetClient", "edge_deploy.geometry:Camera", "edge_deploy.lanedet.decode_lanes"} <= names
    assert len(names) >= 20, names


@pytest.mark.parametrize("path, page", PATHS, ids=[f"{page}:{path}" for path, page in PATHS])
def test_every_documented_path_imports(path: str, page: str) -> None:
    """Plant a page line `from edge_deploy.synthetic_roads import scene` (the module moved to synthetic/roads.py), or
    drop `TLSConfig` from tls/__init__.py while a page names `edge_deploy.tls.TLSConfig`, and this fails."""
    try:
        resolve(path)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{page} names {path}, which does not import: {exc!r}")
