"""model_fp16.onnx: the FP16 graph TensorRT builds strongly typed, made and verified here with ONNX Runtime.

The float tensors of model.onnx become FP16 with onnxconverter-common's float16
pass (`convert_float_to_float16`), except the nodes the FP16 report lists
(they stay FP32, with casts around them) and, by default, the graph I/O
(`fp16_io=True` makes the I/O FP16 too). onnxconverter-common rather than
ModelOpt AutoCast: `nvidia-modelopt[onnx]` pulls numpy 2 (the bundled Triton
Python backend needs numpy < 2), onnx 1.21, onnxruntime-gpu and cupy into the
environment, while AutoCast itself calls onnxconverter-common underneath.

ONNX Runtime runs the result on the CPU on the parity inputs of `convert`;
it is compared with model.onnx (FP32) on the raw outputs (max abs/rel) and on
decoded lanes (same count per image, mean |dx| <= MAX_LANE_DX_PX at the width the family checks its lanes at:
640 wide for LaneATT, the data set's original width for UFLDv2 and CLRNet; parity.LaneCheck).
This is the FP16 accuracy a user sees before the model reaches the device.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.deps import require
from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, IOSignature, Manifest, TensorSpec, file_entry
from ..errors import ConvertError, EdgeDeployError, one_line
from ..core.fsutil import AtomicOutput
from .parity import (NEAR_TIE_MAX_REL, LaneCheck, compare_to_reference, lanes_line, lanes_moved_reason, ort_session,
                      parity_feeds)
from ..core.progress import Reporter
from ..artifact.records import Comparison, Fp16OnnxRecord, Fp16Report, LaneComparison
from . import onnx_target
from .fp16_report import DATA_MOVEMENT_OPS

MAX_LANE_DX_PX = 1.0  # mean |dx| allowed between model.onnx and model_fp16.onnx lanes (pixels: see above)
# ONNX Runtime on the CPU runs part of the FP16 graph in FP32 (casts around the kernels it lacks in FP16), so it sees
# less lane movement than a GPU: on an H200, the torch model in FP16 moved lanes 2.0-3.1x as far as this check saw on
# 48 held-out frames, per family (LaneATT 0.29 vs 0.09 px, UFLDv2 1.72 vs 0.86, CLRNet 0.24 vs 0.08; BENCHMARKS.md,
# "FP16 lanes on a GPU"). The report says so with the figure scaled by the largest factor measured.
GPU_FP16_DX_FACTOR = 3.1
FP16_MAX = 65504.0  # largest finite FP16: weights are clamped here, not at the converter's 1e4 default
FP16_MIN_SUBNORMAL = 2.0**-24  # smallest FP16 subnormal: tinier non-zero weights keep this magnitude


def kept_fp32_nodes(model: Any, fp16_report: Fp16Report | None) -> list[str]:
    """Names of the nodes to keep in FP32: the report's nodes, the consumers of overflowing initializers,
    and the data-movement nodes (Reshape, Concat, ...) that only pass their values on.

    The report does not check data-movement nodes (their values come from a checked node), so they
    follow their producers: otherwise a kept node's FP32 values would be cast to FP16 right after it.
    Unnamed nodes are named here the way the FP16 report names them ("<op>_<index>").
    """
    nodes = list(model.graph.node)
    for index, node in enumerate(nodes):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
    names = {node.name for node in nodes}
    keep: list[str] = []
    for entry in (fp16_report.nodes if fp16_report else None) or ():
        if entry.op == "initializer":
            keep += [n.name for n in nodes if entry.node in n.input]
        elif entry.node in names:
            keep.append(str(entry.node))
    kept_outputs = {out for n in nodes if n.name in keep for out in n.output}
    for node in nodes:  # graph.node is in topological order (an ONNX requirement)
        if node.op_type in DATA_MOVEMENT_OPS and kept_outputs.intersection(node.input) and node.name not in keep:
            keep.append(node.name)
            kept_outputs.update(node.output)
    return list(dict.fromkeys(keep))


def convert_model(model: Any, keep_fp32: list[str], fp16_io: bool) -> Any:
    """model (FP32 ModelProto) -> FP16 ModelProto, `keep_fp32` nodes and (unless fp16_io) the graph I/O in FP32."""
    require("onnxconverter_common", "making the FP16 ONNX model")
    from onnxconverter_common import float16

    onnx = require("onnx", "making the FP16 ONNX model")
    float_outputs = {o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    # The pass keeps stale FP32 value_info for the outputs of blocked nodes, which then contradicts the
    # Cast it inserts after them (ONNX Runtime refuses such a graph); it re-infers shapes itself.
    del model.graph.value_info[:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one warning per clamped weight value
        converted = float16.convert_float_to_float16(
            model, min_positive_val=FP16_MIN_SUBNORMAL, max_finite_val=FP16_MAX,
            keep_io_types=not fp16_io, node_block_list=keep_fp32,
        )
    if not fp16_io:
        _keep_fp32_outputs(converted, float_outputs)
    return converted


def _keep_fp32_outputs(model: Any, names: set[str]) -> None:
    """keep_io_types misses graph outputs made by a kept-FP32 node: the pass leaves them behind its
    Cast to FP16 (onnxconverter-common 1.16), so a value above 65504 would reach the output as inf.
    Such a Cast is made to cast to FP32 again, and the output is declared FP32."""
    onnx = require("onnx", "making the FP16 ONNX model")
    for output in model.graph.output:
        if output.name not in names or output.type.tensor_type.elem_type != onnx.TensorProto.FLOAT16:
            continue
        for node in model.graph.node:
            if node.op_type == "Cast" and output.name in node.output:
                for attribute in node.attribute:
                    if attribute.name == "to":
                        attribute.i = onnx.TensorProto.FLOAT
                output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


def _converter_name() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"onnxconverter-common {version('onnxconverter-common')} (float16.convert_float_to_float16)"
    except PackageNotFoundError:
        return "onnxconverter-common (float16.convert_float_to_float16)"


def fp16_io_signature(model: Any, io: IOSignature) -> IOSignature:
    """`io` with the datatypes the FP16 model's graph inputs/outputs have."""
    onnx = require("onnx", "making the FP16 ONNX model")
    names = {onnx.TensorProto.FLOAT16: "FP16", onnx.TensorProto.FLOAT: "FP32"}
    types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}

    def retyped(tensors: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        return tuple(replace(t, datatype=names.get(types.get(t.name), t.datatype)) for t in tensors)

    return replace(io, inputs=retyped(io.inputs), outputs=retyped(io.outputs))


def verify_fp16_onnx(fp32_path: Path, fp16_path: Path, manifest: Manifest) -> Comparison:
    """ONNX Runtime (CPU): model.onnx vs model_fp16.onnx on the parity inputs, raw outputs and lanes."""
    import numpy as np

    feeds = parity_feeds(manifest)
    reference_session = ort_session(fp32_path)
    session = ort_session(fp16_path)
    names = [o.name for o in reference_session.get_outputs()]
    dtypes = {i.name: np.float16 if i.type == "tensor(float16)" else np.float32 for i in session.get_inputs()}
    reference = [dict(zip(names, reference_session.run(None, feed))) for feed in feeds]
    actual = []
    for feed in feeds:
        cast = {name: np.asarray(array, dtype=dtypes.get(name, array.dtype)) for name, array in feed.items()}
        actual.append(dict(zip([o.name for o in session.get_outputs()], session.run(None, cast))))
    report = compare_to_reference(reference, actual, LaneCheck.of(manifest), max_dx_px=MAX_LANE_DX_PX, subject="the FP16 model")
    lanes = report.lanes
    if lanes is not None:  # the two sides named for what they are here
        lanes = replace(lanes, lanes_fp32=lanes.lanes_onnxruntime, lanes_fp16=lanes.lanes_plan,
                        lanes_onnxruntime=None, lanes_plan=None)
    return Comparison(
        reference=f"ONNX Runtime (CPU): {ONNX_NAME} (FP32) vs {FP16_ONNX_NAME}",
        batches=tuple(int(next(iter(f.values())).shape[0]) for f in feeds),
        outputs=report.outputs, lanes=lanes, passed=report.passed, problems=report.problems)


def make_fp16_onnx(artifact_dir: Path, manifest: Manifest, *, fp16_io: bool = False,
                   reporter: Reporter | None = None) -> Fp16OnnxRecord:
    """Write artifact_dir/model_fp16.onnx, verify it against model.onnx and record it in `manifest`.

    Adds files["model_fp16.onnx"] and fp16["onnx"] (converter, I/O, kept nodes, verification,
    and "f1": None for the evaluation to fill). Returns that section; a one-line ConvertError
    when the conversion fails or the FP16 model loses lanes.
    """
    onnx = require("onnx", "making the FP16 ONNX model")
    reporter = reporter or Reporter()
    artifact_dir = Path(artifact_dir)
    source, target = artifact_dir / ONNX_NAME, artifact_dir / FP16_ONNX_NAME
    report = manifest.fp16
    model = onnx.load(str(source))
    keep = kept_fp32_nodes(model, report)
    try:
        converted = onnx_target.conform(convert_model(model, keep, fp16_io), what=FP16_ONNX_NAME)
        onnx.checker.check_model(converted)
    except Exception as exc:  # noqa: BLE001 - the converter and checker raise plain exceptions
        raise ConvertError(
            f"cannot make {FP16_ONNX_NAME}: {one_line(exc, 300)}; convert with --precision fp32 to skip it."
        ) from exc
    output = AtomicOutput(target)
    tmp = output.tmp
    try:
        onnx_target.save(converted, tmp, what=FP16_ONNX_NAME)
        try:
            verdict = verify_fp16_onnx(source, tmp, manifest)
        except EdgeDeployError as exc:
            raise ConvertError(f"{FP16_ONNX_NAME} does not run like {ONNX_NAME}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime refuses a graph the converter got wrong
            raise ConvertError(
                f"ONNX Runtime cannot run {FP16_ONNX_NAME}: {one_line(exc, 300)}; convert with --precision fp32."
            ) from exc
        if not verdict.passed:
            verdict = _refuse_or_note_lanes(verdict, manifest, reporter)
        output.commit()
    finally:
        output.discard()
    section = Fp16OnnxRecord(
        file=FP16_ONNX_NAME,
        converter=_converter_name(),
        io_precision="fp16" if fp16_io else "fp32",
        io=fp16_io_signature(converted, manifest.io),
        kept_fp32=tuple(keep),
        verify=replace(verdict, problems=None),
        f1=None,  # F1 retention vs model.onnx: filled by the evaluation when evaluation data is given
    )
    manifest.files[FP16_ONNX_NAME] = file_entry(target)
    manifest.fp16 = replace(manifest.fp16 or Fp16Report(), onnx=section)
    worst = verdict.worst()
    reporter.info(
        f"{FP16_ONNX_NAME}: {len(keep)} node(s) kept in FP32, {(section.io_precision or '').upper()} I/O; vs FP32 "
        f"max abs {worst.max_abs or 0.0:.3g}, max rel {worst.max_rel or 0.0:.3g}"
        + (f"; {fp16_lanes_line(verdict.lanes)}{gpu_fp16_note(verdict.lanes)}" if verdict.lanes else "")
    )
    return section


def fp16_lanes_line(lanes: LaneComparison) -> str:
    """The FP16 lane check in one line."""
    return lanes_line(lanes, f"lanes {lanes.lanes_fp16} (FP32 {lanes.lanes_fp32}) over {lanes.images} images")


def gpu_fp16_note(lanes: LaneComparison) -> str:
    """What the CPU's FP16 lane figure underestimates: the movement a GPU's FP16 shows (GPU_FP16_DX_FACTOR)."""
    if not lanes.mean_dx_px:
        return ""
    gpu = lanes.mean_dx_px * GPU_FP16_DX_FACTOR
    return f" (ONNX Runtime on the CPU computes parts in FP32: on a GPU expect up to ~{gpu:.2f} px, measured on an H200)"


def _refuse_or_note_lanes(verdict: Comparison, manifest: Manifest, reporter: Reporter) -> Comparison:
    """A failed FP16 check: a ConvertError that says what moved and why; for untrained (seeded) weights whose raw
    outputs agree, a warning and "verified": false instead (random weights decide everything at near-ties, and a
    model that is only a demonstration must still convert)."""
    problems = verdict.problems or ()
    summary = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
    near_ties = (verdict.worst().max_rel or 0.0) <= NEAR_TIE_MAX_REL
    reason = lanes_moved_reason(verdict, "FP16")
    lanes = verdict.lanes
    if near_ties and lanes is not None and manifest.source.trained is False \
            and all(not problem.startswith("output ") for problem in problems):
        reporter.warn(f"{FP16_ONNX_NAME}: lanes not verified: {summary}; {reason}. The weights are untrained: "
                      "convert a trained checkpoint to check its lanes.")
        lanes = replace(lanes, verified=False, note=f"not verified: untrained weights ({summary}; {reason})")
        return replace(verdict, lanes=lanes, passed=True)
    advice = ("check that the checkpoint is trained, or convert with --precision fp32 if lanes must match exactly"
              if near_ties else "the model loses accuracy in FP16: convert with --precision fp32 for an FP32 plan")
    raise ConvertError(f"{FP16_ONNX_NAME} does not reproduce {ONNX_NAME} in ONNX Runtime: {summary}; {reason}; "
                       f"{advice}.")
