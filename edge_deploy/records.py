"""The stage reports a manifest holds ("export", "parity", "fp16", "plan.verify", "evaluation",
"fused_preprocess"), one frozen dataclass each, read and checked once by `from_dict`.

Every report is a `Record`:

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

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar, TypeVar

from .io_signature import IOSignature


class RecordError(ValueError):
    """A stage report with a value of the wrong type (the message names the field)."""


R = TypeVar("R", bound="Record")
Reader = Callable[[Any, str], Any]


def json_value(value: Any) -> Any:
    """The JSON form of a field value."""
    if isinstance(value, Record):
        return value.to_dict()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_value(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, eq=False)
class Record(Mapping[str, Any]):
    """Base of the stage reports (see the module's docstring)."""

    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    key_order: tuple[str, ...] = field(default=(), kw_only=True, repr=False)

    _SECTION: ClassVar[str] = "record"
    _READERS: ClassVar[Mapping[str, Reader]] = {}
    _ALWAYS: ClassVar[frozenset[str]] = frozenset()  # written as null when None (a built record)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("extra", "key_order"))

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str | None = None) -> R:
        """The typed report; RecordError naming the field whose value has the wrong type."""
        where = where or cls._SECTION
        if not isinstance(data, Mapping):
            raise RecordError(f"{where} is {_kind(data)}, not an object")
        names = cls._names()
        values = {}
        for key, value in data.items():
            if key in names:
                reader = cls._READERS.get(key)
                values[key] = value if value is None or reader is None else reader(value, f"{where}.{key}")
        return cls(**values, extra={k: v for k, v in data.items() if k not in names}, key_order=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (see the module's docstring)."""
        names = self._names()
        out: dict[str, Any] = {}
        for key in self.key_order:
            if key in names:
                out[key] = json_value(getattr(self, key))
            elif key in self.extra:
                out[key] = self.extra[key]
        for name in names:
            value = getattr(self, name)
            if name not in out and (value is not None or (not self.key_order and name in self._ALWAYS)):
                out[name] = json_value(value)
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    # the read-only mapping view (the sections' API as plain dicts)
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return type(self) is type(other) and self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


# --------------------------------------------------------------------------- readers: (value, where) -> typed value


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.40}"


def _check(test: Callable[[Any], bool], what: str, convert: Callable[[Any], Any] = lambda v: v) -> Reader:
    def read(value: Any, where: str) -> Any:
        if not test(value):
            raise RecordError(f"{where} is {_kind(value)}, not {what}")
        return convert(value)
    return read


_str = _check(lambda v: isinstance(v, str), "a string")
_int = _check(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
_num = _check(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number")
_bool = _check(lambda v: isinstance(v, bool), "true or false")
_ints = _check(lambda v: isinstance(v, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool)
                                                              for i in v), "a list of integers", tuple)
_strs = _check(lambda v: isinstance(v, (list, tuple)) and all(isinstance(i, str) for i in v), "a list of strings",
               tuple)


def _record(cls: type[Record]) -> Reader:
    return cls.from_dict


def _map_of(reader: Reader) -> Reader:
    def read(value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise RecordError(f"{where} is {_kind(value)}, not an object")
        return {str(k): v if v is None else reader(v, f"{where}.{k}") for k, v in value.items()}
    return read


def _list_of(reader: Reader) -> Reader:
    def read(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{where} is {_kind(value)}, not a list")
        return tuple(reader(v, f"{where}[{i}]") for i, v in enumerate(value))
    return read


# the readers other modules' records use (edge_deploy.model_source)
read_str, read_int, read_bool, read_ints, read_record = _str, _int, _bool, _ints, _record


def _io(value: Any, where: str) -> IOSignature:
    if not isinstance(value, Mapping):
        raise RecordError(f"{where} is {_kind(value)}, not an object")
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
    _READERS = {"max_abs": _num, "max_rel": _num, "ok": _bool}


_outputs = _map_of(_record(OutputError))


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
    _READERS = {**{k: _int for k in ("images", "lanes_onnxruntime", "lanes_plan", "lanes_fp32", "lanes_fp16",
                                     "lanes_client", "lanes_fused")},
                **{k: _num for k in ("mean_dx_px", "max_mean_dx_px", "dx_width_px")},
                "verified": _bool, "note": _str}


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
    _READERS = {"status": _str, "reason": _str, "reference": _str, "batches": _ints, "outputs": _outputs,
                "worst_output": _str, "lanes": _record(LaneComparison), "passed": _bool, "problems": _strs}
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
    _READERS = {"tool": _str, "nodes_before": _int, "applied": _bool, "reason": _str, "nodes_after": _int,
                "max_abs_change": _map_of(_num)}


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
    _READERS = {"exporter": _str, "onnx": _str, "opset": _int, "ir_version": _int, "trace_batch": _int,
                "simplify": _record(SimplifyReport)}


@dataclass(frozen=True, eq=False)
class Tolerance(Record):
    atol: float | None = None
    rtol: float | None = None

    _SECTION = "parity.tolerance"
    _READERS = {"atol": _num, "rtol": _num}


@dataclass(frozen=True, eq=False)
class ParityReport(Record):
    """The manifest's "parity": torch vs ONNX Runtime at both ends of the batch range."""

    reference: str | None = None
    tolerance: Tolerance | None = None
    batches: tuple[int, ...] | None = None
    seed: int | None = None
    outputs: Mapping[str, OutputError] | None = None

    _SECTION = "parity"
    _READERS = {"reference": _str, "tolerance": _record(Tolerance), "batches": _ints, "seed": _int,
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
    _READERS = {"node": _str, "op": _str, "output": _str, "max_abs": _num, "reason": _str, "flushed_mass": _num,
                "subnormal_mass": _num}


@dataclass(frozen=True, eq=False)
class F1Retention(Record):
    """fp16.onnx.f1: F1 of model_fp16.onnx against model.onnx's (filled by the evaluation)."""

    iou: float | None = None
    fp32: float | None = None
    fp16: float | None = None
    retention: float | None = None

    _SECTION = "fp16.onnx.f1"
    _READERS = {"iou": _num, "fp32": _num, "fp16": _num, "retention": _num}
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
    _READERS = {"file": _str, "converter": _str, "io_precision": _str, "io": _io, "kept_fp32": _strs,
                "verify": _record(Comparison), "f1": _record(F1Retention)}
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
    _READERS = {"rule": _str, "tensors_checked": _int, "samples": _int, "max_abs": _num,
                "nodes": _list_of(_record(Fp16Node)), "fp32_nodes": _strs, "onnx": _record(Fp16OnnxRecord)}


# --------------------------------------------------------------------------- plan verification


@dataclass(frozen=True, eq=False)
class PlanVerify(Record):
    """plan.verify: "passed" (I/O "ok", and `run` the comparison with ONNX Runtime or why it was skipped), or
    "skipped" with its reason."""

    status: str | None = None
    reason: str | None = None
    io: str | None = None
    run: Comparison | None = None

    _SECTION = "plan.verify"
    _READERS = {"status": _str, "reason": _str, "io": _str, "run": _record(Comparison)}


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True, eq=False)
class Scores(Record):
    f1: float | None = None
    precision: float | None = None
    recall: float | None = None

    _SECTION = "evaluation.files"
    _READERS = {"f1": _num, "precision": _num, "recall": _num}


@dataclass(frozen=True, eq=False)
class EvaluationRecord(Record):
    """The manifest's "evaluation": the --eval-data spec, frame count, and per ONNX file the CULane scores by IoU
    threshold ("0.5" -> Scores)."""

    data: str | None = None
    frames: int | None = None
    files: Mapping[str, Mapping[str, Scores]] | None = None

    _SECTION = "evaluation"
    _READERS = {"data": _str, "frames": _int, "files": _map_of(_map_of(_record(Scores)))}

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
    _READERS = {"height": _int, "width": _int, "datatype": _str, "layout": _str, "color": _str}


@dataclass(frozen=True, eq=False)
class PixelDiff(Record):
    max_abs: float | None = None
    max_levels: float | None = None
    fraction_differing: float | None = None

    _SECTION = "fused_preprocess.parity.pixels"
    _READERS = {"max_abs": _num, "max_levels": _num, "fraction_differing": _num}


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
    _READERS = {"frames": _int, "rounded": _record(PixelDiff), "unrounded": _record(PixelDiff), "max_abs": _num,
                "max_levels": _num}


@dataclass(frozen=True, eq=False)
class FusedParity(Record):
    reference: str | None = None
    seed: int | None = None
    pixels: PixelParity | None = None
    lanes: Mapping[str, Comparison] | None = None  # ONNX file name -> its comparison
    max_mean_dx_px: float | Mapping[str, float] | None = None  # per ONNX file name; one number before FP16 had its own

    _SECTION = "fused_preprocess.parity"
    _READERS = {"reference": _str, "seed": _int, "pixels": _record(PixelParity),
                "lanes": _map_of(_record(Comparison)),
                "max_mean_dx_px": lambda v, where: _map_of(_num)(v, where) if isinstance(v, Mapping) else _num(v, where)}


@dataclass(frozen=True, eq=False)
class Substitution(Record):
    interpolation: str | None = None
    by: str | None = None

    _SECTION = "fused_preprocess.substituted"
    _READERS = {"interpolation": _str, "by": _str}


@dataclass(frozen=True, eq=False)
class FusedPreprocessRecord(Record):
    """The manifest's "fused_preprocess" (convert --fuse-preprocess): the frame input, the graph, its parity."""

    input: str | None = None
    frame: FrameRecord | None = None
    graph: str | None = None
    substituted: Substitution | None = None
    parity: FusedParity | None = None

    _SECTION = "fused_preprocess"
    _READERS = {"input": _str, "frame": _record(FrameRecord), "graph": _str, "substituted": _record(Substitution),
                "parity": _record(FusedParity)}
