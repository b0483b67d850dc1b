"""manifest.json as the file on disk (a dict): for tests that check what convert recorded, or damage it on purpose.

Product code reads manifests only through `edge_deploy.artifact.manifest.Manifest`; these helpers read and write the
JSON the way a person or another tool would.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def manifest_json(artifact_dir: Path) -> dict[str, Any]:
    return json.loads((Path(artifact_dir) / "manifest.json").read_text())


def write_manifest_json(artifact_dir: Path, data: dict[str, Any]) -> None:
    (Path(artifact_dir) / "manifest.json").write_text(json.dumps(data, indent=2))
