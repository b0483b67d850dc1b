"""Triton Python-backend model NAME_preprocess: a BGR frame of any size -> the lane model's input.

Written by `edge-deploy install --pipeline` as NAME_preprocess/V/model.py beside
preprocess.py (copied from edge_deploy/lanedet/preprocess.py, the code the
client uses) and manifest.json (format 2) (the preprocessing spec and the model's input
name and dtype). Input FRAME: UINT8 [H, W, 3] BGR. Outputs: the model input
[1, 3, h, w] and ORIGINAL_SIZE: INT32 [2] = (H, W).
"""
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preprocess import Preprocessor, PreprocessSpec  # noqa: E402 - the copy in this version directory

_DTYPES = {"FP32": np.float32, "FP16": np.float16}


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "manifest.json")) as fh:
            manifest = json.load(fh)
        model_input = manifest["io"]["inputs"][0]
        self.output_name = model_input["name"]
        self.pre = Preprocessor(PreprocessSpec.from_dict(manifest["preprocess"]), _DTYPES[model_input["datatype"]], 1)

    def _one(self, request):
        frame = pb_utils.get_input_tensor_by_name(request, "FRAME").as_numpy()
        tensor = np.array(self.pre(frame, 0, "bgr"))
        size = np.array(frame.shape[:2], dtype=np.int32)
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor(self.output_name, tensor), pb_utils.Tensor("ORIGINAL_SIZE", size)]
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # noqa: BLE001 - reported to the client
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses
