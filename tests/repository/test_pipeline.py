"""--pipeline: NAME_pipeline (preprocess -> model -> postprocess) on the real server vs client-side decoding."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from small_artifact import make_artifact
from triton_helpers import failed_loads

from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.serve import server_record as control

pytestmark = pytest.mark.triton
KEY_NAME = "edge-deploy-key"


def frames() -> list[np.ndarray]:
    """Frames of several sizes whose mean colours give the tiny model different lanes (and sometimes none)."""
    rng = np.random.default_rng(7)
    sizes = [(720, 1280), (360, 640), (481, 853), (1080, 1920)]
    bases = [(40, 90, 200), (200, 30, 30), (128, 128, 128), (10, 220, 90)]
    return [np.clip(rng.integers(0, 40, (h, w, 3)) + np.array(b), 0, 255).astype(np.uint8) for (h, w), b in zip(sizes, bases)]


def compare_pipeline_with_client_decoding(url: str, manifest: dict, name: str = "lane") -> int:
    """Send each frame to NAME_pipeline and (preprocessed on the client) to NAME; returns the lanes seen."""
    import tritonclient.grpc as grpcclient

    from edge_deploy.lanedet.laneatt.decode import decode_lanes
    from edge_deploy.lanedet.preprocess import Preprocessor, PreprocessSpec

    decode = manifest["decode"]
    model_in, model_out = manifest["io"]["inputs"][0], manifest["io"]["outputs"][0]
    dtype = np.float16 if model_in["datatype"] == "FP16" else np.float32
    pre = Preprocessor(PreprocessSpec.from_dict(manifest["preprocess"]), dtype, 1)
    client = grpcclient.InferenceServerClient(url)
    seen = 0
    try:
        for frame in frames():
            inp = grpcclient.InferInput("FRAME", list(frame.shape), "UINT8")
            inp.set_data_from_numpy(frame)
            out = client.infer(f"{name}_pipeline", [inp])
            lanes, scores = out.as_numpy("LANES"), out.as_numpy("SCORES")
            counts, (num,) = out.as_numpy("NUM_POINTS"), out.as_numpy("NUM_LANES")
            assert lanes.shape == (decode["top_k"], 72, 2)

            x = np.array(pre(frame))
            tensor = grpcclient.InferInput(model_in["name"], list(x.shape), model_in["datatype"])
            tensor.set_data_from_numpy(x)
            raw = client.infer(name, [tensor]).as_numpy(model_out["name"])[0]
            expected = decode_lanes(raw, conf_threshold=decode["conf_threshold"], nms_threshold=decode["nms_threshold"],
                                    top_k=decode["top_k"], image_size=frame.shape[:2])
            assert num == len(expected)
            for i, lane in enumerate(expected):
                assert counts[i] == len(lane.points)
                np.testing.assert_array_equal(lanes[i, : counts[i]], lane.points)
                assert np.isnan(lanes[i, counts[i]:]).all()
                assert scores[i] == np.float32(lane.score)
            assert np.isnan(lanes[num:]).all() and (scores[num:] == 0).all() and (counts[num:] == 0).all()
            seen += int(num)
    finally:
        client.close()
    return seen


def test_pipeline_lanes_equal_client_side_decoding(tmp_path, laneatt_data, start_triton, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    anchors = laneatt_data / "anchors_2784x77.npy"
    first = make_artifact(tmp_path / "first", anchors, n=1000, seed=3)
    repo = tmp_path / "repo"
    result = install(InstallOptions(first, repo, "lane", runtime="python", pipeline=True))
    assert result.models == ["lane", "lane_preprocess", "lane_postprocess", "lane_pipeline"]
    key = "pipeline-key-0123456789"
    (tmp_path / "key").write_text(key)
    server = start_triton(repo, model_control="explicit", restricted_key=(KEY_NAME, key))
    seen = compare_pipeline_with_client_decoding(server.url, json.loads((first / "manifest.json").read_text()))
    assert seen > 0, "the test frames produced no lanes at all: the comparison would be vacuous"

    # A new pipeline version is loaded as a whole by a running server (ensemble included).
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_NAME,
                                             key_file=tmp_path / "key", scope="user"))
    second = make_artifact(tmp_path / "second", anchors, n=500, seed=4)
    result = install(InstallOptions(second, repo, "lane", runtime="python", pipeline=True))
    assert result.served == {m: [2] for m in result.models}
    seen = compare_pipeline_with_client_decoding(server.url, json.loads((second / "manifest.json").read_text()))
    assert seen > 0
    assert failed_loads(server.log_path) == []


@pytest.mark.slow
def test_pipeline_with_converted_laneatt(tmp_path, laneatt_artifact, start_triton) -> None:
    artifact: Path = laneatt_artifact
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "laneatt", runtime="python", pipeline=True))
    server = start_triton(repo)
    seen = compare_pipeline_with_client_decoding(server.url, json.loads((artifact / "manifest.json").read_text()),
                                                 "laneatt")
    assert seen > 0, "the converted LaneATT found no lanes in the test frames: the comparison would be vacuous"
