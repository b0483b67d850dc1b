"""The contract between `install` and the client: config parameter names and pipeline tensor names.

`install` writes these into config.pbtxt; LaneDetClient and the pipeline models
read them back. Both sides import them from here, so neither imports the other.
What a family's outputs mean, its preprocessing and decode defaults are the
family's (edge_deploy.lanedet.family).
"""
from __future__ import annotations

# config.pbtxt `parameters` (JSON strings) that LaneDetClient configures itself from.
PARAM_FAMILY = "edge_deploy.family"  # the lane-model family (absent in configs written before families: laneatt)
# The distribution providing a plug-in family (the manifest's source.family_package): what a client without it installs.
PARAM_FAMILY_PACKAGE = "edge_deploy.family_package"
PARAM_PREPROCESS = "edge_deploy.preprocess"
PARAM_DECODE = "edge_deploy.decode"
PARAM_ROLE = "edge_deploy.role"
PARAM_RUNTIME = "edge_deploy.runtime"
PARAM_MANIFEST_SHA256 = "edge_deploy.manifest_sha256"
# A model with the preprocessing fused in (convert --fuse-preprocess): JSON {"input", "height", "width", "color"},
# the UINT8 [B, height, width, 3] camera frame it takes instead of the preprocessed image.
PARAM_FUSED = "edge_deploy.fused_preprocess"
# An object detector's layout and frame fitting (the manifest's "detection"): what DetectorClient decodes with.
PARAM_DETECTION = "edge_deploy.detection"
# NAME_pipeline's kind: "ensemble" (absent: configs written before kinds) or "bls" (one Python model calling NAME).
PARAM_PIPELINE = "edge_deploy.pipeline"

# Pipeline tensor names (the server-side pre/postprocess models and the ensemble).
FRAME = "FRAME"  # UINT8 [H, W, 3] BGR, any size
ORIGINAL_SIZE = "ORIGINAL_SIZE"  # INT32 [2]: the frame's (height, width)
LANES = "LANES"  # FP32 [top_k, max_points, 2]: (x, y) in frame pixels, NaN-padded (max_points: the family's)
SCORES = "SCORES"  # FP32 [top_k]: lane scores, 0 for padding
NUM_POINTS = "NUM_POINTS"  # INT32 [top_k]: valid points per lane, 0 for padding
NUM_LANES = "NUM_LANES"  # INT32 [1]
