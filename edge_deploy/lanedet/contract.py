"""The contract between `install` and the client: config parameter names, tensor names, LaneATT defaults.

`install` writes these into config.pbtxt; LaneDetClient and the pipeline models
read them back. Both sides import them from here, so neither imports the other.
"""
from __future__ import annotations

from typing import Any

# LaneATT's preprocessing and CULane decode defaults (docs/design.md, "The LaneATT model" and "Decoding").
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
# The official test parameters per data set (LaneATT's cfgs/*.yml), recorded when convert is given --dataset.
DATASET_DECODE: dict[str, dict[str, Any]] = {
    "culane": LANEATT_DECODE,
    "tusimple": {"conf_threshold": 0.2, "nms_threshold": 45.0, "top_k": 5},
    "llamas": LANEATT_DECODE,
}

# config.pbtxt `parameters` (JSON strings) that LaneDetClient configures itself from.
PARAM_PREPROCESS = "edge_deploy.preprocess"
PARAM_DECODE = "edge_deploy.decode"
PARAM_ROLE = "edge_deploy.role"
PARAM_RUNTIME = "edge_deploy.runtime"
PARAM_MANIFEST_SHA256 = "edge_deploy.manifest_sha256"
# A model with the preprocessing fused in (convert --fuse-preprocess): JSON {"input", "height", "width", "color"},
# the UINT8 [B, height, width, 3] camera frame it takes instead of the preprocessed image.
PARAM_FUSED = "edge_deploy.fused_preprocess"

# Pipeline tensor names (the server-side pre/postprocess models and the ensemble).
FRAME = "FRAME"  # UINT8 [H, W, 3] BGR, any size
ORIGINAL_SIZE = "ORIGINAL_SIZE"  # INT32 [2]: the frame's (height, width)
LANES = "LANES"  # FP32 [top_k, 72, 2]: (x, y) in frame pixels, NaN-padded
SCORES = "SCORES"  # FP32 [top_k]: lane scores, 0 for padding
NUM_POINTS = "NUM_POINTS"  # INT32 [top_k]: valid points per lane, 0 for padding
NUM_LANES = "NUM_LANES"  # INT32 [1]
MAX_POINTS = 72
