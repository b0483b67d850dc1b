"""Triton Python-backend model NAME_postprocess: the lane model's outputs -> lanes in frame pixels.

Written by `edge-deploy install --pipeline` as NAME_postprocess/V/model.py beside
pipeline_steps.py (the decoding and padding it shares with the BLS pipeline), decode.py
and lane.py (copies of the model's lane-family decoder, the one the client uses:
edge_deploy.lanedet.family) and manifest.json (format 2: decode
defaults, the outputs the family decodes, preprocessing). Inputs: the model's
lane outputs (one frame) and ORIGINAL_SIZE (height, width), or for a fused model
(no preprocess step) the frame size its manifest records. Outputs, padded to
top_k lanes: LANES [top_k, max_points, 2] (x, y) with NaN padding, SCORES [top_k]
(0 padding), NUM_POINTS [top_k] and NUM_LANES [1].
"""
import json
import os
import sys

import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_steps import LanePacker  # noqa: E402 - copied beside this file, with the family decoder's copy

OUTPUTS = ("LANES", "SCORES", "NUM_POINTS", "NUM_LANES")


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "manifest.json")) as fh:
            manifest = json.load(fh)
        config = json.loads(args["model_config"])
        # The family's lane outputs, in the order its decoder takes them (install wrote them as this config's inputs).
        self.lane_inputs = [t["name"] for t in config["input"] if t["name"] != "ORIGINAL_SIZE"]
        max_points = int(next(t for t in config["output"] if t["name"] == "LANES")["dims"][1])
        # A fused model (convert --fuse-preprocess) takes frames of one size: no ORIGINAL_SIZE input then.
        frame = (manifest.get("fused_preprocess") or {}).get("frame")
        self.fused = frame is not None
        self.pack = LanePacker(manifest["decode"], manifest["preprocess"], max_points,
                               (int(frame["height"]), int(frame["width"])) if frame else None)

    def _one(self, request):
        outputs = []
        for name in self.lane_inputs:
            array = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            outputs.append(array.reshape(array.shape[1:]) if array.shape[:1] == (1,) else array)
        size = None if self.fused else pb_utils.get_input_tensor_by_name(request, "ORIGINAL_SIZE").as_numpy().reshape(-1)
        return pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in zip(OUTPUTS, self.pack(outputs, size))])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # noqa: BLE001 - reported to the client
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses
