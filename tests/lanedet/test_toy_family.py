"""A third lane-model family added from the test tree alone (tests/support/toy_family.py) converts,
installs and serves end to end: raw (client-side decoding) and as a pipeline (the server-side
postprocess model runs the toy decoder that install copied), through the real bundled tritonserver
and LaneDetClient. No product file names the family; that is what proves the interface."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

torch_or_skip()  # the toy family is a torch model (tests/support/toy_family.py)
from triton_helpers import serving
from toy_family import register, unregister  # noqa: E402

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.lanedet.contract import PARAM_FAMILY

pytestmark = pytest.mark.triton


def _frames() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    red = np.zeros((120, 200, 3), np.uint8)
    red[..., 2] = 230  # BGR: red, so the first toy row scores high
    mixed = rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)
    return [red, mixed, np.full((60, 100, 3), 200, np.uint8)]


@pytest.fixture(scope="module")
def toy_served(tmp_path_factory):
    register()
    try:
        yield from _served(tmp_path_factory)
    finally:
        unregister()  # the toy family must not outlive this module (tests/cli/test_cli_reference.py lists families)


def _served(tmp_path_factory):
    from edge_deploy.engine.convert import convert
    from edge_deploy.export.settings import ExportSettings
    from edge_deploy.export.source import SourceSpec
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = tmp_path_factory.mktemp("toy")
    result = convert(SourceSpec(model="toy"), work / "art", ExportSettings(output_names=("toy_lanes",)),
                     target="onnx")
    repo = work / "repo"
    install(InstallOptions(result.artifact_dir, repo, "toy", runtime="python", pipeline=True))
    with serving(repo, work) as proc:
        yield result.artifact_dir, repo, proc


def _expected(artifact: Path, frame: np.ndarray, fp16: bool):
    """The toy family's lanes computed here: the client's preprocessing, ONNX Runtime, the toy decoder."""
    from edge_deploy.evaluate.runners import OnnxRunner

    return OnnxRunner(artifact, "fp16" if fp16 else "fp32").detect(frame)


def test_convert_records_the_toy_family_and_install_writes_it_into_the_configs(toy_served) -> None:
    from edge_deploy.repository.versions import read_config

    artifact, repo, _ = toy_served
    manifest = Manifest.read(artifact)
    assert manifest.family == "toy" and manifest.preprocess.height == 48 and manifest.decode.top_k == 3
    for model in ("toy", "toy_postprocess", "toy_pipeline"):
        assert read_config(repo, model).parameters[PARAM_FAMILY].string_value == "toy"
    post = read_config(repo, "toy_postprocess")
    assert [list(t.dims) for t in post.output][0] == [3, 2, 2]  # top_k lanes of the family's max_points
    copied = (repo / "toy_postprocess" / "1" / "decode.py").read_text()
    assert "toy" in copied.splitlines()[0]  # the toy decoder, not LaneATT's


def test_served_toy_lanes_raw_and_pipeline_equal_the_familys_own(toy_served) -> None:
    from edge_deploy.client.sync_client import LaneDetClient

    artifact, _, proc = toy_served
    fp16 = Manifest.read(artifact).precision.value == "fp16"  # install follows what convert recorded
    with LaneDetClient(proc.url, "toy") as raw, LaneDetClient(proc.url, "toy_pipeline") as pipeline:
        assert raw.model.family.name == "toy" and raw.model.kind == "raw"
        assert pipeline.model.kind == "pipeline"
        found = 0
        for frame in _frames():
            expected = _expected(artifact, frame, fp16)
            for client in (raw, pipeline):
                lanes = client.detect(frame)
                assert [len(lane) for lane in lanes] == [2] * len(expected)
                for got, want in zip(lanes, expected):
                    np.testing.assert_allclose(got.points, want.points, atol=1e-3)
                    assert got.score == pytest.approx(want.score, abs=1e-3)
            found += len(expected)
        assert found > 0  # the frames were chosen so that some toy rows pass the threshold
