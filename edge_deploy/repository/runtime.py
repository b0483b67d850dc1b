"""Which runtime serves an artifact, which of its files, and the checks on that file before install writes.

The runtime follows the artifact and the server: `tensorrt` for a plan, `onnxruntime` when the
server has that backend, else `python` (ONNX Runtime in a Python-backend model). The file
follows what convert recorded: an FP16 artifact (the manifest's precision) serves
model_fp16.onnx where no plan is served; `install --fp16/--no-fp16` overrides.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, PLAN_NAME, Manifest
from ..machine.plan_fit import plan_mismatch
from ..errors import EdgeDeployError, RepositoryError
from ..artifact.precision import Precision
from ..core.progress import Reporter
from . import model_config as mc
from .signature import check_onnx_signature, check_plan_signature


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime, why it was chosen, and the precision of the ONNX file it serves (FP16: model_fp16.onnx)."""

    runtime: str
    why: str
    precision: Precision


def choose_runtime(artifact: Path, manifest: Manifest, requested: str | None, backends: list[str] | None, *,
                   precision: Precision | None = None, pipeline: bool = False) -> RuntimeChoice:
    """The runtime and the file it serves; `backends`: those of the tritonserver found here (None: none found).

    precision: FP16 serves model_fp16.onnx with an ONNX Runtime runtime (the plan is not considered); FP32 serves
    model.onnx or the plan; None follows the manifest's precision (model_fp16.onnx where no plan is served).
    """
    if precision is not None:
        runtime, why = _runtime(artifact, requested, backends, precision=precision)
        return RuntimeChoice(runtime, why, precision)
    runtime, why = _runtime(artifact, requested, backends, precision=Precision.FP32)
    if runtime == "tensorrt" or manifest.precision is not Precision.FP16:
        return RuntimeChoice(runtime, why, Precision.FP32)
    if not (artifact / FP16_ONNX_NAME).is_file():
        raise RepositoryError(
            f"{artifact} was converted for fp16 but has no {FP16_ONNX_NAME}; convert it again, or install "
            f"{ONNX_NAME} with --no-fp16."
        )
    if pipeline and manifest.io_of(FP16_ONNX_NAME) != manifest.io:
        return RuntimeChoice(runtime, f"{why}; {ONNX_NAME}, not {FP16_ONNX_NAME}: the pipeline needs FP32 I/O and "
                                      "this FP16 model has FP16 I/O (--fp16-io)", Precision.FP32)
    return RuntimeChoice(runtime, f"{why}; {FP16_ONNX_NAME}: the artifact was converted for fp16 (--no-fp16 "
                                  f"serves {ONNX_NAME})", Precision.FP16)


def _runtime(artifact: Path, requested: str | None, backends: list[str] | None, *, precision: Precision) -> tuple[str, str]:
    fp16 = precision is Precision.FP16
    onnx_name = mc.SERVED_ONNX[precision]
    has_plan = (artifact / PLAN_NAME).is_file() and not fp16
    has_onnx = (artifact / onnx_name).is_file()
    if fp16 and requested == "tensorrt":
        raise RepositoryError(
            f"--fp16 serves {FP16_ONNX_NAME} with ONNX Runtime; a plan (built from it on TensorRT 10+) is "
            "installed with --runtime tensorrt and without --fp16."
        )
    if fp16 and not has_onnx:
        raise RepositoryError(
            f"--fp16 needs {FP16_ONNX_NAME}, which {artifact} does not have; convert with --precision fp16."
        )
    if requested is not None:
        if requested not in mc.RUNTIMES:
            raise RepositoryError(f"unknown runtime {requested!r}; use one of {', '.join(mc.RUNTIMES)}.")
        needed = PLAN_NAME if requested == "tensorrt" else onnx_name
        if not (artifact / needed).is_file():
            raise RepositoryError(
                f"--runtime {requested} needs {needed}, which {artifact} does not have; "
                "pick another runtime or convert again."
            )
        return requested, "requested with --runtime"
    if not has_plan and not has_onnx:
        raise RepositoryError(f"{artifact} has neither model.plan nor model.onnx; re-run `edge-deploy convert`.")
    if has_plan and (backends is None or "tensorrt" in backends or not has_onnx):
        return "tensorrt", "the artifact has a TensorRT plan"
    if backends is not None and "onnxruntime" in backends:
        return "onnxruntime", "the server has the ONNX Runtime backend"
    if backends is None:
        return "python", "no tritonserver found here to ask for backends: ONNX Runtime in a Python-backend model"
    return "python", "the server has no ONNX Runtime backend: ONNX Runtime (CPU) in a Python-backend model"


def check_plan_fingerprint(manifest: Manifest, force: bool, reporter: Reporter) -> None:
    """Refuse a plan built for another device/TensorRT unless `force`."""
    try:
        differences = list(plan_mismatch(manifest.plan))
    except EdgeDeployError as exc:
        differences = [f"this machine's fingerprint cannot be read ({exc})"]
    if differences and not force:
        raise RepositoryError(
            f"model.plan does not fit this machine ({'; '.join(differences)}): rebuild it here with "
            "`edge-deploy convert`, or install anyway with --force."
        )
    if differences:
        reporter.warn(f"installing a plan that does not fit this machine because of --force: {'; '.join(differences)}")


def check_model_signature(artifact: Path, manifest: Manifest, runtime: str, options: mc.ConfigOptions,
                          force: bool, reporter: Reporter) -> None:
    """The file the runtime serves, and every ONNX file the artifact lists, must have the manifest's I/O (config.pbtxt
    is written from the manifest)."""
    io = mc.served_io(manifest, runtime, options)
    # Every ONNX file the artifact lists, not only the one served: the manifest must describe the artifact.
    for onnx_name in (ONNX_NAME, FP16_ONNX_NAME):
        if onnx_name in manifest.files:
            check_onnx_signature(artifact / onnx_name, manifest.io_of(onnx_name))
    # The file install copies must be listed (so verify_files checked it: a regular file of the artifact).
    manifest.listed(artifact, PLAN_NAME if runtime == "tensorrt" else options.onnx_file)
    if runtime != "tensorrt":
        return
    check_plan_fingerprint(manifest, force, reporter)
    if force:
        return  # a plan for another device may not even deserialize here; the server's load decides
    dla_core = manifest.plan.dla_core if manifest.plan else None
    if not check_plan_signature(artifact / PLAN_NAME, io, dla_core):
        reporter.info("TensorRT is not installed here: the plan's I/O is checked when the server loads it")


