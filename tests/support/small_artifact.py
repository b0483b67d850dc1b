"""A small, fast stand-in for a converted LaneATT artifact (used until/besides `laneatt_artifact`).

The ONNX model has LaneATT's I/O signature, input [B, 3, 360, 640] FP32 ->
predict_lanes [B, N, 77] FP32, but is tiny: a global average pool of the frame
feeds a linear layer whose bias holds real LaneATT anchor rows, so the outputs
are plausible lanes that depend on the input. The manifest is the product's
`Manifest` (format 2); tests/data/format1 holds artifacts of the released format 1.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dataclasses import replace

from edge_deploy.artifact.manifest import BatchRange, IOSignature, Manifest, TensorSpec, file_entry
from edge_deploy.lanedet.model_source import ExternalSource
from edge_deploy.artifact.precision import Precision
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
LANEATT_DECODE = LANEATT.decode_defaults.to_dict()
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()


def build_onnx(path: Path, anchors: np.ndarray, *, seed: int = 0, batch: str | int = "batch",
               hw: tuple[int, int] = (360, 640)) -> None:
    """Write the tiny lane model to `path` (batch: a dim name for dynamic batch, or an int; hw: input size)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    n = anchors.shape[0]
    bias = anchors.astype(np.float32).copy()
    bias[:, 0] = 0.0
    bias[:, 1] = rng.normal(-1.0, 1.0, n)  # logit_pos
    bias[:, 4] = rng.uniform(20, 60, n)  # length in strips
    weight = np.zeros((3, n, 77), np.float32)
    weight[:, :, 1] = rng.normal(0.0, 6.0, (3, n))  # scores depend on the frame's mean colour
    weight[:, :, 5:] = rng.normal(0.0, 20.0, (3, n, 1))  # lanes shift with it
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "W"], ["mm"]),
            helper.make_node("Add", ["mm", "B"], ["lin"]),
            helper.make_node("Reshape", ["lin", "shape"], ["predict_lanes"]),
        ],
        "tiny_laneatt",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, *hw])],
        [helper.make_tensor_value_info("predict_lanes", TensorProto.FLOAT, [batch, n, 77])],
        initializer=[
            numpy_helper.from_array(weight.reshape(3, n * 77), "W"),
            numpy_helper.from_array(bias.reshape(n * 77), "B"),
            numpy_helper.from_array(np.array([-1, n, 77], np.int64), "shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def make_artifact(
    out: Path, anchors_npy: Path, *, n: int = 1000, seed: int = 0, batch_max: int = 4, dynamic: bool = True,
    fixed_batch: int = 1, hw: tuple[int, int] = (360, 640),
) -> Path:
    """An artifact directory (model.onnx + manifest.json) in `out`; returns `out`.

    dynamic=True: batch axis 1..batch_max; dynamic=False: a fixed batch of `fixed_batch`; hw: the input size.
    The weights depend on `seed` and `n` only, so the same seed gives the same lanes at any batch.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = np.load(anchors_npy)
    anchors = table[np.linspace(0, len(table) - 1, n).astype(int)]
    batch_dim = "batch" if dynamic else fixed_batch
    build_onnx(out / "model.onnx", anchors, seed=seed, batch=batch_dim, hw=hw)
    lead = -1 if dynamic else fixed_batch
    batch_range = (BatchRange(1, 1, batch_max, True) if dynamic else
                   BatchRange(fixed_batch, fixed_batch, fixed_batch, False))
    Manifest(
        io=IOSignature((TensorSpec("input", "FP32", (lead, 3, *hw)),),
                       (TensorSpec("predict_lanes", "FP32", (lead, n, 77)),), batch_range),
        preprocess=replace(LANEATT.preprocess, height=hw[0], width=hw[1]),
        decode=LANEATT.decode_defaults,
        precision=Precision.FP32,
        family="laneatt",
        tool={"name": "edge-deploy", "version": "test"},
        created="2026-11-22T07:00:00Z",
        source=ExternalSource.from_dict({"kind": "factory", "spec": "tests/support/small_artifact.py", "backbone": None,
                                         "checkpoint": None, "num_anchors": n, "trained": False}),
        files={"model.onnx": file_entry(out / "model.onnx")},
    ).write(out)
    return out


def make_unloadable(out: Path, anchors_npy: Path, *, n: int = 100) -> Path:
    """An artifact whose manifest and I/O signature are right but whose model no runtime can load.

    model.onnx holds one node of an operator nobody implements, so install's checks pass
    and the server's load fails (what a model broken in a subtler way does).
    """
    import onnx
    from onnx import TensorProto, helper

    out = make_artifact(out, anchors_npy, n=n)
    graph = helper.make_graph(
        [helper.make_node("NoSuchLaneOp", ["input"], ["predict_lanes"], domain="edge_deploy.test")],
        "unloadable",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 360, 640])],
        [helper.make_tensor_value_info("predict_lanes", TensorProto.FLOAT, ["batch", n, 77])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("edge_deploy.test", 1)])
    model.ir_version = 8
    onnx.save(model, str(out / "model.onnx"))
    manifest = Manifest.read(out)
    manifest.files["model.onnx"] = file_entry(out / "model.onnx")
    manifest.write(out)
    return out


def make_fused_artifact(out: Path, anchors_npy: Path, *, frame_size: tuple[int, int] = (590, 1640),
                        **options) -> Path:
    """`make_artifact`'s model with the preprocessing fused in by the product (`convert --fuse-preprocess`)."""
    from edge_deploy.export.fused_preprocess import fuse_artifact

    out = make_artifact(out, anchors_npy, **options)
    manifest = Manifest.read(out)
    fuse_artifact(out, manifest, frame_size)
    manifest.write(out)
    return out


def make_ufldv2_artifact(out: Path, dataset: str = "culane", *, seed: int = 0) -> Path:
    """A negligible-compute stand-in for a converted UFLDv2 artifact with the data set's real I/O: input
    [B, 3, 320, W] -> loc_row, loc_col, exist_row, exist_col (a global average pool of the input feeds one
    linear layer whose outputs are split and reshaped like the official model's), for client benchmarks."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edge_deploy.lanedet.ufldv2 import FAMILY as UFLDV2
    from edge_deploy.lanedet.ufldv2.decode import OUTPUT_NAMES
    from edge_deploy.lanedet.ufldv2.presets import PRESETS

    p = PRESETS[dataset]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = [(p.cells_row, p.rows, p.lanes), (p.cells_col, p.cols, p.lanes), (2, p.rows, p.lanes),
              (2, p.cols, p.lanes)]
    rng = np.random.default_rng(seed)
    weight = rng.normal(0.0, 2.0, (3, p.total_dim)).astype(np.float32)
    bias = rng.normal(0.0, 1.0, p.total_dim).astype(np.float32)
    bias[-2 * p.lanes * (p.rows + p.cols):] += 0.5  # exist logits lean to "exists": lanes are drawn
    nodes = [helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
             helper.make_node("MatMul", ["flat", "W"], ["mm"]),
             helper.make_node("Add", ["mm", "B"], ["lin"]),
             helper.make_node("Split", ["lin", "sizes"], [f"{n}_flat" for n in OUTPUT_NAMES], axis=1)]
    inits = [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B"),
             numpy_helper.from_array(np.array([int(np.prod(s)) for s in shapes], np.int64), "sizes")]
    for name, shape in zip(OUTPUT_NAMES, shapes):
        inits.append(numpy_helper.from_array(np.array([-1, *shape], np.int64), f"{name}_shape"))
        nodes.append(helper.make_node("Reshape", [f"{name}_flat", f"{name}_shape"], [name]))
    hw = (p.input_height, p.input_width)
    graph = helper.make_graph(nodes, "tiny_ufldv2",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, *hw])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", *s])
                               for n, s in zip(OUTPUT_NAMES, shapes)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out / "model.onnx"))
    preset = UFLDV2.datasets[dataset]
    Manifest(
        io=IOSignature((TensorSpec("input", "FP32", (-1, 3, *hw)),),
                       tuple(TensorSpec(n, "FP32", (-1, *s)) for n, s in zip(OUTPUT_NAMES, shapes)),
                       BatchRange(1, 1, 4, True)),
        preprocess=preset.preprocess, decode=preset.decode, precision=Precision.FP32, family="ufldv2",
        tool={"name": "edge-deploy", "version": "test"}, created="2026-11-24T07:00:00Z",
        source=ExternalSource.from_dict({"kind": "factory", "spec": "tests/support/small_artifact.py", "trained": False}),
        files={"model.onnx": file_entry(out / "model.onnx")},
    ).write(out)
    return out
