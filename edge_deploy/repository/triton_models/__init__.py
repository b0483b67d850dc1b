"""Python-backend model sources that `install` copies into a model's version directory.

They are package data, never imported by edge_deploy: each runs inside
Triton's Python backend stub (which provides `triton_python_backend_utils`) and
imports only numpy, onnxruntime / cv2 and the modules copied beside it
(lanedet/preprocess.py, lanedet/decode.py), because Triton's Python on a
Jetson may not have edge_deploy installed.

- onnx_runner.py   -> NAME/V/model.py: runs V/model.onnx with ONNX Runtime (CPU).
- preprocess_model.py  -> NAME_preprocess/V/model.py
- postprocess_model.py -> NAME_postprocess/V/model.py
"""
from __future__ import annotations

from importlib import resources

SOURCES = ("onnx_runner.py", "preprocess_model.py", "postprocess_model.py")


def source(name: str) -> bytes:
    """The bytes of one model source shipped with the package."""
    if name not in SOURCES:
        raise KeyError(name)
    return resources.files(__name__).joinpath(name).read_bytes()
