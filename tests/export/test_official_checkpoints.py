"""Official-format top-1000 checkpoints convert with --dataset and give the model they were trained as.

The checkpoints are written here with seeded weights in the official layout ({'model': state_dict}): what
matters is that the ONNX model mixes the same anchors in the same order as the PyTorch model built with
the order real torch 1.6 gave (tests/data/laneatt/torch16_argsort_*.npy).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_process import run_cli
from needs import torch_or_skip

torch = torch_or_skip()

from edge_deploy.lanedet.laneatt.model import LaneATT, build_laneatt, load_checkpoint
from edge_deploy.export.parity import ort_session



def _convert(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    # What is checked is model.onnx and the manifest's source/decode: no simplifier and no model_fp16.onnx
    # (--precision fp32), stages the suite's LaneATT-R18 artifact (conftest.py `laneatt_artifact`) goes through.
    return run_cli(["convert", "laneatt", "--backbone", "resnet18", "--batch", "1", "--target", "onnx",
                    "--no-simplify", "--precision", "fp32", "-o", str(out), *args], timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["culane", "tusimple", "llamas"])
def test_official_checkpoint_converts_to_the_same_model(dataset: str, laneatt_data: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / f"laneatt_r18_{dataset}.pt"
    trained = build_laneatt("resnet18", dataset=dataset, seed=11)
    torch.save({"model": trained.state_dict(), "epoch": 15}, checkpoint)

    result = _convert(["--checkpoint", str(checkpoint), "--dataset", dataset], tmp_path / "art")
    assert result.returncode == 0, result.stderr

    order = np.load(laneatt_data / f"torch16_argsort_{dataset}.npy")[:1000]
    reference = load_checkpoint(LaneATT("resnet18", order), checkpoint).eval()
    x = np.random.default_rng(5).random((1, 3, 360, 640), dtype=np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    got = ort_session(tmp_path / "art" / "model.onnx").run(None, {"input": x})[0]
    assert got.shape == (1, 1000, 77)
    assert float(np.abs(got - expected).max()) <= 1e-3

    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    source = manifest["source"]
    assert source["dataset"] == dataset and source["topk_anchors"] == 1000 and source["trained"]
    assert source["anchor_order"]["rule"] == "torch16"
    expected_decode = {"conf_threshold": 0.2, "nms_threshold": 45.0, "top_k": 5} if dataset == "tusimple" else \
        {"conf_threshold": 0.5, "nms_threshold": 50.0, "top_k": 4}
    assert manifest["decode"] == expected_decode


def test_the_wrong_order_gives_another_model(laneatt_data: Path) -> None:
    """Why the order matters: a stable-order model with the same weights differs far beyond tolerance."""
    model = build_laneatt("resnet18", dataset="culane", seed=3)
    stable = build_laneatt("resnet18", dataset="culane", anchor_order="stable", seed=3)
    x = torch.rand(1, 3, 360, 640, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float((model(x) - stable(x)).abs().max()) > 1.0


def test_top1000_checkpoint_without_dataset_names_both_options(tmp_path: Path) -> None:
    checkpoint = tmp_path / "laneatt_r18_culane.pt"
    torch.save({"model": build_laneatt("resnet18", dataset="culane").state_dict()}, checkpoint)
    result = _convert(["--checkpoint", str(checkpoint)], tmp_path / "art")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "top 1000 anchors" in result.stderr and "--dataset" in result.stderr and "--anchors-freq" in result.stderr
    assert not (tmp_path / "art").exists()
