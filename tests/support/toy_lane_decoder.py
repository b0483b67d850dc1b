"""The toy family's decoder (tests/support/toy_family.py): rows (score logit, x top, x bottom) -> lanes.

Self-contained like every family decoder (numpy, the standard library and lane.py), because install
copies it beside the server-side postprocess model as decode.py.
"""
from __future__ import annotations

import math

import numpy as np

try:
    from edge_deploy.lanedet.lane import Lane
except ImportError:  # the flat copy beside a Triton Python-backend model
    from lane import Lane  # type: ignore[no-redef]


def decode_outputs(outputs, *, conf_threshold, nms_threshold, top_k, image_size, model_width):
    rows = np.asarray(outputs[0], dtype=np.float64)
    scores = [1.0 / (1.0 + math.exp(-r[0])) for r in rows]
    order = sorted((i for i, s in enumerate(scores) if s > conf_threshold), key=lambda i: -scores[i])[:top_k]
    height, width = image_size
    scale = width / model_width
    return [Lane(np.float32([[rows[i, 1] * scale, 0.0], [rows[i, 2] * scale, height]]), scores[i]) for i in order]
