"""convert's one-line errors say the first thing to fix (issue 56, item 11):

- `convert laneatt --checkpoint MISSING -o EXISTING` names the missing checkpoint, not "EXISTING already exists;
  pass --force" (which, followed, only leads to the checkpoint error);
- `convert ART` (an artifact: its ONNX is made, only the plan is left) on a machine without TensorRT says to build
  it on the device, not `convert --target onnx` (which refuses an artifact: "--target onnx has nothing to do").
  TensorRT cannot be installed here; where a machine has it, the test hides it (jetson_fixtures' no_tensorrt).
"""
from __future__ import annotations

import pytest
from cli_process import run_cli
from needs import torch_or_skip
from small_artifact import make_artifact

from edge_deploy.engine.convert import convert
from edge_deploy.engine.plan import tensorrt_missing_message
from edge_deploy.errors import EdgeDeployError
from edge_deploy.export.source import SourceSpec

pytest_plugins = ["jetson_fixtures"]  # no_tensorrt


def test_a_missing_checkpoint_is_named_before_an_existing_output(tmp_path) -> None:
    torch_or_skip()  # convert laneatt reads the checkpoint with torch
    existing = tmp_path / "artifacts" / "lanedet"
    existing.mkdir(parents=True)
    for given in (tmp_path / "missing.pt", tmp_path):  # a file that is not there; a directory
        done = run_cli(["convert", "laneatt", "--checkpoint", str(given), "-o", str(existing)], timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "already exists" not in lines[0], done.stderr
        assert lines[0].startswith(f"error: checkpoint {given} "), lines[0]
        assert "LaneATT checkpoint file" in lines[0], lines[0]


def test_an_artifact_without_tensorrt_is_told_to_build_on_the_device(tmp_path, laneatt_data, no_tensorrt) -> None:
    art = make_artifact(tmp_path / "art", laneatt_data / "anchors_2784x77.npy", n=100)
    for output in (None, tmp_path / "copy"):
        with pytest.raises(EdgeDeployError) as refused:
            convert(SourceSpec(str(art)), output)
        message = str(refused.value)
        assert "--target onnx" not in message, message
        assert f"copy {art} to the device and run `edge-deploy convert {art}` there" in message, message
    assert "--target onnx" in tensorrt_missing_message()  # a new export still gets that advice
