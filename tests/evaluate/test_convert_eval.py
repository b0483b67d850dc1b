"""`convert --eval-data`: the F1 of what convert built, recorded in the manifest and shown by install.

Runs the real convert (torch -> ONNX, FP16 ONNX) of the committed demo weights
(weights/laneatt_r18_synthetic.pt, trained on synthetic roads, so F1 is far from 0 and a
wrong number shows) on a few held-out synthetic frames.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_process import run_cli
from needs import torch_or_skip

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.evaluate.datasets import synthetic_frames
from edge_deploy.evaluate.run import evaluate
from edge_deploy.evaluate.runners import OnnxRunner

WEIGHTS = Path(__file__).resolve().parents[2] / "weights" / "laneatt_r18_synthetic.pt"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_cli(args, cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> tuple[Path, dict, str]:
    torch_or_skip()
    out = tmp_path_factory.mktemp("eval") / "artifact"
    result = cli("convert", "laneatt", "--checkpoint", str(WEIGHTS), "--backbone", "resnet18", "--dataset", "culane",
                 "--output", str(out), "--target", "onnx", "--max-batch", "1", "--eval-data", "synthetic:4")
    assert result.returncode == 0, result.stderr
    return out, json.loads((out / "manifest.json").read_text()), result.stdout


def test_the_manifest_records_each_onnx_files_f1_as_evaluate_computes_it(scored) -> None:
    out, manifest, stdout = scored
    section = manifest["evaluation"]
    assert section["data"] == "synthetic:4" and section["frames"] == 4
    assert set(section["files"]) == {"model.onnx", "model_fp16.onnx"}
    for name, precision in (("model.onnx", "fp32"), ("model_fp16.onnx", "fp16")):
        report, _ = evaluate(OnnxRunner(out, precision), synthetic_frames(4, 0))
        for r in report.culane:
            assert section["files"][name][f"{r.iou_threshold:g}"] == {
                "f1": round(r.f1, 4), "precision": round(r.precision, 4), "recall": round(r.recall, 4)}
    fp32, fp16 = (section["files"][n]["0.5"]["f1"] for n in ("model.onnx", "model_fp16.onnx"))
    assert fp32 > 0.3  # trained weights: a real score, not 0 = 0
    # and convert's own FP16 lane check saw lanes (on road frames; random inputs give a trained model none)
    assert manifest["fp16"]["onnx"]["verify"]["lanes"]["lanes_fp32"] > 0
    assert manifest["fp16"]["onnx"]["f1"] == {"iou": 0.5, "fp32": fp32, "fp16": fp16,
                                              "retention": round(fp16 / fp32, 4)}
    assert f"F1 at IoU 0.5 on synthetic:4 (4 frames): model.onnx {fp32:.3f}, model_fp16.onnx {fp16:.3f}" in stdout


def test_each_file_is_scored_on_its_own_and_the_retention_is_fp16_over_fp32(scored, tmp_path, laneatt_data) -> None:
    # On 4 frames the FP16 and FP32 files of a real model score the same, which would hide a mix-up;
    # so model_fp16.onnx is replaced by another lane model (same I/O, other lanes).
    import shutil

    from small_artifact import make_artifact

    from edge_deploy.evaluate.convert_eval import evaluate_artifact

    out, manifest, _ = scored
    copy = tmp_path / "artifact"
    shutil.copytree(out, copy)
    other = make_artifact(tmp_path / "other", laneatt_data / "anchors_2784x77.npy")
    shutil.copy(other / "model.onnx", copy / "model_fp16.onnx")
    manifest = Manifest.from_dict(json.loads(json.dumps(manifest)))
    section = evaluate_artifact(copy, manifest, "synthetic:4")
    fp32, fp16 = (section["files"][n]["0.5"]["f1"] for n in ("model.onnx", "model_fp16.onnx"))
    report, _ = evaluate(OnnxRunner(copy, "fp16"), synthetic_frames(4, 0))
    assert fp16 == round(report.culane[0].f1, 4) and fp16 != fp32
    assert manifest.fp16["onnx"]["f1"]["retention"] == round(fp16 / fp32, 4)


def test_install_shows_the_recorded_f1(scored, tmp_path) -> None:
    out, manifest, _ = scored
    result = cli("install", str(out), "--repository", str(tmp_path / "repo"), "--runtime", "onnxruntime")
    assert result.returncode == 0, result.stderr
    fp32 = manifest["evaluation"]["files"]["model.onnx"]["0.5"]["f1"]
    assert f"F1 at IoU 0.5 on synthetic:4 (4 frames): model.onnx {fp32:.3f}" in result.stdout


@pytest.mark.parametrize(("value", "message"), [
    ("synthetic:0", "synthetic:N with N frames"),
    ("synthetic:many", "synthetic:N with N frames"),
    ("no/such/list.txt", "is not a file"),
])
def test_bad_eval_data_is_refused_before_the_export(tmp_path, value, message) -> None:
    result = cli("convert", "laneatt", "--output", str(tmp_path / "out"), "--target", "onnx", "--eval-data", value)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "out").exists()
