"""torch -> ONNX: export, check, simplify, verify parity, assemble the manifest.

`export_artifact()` runs these stages into a working directory; the convert
flow around it (staging directory, TensorRT hand-off) is edge_deploy.engine.convert.
torch, onnx and onnxruntime are imported inside the functions that use them.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from ..core.deps import require
from ..artifact.manifest import ONNX_NAME, IOSignature, Manifest, file_entry
from ..errors import ConvertError, EdgeDeployError, one_line
from ..lanedet.decode_params import DecodeParams, DecodeParamsError
from ..lanedet.entry_points import LEGACY_FAMILY, family_package
from ..lanedet.lane_family import LaneFamily, LoadedModel, family_for_outputs, family_names, get_family
from ..lanedet.preprocess import PreprocessSpec
from .parity import ort_session, parity_inputs, run_ort, tolerance_report
from ..core.progress import Reporter
from ..artifact.records import ExportReport, ParityReport, SimplifyReport, Tolerance
from .finite_weights import check_finite_weights
from .fp16_onnx import make_fp16_onnx
from .onnx_export import (
    check_onnx,
    export_onnx,
    io_signature,
    simplify_onnx,
    trace_batch,
)
from .settings import ExportSettings
from .source import SourceSpec, load_source
from .fp16_report import fp16_report
from .fused_preprocess import fuse_artifact

# The preprocessing and decode defaults recorded for a model that belongs to no lane family.
UNTRAINED_NOTICE = (
    "no --checkpoint: {title} gets seeded random weights; this is fine for testing the pipeline, "
    "but lanes from untrained weights mean nothing."
)


def _torch_outputs(module: Any, array: Any) -> list[Any]:
    torch = require("torch", "checking parity")
    try:
        with torch.no_grad():
            out = module(torch.from_numpy(array))
    except Exception as exc:
        raise ConvertError(
            f"the model fails on an input of shape {list(array.shape)}: {one_line(exc)}; check --input-shape "
            "(and that the batch range suits the model)."
        ) from exc
    if isinstance(out, torch.Tensor):
        out = (out,)
    if not isinstance(out, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in out):
        raise ConvertError(
            f"the model returns {type(out).__name__}; convert needs a tensor or a tuple of tensors."
        )
    return [t.detach().cpu().numpy() for t in out]


# --------------------------------------------------------------------------- the export stages


def export_artifact(source: SourceSpec, settings: ExportSettings, workdir: Path, reporter: Reporter) -> Manifest:
    """Load MODEL, write `workdir`/model.onnx (checked, simplified, parity-verified) and return its manifest.

    The manifest's plan is None and model.plan is not listed; the caller
    writes manifest.json (see edge_deploy.engine.convert). The family is the loaded model's, else the one
    whose outputs these are (edge_deploy.lanedet.family); its defaults fill preprocess and decode.
    """
    with reporter.stage("load model"):
        loaded = load_source(source)
        check_finite_weights(loaded.module, loaded.source.checkpoint)  # before parity blames the export
        if loaded.family is not None:  # refuse decode options the family does not take before the export work
            _decode(loaded.decode or loaded.family.decode_defaults, settings)
        if not loaded.source.trained:
            reporter.warn(UNTRAINED_NOTICE.format(title=loaded.family.title if loaded.family else "the model"))

    with reporter.stage("torch reference"):
        inputs = parity_inputs(loaded.sample_shape, settings.batch.ends(), settings.seed)
        example_np = parity_inputs(loaded.sample_shape, [trace_batch(settings.batch)], settings.seed + 1)[0]
        reference = [_torch_outputs(loaded.module, array) for array in inputs]
        names = _output_names(settings, loaded.output_names, len(reference[0]))

    onnx_path = workdir / ONNX_NAME
    with reporter.stage("export ONNX"):
        torch = require("torch", "exporting to ONNX")
        export_onnx(loaded.module, torch.from_numpy(example_np), onnx_path, settings, names)

    with reporter.stage("check ONNX"):
        check_onnx(onnx_path)
        try:
            session = ort_session(onnx_path)
        except EdgeDeployError:  # edge-deploy's own line ($EDGE_DEPLOY_ORT_THREADS out of its range), as it is
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
            raise ConvertError(
                f"ONNX Runtime cannot load the exported model (opset {settings.opset}): {one_line(exc, 200)}; "
                "export with the default --opset 17."
            ) from exc
        ort_outputs = run_ort(session, settings.input_name, inputs)

    simplify_report = SimplifyReport(applied=False, reason="disabled (--no-simplify)")
    if settings.simplify:
        with reporter.stage("simplify"):
            simplify_report, ort_outputs = simplify_onnx(onnx_path, settings.input_name, inputs, ort_outputs,
                                                         names, settings.atol, settings.rtol)
            if not simplify_report.applied:
                reporter.warn(f"kept the unsimplified graph: {simplify_report.reason}")

    with reporter.stage("parity"):
        parity = _parity_report(names, reference, ort_outputs, settings)

    with reporter.stage("FP16 report"):
        onnx = require("onnx", "the FP16 report")
        final_model = onnx.shape_inference.infer_shapes(onnx.load(str(onnx_path)))
        fp16 = fp16_report(final_model, settings.input_name, inputs, settings.batch.dynamic)

    io = io_signature(final_model, settings.batch)
    family, preprocess, decode = _family_settings(loaded, io, settings)
    package = family_package(family.name) if family is not None else None
    # where the family is missing, the package to install is named
    recorded = replace(loaded.source, family_package=package) if package else loaded.source
    if family is None:
        reporter.warn(f"the model's outputs ({', '.join(f'{t.name} {list(t.shape)}' for t in io.outputs)}) are no "
                      f"known lane-model family's ({', '.join(family_names())}): the artifact records family null, "
                      "so `infer`, `evaluate`, the lane checks and `install --pipeline` cannot decode its lanes; "
                      "install the package of its family and convert again, or convert that family by name.")
    manifest = Manifest(
        io=io,
        preprocess=preprocess,
        decode=decode,
        precision=settings.precision,
        family=family.name if family else None,
        source=recorded,
        files={ONNX_NAME: file_entry(onnx_path)},
        export=ExportReport(exporter=f"torch {torch.__version__} (TorchScript-based torch.onnx.export)",
                            onnx=onnx.__version__, opset=settings.opset, ir_version=int(final_model.ir_version),
                            trace_batch=int(example_np.shape[0]), simplify=simplify_report),
        parity=parity,
        fp16=fp16,
    )
    if settings.fp16_onnx:
        with reporter.stage("FP16 ONNX"):
            make_fp16_onnx(workdir, manifest, fp16_io=settings.fp16_io, reporter=reporter)
    if settings.fuse_frame is not None:
        with reporter.stage("fuse preprocessing"):
            fuse_artifact(workdir, manifest, settings.fuse_frame, settings.seed, reporter)
    return manifest


def _family_settings(loaded: LoadedModel, io: IOSignature, settings: ExportSettings
                     ) -> tuple[LaneFamily | None, PreprocessSpec, DecodeParams]:
    """The model's family (its own, else the one whose outputs these are), preprocessing and decode settings."""
    family = loaded.family or family_for_outputs(io.outputs, io.batch.dynamic)
    preprocess = loaded.preprocess or (family or get_family(LEGACY_FAMILY)).preprocess
    if loaded.preprocess is None and len(loaded.sample_shape) == 3:  # the model's own input size
        preprocess = replace(preprocess, height=int(loaded.sample_shape[1]), width=int(loaded.sample_shape[2]),
                             resized_height=None)
    decode = _decode(loaded.decode or (family or get_family(LEGACY_FAMILY)).decode_defaults, settings)
    return family, preprocess, decode


