"""CLRNet served through the real bundled tritonserver: the raw model with client decoding, the ensemble
(`--pipeline`) and the BLS pipeline (`--pipeline bls`) give the lanes of the local decode of model_fp16.onnx (what
install serves), through LaneDetClient over shared memory and plain gRPC, AsyncLaneDetClient, and `infer` on an
image. One server for the module, on the suite's shared CULane ResNet-18 artifact."""
from __future__ import annotations

import numpy as np
import pytest
from triton_helpers import run_cli, serving

pytestmark = [pytest.mark.triton,
              pytest.mark.once(reason="a CLRNet convert served three ways (a minute); every test needs torch")]


def _frames() -> list[np.ndarray]:
    from edge_deploy.synthetic.roads import scene

    return [scene(9_100_000 + i, 1640, 590).frame for i in range(3)]


def _same_lanes(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        points = np.asarray(a.points if hasattr(a, "points") else a["points"], np.float64)
        np.testing.assert_allclose(points, b.points, atol=2e-3)
        score = a.score if hasattr(a, "score") else a["score"]
        assert score == pytest.approx(b.score, abs=1e-4)


@pytest.fixture(scope="module")
def served(clrnet_artifact, tmp_path_factory):
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    _, artifact = clrnet_artifact
    work = tmp_path_factory.mktemp("clrnet_served")
    repo = work / "repo"
    install(InstallOptions(artifact, repo, "clr", runtime="python", pipeline=True))
    install(InstallOptions(artifact, repo, "clrb", runtime="python", pipeline="bls"))
    with serving(repo, work, timeout=180) as proc:
        yield artifact, repo, proc


def test_served_clrnet_raw_ensemble_and_bls_give_the_local_lanes(served) -> None:
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.evaluate.runners import OnnxRunner
    from edge_deploy.repository.versions import read_config

    artifact, repo, proc = served
    post = read_config(repo, "clr_postprocess")
    assert [list(t.dims) for t in post.output][0] == [4, 72, 2]  # top_k lanes of 72 points
    local = OnnxRunner(artifact, "fp16")
    frames = _frames()
    expected = [local.detect(frame) for frame in frames]
    assert sum(len(lanes) for lanes in expected) > 0
    with LaneDetClient(proc.url, "clr") as raw, LaneDetClient(proc.url, "clr_pipeline") as ensemble, \
            LaneDetClient(proc.url, "clrb_pipeline") as bls:
        assert raw.model.family.name == "clrnet" and raw.shm_regions
        assert ensemble.model.kind == bls.model.kind == "pipeline"
        for frame, want in zip(frames, expected):
            for client in (raw, ensemble, bls):
                _same_lanes(client.detect(frame), want)
        best = raw.detect(frames[0], top_k=1)
        _same_lanes(best, expected[0][:1])
        strict = raw.detect(frames[0], conf_threshold=0.99)  # above every lane's score: none
        assert strict == [] and all(lane.score < 0.99 for lane in expected[0])
    with LaneDetClient(proc.url, "clr", transport="grpc") as client:
        assert client.transport == "grpc"
        _same_lanes(client.detect(frames[1]), expected[1])


def test_served_clrnet_async_client_and_infer_give_the_local_lanes(served, tmp_path) -> None:
    import asyncio
    import json

    import cv2

    from edge_deploy.client.async_client import AsyncLaneDetClient
    from edge_deploy.evaluate.runners import OnnxRunner

    artifact, _, proc = served
    local = OnnxRunner(artifact, "fp16")
    frames = _frames()

    async def detect_async() -> list:
        async with AsyncLaneDetClient(proc.url, "clr") as client:
            assert client.model.family.name == "clrnet" and client.shm_regions
            return list(await asyncio.gather(*(client.detect(frame) for frame in frames)))

    for got, frame in zip(asyncio.run(detect_async()), frames):
        _same_lanes(got, local.detect(frame))

    image = tmp_path / "road.png"
    cv2.imwrite(str(image), frames[2])
    done = run_cli(tmp_path, "infer", str(image), "--url", proc.url, "--model", "clr_pipeline", "--out",
                   str(tmp_path / "out"), "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "out" / "road.lanes.json").read_text())
    want = local.detect(cv2.imread(str(image)))
    assert want
    _same_lanes(record["lanes"], want)
    assert (tmp_path / "out" / "road.lanes.png").is_file()
