"""A stand-in object detector as an ONNX file, for trying the stack without a trained detector
(`edge-deploy sample --stack`): it finds the bright quadrants of its input.

The graph (onnx.helper, opset 17, IR 8; input `images` [B, 3, S, S] FP32 RGB in 0..1, output `output0`
[B, 6, 8] in the YOLO layout): the mean brightness of each quadrant gives a score s = sigmoid(20 (b - 0.3)).
Anchors 0-3 are the quadrants' boxes, scored s as class 0; anchors 4-7 are the same boxes shifted by 2 px,
scored 0.8 s as class 1 (and 0.1 s as class 0). So a bright quadrant gives one box of each class after
class-aware NMS. Its boxes are known in advance, which is what a demo or a test needs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.deps import require
from ..core.fsutil import write_bytes_atomic
from .onnx_target import IR_VERSION

__all__ = ["STAND_IN_SIZE", "stand_in_anchors", "write_stand_in_detector"]

STAND_IN_SIZE = 64
_SHIFT = 2.0
_THRESHOLD = 0.3


def stand_in_anchors(size: int = STAND_IN_SIZE) -> np.ndarray:
    """The eight anchors' (x1, y1, x2, y2) in input pixels: quadrants (top-left, top-right, bottom-left,
    bottom-right), then the same shifted by 2 px."""
    half = size / 2
    corners = [(0.0, 0.0), (half, 0.0), (0.0, half), (half, half)]
    boxes = [(x, y, x + half, y + half) for x, y in corners]
    boxes += [(x + _SHIFT, y + _SHIFT, x + half + _SHIFT, y + half + _SHIFT) for x, y in corners]
    return np.array(boxes, np.float32)


def write_stand_in_detector(path: Path, size: int = STAND_IN_SIZE) -> Path:
    """Write the stand-in detector (module docstring) to `path`; returns `path`."""
    onnx = require("onnx", "writing the stand-in detector")
    from onnx import TensorProto, helper, numpy_helper

    if size < 4 or size % 2:
        raise ValueError(f"the stand-in detector's size must be an even number of at least 4, not {size}")
    xyxy = stand_in_anchors(size)
    cxcywh = np.stack([(xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2,
                       xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]])[None].astype(np.float32)  # [1, 4, 8]
    constants = {"threshold": np.float32(_THRESHOLD), "gain": np.float32(20.0), "tenth": np.float32(0.1),
                 "eight_tenths": np.float32(0.8), "zero": np.float32(0.0), "quads": np.array([-1, 4], np.int64),
                 "axis1": np.array([1], np.int64), "anchors": cxcywh}
    node = helper.make_node
    half = size // 2
    nodes = [
        node("ReduceMean", ["images"], ["gray"], axes=[1], keepdims=1),
        node("AveragePool", ["gray"], ["pooled"], kernel_shape=[half, half], strides=[half, half]),
        node("Reshape", ["pooled", "quads"], ["bright"]),
        node("Sub", ["bright", "threshold"], ["above"]),
        node("Mul", ["above", "gain"], ["logit"]),
        node("Sigmoid", ["logit"], ["s"]),
        node("Mul", ["s", "tenth"], ["s_tenth"]),
        node("Mul", ["s", "eight_tenths"], ["s_shifted"]),
        node("Mul", ["s", "zero"], ["s_zero"]),
        node("Concat", ["s", "s_tenth"], ["class0"], axis=1),
        node("Concat", ["s_zero", "s_shifted"], ["class1"], axis=1),
        node("Unsqueeze", ["class0", "axis1"], ["class0_row"]),
        node("Unsqueeze", ["class1", "axis1"], ["class1_row"]),
        node("Mul", ["class0_row", "zero"], ["zero_row"]),
        node("Add", ["zero_row", "anchors"], ["boxes"]),  # [B, 4, 8]: the anchors for every item of the batch
        node("Concat", ["boxes", "class0_row", "class1_row"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "stand_in_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 6, 8])],
        initializer=[numpy_helper.from_array(np.asarray(value), name) for name, value in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_bytes_atomic(path, model.SerializeToString(), 0o644)
