"""Artifacts written by the released code (manifest format 1, tests/data/format1) still install and serve:
the manifest is migrated once when read, the version directory gets the migrated manifest, and a
repository version holding a format-1 manifest (installed by the released code) rolls back."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from triton_helpers import serving

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.lanedet.contract import PARAM_FAMILY

pytestmark = pytest.mark.triton
FORMAT1 = Path(__file__).resolve().parents[1] / "data" / "format1"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = tmp_path_factory.mktemp("format1")
    arts = {name: Path(shutil.copytree(FORMAT1 / name, work / name)) for name in ("tiny_fp16", "tiny_fused")}
    repo = work / "repo"
    install(InstallOptions(arts["tiny_fp16"], repo, "tiny", runtime="python", pipeline=True))
    install(InstallOptions(arts["tiny_fused"], repo, "tinyf", runtime="python"))
    with serving(repo, work) as proc:
        yield arts, repo, proc


def _frames() -> list[np.ndarray]:
    from edge_deploy.synthetic.roads import road_scene

    return [road_scene(820, 295, seed=s)[0] for s in (1, 2, 3)]


def test_a_format1_artifact_installs_with_its_recorded_settings(served) -> None:
    import json

    from edge_deploy.repository.versions import read_config

    arts, repo, _ = served
    installed = json.loads((repo / "tiny" / "1" / "manifest.json").read_text())
    assert installed["format"] == 2 and installed["family"] == "laneatt" and installed["precision"] == "fp16"
    assert installed["decode"] == {"conf_threshold": 0.4, "nms_threshold": 50.0, "top_k": 3}  # convert --conf --top-k
    # the FP16 artifact serves its model_fp16.onnx (no plan here), as convert recorded
    assert (repo / "tiny" / "1" / "model.onnx").read_bytes() == (arts["tiny_fp16"] / "model_fp16.onnx").read_bytes()
    assert read_config(repo, "tiny").parameters[PARAM_FAMILY].string_value == "laneatt"
    assert json.loads((arts["tiny_fp16"] / "manifest.json").read_text())["format"] == 1  # the artifact is untouched


def test_format1_artifacts_serve_the_lanes_of_their_own_onnx(served) -> None:
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.evaluate.runners import OnnxRunner

    arts, _, proc = served
    runners = {"tiny": OnnxRunner(arts["tiny_fp16"], "fp16"), "tinyf": OnnxRunner(arts["tiny_fused"], "fp16")}
    found = 0
    for model, runner in runners.items():
        for name in (model, f"{model}_pipeline") if model == "tiny" else (model,):
            with LaneDetClient(proc.url, name) as client:
                for frame in _frames():
                    want, got = runner.detect(frame), client.detect(frame)
                    assert len(got) == len(want)
                    for a, b in zip(got, want):
                        np.testing.assert_allclose(a.points, b.points, atol=0.05)
                    found += len(got)
    assert found > 0


def test_a_version_installed_by_the_released_code_rolls_back(served) -> None:
    """The released code copied the format-1 manifest into the version directory verbatim."""
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.deploy.rollback import rollback
    from edge_deploy.repository.versions import read_config

    arts, repo, _ = served
    shutil.copy(arts["tiny_fp16"] / "manifest.json", repo / "tiny" / "1" / "manifest.json")
    install(InstallOptions(arts["tiny_fp16"], repo, "tiny", runtime="python"))  # version 2
    result = rollback(repo, "tiny", to=1)
    assert result.version == 1
    config = read_config(repo, "tiny")
    assert list(config.version_policy.specific.versions) == [1]
    assert config.parameters[PARAM_FAMILY].string_value == "laneatt"
    assert Manifest.read(repo / "tiny" / "1").decode.top_k == 3
