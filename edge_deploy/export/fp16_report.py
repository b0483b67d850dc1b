"""Which tensors of an ONNX model would not survive FP16.

The model is run by ONNX Runtime in FP32 with the outputs of its computing
nodes exposed as graph outputs (on a copy; the artifact is untouched). Nodes
that only move data (Reshape, Transpose, Concat, Gather, ...) are skipped:
their values come from another node that is already checked. A node is listed
when one of its float outputs

- overflows: some |x| > 65504, the largest finite FP16 value (it would become
  inf; non-finite values count too), or
- underflows in a way that matters: the values below 2**-24, the smallest FP16
  subnormal (they become 0), carry at least FLUSHED_MASS of the tensor's total
  magnitude sum(|x|); or the values below 2**-14, the smallest normal FP16
  (they keep fewer than 11 significant bits), carry at least SUBNORMAL_MASS of
  it. Measuring by magnitude rather than by count means many tiny values that
  contribute nothing (a peaked softmax's tail, ReLU outputs near 0) are not
  listed, while a tensor whose signal lives at 1e-9 is.

Float initializers whose magnitude exceeds 65504 are listed too (the weights
themselves would overflow). The TensorRT stage keeps the listed nodes in FP32.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..core.deps import require
from ..artifact.records import Fp16Node, Fp16Report
from .parity import ort_session

FP16_MAX = 65504.0
FP16_MIN_SUBNORMAL = 2.0**-24
FP16_MIN_NORMAL = 2.0**-14
FLUSHED_MASS = 0.01
SUBNORMAL_MASS = 0.5
_FLOAT = 1  # onnx.TensorProto.FLOAT
DATA_MOVEMENT_OPS = frozenset({
    "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
})

RULE = (
    f"overflow: any |x| > {FP16_MAX:g}; underflow: values with |x| < 2^-24 (flushed to 0) carry >= "
    f"{FLUSHED_MASS:.0%} of sum(|x|), or values with |x| < 2^-14 (subnormal) carry >= {SUBNORMAL_MASS:.0%} of it"
)


def _exposed_model(model: Any) -> tuple[Any, dict[str, tuple[str, str]]]:
    """A copy of `model` with each float node output added as a graph output.

    Returns the copy and, per exposed tensor, the (node name, op type) that produces it.
    """
    onnx = require("onnx", "the FP16 report")
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    graph = exposed.graph
    known = {v.name: v for v in list(graph.value_info) + list(graph.output)}
    outputs = {v.name for v in graph.output}
    producers: dict[str, tuple[str, str]] = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            value = known.get(name)
            if node.op_type in DATA_MOVEMENT_OPS or not name or value is None:
                continue
            if value.type.tensor_type.elem_type != _FLOAT:
                continue
            producers[name] = (node.name or f"{node.op_type}_{index}", node.op_type)
            if name not in outputs:
                graph.output.append(value)
                outputs.add(name)
    return exposed, producers


def _initializer_overflows(model: Any) -> list[Fp16Node]:
    onnx = require("onnx", "the FP16 report")
    import numpy as np

    found = []
    for init in model.graph.initializer:
        if init.data_type != _FLOAT:
            continue
        values = onnx.numpy_helper.to_array(init)
        peak = float(np.abs(values).max()) if values.size else 0.0
        if peak > FP16_MAX:
            found.append(Fp16Node(node=init.name, op="initializer", output=init.name, max_abs=peak, reason="overflow"))
    return found


def fp16_report(model: Any, input_name: str, inputs: Sequence[Any], dynamic_batch: bool) -> Fp16Report:
    """Run `model` (ONNX, shapes inferred) in FP32 on `inputs` and list what FP16 would break.

    With a dynamic batch axis the samples run one at a time, so only one
    sample's intermediates are in memory at once.
    """
    import numpy as np


    exposed, producers = _exposed_model(model)
    session = ort_session(exposed)
    names = [o.name for o in session.get_outputs() if o.name in producers]
    peak = {n: 0.0 for n in names}
    total = {n: 0.0 for n in names}
    flushed = {n: 0.0 for n in names}
    subnormal = {n: 0.0 for n in names}
    feeds = [a[i : i + 1] for a in inputs for i in range(a.shape[0])] if dynamic_batch else list(inputs)
    for feed in feeds:
        for name, value in zip(names, session.run(names, {input_name: feed})):
            if value.size == 0:
                continue
            magnitude = np.abs(value)
            top = float(magnitude.max())
            peak[name] = max(peak[name], top) if np.isfinite(top) else float("inf")
            total[name] += float(magnitude.sum(dtype=np.float64))
            flushed[name] += float(magnitude.sum(where=magnitude < FP16_MIN_SUBNORMAL, dtype=np.float64))
            subnormal[name] += float(magnitude.sum(where=magnitude < FP16_MIN_NORMAL, dtype=np.float64))

    nodes = _initializer_overflows(model)
    for name in names:
        node, op = producers[name]
        if peak[name] > FP16_MAX:
            nodes.append(Fp16Node(node=node, op=op, output=name, max_abs=peak[name], reason="overflow"))
        elif total[name] > 0 and (flushed[name] >= FLUSHED_MASS * total[name]
                                  or subnormal[name] >= SUBNORMAL_MASS * total[name]):
            nodes.append(Fp16Node(node=node, op=op, output=name, max_abs=peak[name], reason="underflow",
                                  flushed_mass=round(flushed[name] / total[name], 4),
                                  subnormal_mass=round(subnormal[name] / total[name], 4)))
    return Fp16Report(
        rule=RULE,
        tensors_checked=len(names),
        samples=int(sum(a.shape[0] for a in inputs)),
        max_abs=max(peak.values(), default=0.0),
        nodes=tuple(nodes),
        fp32_nodes=tuple(sorted({n.node for n in nodes if n.op != "initializer" and n.node})),
    )
