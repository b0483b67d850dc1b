"""`convert --eval-data`: the lane quality of what convert built, recorded in the manifest.

Each ONNX file of the artifact (model.onnx; model_fp16.onnx when there is one) runs in ONNX
Runtime on the same labelled frames; the manifest's "evaluation" section keeps the CULane
F1/precision/recall at IoU 0.5 and 0.7 per file, so `install` can show what a version is
worth and a later conversion can be compared with it.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, Manifest
from ..errors import EvaluationError
from ..core.progress import Reporter
from ..artifact.records import EvaluationRecord, F1Retention, Scores
from . import datasets
from .run import evaluate
from .runners import OnnxRunner

SYNTHETIC_PREFIX = "synthetic:"


def check_eval_data(spec: str) -> None:
    """One-line EvaluationError unless `spec` is synthetic:N or an existing file (checked before the export)."""
    if spec.startswith(SYNTHETIC_PREFIX):
        count = spec[len(SYNTHETIC_PREFIX):]
        if not count.isdigit() or int(count) < 1:
            raise EvaluationError(f"--eval-data {spec}: write synthetic:N with N frames (N >= 1).")
    elif not Path(spec).is_file():
        raise EvaluationError(f"--eval-data {spec} is not a file; give synthetic:N, a CULane list file "
                              "(image paths relative to its folder) or a TuSimple label_data_*.json.")


def eval_frames(spec: str) -> Any:
    """The labelled frames an --eval-data value names: synthetic:N, a CULane list file, or TuSimple JSON."""
    check_eval_data(spec)
    if spec.startswith(SYNTHETIC_PREFIX):
        return datasets.synthetic_frames(int(spec[len(SYNTHETIC_PREFIX):]), 0)
    path = Path(spec)
    if path.suffix == ".json":
        labelled = datasets.tusimple_frames(path.parent, [path])
        return ((name, frame, label.polylines()) for name, frame, label in labelled)
    return datasets.culane_frames(path.parent, path)


def evaluate_artifact(artifact_dir: Path, manifest: Manifest, spec: str,
                      reporter: Reporter | None = None) -> EvaluationRecord:
    """F1/precision/recall of each ONNX file of the artifact on the --eval-data frames (the manifest's section).

    With both ONNX files scored, fp16.onnx.f1 of `manifest` gets model_fp16.onnx's F1 retention."""
    reporter = reporter or Reporter()
    frames = 0
    scores: dict[str, dict[str, Scores]] = {}
    for precision, name in (("fp32", ONNX_NAME), ("fp16", FP16_ONNX_NAME)):
        if not (Path(artifact_dir) / name).is_file():
            continue
        with reporter.stage(f"evaluate {name} on {spec}"):
            runner = OnnxRunner(Path(artifact_dir), precision, manifest=manifest)
            count = int(spec[len(SYNTHETIC_PREFIX):]) if spec.startswith(SYNTHETIC_PREFIX) else None
            report, _ = evaluate(runner, eval_frames(spec), reporter=reporter, total=count)
        frames = report.frames
        scores[name] = {f"{r.iou_threshold:g}": Scores(f1=round(r.f1, 4), precision=round(r.precision, 4),
                                                       recall=round(r.recall, 4)) for r in report.culane}
    section = EvaluationRecord(data=spec, frames=frames, files=scores)
    fp16 = manifest.fp16_onnx
    ref, low = section.f1(ONNX_NAME), section.f1(FP16_ONNX_NAME)
    if fp16 is not None and manifest.fp16 is not None and ref is not None and low is not None:
        f1 = F1Retention(iou=0.5, fp32=ref, fp16=low, retention=round(low / ref, 4) if ref else None)
        manifest.fp16 = replace(manifest.fp16, onnx=replace(fp16, f1=f1))
    return section


def evaluation_summary(section: EvaluationRecord | None) -> str | None:
    """One line for `install`: 'F1 at IoU 0.5 on synthetic:200 (200 frames): model.onnx 0.93, model_fp16.onnx 0.93'."""
    if not section or not section.files:
        return None
    parts = [f"{name} {scores['0.5'].f1:.3f}" for name, scores in section.files.items() if "0.5" in scores]
    return f"F1 at IoU 0.5 on {section.data} ({section.frames} frames): {', '.join(parts)}"
