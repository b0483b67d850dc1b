"""The stage reports a manifest holds ("export", "parity", "fp16", "plan.verify", "evaluation",
"fused_preprocess"; an object detector's "detection" is edge_deploy.detect.record's), one frozen dataclass each, read and checked once by `from_dict`.

Every report is a `Record` (edge_deploy.core.json_record, the base the "source" section shares):

- `from_dict(data, where)` checks each known key's type (RecordError naming the field, e.g.
  ``parity.tolerance.atol``), builds the nested records, and keeps the keys this version does not
  know in `extra`, so a manifest written by a newer edge-deploy round-trips;
- `to_dict()` writes the JSON the stage has always written: a record that was read writes its keys
  in the order read, then the fields set since; a record a stage built writes its fields in
  declaration order, leaving out those that are None (except the `_ALWAYS` ones, which the format
  writes as null);
- equality is equality of `to_dict()`;
- a record is also a read-only mapping of its `to_dict()` (``manifest.parity["outputs"]``), the
  API these sections had when they were plain dicts.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .io_signature import IOSignature
from ..core.json_record import json_value  # noqa: F401 - re-exported: records.json_value, as Record and RecordError
from ..core.json_record import (Record, RecordError, kind_of, list_of, map_of, read_bool, read_int, read_ints, read_number,
                          read_record, read_str, read_strs)


def _io(value: Any, where: str) -> IOSignature:
    if not isinstance(value, Mapping):
        raise RecordError(f"{where} is {kind_of(value)}, not an object")
    try:
        return IOSignature.from_dict(value)
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{where} is not an I/O signature ({type(exc).__name__}: {exc})") from None


# --------------------------------------------------------------------------- comparisons (parity, FP16, plan, fused)


@dataclass(frozen=True, eq=False)
class OutputError(Record):
    """One output's largest error against its reference; `ok`: within tolerance (export's parity only)."""

    max_abs: float | None = None
    max_rel: float | None = None
    ok: bool | None = None

    _SECTION = "output"
    _READERS = {"max_abs": read_number, "max_rel": read_number, "ok": read_bool}


_outputs = map_of(read_record(OutputError))


@dataclass(frozen=True, eq=False)
class LaneComparison(Record):
    """Decoded lanes of a candidate against its reference. The count keys name the two sides: onnxruntime/plan
    (a plan), fp32/fp16 (model_fp16.onnx), client/fused (fused preprocessing)."""

    images: int | None = None
    lanes_onnxruntime: int | None = None
    lanes_plan: int | None = None
    lanes_fp32: int | None = None
    lanes_fp16: int | None = None
    lanes_client: int | None = None
    lanes_fused: int | None = None
    mean_dx_px: float | None = None
    max_mean_dx_px: float | None = None
    dx_width_px: float | None = None
    verified: bool | None = None  # None: not said (a pass); False: nothing to compare, or untrained weights
    note: str | None = None

    _SECTION = "lanes"
    _READERS = {**{k: read_int for k in ("images", "lanes_onnxruntime", "lanes_plan", "lanes_fp32", "lanes_fp16",
                                     "lanes_client", "lanes_fused")},
                **{k: read_number for k in ("mean_dx_px", "max_mean_dx_px", "dx_width_px")},
                "verified": read_bool, "note": read_str}


@dataclass(frozen=True, eq=False)
class Comparison(Record):
    """A candidate run against its reference on the same feeds (`parity.compare_to_reference`): raw errors per
    output, then lanes. Also the plan's "run" section (`status`, and `reason` when skipped)."""

    status: str | None = None
    reason: str | None = None
    reference: str | None = None
    batches: tuple[int, ...] | None = None
    outputs: Mapping[str, OutputError] | None = None
    worst_output: str | None = None
    lanes: LaneComparison | None = None
    passed: bool | None = None
    problems: tuple[str, ...] | None = None

    _SECTION = "comparison"
    _READERS = {"status": read_str, "reason": read_str, "reference": read_str, "batches": read_ints, "outputs": _outputs,
                "worst_output": read_str, "lanes": read_record(LaneComparison), "passed": read_bool, "problems": read_strs}
    _ALWAYS = frozenset({"lanes"})

    @classmethod
    def skipped(cls, reason: str) -> Comparison:
        """{"status": "skipped", "reason": ...}: a run that did not happen."""
        return cls(status="skipped", reason=reason, key_order=("status", "reason"))

    def worst(self) -> OutputError:
        """The output entry with the largest relative error (zeros when there is none)."""
        entries = [e for e in (self.outputs or {}).values() if e.max_rel is not None]
        return max(entries, key=lambda e: e.max_rel or 0.0, default=OutputError(max_abs=0.0, max_rel=0.0))


