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
      "files": {"model.onnx": {"sha256": str, "bytes": int}, "model_fp16.onnx": {...}, "model.plan": {...}},
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
               "nodes": [{"node", "op", "output", "max_abs", "reason", ...}],
               "onnx": null | {"file": "model_fp16.onnx", "converter", "io_precision": "fp32" | "fp16",
                               "io": {like "io" above}, "kept_fp32": [...],
                               "verify": {"reference", "batches", "outputs", "lanes", "passed"},
                               "f1": null}},   (f1: filled by evaluation when data is given)
      "plan": null | {"tensorrt", "cuda", "gpu", "compute_capability", "l4t",
                      "jetpack", "nvpmodel", "precision", "dla_core", "profile",
                      "workspace_bytes", "onnx", "onnx_sha256", "typing", "build_time",
                      "fp32_layers", "verify", ...},
      "timings": {stage: seconds}
    }

Datatypes are Triton's names (FP32, FP16, INT64, ...). In "shape" a -1 on
axis 0 is the dynamic batch axis; a fixed-batch model has its batch size there
and batch.dynamic = false.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import EdgeDeployError
from .fsutil import write_json_atomic  # (manifest.write_json_atomic stays importable)

MANIFEST_NAME = "manifest.json"
ONNX_NAME = "model.onnx"
PLAN_NAME = "model.plan"
FP16_ONNX_NAME = "model_fp16.onnx"  # the FP16 graph (the FP16 report's nodes kept FP32), built strongly typed

# ONNX TensorProto element type -> the Triton datatype name the manifest's `io` section uses.
ONNX_TRITON_DTYPES = {
    1: "FP32", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
    9: "BOOL", 10: "FP16", 11: "FP64", 12: "UINT32", 13: "UINT64", 16: "BF16",
}

FORMAT = 1



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


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the manifest's I/O signature (Triton datatype; -1 = dynamic batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


class Manifest:
    """A read-only typed view of a manifest dict: each section and its default, in one place."""

    def __init__(self, data: Mapping[str, Any] | None) -> None:
        self.data: Mapping[str, Any] = data or {}

    def _section(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        return value if isinstance(value, dict) else {}

    @property
    def io(self) -> dict[str, Any]:
        return self._section("io")

    @property
    def inputs(self) -> list[TensorSpec]:
        return [_tensor(t) for t in self.io.get("inputs") or []]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [_tensor(t) for t in self.io.get("outputs") or []]

    @property
    def batch(self) -> dict[str, Any]:
        value = self.io.get("batch")
        return value if isinstance(value, dict) else {}

    @property
    def preprocess(self) -> dict[str, Any]:
        return self._section("preprocess")

    @property
    def decode(self) -> dict[str, Any]:
        return self._section("decode")

    @property
    def files(self) -> dict[str, Any]:
        return self._section("files")

    @property
    def parity(self) -> dict[str, Any]:
        return self._section("parity")

    @property
    def fp16(self) -> dict[str, Any]:
        return self._section("fp16")

    @property
    def fp16_onnx(self) -> dict[str, Any] | None:
        """The record of model_fp16.onnx (fp16.onnx), or None when the artifact has none."""
        value = self.fp16.get("onnx")
        return value if isinstance(value, dict) else None

    def io_of(self, onnx_name: str) -> dict[str, Any]:
        """The I/O signature of one of the artifact's ONNX files (model_fp16.onnx may have FP16 I/O)."""
        record = self.fp16_onnx
        if onnx_name == FP16_ONNX_NAME and record and isinstance(record.get("io"), dict):
            return record["io"]
        return self.io

    @property
    def plan_io(self) -> dict[str, Any]:
        """The I/O of model.plan: that of the ONNX file it was built from."""
        return self.io_of(str((self.plan or {}).get("onnx") or ONNX_NAME))

    @property
    def plan(self) -> dict[str, Any] | None:
        """The plan section, or None for an ONNX-only artifact."""
        value = self.data.get("plan")
        return value if isinstance(value, dict) else None

    @property
    def input_size(self) -> tuple[int, int]:
        """The model input's (height, width) from the preprocessing spec (LaneATT's 360x640 by default)."""
        return int(self.preprocess.get("height", 360)), int(self.preprocess.get("width", 640))


def _tensor(entry: Mapping[str, Any]) -> TensorSpec:
    return TensorSpec(str(entry["name"]), str(entry["datatype"]), tuple(int(d) for d in entry["shape"]))
