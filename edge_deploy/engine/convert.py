"""`edge-deploy convert` as a library call: MODEL -> artifact directory.

Everything is built in a hidden staging directory beside the requested output
and renamed into place only when every stage succeeded, so a failure never
leaves a partial artifact and never damages an existing one. The torch ->
ONNX stages are edge_deploy.export; the TensorRT plan is edge_deploy.engine.plan
(imported only when a plan is wanted, and optional: without it, or without
TensorRT, the plan is built later on the device).
"""
from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..artifact.manifest import FP16_ONNX_NAME, MANIFEST_NAME, ONNX_NAME, PLAN_NAME, Manifest, PlanRecord, file_entry
from .options import EngineOptions
from ..errors import ConvertError, EngineError
from ..export.pipeline import ExportSettings, export_artifact
from ..export.source import SourceSpec, classify_model
from ..core.fsutil import fsync_dir, fsync_tree
from ..artifact.precision import Precision
from ..core.progress import Reporter
from ..evaluate.convert_eval import check_eval_data, evaluate_artifact
from ..export.fp16_onnx import make_fp16_onnx
from ..export.onnx_import import DetectionOptions, import_onnx_artifact


@dataclass
class ConvertResult:
    """What `convert` produced: the artifact directory, its manifest and the time of each stage."""

    artifact_dir: Path
    manifest: Manifest
    timings: dict[str, float]


# --------------------------------------------------------------------------- staging directory