# --------------------------------------------------------------------------- export and parity


@dataclass(frozen=True, eq=False)
class SimplifyReport(Record):
    """export.simplify: whether onnxslim's graph was kept, and why not."""

    tool: str | None = None
    nodes_before: int | None = None
    applied: bool | None = None
    reason: str | None = None
    nodes_after: int | None = None
    max_abs_change: Mapping[str, float] | None = None

    _SECTION = "export.simplify"
    _READERS = {"tool": read_str, "nodes_before": read_int, "applied": read_bool, "reason": read_str, "nodes_after": read_int,
                "max_abs_change": map_of(read_number)}


@dataclass(frozen=True, eq=False)
class ExportReport(Record):
    """The manifest's "export": exporter and onnx versions, opset, trace batch, simplification."""

    exporter: str | None = None
    onnx: str | None = None
    opset: int | None = None
    ir_version: int | None = None
    trace_batch: int | None = None
    simplify: SimplifyReport | None = None

    _SECTION = "export"
    _READERS = {"exporter": read_str, "onnx": read_str, "opset": read_int, "ir_version": read_int, "trace_batch": read_int,
                "simplify": read_record(SimplifyReport)}


@dataclass(frozen=True, eq=False)
class Tolerance(Record):
    atol: float | None = None
    rtol: float | None = None

    _SECTION = "parity.tolerance"
    _READERS = {"atol": read_number, "rtol": read_number}


@dataclass(frozen=True, eq=False)
class ParityReport(Record):
    """The manifest's "parity": torch vs ONNX Runtime at both ends of the batch range."""

    reference: str | None = None
    tolerance: Tolerance | None = None
    batches: tuple[int, ...] | None = None
    seed: int | None = None
    outputs: Mapping[str, OutputError] | None = None

    _SECTION = "parity"
    _READERS = {"reference": read_str, "tolerance": read_record(Tolerance), "batches": read_ints, "seed": read_int,
                "outputs": _outputs}


# --------------------------------------------------------------------------- FP16


@dataclass(frozen=True, eq=False)
class Fp16Node(Record):
    """A node (or an initializer) whose values FP16 cannot hold: it stays FP32."""

    node: str | None = None
    op: str | None = None
    output: str | None = None
    max_abs: float | None = None
    reason: str | None = None  # "overflow" | "underflow"
    flushed_mass: float | None = None
    subnormal_mass: float | None = None

    _SECTION = "fp16.nodes[]"
    _READERS = {"node": read_str, "op": read_str, "output": read_str, "max_abs": read_number, "reason": read_str, "flushed_mass": read_number,
                "subnormal_mass": read_number}


@dataclass(frozen=True, eq=False)
class F1Retention(Record):
    """fp16.onnx.f1: F1 of model_fp16.onnx against model.onnx's (filled by the evaluation)."""

    iou: float | None = None
    fp32: float | None = None
    fp16: float | None = None
    retention: float | None = None

    _SECTION = "fp16.onnx.f1"
    _READERS = {"iou": read_number, "fp32": read_number, "fp16": read_number, "retention": read_number}
    _ALWAYS = frozenset({"retention"})  # null when model.onnx's F1 is 0


@dataclass(frozen=True, eq=False)
class Fp16OnnxRecord(Record):
    """fp16.onnx: the record of model_fp16.onnx (converter, I/O, nodes kept FP32, verification, F1)."""

    file: str | None = None
    converter: str | None = None
    io_precision: str | None = None
    io: IOSignature | None = None
    kept_fp32: tuple[str, ...] | None = None
    verify: Comparison | None = None
    f1: F1Retention | None = None

    _SECTION = "fp16.onnx"
    _READERS = {"file": read_str, "converter": read_str, "io_precision": read_str, "io": _io, "kept_fp32": read_strs,
                "verify": read_record(Comparison), "f1": read_record(F1Retention)}
    _ALWAYS = frozenset({"f1"})


@dataclass(frozen=True, eq=False)
class Fp16Report(Record):
    """The manifest's "fp16": the FP16 range report and, with model_fp16.onnx, its record (`onnx`)."""

    rule: str | None = None
    tensors_checked: int | None = None
    samples: int | None = None
    max_abs: float | None = None
    nodes: tuple[Fp16Node, ...] | None = None
    fp32_nodes: tuple[str, ...] | None = None
    onnx: Fp16OnnxRecord | None = None

    _SECTION = "fp16"
    _READERS = {"rule": read_str, "tensors_checked": read_int, "samples": read_int, "max_abs": read_number,
                "nodes": list_of(read_record(Fp16Node)), "fp32_nodes": read_strs, "onnx": read_record(Fp16OnnxRecord)}