def _parity_report(names: Sequence[str], reference: Sequence[Sequence[Any]], ort_outputs: Sequence[Sequence[Any]],
                   settings: ExportSettings) -> ParityReport:
    """torch vs ONNX Runtime within --atol/--rtol on every output (ConvertError otherwise), as the manifest says it."""
    parity = tolerance_report(names, reference, ort_outputs, settings.atol, settings.rtol)
    for name, entry in parity.items():
        if not entry.ok:
            raise ConvertError(
                f"parity check failed: output {name!r} differs between torch and ONNX Runtime by "
                f"{entry.max_abs:.3g} (max abs; rel {entry.max_rel:.3g}) beyond atol {settings.atol:g} / "
                f"rtol {settings.rtol:g}; the export does not reproduce the model."
            )
    return ParityReport(
        reference="torch (CPU, FP32) vs ONNX Runtime (CPUExecutionProvider, FP32)",
        tolerance=Tolerance(atol=settings.atol, rtol=settings.rtol),
        batches=tuple(settings.batch.ends()),
        seed=settings.seed,
        outputs={n: replace(e, ok=None) for n, e in parity.items()},  # "ok" is implied: it passed
    )


def _decode(base: DecodeParams, settings: ExportSettings) -> DecodeParams:
    """`base` with convert's --conf / --nms / --top-k over it; a setting the family does not take is refused."""
    try:
        return base.overridden(conf_threshold=settings.conf_threshold, nms_threshold=settings.nms_threshold,
                               top_k=settings.top_k)
    except DecodeParamsError as exc:
        raise ConvertError(f"{exc}: drop the options it does not take (--conf and --nms set conf_threshold and "
                           "nms_threshold).") from None


def _output_names(settings: ExportSettings, fixed: Sequence[str] | None, count: int) -> list[str]:
    requested = settings.output_names
    if fixed is not None:
        if requested != ExportSettings().output_names and tuple(requested) != tuple(fixed):
            raise ConvertError(f"this model's outputs keep their official names ({', '.join(fixed)}), which "
                               "existing code relies on; drop --output-name.")
        requested = tuple(fixed)
    if len(requested) == count:
        return list(requested)
    raise ConvertError(
        f"the model returns {count} output(s) but --output-name gives {len(requested)} "
        f"({', '.join(requested)}); pass one name per output, comma-separated."
    )


