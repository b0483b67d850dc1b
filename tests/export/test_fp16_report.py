"""The FP16 report on small hand-built ONNX graphs, run by real ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge_deploy.export.fp16_report import FP16_MAX, fp16_report  # noqa: E402


def graph_model(nodes, initializers, out_shape, in_shape=("batch", 8)):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
        [numpy_helper.from_array(np.asarray(v, np.float32), name) for name, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model)


def report_for(model, batches=(1, 3), dynamic=True, width=8, scale=1.0):
    rng = np.random.default_rng(0)
    inputs = [(rng.random((b, width), dtype=np.float32) + 0.5) * scale for b in batches]
    return fp16_report(model, "x", inputs, dynamic)


def flagged(report):
    return {(n["node"], n["reason"]) for n in report["nodes"]}


def test_overflow_is_listed_by_node_and_data_movement_is_skipped() -> None:
    model = graph_model(
        [
            helper.make_node("Mul", ["x", "k"], ["big"], name="scale"),  # up to 1.5 * 300 = 450
            helper.make_node("Mul", ["big", "big"], ["square"], name="square"),  # up to 2e5: overflow
            helper.make_node("Reshape", ["square", "shape"], ["flat"], name="flatten"),
            helper.make_node("Div", ["flat", "k2"], ["y"], name="shrink"),  # back below 65504
        ],
        {"k": [300.0], "shape": np.array([-1], np.float32), "k2": [1000.0]},
        ["batch*8"],
    )
    # Reshape's shape must be int64.
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([-1], np.int64), "shape"))
    report = report_for(model)
    assert flagged(report) == {("square", "overflow")}
    (entry,) = report["nodes"]
    assert entry["op"] == "Mul" and entry["output"] == "square" and entry["max_abs"] > FP16_MAX
    assert report["max_abs"] == entry["max_abs"]
    assert report["fp32_nodes"] == ["square"]
    assert report["samples"] == 4  # batch 1 + batch 3, one sample at a time
    assert "flatten" not in {n["node"] for n in report["nodes"]}  # a reshape of a checked tensor
    assert len(model.graph.output) == 1  # the report works on a copy


def test_underflow_that_carries_the_signal_is_listed() -> None:
    model = graph_model(
        [
            helper.make_node("Mul", ["x", "tiny"], ["small"], name="shrink"),  # ~1e-9: all flushed to 0
            helper.make_node("Div", ["small", "tiny"], ["y"], name="restore"),  # back to ~1
        ],
        {"tiny": [1e-9]},
        ["batch", 8],
    )
    report = report_for(model)
    assert flagged(report) == {("shrink", "underflow")}
    assert report["nodes"][0]["flushed_mass"] == 1.0


def test_tiny_tail_of_a_peaked_softmax_is_not_listed() -> None:
    # One logit far above the others: most softmax outputs are < 2^-24 and would
    # flush to zero, but they carry almost none of the mass, so nothing changes.
    model = graph_model(
        [
            helper.make_node("Mul", ["x", "sharp"], ["logits"], name="sharpen"),
            helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
        ],
        {"sharp": np.linspace(0, 60, 64).astype(np.float32)},
        ["batch", 64],
        in_shape=("batch", 64),
    )
    rng = np.random.default_rng(1)
    inputs = [np.ones((2, 64), np.float32) + 0.01 * rng.random((2, 64), dtype=np.float32)]
    outputs = __import__("onnxruntime").InferenceSession(model.SerializeToString()).run(None, {"x": inputs[0]})[0]
    assert (outputs < 2.0**-24).mean() > 0.3  # the premise: many values would flush
    report = fp16_report(model, "x", inputs, dynamic_batch=True)
    assert report["nodes"] == []


def test_initializers_beyond_fp16_are_listed_and_static_batches_run_whole() -> None:
    model = graph_model([helper.make_node("Sub", ["x", "offset"], ["y"], name="center")],
                        {"offset": [1e6]}, [2, 8], in_shape=(2, 8))
    report = report_for(model, batches=(2,), dynamic=False, scale=1e6)
    reasons = {(n["op"], n["reason"]) for n in report["nodes"]}
    assert reasons == {("initializer", "overflow"), ("Sub", "overflow")}  # |x - 1e6| up to 5e5
    assert report["fp32_nodes"] == ["center"]  # initializers are not nodes to keep in FP32
    assert report["samples"] == 2
