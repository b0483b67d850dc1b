"""manifest.json: what an artifact directory holds and how it was made.

An artifact directory (written by `convert`) contains model.onnx, model.plan
when a TensorRT engine was built, and manifest.json with this shape::

    {
      "format": 1,
      "tool": {"name": "edge-deploy", "version": "0.1.0"},
      "created": "2026-11-22T07:00:00Z",
      "source": {"kind": "laneatt" | "torchscript" | "factory", "spec": str,
                 "backbone": str | null, "checkpoint": {"path", "sha256"} | null,
                 "anchors_freq": {"path", "sha256"} | null, "topk_anchors": int | null,
                 "num_anchors": int | null, "trained": bool, "seed": int | null,
                 "file": {"path", "sha256"} (TorchScript)},
      "files": {"model.onnx": {"sha256": str, "bytes": int}, "model.plan": {...}},
      "io": {
        "inputs":  [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 360, 640]}],
        "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [-1, 2784, 77]}],
        "batch": {"min": 1, "opt": 1, "max": 4, "dynamic": true}
      },
      "export": {"exporter", "onnx", "opset", "trace_batch",
                 "simplify": {"tool", "applied", "nodes_before", "nodes_after", "max_abs_change"}},
      "preprocess": {"height": 360, "width": 640, "color": "bgr", "scale": 1/255,
                     "mean": [0,0,0], "std": [1,1,1], "interpolation": "bicubic",
                     "crop": null, "layout": "NCHW"},
      "decode": {"conf_threshold": 0.5, "nms_threshold": 50.0, "top_k": 4},
      "parity": {"reference", "tolerance": {"atol", "rtol"}, "batches": [...], "seed",
                 "outputs": {name: {"max_abs", "max_rel"}}},
      "fp16": {"rule", "tensors_checked", "samples", "max_abs", "fp32_nodes": [...],
               "nodes": [{"node", "op", "output", "max_abs", "reason", ...}]},
      "plan": null | {"tensorrt", "cuda", "gpu", "compute_capability", "l4t",
                      "jetpack", "nvpmodel", "precision", "dla_core", "profile",
                      "workspace_bytes", "onnx_sha256", "build_time", "fp32_layers",
                      "verify", ...},
      "timings": {stage: seconds}
    }

Datatypes are Triton's names (FP32, FP16, INT64, ...). In "shape" a -1 on
axis 0 is the dynamic batch axis; a fixed-batch model has its batch size there
and batch.dynamic = false.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .errors import EdgeDeployError
from .fsutil import write_json_atomic  # (manifest.write_json_atomic stays importable)

MANIFEST_NAME = "manifest.json"
FORMAT = 1

# LaneATT's preprocessing and CULane decode defaults (shared/design.md).
LANEATT_PREPROCESS: dict[str, Any] = {
    "height": 360,
    "width": 640,
    "color": "bgr",
    "scale": 1.0 / 255.0,
    "mean": [0.0, 0.0, 0.0],
    "std": [1.0, 1.0, 1.0],
    "interpolation": "bicubic",
    "crop": None,
    "layout": "NCHW",
}
LANEATT_DECODE: dict[str, Any] = {"conf_threshold": 0.5, "nms_threshold": 50.0, "top_k": 4}


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_entry(path: Path) -> dict[str, Any]:
    """The manifest's record of one file: sha256 and size."""
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def read_manifest(artifact_dir: Path) -> dict[str, Any]:
    """Load DIR/manifest.json, raising a one-line EdgeDeployError when absent or unreadable."""
    path = Path(artifact_dir) / MANIFEST_NAME
    if not path.is_file():
        raise EdgeDeployError(
            f"{artifact_dir} has no {MANIFEST_NAME}: it is not an edge-deploy artifact; "
            "create one with `edge-deploy convert`."
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EdgeDeployError(f"cannot read {path}: {exc}; re-run `edge-deploy convert`.") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EdgeDeployError(
            f"{path} is not a format-{FORMAT} edge-deploy manifest; re-run `edge-deploy convert`."
        )
    return data


def write_manifest(artifact_dir: Path, data: dict[str, Any]) -> Path:
    """Write DIR/manifest.json atomically and return its path."""
    path = Path(artifact_dir) / MANIFEST_NAME
    write_json_atomic(path, data)
    return path


def verify_files(artifact_dir: Path, manifest: dict[str, Any]) -> None:
    """Check every file the manifest lists exists with the recorded sha256."""
    for name, entry in manifest.get("files", {}).items():
        path = Path(artifact_dir) / name
        if not path.is_file():
            raise EdgeDeployError(
                f"{path} is listed in the manifest but missing; re-run `edge-deploy convert`."
            )
        actual = sha256_file(path)
        if actual != entry.get("sha256"):
            raise EdgeDeployError(
                f"{path} does not match its manifest (sha256 {actual[:12]}… != {str(entry.get('sha256'))[:12]}…): "
                "the file was changed after convert; re-run `edge-deploy convert`."
            )
