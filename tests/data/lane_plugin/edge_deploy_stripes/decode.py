"""Rows (score logit, x top, x bottom) -> lanes: self-contained, because install copies it beside the
server-side pipeline models as decode.py."""
from __future__ import annotations

import numpy as np

try:
    from edge_deploy.lanedet.lane import Lane
except ImportError:  # the flat copy beside a Triton Python-backend model
    from lane import Lane  # type: ignore[no-redef]


def decode_outputs(outputs, *, conf_threshold, nms_threshold, top_k, image_size, model_width):
    rows = np.asarray(outputs[0], dtype=np.float64)
    scores = 1.0 / (1.0 + np.exp(-rows[:, 0]))
    order = [i for i in np.argsort(-scores, kind="stable") if scores[i] > conf_threshold][:top_k]
    height, width = image_size
    scale = width / model_width
    return [Lane(np.float32([[rows[i, 1] * scale, 0.0], [rows[i, 2] * scale, height]]), float(scores[i]))
            for i in order]
