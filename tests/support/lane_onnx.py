"""A small real ONNX model with LaneATT's I/O, and a manifest like `convert` writes for it.

input [B, 3, 360, 640] -> GlobalAveragePool -> Flatten -> Gemm -> Reshape ->
predict_lanes [B, N, 77]. The Gemm bias makes the first rows confident lanes
well apart from each other, so decoding finds lanes; its small weights make
them depend on the image. Used by the engine tests (as the file the builders
get) and by the TensorRT tests on a Jetson (as the model that is built and run).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_deploy.artifact.manifest import Manifest, file_entry
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
LANEATT_DECODE = LANEATT.decode_defaults.to_dict()
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()


def write_lane_onnx(path: Path, rows: int = 64, lanes: int = 3, seed: int = 0, dynamic: bool = True) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    width = 77
    bias = np.zeros((rows, width), dtype=np.float32)
    bias[:, 0] = 0.0
    bias[:, 1] = -4.0
    bias[:lanes, 1] = 4.0
    bias[:, 2] = 0.05  # start near the bottom
    bias[:, 3] = np.linspace(0.1, 0.9, rows)
    bias[:, 4] = 60.0  # length in strips
    for i in range(rows):
        bias[i, 5:] = 80.0 + 200.0 * (i % 4) + 1.5 * np.arange(72)
    weight = (rng.standard_normal((3, rows * width)) * 0.3).astype(np.float32)
    batch = "batch" if dynamic else 1
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["input"], ["pooled"], name="pool"),
            helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
            helper.make_node("Gemm", ["flat", "head.weight", "head.bias"], ["rows"], name="head"),
            helper.make_node("Reshape", ["rows", "shape"], ["predict_lanes"], name="reshape"),
        ],
        "lanes",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 360, 640])],
        [helper.make_tensor_value_info("predict_lanes", TensorProto.FLOAT, [batch, rows, width])],
        initializer=[
            numpy_helper.from_array(weight, "head.weight"),
            numpy_helper.from_array(bias.reshape(-1), "head.bias"),
            numpy_helper.from_array(np.array([-1, rows, width], dtype=np.int64), "shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def lane_manifest(artifact_dir: Path, rows: int = 64, *, batch: tuple[int, int, int] = (1, 1, 4),
                  fp32_nodes: tuple[str, ...] = ("head",)) -> Manifest:
    """The manifest `convert` would write beside model.onnx (only the parts the engine stage reads; the
    released format 1, migrated)."""
    lo, opt, hi = batch
    nodes = [{"node": n, "op": "Gemm", "output": "rows", "max_abs": 70000.0, "reason": "overflow"} for n in fp32_nodes]
    return Manifest.from_dict({
        "format": 1,
        "files": {"model.onnx": file_entry(Path(artifact_dir) / "model.onnx").to_dict()},
        "io": {
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 360, 640]}],
            "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [-1, rows, 77]}],
            "batch": {"min": lo, "opt": opt, "max": hi, "dynamic": True},
        },
        "preprocess": dict(LANEATT_PREPROCESS),
        "decode": dict(LANEATT_DECODE),
        "parity": {"tolerance": {"atol": 1e-3, "rtol": 1e-3}, "batches": sorted({lo, hi}), "seed": 0, "outputs": {}},
        "fp16": {"nodes": nodes, "fp32_nodes": list(fp32_nodes)},
        "plan": None,
    })
