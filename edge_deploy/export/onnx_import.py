"""An ONNX file as MODEL (an object detector's export, say): read, checked and brought to the device's targets.

`import_onnx_artifact()` is the ONNX route's counterpart of `pipeline.export_artifact`: the file is read
(nothing but a regular file; external data only from beside it), checked with onnx.checker and shape
inference, converted to the opsets every consumer on the device parses (export/onnx_target.py) with onnx's
version converter where it can, its symbolic dimensions fixed (the first one stays the dynamic batch axis;
`--input-shape` gives the others), run in ONNX Runtime against the file as given on seeded inputs, and then
goes through the FP16 report and model_fp16.onnx as every export does. The manifest's source records the file
and its sha256; an image model whose outputs are a known detection layout gets a "detection" section.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..core.deps import require
from ..core.bounded_read import regular_file
from ..artifact.manifest import ONNX_NAME, BatchRange, IOSignature, Manifest, file_entry
from ..errors import ConvertError, EdgeDeployError, one_line
from ..lanedet.decode_params import DecodeParamsError, ScoreNmsDecodeParams
from ..lanedet.preprocess import PreprocessSpec
from ..lanedet.model_source import ExternalSource, SourceFile
from .parity import ort_session, parity_inputs, run_ort, tolerance_report
from ..core.progress import Reporter
from ..detect.record import DETECTION_LAYOUTS, DETECTION_RESIZES, DetectionRecord
from ..artifact.records import ExportReport, ParityReport, SimplifyReport, Tolerance
from . import onnx_target
from .fp16_onnx import make_fp16_onnx
from .fp16_report import fp16_report
from .onnx_export import check_onnx, io_signature, simplify_onnx
from .settings import ExportSettings
from .source import SourceSpec

__all__ = ["DETECTOR_DECODE", "DetectionOptions", "import_onnx_artifact", "lowest_tensorrt"]

# What a detector's score threshold, IoU threshold and detection count default to (ultralytics' predict defaults
# for the first two; a road scene rarely holds more than 100 objects worth a control decision).
DETECTOR_DECODE = ScoreNmsDecodeParams(conf_threshold=0.25, nms_threshold=0.45, top_k=100)
# The newest ai.onnx opset each TensorRT release's ONNX parser takes (onnx-tensorrt docs/operators.md of the
# release branches 8.5-GA "up to Opset 17", 9.2 "up to Opset 19", 10.0/10.1-GA "opset 9 to opset 20").
_TENSORRT_MAX_OPSET = (("8.5 (JetPack 5)", 17), ("9.2", 19), ("10.0 (JetPack 6 has 10.3)", 20))
_MAX_BYTES = 2**31 - 1  # protobuf's limit for one serialized model: model.onnx is written as one file


@dataclass(frozen=True)
class DetectionOptions:
    """How an object detector given as ONNX is read (convert's --layout and --resize): `layout` None takes it from
    the model's outputs; `resize` fits frames to its input keeping their aspect (letterbox) or not (stretch)."""

    layout: str | None = None
    resize: str = "letterbox"

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout not in DETECTION_LAYOUTS:
            raise ConvertError(f"--layout {self.layout!r} is not a detection layout; use "
                               f"{' or '.join(DETECTION_LAYOUTS)}.")
        if self.resize not in DETECTION_RESIZES:
            raise ConvertError(f"--resize {self.resize!r} is not a way to fit frames; use "
                               f"{' or '.join(DETECTION_RESIZES)}.")


def lowest_tensorrt(opset: int) -> str | None:
    """The first TensorRT release whose parser takes `opset`, or None when none of those checked does."""
    return next((release for release, top in _TENSORRT_MAX_OPSET if opset <= top), None)


@dataclass(frozen=True)
class _Input:
    """The graph's one input: its name and each dimension as a size or a symbol ("" for an unnamed one)."""

    name: str
    dims: tuple[int | str, ...]


def import_onnx_artifact(source: SourceSpec, settings: ExportSettings, workdir: Path, reporter: Reporter,
                         detection: DetectionOptions = DetectionOptions()) -> Manifest:
    """Check MODEL (an ONNX file), write `workdir`/model.onnx (and model_fp16.onnx) and return the manifest."""
    onnx = require("onnx", "converting an ONNX model")
    path = Path(source.model)
    with reporter.stage("read ONNX"):
        given = read_onnx(path)
        graph_input = _single_input(given, path)
    with reporter.stage("check ONNX"):
        _checker(given, path)
        opset = _opset(given)  # _checker refused a model without one
        model = _to_target_opset(given, path, opset)
        batch, shape = _resolved_shape(graph_input, source.input_shape, settings.batch, path)
        _fix_input(model, graph_input, shape, batch)
        onnx_path = workdir / ONNX_NAME
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # noqa: BLE001 - onnx raises its own InferenceError and others
            raise ConvertError(f"{path} fails ONNX shape inference with input {list(shape)}: {one_line(exc, 200)}; "
                               "check --input-shape.") from None
        onnx_target.save(model, onnx_path, what=str(path))
        check_onnx(onnx_path)
    inputs = parity_inputs(shape[1:], batch.ends(), settings.seed)
    with reporter.stage("parity"):
        reference = _run(given, graph_input.name, inputs, f"{path} as given")
        outputs = _run(onnx_path, graph_input.name, inputs, ONNX_NAME)
        names = [o.name for o in model.graph.output]
        simplify = SimplifyReport(applied=False, reason="disabled (--no-simplify)")
        if settings.simplify:
            simplify, outputs = simplify_onnx(onnx_path, graph_input.name, inputs, outputs, names, settings.atol,
                                              settings.rtol)
        parity = _parity(names, reference, outputs, settings)
    with reporter.stage("FP16 report"):
        final = onnx.shape_inference.infer_shapes(onnx.load(str(onnx_path)))
        fp16 = fp16_report(final, graph_input.name, inputs, batch.dynamic)
    io = io_signature(final, batch)
    manifest = Manifest(
        io=io, preprocess=_image_preprocess(shape), decode=_decode(settings), precision=settings.precision,
        family=None, source=ExternalSource(kind="onnx", spec=source.model, file=SourceFile.of(path), trained=True),
        files={ONNX_NAME: file_entry(onnx_path)},
        export=ExportReport(exporter=f"ONNX file (opset {opset}{', converted' if opset != _opset(final) else ''})",
                            onnx=onnx.__version__, opset=_opset(final), ir_version=int(final.ir_version),
                            trace_batch=None, simplify=simplify),
        parity=parity, fp16=fp16, detection=detection_record(io, shape, detection),
    )
    if manifest.detection is None and detection.layout is not None:
        raise ConvertError(f"--layout {detection.layout} describes an image detector's outputs, but {path} takes "
                           f"{list(shape)} and returns {_outputs_text(io)}; drop --layout.")
    if settings.fp16_onnx:
        with reporter.stage("FP16 ONNX"):
            make_fp16_onnx(workdir, manifest, fp16_io=settings.fp16_io, reporter=reporter)
    return manifest


# --------------------------------------------------------------------------- reading


def read_onnx(path: Path) -> Any:
    """The ModelProto at `path`, its external data (only from files beside it) loaded; ConvertError otherwise."""
    onnx = require("onnx", "converting an ONNX model")
    regular_file(path, "ONNX model", ConvertError, "pass the .onnx file your exporter wrote")
    if path.stat().st_size > _MAX_BYTES:
        raise ConvertError(f"{path} is over 2 GiB, more than one ONNX file holds; export it with external data.")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and onnx's own errors
        raise ConvertError(f"{path} is not an ONNX model ({one_line(exc, 120)}): it is damaged, truncated or "
                           "another format; export it again.") from None
    if not model.graph.node or not model.opset_import:
        raise ConvertError(f"{path} is not an ONNX model (no graph or no opset); it is damaged, truncated or another "
                           "format: export it again.")
    _load_external_data(model, path)
    return model


def _load_external_data(model: Any, path: Path) -> None:
    """Load the tensors stored beside the file; a location outside the file's directory is refused (a model file
    must not read /etc/shadow or another user's files into an artifact)."""
    onnx = require("onnx", "converting an ONNX model")
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    base = path.resolve().parent
    total = 0
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or not target.is_relative_to(base):
            raise ConvertError(f"{path} keeps tensor {tensor.name!r} in {location!r}, outside its own directory; "
                               "external data must sit beside the .onnx file: export it again.")
        if not target.is_file():
            raise ConvertError(f"{path} keeps tensor {tensor.name!r} in {location!r}, which is missing or not a "
                               "regular file; copy the external data file beside the .onnx file.")
        total += target.stat().st_size
    if total > _MAX_BYTES:
        raise ConvertError(f"{path}'s external data is over 2 GiB, more than model.onnx can hold in one file.")
    try:
        onnx.load_external_data_for_model(model, str(base))
    except Exception as exc:  # noqa: BLE001 - truncated external data
        raise ConvertError(f"cannot read {path}'s external data: {one_line(exc, 160)}; export it again.") from None


def _single_input(model: Any, path: Path) -> _Input:
    onnx = require("onnx", "converting an ONNX model")
    initializers = {init.name for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    if len(inputs) != 1:
        raise ConvertError(f"{path} has {len(inputs)} inputs ({', '.join(v.name for v in inputs) or 'none'}); "
                           "convert takes models with one input tensor (an image): export it with one.")
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type != onnx.TensorProto.FLOAT:
        name = onnx.TensorProto.DataType.Name(tensor.elem_type) if tensor.elem_type else "untyped"
        raise ConvertError(f"{path}'s input {inputs[0].name!r} is {name}; convert checks models with an FP32 input "
                           "(model_fp16.onnx is made from it): export it with a float32 input.")
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else d.dim_param for d in tensor.shape.dim)
    if not dims:
        raise ConvertError(f"{path}'s input {inputs[0].name!r} has no shape; export it with one.")
    return _Input(inputs[0].name, dims)


# --------------------------------------------------------------------------- checks and conversion


def _checker(model: Any, path: Path) -> None:
    onnx = require("onnx", "converting an ONNX model")
    opset = onnx_target.default_opset(model)
    if opset is None:
        raise ConvertError(f"{path} imports no ai.onnx opset; it is not a model TensorRT parses.")
    if lowest_tensorrt(opset) is None:
        raise ConvertError(
            f"{path} uses opset {opset}, newer than any TensorRT on JetPack parses (TensorRT 10.0-10.3 stop at "
            f"{_TENSORRT_MAX_OPSET[-1][1]}, TensorRT 8.5 at {onnx_target.MAX_OPSET}): export it again at opset "
            f"{onnx_target.DEFAULT_OPSET}.")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError
        raise ConvertError(f"{path} does not pass onnx.checker: {one_line(exc, 240)}; export it again.") from None


def _to_target_opset(model: Any, path: Path, opset: int) -> Any:
    """`model` at an opset every consumer parses: as it is, or converted by onnx's version converter."""
    if onnx_target.opset_problem(opset) is None:
        return model
    onnx = require("onnx", "converting an ONNX model")
    target = onnx_target.DEFAULT_OPSET if opset > onnx_target.MAX_OPSET else onnx_target.MIN_OPSET
    try:
        converted = onnx.version_converter.convert_version(model, target)
        onnx.checker.check_model(converted)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError/ConvertError of its own
        release = lowest_tensorrt(opset)
        raise ConvertError(
            f"{path} uses opset {opset}, which TensorRT parses from {release} on (TensorRT 8.5, JetPack 5, only up "
            f"to {onnx_target.MAX_OPSET}), and onnx's version converter cannot take it to opset {target} "
            f"({one_line(exc, 120)}); export it again at opset {onnx_target.DEFAULT_OPSET}.") from None
    return converted


def _resolved_shape(graph_input: _Input, given: Sequence[int] | None, batch: BatchRange,
                    path: Path) -> tuple[BatchRange, tuple[int, ...]]:
    """The batch range and a full input shape (batch first, at the range's smallest) from the graph's dims,
    --input-shape for the symbolic ones, and the batch options."""
    dims = graph_input.dims
    if given is not None and len(given) != len(dims):
        raise ConvertError(f"--input-shape {','.join(map(str, given))} has {len(given)} dimensions but {path}'s "
                           f"input {graph_input.name!r} has {len(dims)} ({_dims_text(dims)}).")
    resolved: list[int] = []
    for index, dim in enumerate(dims[1:], start=1):
        wanted = given[index] if given is not None else None
        if isinstance(dim, int):
            if wanted is not None and wanted != dim:
                raise ConvertError(f"--input-shape gives dimension {index} of {graph_input.name!r} as {wanted}, but "
                                   f"the graph fixes it at {dim}; pass {dim} there.")
            resolved.append(dim)
        elif wanted is None:
            example = ",".join(str(d) if isinstance(d, int) else "N" for d in dims)
            raise ConvertError(f"{path}'s input {graph_input.name!r} has the symbolic dimension {index} "
                               f"({dim or 'unnamed'}: {_dims_text(dims)}); fix it with --input-shape, e.g. "
                               f"--input-shape {example} with N its size.")
        else:
            resolved.append(wanted)
    first = dims[0]
    if isinstance(first, int):  # the graph fixes the batch
        if batch.dynamic and batch != BatchRange(1, 1, 4, dynamic=True) or not batch.dynamic and batch.max != first:
            raise ConvertError(f"{path} fixes the batch of {graph_input.name!r} at {first}; drop the batch options "
                               "or export the model with a dynamic batch axis.")
        batch = BatchRange(first, first, first, dynamic=False)
    return batch, (batch.min, *resolved)


def _fix_input(model: Any, graph_input: _Input, shape: Sequence[int], batch: BatchRange) -> None:
    """Write the resolved dims into the graph's input (the batch axis named `batch` when dynamic)."""
    value = next(v for v in model.graph.input if v.name == graph_input.name)
    for index, dim in enumerate(value.type.tensor_type.shape.dim):
        if index == 0 and batch.dynamic:
            dim.Clear()
            dim.dim_param = "batch"
        else:
            dim.Clear()
            dim.dim_value = int(batch.max if index == 0 else shape[index])


def _run(model: Any, input_name: str, inputs: Sequence[Any], what: str) -> list[list[Any]]:
    try:
        session = ort_session(model)
    except EdgeDeployError:  # edge-deploy's own line ($EDGE_DEPLOY_ORT_THREADS out of its range), as it is
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
        raise ConvertError(f"ONNX Runtime cannot load {what}: {one_line(exc, 200)}.") from None
    return run_ort(session, input_name, inputs)


def _parity(names: Sequence[str], reference: Sequence[Sequence[Any]], outputs: Sequence[Sequence[Any]],
            settings: ExportSettings) -> ParityReport:
    report = tolerance_report(names, reference, outputs, settings.atol, settings.rtol)
    for name, entry in report.items():
        if not entry.ok:
            raise ConvertError(f"model.onnx's output {name!r} differs from the ONNX file as given by "
                               f"{entry.max_abs:.3g} (max abs) beyond atol {settings.atol:g} / rtol {settings.rtol:g}: "
                               "the opset conversion or simplification changed the model; export it at opset "
                               f"{onnx_target.DEFAULT_OPSET}, or convert with --no-simplify.")
    from dataclasses import replace

    return ParityReport(reference="the ONNX file as given vs model.onnx (ONNX Runtime, CPUExecutionProvider, FP32)",
                        tolerance=Tolerance(atol=settings.atol, rtol=settings.rtol),
                        batches=tuple(settings.batch.ends()), seed=settings.seed,
                        outputs={n: replace(e, ok=None) for n, e in report.items()})


# --------------------------------------------------------------------------- what the manifest says


def _image_preprocess(shape: Sequence[int]) -> PreprocessSpec:
    """An NCHW 3-channel input is an image: RGB scaled to [0, 1], bilinear (what YOLO-style exports expect);
    another input keeps the defaults (its preprocessing is the caller's)."""
    if _is_image(shape):
        return PreprocessSpec(height=int(shape[2]), width=int(shape[3]), color="rgb", scale=1.0 / 255.0,
                              interpolation="bilinear")
    return PreprocessSpec()


def _is_image(shape: Sequence[int]) -> bool:
    return len(shape) == 4 and shape[1] == 3 and shape[2] > 0 and shape[3] > 0


def detection_record(io: IOSignature, shape: Sequence[int], options: DetectionOptions) -> DetectionRecord | None:
    """The manifest's "detection" for an image model whose outputs are a detection layout (or --layout given)."""
    if not _is_image(shape):
        return None
    from ..detect.layout import layout_of

    layout = options.layout
    if layout is None:
        try:
            layout = layout_of(io.outputs).value
        except ValueError:
            return None
    return DetectionRecord(layout=layout, resize=options.resize, pad_value=114)


def _decode(settings: ExportSettings) -> ScoreNmsDecodeParams:
    try:
        return DETECTOR_DECODE.overridden(conf_threshold=settings.conf_threshold,
                                          nms_threshold=settings.nms_threshold, top_k=settings.top_k)
    except DecodeParamsError as exc:
        raise ConvertError(f"{exc}.") from None


def _opset(model: Any) -> int:
    return onnx_target.default_opset(model) or 0


def _dims_text(dims: Sequence[int | str]) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else (d or "?") for d in dims) + "]"


def _outputs_text(io: IOSignature) -> str:
    return ", ".join(f"{t.name} {list(t.shape)}" for t in io.outputs)