# --------------------------------------------------------------------------- plan verification


@dataclass(frozen=True, eq=False)
class PlanVerify(Record):
    """plan.verify: "passed" (I/O "ok", and `run` the comparison with ONNX Runtime or why it was skipped), or
    "skipped" with its reason."""

    status: str | None = None
    reason: str | None = None
    io: str | None = None
    run: Comparison | None = None
    device_memory_bytes: int | None = None  # an execution context's device memory (serve adds up the stack's)

    _SECTION = "plan.verify"
    _READERS = {"status": read_str, "reason": read_str, "io": read_str, "run": read_record(Comparison),
                "device_memory_bytes": read_int}


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True, eq=False)
class Scores(Record):
    f1: float | None = None
    precision: float | None = None
    recall: float | None = None

    _SECTION = "evaluation.files"
    _READERS = {"f1": read_number, "precision": read_number, "recall": read_number}


@dataclass(frozen=True, eq=False)
class EvaluationRecord(Record):
    """The manifest's "evaluation": the --eval-data spec, frame count, and per ONNX file the CULane scores by IoU
    threshold ("0.5" -> Scores)."""

    data: str | None = None
    frames: int | None = None
    files: Mapping[str, Mapping[str, Scores]] | None = None

    _SECTION = "evaluation"
    _READERS = {"data": read_str, "frames": read_int, "files": map_of(map_of(read_record(Scores)))}

    def f1(self, name: str, iou: str = "0.5") -> float | None:
        scores = (self.files or {}).get(name, {}).get(iou)
        return scores.f1 if scores is not None else None


# --------------------------------------------------------------------------- fused preprocessing


@dataclass(frozen=True, eq=False)
class FrameRecord(Record):
    height: int | None = None
    width: int | None = None
    datatype: str | None = None
    layout: str | None = None
    color: str | None = None

    _SECTION = "fused_preprocess.frame"
    _READERS = {"height": read_int, "width": read_int, "datatype": read_str, "layout": read_str, "color": read_str}


@dataclass(frozen=True, eq=False)
class PixelDiff(Record):
    max_abs: float | None = None
    max_levels: float | None = None
    fraction_differing: float | None = None

    _SECTION = "fused_preprocess.parity.pixels"
    _READERS = {"max_abs": read_number, "max_levels": read_number, "fraction_differing": read_number}


@dataclass(frozen=True, eq=False)
class PixelParity(Record):
    """The fused preprocessing vs the client's per pixel, with and without the uint8 rounding (the headline
    max_abs/max_levels are the rounded ones)."""

    frames: int | None = None
    rounded: PixelDiff | None = None
    unrounded: PixelDiff | None = None
    max_abs: float | None = None
    max_levels: float | None = None

    _SECTION = "fused_preprocess.parity.pixels"
    _READERS = {"frames": read_int, "rounded": read_record(PixelDiff), "unrounded": read_record(PixelDiff), "max_abs": read_number,
                "max_levels": read_number}


@dataclass(frozen=True, eq=False)
class FusedParity(Record):
    reference: str | None = None
    seed: int | None = None
    pixels: PixelParity | None = None
    lanes: Mapping[str, Comparison] | None = None  # ONNX file name -> its comparison
    max_mean_dx_px: float | Mapping[str, float] | None = None  # per ONNX file name; one number before FP16 had its own

    _SECTION = "fused_preprocess.parity"
    _READERS = {"reference": read_str, "seed": read_int, "pixels": read_record(PixelParity),
                "lanes": map_of(read_record(Comparison)),
                "max_mean_dx_px": lambda v, where: map_of(read_number)(v, where) if isinstance(v, Mapping) else read_number(v, where)}


@dataclass(frozen=True, eq=False)
class Substitution(Record):
    interpolation: str | None = None
    by: str | None = None

    _SECTION = "fused_preprocess.substituted"
    _READERS = {"interpolation": read_str, "by": read_str}


@dataclass(frozen=True, eq=False)
class FusedPreprocessRecord(Record):
    """The manifest's "fused_preprocess" (convert --fuse-preprocess): the frame input, the graph, its parity."""

    input: str | None = None
    frame: FrameRecord | None = None
    graph: str | None = None
    substituted: Substitution | None = None
    parity: FusedParity | None = None

    _SECTION = "fused_preprocess"
    _READERS = {"input": read_str, "frame": read_record(FrameRecord), "graph": read_str, "substituted": read_record(Substitution),
                "parity": read_record(FusedParity)}

