"""Triton Python-backend model NAME_postprocess: raw lane output -> lanes in frame pixels.

Written by `edge-deploy install --pipeline` as NAME_postprocess/V/model.py beside
decode.py (copied from edge_deploy/lanedet/decode.py, the decoder the client
uses) and manifest.json (decode defaults). Inputs: the model's raw output
[1, N, 77] and ORIGINAL_SIZE (height, width), or for a fused model (no preprocess
step) the frame size its manifest records. Outputs, padded to top_k lanes:
LANES [top_k, 72, 2] (x, y) with NaN padding, SCORES [top_k] (0 padding),
NUM_POINTS [top_k] and NUM_LANES [1].
"""
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import decode_lanes  # noqa: E402 - the copy in this version directory

MAX_POINTS = 72


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "manifest.json")) as fh:
            manifest = json.load(fh)
        decode = manifest.get("decode") or {}
        self.conf = float(decode.get("conf_threshold", 0.5))
        self.nms = float(decode.get("nms_threshold", 50.0))
        self.top_k = int(decode.get("top_k", 4))
        self.raw_name = manifest["io"]["outputs"][0]["name"]
        self.model_width = int(manifest["preprocess"]["width"])  # the x columns are in model-input pixels
        # With a crop, the model saw only part of the frame: decode in that box, then shift.
        crop = (manifest.get("preprocess") or {}).get("crop") or {}
        self.crop = {side: int(crop.get(side, 0)) for side in ("top", "bottom", "left", "right")}
        # A fused model (convert --fuse-preprocess) takes frames of one size: no ORIGINAL_SIZE input then.
        frame = (manifest.get("fused_preprocess") or {}).get("frame")
        self.frame_size = (int(frame["height"]), int(frame["width"])) if frame else None

    def _one(self, request):
        raw = pb_utils.get_input_tensor_by_name(request, self.raw_name).as_numpy()
        if self.frame_size is not None:
            size = self.frame_size
        else:
            size = pb_utils.get_input_tensor_by_name(request, "ORIGINAL_SIZE").as_numpy().reshape(-1)
        raw = raw.reshape(raw.shape[-2], raw.shape[-1])
        c = self.crop
        height = int(size[0]) - c["top"] - c["bottom"]
        width = int(size[1]) - c["left"] - c["right"]
        lanes = decode_lanes(raw, conf_threshold=self.conf, nms_threshold=self.nms,
                             top_k=self.top_k, image_size=(height, width), model_width=self.model_width)
        points = np.full((self.top_k, MAX_POINTS, 2), np.nan, np.float32)
        scores = np.zeros(self.top_k, np.float32)
        counts = np.zeros(self.top_k, np.int32)
        for i, lane in enumerate(lanes[: self.top_k]):
            n = min(len(lane.points), MAX_POINTS)
            points[i, :n] = lane.points[:n] + np.array([c["left"], c["top"]], np.float32)
            scores[i] = lane.score
            counts[i] = n
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("LANES", points),
            pb_utils.Tensor("SCORES", scores),
            pb_utils.Tensor("NUM_POINTS", counts),
            pb_utils.Tensor("NUM_LANES", np.array([len(lanes[: self.top_k])], np.int32)),
        ])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # noqa: BLE001 - reported to the client
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses
