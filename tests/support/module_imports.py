"""What a Python source file imports at top level (for the self-contained-module tests)."""
from __future__ import annotations

import ast
from pathlib import Path


def imported_packages(source: Path, relative_ok: frozenset[str] = frozenset()) -> set[str]:
    """Top-level package names a module imports; fails on relative imports, but for modules named in
    `relative_ok` (a sibling the copy sits beside: `from ..lane import` falls back to `from lane import`)."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(Path(source).read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 or node.module in relative_ok, f"relative import in {source}"
            imported.add(node.module.split(".")[0])
    return imported
