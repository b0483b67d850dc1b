"""The device-independent part of an artifact, which the rollout copies to every vehicle.

A plan only runs on the device (TensorRT, JetPack, GPU) it was built for, so the payload holds
the ONNX files, the manifest without its "plan" section and the smoke reference; each vehicle
builds (or reuses) its own plan from it.
"""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from ..core.fsutil import atomic_path
from ..artifact.manifest import MANIFEST_NAME, PLAN_NAME, Manifest, open_inside, sha256_file
from .smoke import REFERENCE_NAME, SMOKE_DIR, record_reference


def make_payload(artifact_dir: Path, out_dir: Path) -> tuple[Path, bool]:
    """Write the payload of `artifact_dir` into `out_dir` (fresh); returns (out_dir, reference recorded now)."""
    artifact_dir = Path(artifact_dir)
    manifest = Manifest.read(artifact_dir)
    manifest.verify_files(artifact_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    files = {name: entry for name, entry in manifest.files.items() if name != PLAN_NAME}
    for name in files:
        with open_inside(artifact_dir / name) as src, open(out_dir / name, "wb") as out:  # no link followed out
            shutil.copyfileobj(src, out, 1 << 20)
    replace(manifest, files=files, plan=None).write(out_dir)
    recorded = artifact_dir / SMOKE_DIR / REFERENCE_NAME
    if recorded.is_file():
        shutil.copytree(artifact_dir / SMOKE_DIR, out_dir / SMOKE_DIR)
        return out_dir, False
    record_reference(out_dir, out_dir)
    return out_dir, True


def archive(payload_dir: Path) -> Path:
    """PAYLOAD.tar beside the payload directory (its files at the top): one copy per vehicle, not one per file."""
    import tarfile

    target = Path(f"{payload_dir}.tar")
    with atomic_path(target) as partial, tarfile.open(partial, "w") as tar:
        for path in sorted(Path(payload_dir).rglob("*")):
            tar.add(path, arcname=str(path.relative_to(payload_dir)), recursive=False)
    return target


def payload_id(payload_dir: Path) -> str:
    """A short name for a payload on the vehicles: the first 16 hex digits of its manifest's sha256."""
    return sha256_file(Path(payload_dir) / MANIFEST_NAME)[:16]
