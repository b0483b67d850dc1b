"""Python-backend model sources that `install` copies into a model's version directory.

They are package data, never imported by edge_deploy: each runs inside
Triton's Python backend stub (which provides `triton_python_backend_utils`) and
imports only numpy, onnxruntime / cv2 and the modules copied beside it
(lanedet/preprocess.py, the family's decode.py and lane.py, pipeline_steps.py), because
Triton's Python on a Jetson may not have edge_deploy installed. `model_files` is the one
place that decides which copies go beside which model.

- onnx_runner.py   -> NAME/V/model.py: runs V/model.onnx with ONNX Runtime (CPU).
- preprocess_model.py  -> NAME_preprocess/V/model.py
- postprocess_model.py -> NAME_postprocess/V/model.py
- bls_model.py         -> NAME_pipeline/V/model.py (`install --pipeline bls`)
- pipeline_steps.py    -> beside the last two: decoding into the pipeline's padded tensors
"""
from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...lanedet.lane_family import LaneFamily

SOURCES = ("onnx_runner.py", "preprocess_model.py", "postprocess_model.py", "bls_model.py", "pipeline_steps.py")
# role -> the model source that becomes its model.py
_MODEL_PY = {"preprocess": "preprocess_model.py", "postprocess": "postprocess_model.py", "bls": "bls_model.py"}


def source(name: str) -> bytes:
    """The bytes of one model source shipped with the package."""
    if name not in SOURCES:
        raise KeyError(name)
    return resources.files(__name__).joinpath(name).read_bytes()


def _lanedet_module(name: str) -> bytes:
    return resources.files("edge_deploy.lanedet").joinpath(name).read_bytes()


def model_files(role: str, family: LaneFamily, *, fused: bool = False) -> dict[str, bytes]:
    """model.py of a server-side pipeline model (role: preprocess | postprocess | bls) and the copies it imports:
    preprocess.py where it preprocesses (not for a fused model), the family decoder (decode.py, lane.py) and
    pipeline_steps.py where it decodes."""
    files = {"model.py": source(_MODEL_PY[role])}
    if role in ("preprocess", "bls") and not fused:
        files["preprocess.py"] = _lanedet_module("preprocess.py")
    if role in ("postprocess", "bls"):
        files["pipeline_steps.py"] = source("pipeline_steps.py")
        files.update(family.decoder_sources())
    return files
