"""Shared by the server-side pipeline models (NAME_postprocess and the BLS NAME_pipeline): one frame's lane
outputs -> the pipeline's padded tensors.

Copied by `edge-deploy install --pipeline` beside the model's model.py, with decode.py and lane.py (the
family decoder's copies): it imports numpy and those only. Outputs, padded to top_k lanes: LANES
[top_k, max_points, 2] (x, y) in frame pixels with NaN padding, SCORES [top_k] (0 padding), NUM_POINTS
[top_k] and NUM_LANES [1].
"""
import numpy as np
from decode import decode_outputs  # the family decoder's copy in the same version directory


class LanePacker:
    """Decode one frame with the manifest's decode parameters and pad the lanes to the pipeline's outputs."""

    def __init__(self, decode, preprocess, max_points, frame_size=None):
        # The family's decode parameters, passed to its decoder by name (every family's include top_k).
        self.decode = dict(decode)
        self.top_k = int(self.decode["top_k"])
        self.max_points = int(max_points)
        self.model_width = int(preprocess["width"])  # x is in model-input pixels
        # With a crop, the model saw only part of the frame: decode in that box, then shift.
        crop = preprocess.get("crop") or {}
        self.crop = {side: int(crop.get(side, 0)) for side in ("top", "bottom", "left", "right")}
        # A fused model (convert --fuse-preprocess) takes frames of one size: (height, width), else None.
        self.frame_size = frame_size

    def __call__(self, outputs, size=None):
        """`outputs`: the family's lane outputs of one frame (no batch axis); `size`: the frame's (H, W), or None
        for a fused model's fixed frame size. Returns (LANES, SCORES, NUM_POINTS, NUM_LANES) arrays."""
        size = self.frame_size if size is None else size
        c = self.crop
        height = int(size[0]) - c["top"] - c["bottom"]
        width = int(size[1]) - c["left"] - c["right"]
        lanes = decode_outputs(outputs, image_size=(height, width), model_width=self.model_width, **self.decode)
        lanes = lanes[: self.top_k]
        points = np.full((self.top_k, self.max_points, 2), np.nan, np.float32)
        scores = np.zeros(self.top_k, np.float32)
        counts = np.zeros(self.top_k, np.int32)
        for i, lane in enumerate(lanes):
            n = min(len(lane.points), self.max_points)
            points[i, :n] = lane.points[:n] + np.array([c["left"], c["top"]], np.float32)
            scores[i] = lane.score
            counts[i] = n
        return points, scores, counts, np.array([len(lanes)], np.int32)
