"""Precision: the one type for what `convert --precision` asks, recorded in the manifest and followed by install."""
from __future__ import annotations

from enum import Enum


class Precision(str, Enum):
    """The precision a model is converted for (FP16 by default).

    fp16: convert also writes model_fp16.onnx (verified with ONNX Runtime); TensorRT builds
    an FP16 plan; install serves the FP16 model where no plan exists.
    fp32: model.onnx only, an FP32 plan. int8: an INT8 plan with calibration (TensorRT 8.5-10.x).
    """

    FP16 = "fp16"
    FP32 = "fp32"
    INT8 = "int8"

    def __str__(self) -> str:
        return self.value