class StagingDir:
    """A hidden directory beside `target` that replaces it only on `commit()`.

    As a context manager it is discarded when the block raises. An existing target
    is refused unless `force`; with `force` it must be an edge-deploy artifact (or
    empty) so a typo cannot wipe an unrelated directory.
    """

    def __init__(self, target: Path, force: bool) -> None:
        self.target = Path(os.path.abspath(target))
        self._restore_interrupted_commit()
        if self.target.exists() or self.target.is_symlink():
            if not force:
                raise ConvertError(f"{target} already exists; pass --force to replace it or choose another --output.")
            if not self.target.is_dir() or (
                any(self.target.iterdir()) and not (self.target / MANIFEST_NAME).is_file()
            ):
                raise ConvertError(
                    f"{target} exists and is not an edge-deploy artifact directory; --force only replaces "
                    "artifacts. Remove it yourself or choose another --output."
                )
        blocker = next((p for p in self.target.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise ConvertError(f"cannot write the output {target}: {blocker} is a file, not a directory; "
                               "choose another --output.")
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".partial",
                                              dir=self.target.parent))
        except OSError as exc:
            raise ConvertError(
                f"cannot write the output {target}: {exc.strerror or exc}; choose a writable --output."
            ) from exc

    def _restore_interrupted_commit(self) -> None:
        """A commit cut short between its two renames (power loss) left the old artifact as .NAME.*.old and no
        NAME: put the old one back, so the output is the old artifact or the new one, never neither."""
        if self.target.exists() or self.target.is_symlink() or not self.target.parent.is_dir():
            return
        backups = sorted(self.target.parent.glob(f".{self.target.name}.*.old"), key=lambda p: p.stat().st_mtime)
        if backups and (backups[-1] / MANIFEST_NAME).is_file():
            os.replace(backups[-1], self.target)
            fsync_dir(self.target.parent)

    def commit(self) -> None:
        """Move the staged directory into place (replacing an old artifact) in two renames."""
        # mkdtemp makes the directory 0700; the served artifact gets the usual umask permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)
        fsync_tree(self.path)  # complete on disk before it becomes the artifact
        backup = None
        if self.target.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".old", dir=self.target.parent))
            os.rmdir(backup)
            os.replace(self.target, backup)
        try:
            os.replace(self.path, self.target)
        except OSError as exc:
            if backup is not None:
                os.replace(backup, self.target)
            raise ConvertError(f"cannot move the result into {self.target}: {exc.strerror or exc}.") from exc
        fsync_dir(self.target.parent)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)

    def discard(self) -> None:
        """Remove the staged directory (a no-op after `commit()`)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> StagingDir:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.discard()


# --------------------------------------------------------------------------- the command


def convert(
    source: SourceSpec,
    output: Path | None,
    settings: ExportSettings | None = None,
    *,
    target: str = "auto",
    engine_options: EngineOptions | None = None,
    force: bool = False,
    eval_data: str | None = None,
    reporter: Reporter | None = None,
    detection: DetectionOptions | None = None,
) -> ConvertResult:
    """Convert MODEL to an artifact directory (model.onnx, manifest.json, model.plan when built).

    `eval_data` (synthetic:N, a CULane list, TuSimple JSON): record the F1 of the ONNX files made in the
    manifest's "evaluation" section. `target`: "onnx" stops after ONNX; "auto" also builds the TensorRT plan when a
    builder is available here; "tensorrt" requires it. `engine_options` says how
    to build the plan (defaults: `EngineOptions()`). When MODEL is an
    existing artifact directory, the export is skipped and only the plan is built
    (in place, or in a copy at `output`). When MODEL is an ONNX file it is checked and brought to the device's
    opsets instead of exported (export/onnx_import.py); `detection` says how a detector's frames and outputs are
    read when its outputs do not tell.
    """
    reporter = reporter or Reporter()
    detection = detection or DetectionOptions()
    settings, engine_options = _one_precision(settings, engine_options)
    if target not in ("auto", "onnx", "tensorrt"):
        raise ConvertError(f"--target must be auto, onnx or tensorrt (got {target!r}).")
    started = time.perf_counter()
    if eval_data:
        check_eval_data(eval_data)
    if classify_model(source.model) == "artifact":
        _refuse_export_options(source, settings)
        if eval_data:
            raise ConvertError(f"--eval-data scores a new export; {source.model} is an artifact already: score it "
                               f"with `edge-deploy evaluate {source.model} --synthetic N` (or --data).")
        result_dir, manifest = _convert_artifact(Path(source.model), output, target, engine_options, force,
                                                 reporter, fp16_io=settings.fp16_io)
        return _result(result_dir, manifest, reporter, started)
    if output is None:
        raise ConvertError("--output DIR is required: where to write model.onnx and manifest.json.")
    if target == "tensorrt":
        _require_builder(engine_options)  # fail before the export work, not after it
    kind = classify_model(source.model)
    if kind == "onnx":
        _refuse_onnx_options(source, settings)
    elif detection != DetectionOptions():
        raise ConvertError("--layout and --resize describe an object detector given as an ONNX file (MODEL.onnx); "
                           f"{source.model} is not one: drop them.")
    if kind == "family" and source.checkpoint is not None:
        _check_checkpoint_file(source)  # a missing checkpoint first: before "OUTPUT already exists"
    with StagingDir(Path(output), force) as staging:
        if kind == "onnx":
            manifest = import_onnx_artifact(source, settings, staging.path, reporter, detection)
        else:
            manifest = export_artifact(source, settings, staging.path, reporter)
        manifest.plan = _plan_stage(staging.path, manifest, target, engine_options, reporter)
        if manifest.plan is not None:
            manifest.files[PLAN_NAME] = file_entry(staging.path / PLAN_NAME)
        if eval_data:
            manifest.evaluation = evaluate_artifact(staging.path, manifest, eval_data, reporter)
        with reporter.stage("write artifact"):
            manifest.timings = {k: round(v, 3) for k, v in reporter.timings.items()}
            manifest.write(staging.path)
            staging.commit()
    return _result(staging.target, manifest, reporter, started)


def _check_checkpoint_file(source: SourceSpec) -> None:
    """The one-line CheckpointError of a --checkpoint that is missing or a directory, before anything else of the
    output is looked at (the family reads the file itself later)."""
    from ..export.source import family_named
    from ..lanedet.checkpoint import checkpoint_path
    from ..lanedet.lane_family import get_family

    name = family_named(source.model)
    checkpoint_path(Path(str(source.checkpoint)), get_family(name).title if name is not None else source.model)


def _one_precision(settings: ExportSettings | None,
                   engine_options: EngineOptions | None) -> tuple[ExportSettings, EngineOptions]:
    """Both, with one precision: the one given where only one of them is given (the defaults' otherwise);
    a ConvertError where both are given and differ (one --precision: the ONNX files and the plan agree)."""
    if settings is not None and engine_options is not None and settings.precision is not engine_options.precision:
        raise ConvertError(
            f"the export settings ask for precision {settings.precision} but the engine options for "
            f"{engine_options.precision}; give one precision to both (convert's --precision does).")
    if settings is None:
        settings = ExportSettings(precision=engine_options.precision) if engine_options else ExportSettings()
    return settings, engine_options or EngineOptions(precision=settings.precision)


def _refuse_export_options(source: SourceSpec, settings: ExportSettings) -> None:
    """An artifact MODEL only gets its TensorRT plan built: options of the torch export would be silently ignored."""
    flags = [*source.options_given, *settings.export_options_given]
    if flags:
        raise ConvertError(
            f"{', '.join(flags)} describe{'s' if len(flags) == 1 else ''} the export from PyTorch, but {source.model} "
            "is converted already (only its TensorRT plan is built): drop them, or convert the torch model again "
            "with them."
        )


def _refuse_onnx_options(source: SourceSpec, settings: ExportSettings) -> None:
    """An ONNX MODEL keeps its own tensor names and graph: the options that shape a torch export do not apply."""
    flags = [*source.family_options_given,
             *(flag for flag in settings.export_options_given
               if flag in ("--opset", "--input-name", "--output-name", "--fuse-preprocess"))]
    if flags:
        raise ConvertError(
            f"{', '.join(flags)} shape{'s' if len(flags) == 1 else ''} an export from PyTorch, but {source.model} is "
            "an ONNX file, converted with its own tensor names and opset (taken to opset 17 where needed): drop "
            f"{'it' if len(flags) == 1 else 'them'}.")


def _result(artifact_dir: Path, manifest: Manifest, reporter: Reporter, started: float) -> ConvertResult:
    timings = dict(reporter.timings)
    timings["total"] = time.perf_counter() - started
    return ConvertResult(artifact_dir, manifest, timings)


# --------------------------------------------------------------------------- TensorRT stage


def _engine_module() -> Any | None:
    """edge_deploy.engine.plan, or None when that stage is not part of this installation."""
    try:
        return importlib.import_module("edge_deploy.engine.plan")
    except ModuleNotFoundError as exc:
        if exc.name in ("edge_deploy.engine.plan", "tensorrt", "pycuda"):
            return None
        raise


def _require_builder(engine_options: EngineOptions) -> None:
    engine = _engine_module()
    if engine is None or engine.available_builder(engine_options.builder) is None:
        raise EngineError(_missing_tensorrt(engine))


def _missing_tensorrt(engine: Any | None, artifact: Path | None = None) -> str:
    """Why no plan can be built here; `artifact`: an artifact directory given as MODEL (its ONNX is made)."""
    if engine is not None:
        return engine.tensorrt_missing_message(artifact)
    return ("--target tensorrt needs TensorRT, which is not available here; TensorRT comes with JetPack "
            "on the Jetson (apt install python3-libnvinfer): run `edge-deploy convert DIR` there.")


def _plan_stage(artifact_dir: Path, manifest: Manifest, target: str, engine_options: EngineOptions,
                reporter: Reporter, given: Path | None = None) -> PlanRecord | None:
    """Build model.plan in `artifact_dir` when the target asks for it; returns the manifest's plan section.
    `given`: the artifact directory given as MODEL (what a missing TensorRT's message names)."""
    if target == "onnx":
        return None
    engine = _engine_module()
    builder = None
    if engine is not None:
        builder = engine.available_builder(engine_options.builder)
    if builder is None or engine is None:  # (no engine: no builder)
        if target == "tensorrt":
            raise EngineError(_missing_tensorrt(engine, given))
        reporter.info("no TensorRT here: stopped after ONNX; the plan is built on the device "
                      "(copy the directory to the Jetson and run `edge-deploy convert DIR` there).")
        return None
    return engine.build_plan(artifact_dir, manifest, engine_options, reporter)  # reports its own stages


def _ensure_fp16_onnx(artifact_dir: Path, manifest: Manifest, engine_options: EngineOptions, fp16_io: bool,
                      reporter: Reporter) -> bool:
    """An FP16 build needs model_fp16.onnx: make it when the artifact lacks it (or --fp16-io asks for FP16 I/O).

    Returns True when it was (re)made and recorded in `manifest`.
    """
    if engine_options.precision != Precision.FP16:
        return False
    record = manifest.fp16_onnx
    present = record is not None and (artifact_dir / FP16_ONNX_NAME).is_file()
    if present and not (fp16_io and record is not None and record.io_precision != "fp16"):
        return False
    if manifest.fused_preprocess:
        # The FP16 pass would turn the fused preprocessing (uint8 frame, resize, rounding) into FP16 too.
        raise ConvertError(
            f"{artifact_dir} has the preprocessing fused in and no {FP16_ONNX_NAME} made for this build; "
            "convert the model again with --fuse-preprocess and the --precision/--fp16-io you want."
        )

    with reporter.stage("FP16 ONNX"):
        make_fp16_onnx(artifact_dir, manifest, fp16_io=fp16_io, reporter=reporter)
    return True


def _convert_artifact(artifact: Path, output: Path | None, target: str, engine_options: EngineOptions,
                      force: bool, reporter: Reporter, *, fp16_io: bool = False) -> tuple[Path, Manifest]:
    """MODEL is an artifact directory: build its plan in place, or in a copy at `output`.

    Returns the directory that holds the plan and its manifest.
    """
    if target == "onnx":
        raise ConvertError(f"{artifact} already holds {ONNX_NAME}; --target onnx has nothing to do.")
    # Building a plan is the only thing to do here, so auto means tensorrt.
    manifest = Manifest.read(artifact)
    # An ONNX file damaged on its way to the device must not become a plan (model.plan is the engine's business).
    if ONNX_NAME not in manifest.files:
        raise ConvertError(f"{artifact}/{MANIFEST_NAME} does not list {ONNX_NAME}; re-run `edge-deploy convert`.")
    manifest.verify_files(artifact, (ONNX_NAME, FP16_ONNX_NAME))
    if output is None or Path(os.path.abspath(output)) == Path(os.path.abspath(artifact)):  # in place
        if _ensure_fp16_onnx(artifact, manifest, engine_options, fp16_io, reporter):
            manifest.write(artifact)
        manifest.plan = _plan_stage(artifact, manifest, "tensorrt", engine_options, reporter, artifact)
        manifest.files[PLAN_NAME] = file_entry(artifact / PLAN_NAME)
        manifest.write(artifact)
        return Path(os.path.abspath(artifact)), manifest
    with StagingDir(Path(output), force) as staging:
        shutil.copytree(artifact, staging.path, dirs_exist_ok=True)
        _ensure_fp16_onnx(staging.path, manifest, engine_options, fp16_io, reporter)
        manifest.plan = _plan_stage(staging.path, manifest, "tensorrt", engine_options, reporter, artifact)
        manifest.files[PLAN_NAME] = file_entry(staging.path / PLAN_NAME)
        manifest.write(staging.path)
        staging.commit()
    return staging.target, manifest
