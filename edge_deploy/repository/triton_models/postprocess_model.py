"""Triton Python-backend model NAME_postprocess: the lane model's outputs -> lanes in frame pixels.

Written by `edge-deploy install --pipeline` as NAME_postprocess/V/model.py beside
decode.py and lane.py (copies of the model's lane-family decoder, the one the
client uses: edge_deploy.lanedet.family) and manifest.json (format 2: decode
defaults, the outputs the family decodes, preprocessing). Inputs: the model's
lane outputs (one frame) and ORIGINAL_SIZE (height, width), or for a fused model
(no preprocess step) the frame size its manifest records. Outputs, padded to
top_k lanes: LANES [top_k, max_points, 2] (x, y) with NaN padding, SCORES [top_k]
(0 padding), NUM_POINTS [top_k] and NUM_LANES [1].
"""
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode import decode_outputs  # noqa: E402 - the family decoder's copy in this version directory


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "manifest.json")) as fh:
            manifest = json.load(fh)
        config = json.loads(args["model_config"])
        # The family's decode parameters, passed to its decoder by name (every family's include top_k).
        self.decode = dict(manifest["decode"])
        self.top_k = int(self.decode["top_k"])
        size = {"ORIGINAL_SIZE"}
        # The family's lane outputs, in the order its decoder takes them (install wrote them as this config's inputs).
        self.lane_inputs = [t["name"] for t in config["input"] if t["name"] not in size]
        self.max_points = int(next(t for t in config["output"] if t["name"] == "LANES")["dims"][1])
        self.model_width = int(manifest["preprocess"]["width"])  # x is in model-input pixels
        # With a crop, the model saw only part of the frame: decode in that box, then shift.
        crop = manifest["preprocess"]["crop"] or {}
        self.crop = {side: int(crop.get(side, 0)) for side in ("top", "bottom", "left", "right")}
        # A fused model (convert --fuse-preprocess) takes frames of one size: no ORIGINAL_SIZE input then.
        frame = (manifest.get("fused_preprocess") or {}).get("frame")
        self.frame_size = (int(frame["height"]), int(frame["width"])) if frame else None

    def _one(self, request):
        outputs = []
        for name in self.lane_inputs:
            array = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            outputs.append(array.reshape(array.shape[1:]) if array.shape[:1] == (1,) else array)
        if self.frame_size is not None:
            size = self.frame_size
        else:
            size = pb_utils.get_input_tensor_by_name(request, "ORIGINAL_SIZE").as_numpy().reshape(-1)
        c = self.crop
        height = int(size[0]) - c["top"] - c["bottom"]
        width = int(size[1]) - c["left"] - c["right"]
        lanes = decode_outputs(outputs, image_size=(height, width), model_width=self.model_width, **self.decode)
        points = np.full((self.top_k, self.max_points, 2), np.nan, np.float32)
        scores = np.zeros(self.top_k, np.float32)
        counts = np.zeros(self.top_k, np.int32)
        for i, lane in enumerate(lanes[: self.top_k]):
            n = min(len(lane.points), self.max_points)
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
