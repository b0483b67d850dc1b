"""`edge-deploy convert` as a library call: MODEL -> artifact directory.

Everything is built in a hidden staging directory beside the requested output
and renamed into place only when every stage succeeded, so a failure never
leaves a partial artifact and never damages an existing one. The torch ->
ONNX stages are edge_deploy.export; the TensorRT plan is edge_deploy.engine
(imported only when a plan is wanted, and optional: without it, or without
TensorRT, the plan is built later on the device).
"""
from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConvertError, EngineError
from .export import ONNX_NAME, ExportSettings, SourceSpec, classify_model, export_artifact
from .manifest import MANIFEST_NAME, file_entry, read_manifest, verify_files, write_manifest
from .progress import Reporter

PLAN_NAME = "model.plan"


@dataclass
class ConvertResult:
    """What `convert` produced: the artifact directory, its manifest and the time of each stage."""

    artifact_dir: Path
    manifest: dict[str, Any]
    timings: dict[str, float]
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- staging directory


class StagingDir:
    """A hidden directory beside `target` that replaces it only on `commit()`.

    An existing target is refused unless `force`; with `force` it must be an
    edge-deploy artifact (or empty) so a typo cannot wipe an unrelated directory.
    """

    def __init__(self, target: Path, force: bool) -> None:
        self.target = Path(os.path.abspath(target))
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

    def commit(self) -> None:
        """Move the staged directory into place (replacing an old artifact) in two renames."""
        # mkdtemp makes the directory 0700; the served artifact gets the usual umask permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)
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
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# --------------------------------------------------------------------------- the command


def convert(
    source: SourceSpec,
    output: Path | None,
    settings: ExportSettings | None = None,
    *,
    target: str = "auto",
    engine_settings: dict[str, Any] | None = None,
    force: bool = False,
    reporter: Reporter | None = None,
) -> ConvertResult:
    """Convert MODEL to an artifact directory (model.onnx, manifest.json, model.plan when built).

    `target`: "onnx" stops after ONNX; "auto" also builds the TensorRT plan when a
    builder is available here; "tensorrt" requires it. `engine_settings` are the
    keyword arguments of edge_deploy.engine.EngineOptions. When MODEL is an
    existing artifact directory, the export is skipped and only the plan is built
    (in place, or in a copy at `output`).
    """
    reporter = reporter or Reporter()
    settings = settings or ExportSettings()
    if target not in ("auto", "onnx", "tensorrt"):
        raise ConvertError(f"--target must be auto, onnx or tensorrt (got {target!r}).")
    started = time.perf_counter()
    notes: list[str] = []
    if classify_model(source.model) == "artifact":
        return _convert_artifact(Path(source.model), output, target, engine_settings or {}, force, reporter,
                                 notes, started)
    if output is None:
        raise ConvertError("--output DIR is required: where to write model.onnx and manifest.json.")
    if target == "tensorrt":
        _require_builder(engine_settings or {})  # fail before the export work, not after it
    staging = StagingDir(Path(output), force)
    try:
        manifest = export_artifact(source, settings, staging.path, reporter, notes)
        manifest["plan"] = _plan_stage(staging.path, manifest, target, engine_settings or {}, reporter, notes)
        if manifest["plan"] is not None:
            manifest["files"][PLAN_NAME] = file_entry(staging.path / PLAN_NAME)
        with reporter.stage("write artifact"):
            manifest["timings"] = {k: round(v, 3) for k, v in reporter.timings.items()}
            write_manifest(staging.path, manifest)
            staging.commit()
    except BaseException:
        staging.discard()
        raise
    timings = dict(reporter.timings)
    timings["total"] = time.perf_counter() - started
    return ConvertResult(staging.target, manifest, timings, notes)


# --------------------------------------------------------------------------- TensorRT stage


def _engine_module() -> Any | None:
    """edge_deploy.engine, or None when that stage is not part of this installation."""
    try:
        return importlib.import_module("edge_deploy.engine")
    except ModuleNotFoundError as exc:
        if exc.name in ("edge_deploy.engine", "tensorrt", "pycuda"):
            return None
        raise


def _require_builder(engine_settings: dict[str, Any]) -> None:
    engine = _engine_module()
    if engine is None or engine.available_builder(engine_settings.get("builder", "auto")) is None:
        raise EngineError(_missing_tensorrt(engine))


def _missing_tensorrt(engine: Any | None) -> str:
    if engine is not None:
        return engine.tensorrt_missing_message()
    return ("--target tensorrt needs TensorRT, which is not available here; TensorRT comes with JetPack "
            "on the Jetson (apt install python3-libnvinfer): run `edge-deploy convert DIR` there.")


def _plan_stage(artifact_dir: Path, manifest: dict[str, Any], target: str, engine_settings: dict[str, Any],
                reporter: Reporter, notes: list[str]) -> dict[str, Any] | None:
    """Build model.plan in `artifact_dir` when the target asks for it; returns the manifest's plan section."""
    if target == "onnx":
        return None
    engine = _engine_module()
    builder = None
    if engine is not None:
        builder = engine.available_builder(engine_settings.get("builder", "auto"))
    if builder is None:
        if target == "tensorrt":
            raise EngineError(_missing_tensorrt(engine))
        note = ("no TensorRT here: stopped after ONNX; the plan is built on the device "
                "(copy the directory to the Jetson and run `edge-deploy convert DIR` there).")
        reporter.info(note)
        notes.append(note)
        return None
    options = engine.EngineOptions(**engine_settings)
    return engine.build_plan(artifact_dir, manifest, options, reporter)  # reports its own stages


def _convert_artifact(artifact: Path, output: Path | None, target: str, engine_settings: dict[str, Any],
                      force: bool, reporter: Reporter, notes: list[str], started: float) -> ConvertResult:
    """MODEL is an artifact directory: build its plan in place, or in a copy at `output`."""
    if target == "onnx":
        raise ConvertError(f"{artifact} already holds {ONNX_NAME}; --target onnx has nothing to do.")
    # Building a plan is the only thing to do here, so auto means tensorrt.
    manifest = read_manifest(artifact)
    # A model.onnx damaged on its way to the device must not become a plan (model.plan is the engine's business).
    verify_files(artifact, {"files": {ONNX_NAME: manifest.get("files", {}).get(ONNX_NAME, {})}})
    in_place = output is None or Path(os.path.abspath(output)) == Path(os.path.abspath(artifact))
    if in_place:
        manifest["plan"] = _plan_stage(artifact, manifest, "tensorrt", engine_settings, reporter, notes)
        manifest["files"][PLAN_NAME] = file_entry(artifact / PLAN_NAME)
        write_manifest(artifact, manifest)
        result_dir = Path(os.path.abspath(artifact))
    else:
        staging = StagingDir(Path(output), force)
        try:
            shutil.copytree(artifact, staging.path, dirs_exist_ok=True)
            manifest["plan"] = _plan_stage(staging.path, manifest, "tensorrt", engine_settings, reporter, notes)
            manifest["files"][PLAN_NAME] = file_entry(staging.path / PLAN_NAME)
            write_manifest(staging.path, manifest)
            staging.commit()
        except BaseException:
            staging.discard()
            raise
        result_dir = staging.target
    timings = dict(reporter.timings)
    timings["total"] = time.perf_counter() - started
    return ConvertResult(result_dir, manifest, timings, notes)
