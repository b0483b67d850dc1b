"""Fused models (`convert --fuse-preprocess`) served by the real bundled tritonserver, through LaneDetClient.

Models, installed by the real `install` (Python-backend ONNX Runtime runner):

- ``tiny`` / ``tiny_pipeline``: tests/support/small_artifact.py, client-side preprocessing (today's path);
- ``tinyf`` / ``tinyf_pipeline``: the same weights fused by the product's `fuse_artifact` at 1640x590;
- ``tinyc`` and ``tinycf``: the same weights with a crop in the preprocessing spec, unfused and fused;
- ``lanedet`` and ``lanedetf``: LaneATT-R18 converted by the real `convert` CLI, without and with
  --fuse-preprocess.

ONNX Runtime's CPU cubic Resize takes ~0.3 s per 1640x590 frame here, so few frames are sent.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from edge_deploy.artifact.manifest import Manifest
from manifest_files import manifest_json, write_manifest_json
from conftest import free_port

from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import FrameError
from edge_deploy.synthetic.roads import road_scene
from edge_deploy.export.parity import lane_dx

pytestmark = [pytest.mark.triton,
              pytest.mark.once(reason="a fused LaneATT convert and a server (a minute and a half); every test needs torch")]

SIZE = (590, 1640)
CROP = {"top": 200, "left": 60, "right": 20}


def frames(*seeds: int, size: tuple[int, int] = SIZE) -> list[np.ndarray]:
    return [road_scene(size[1], size[0], seed=s)[0] for s in seeds]


def close_lanes(want, got, max_mean_dx: float) -> bool:
    """Same number of lanes and the mean |dx| over them (frame pixels) within max_mean_dx."""
    if len(want) != len(got):
        return False
    dxs = lane_dx(want, got)
    return not dxs or float(np.mean(dxs)) <= max_mean_dx


def with_crop(artifact: Path, crop: dict) -> Path:


    manifest = manifest_json(artifact)
    manifest["preprocess"]["crop"] = crop
    write_manifest_json(artifact, manifest)
    return artifact


@pytest.fixture(scope="module")
def server(tmp_path_factory, laneatt_data, laneatt_artifact, laneatt_fused_artifact):
    from small_artifact import make_artifact, make_fused_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.artifact.precision import Precision
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    work = tmp_path_factory.mktemp("fused_served")
    anchors = laneatt_data / "anchors_2784x77.npy"
    repo = work / "repo"
    install(InstallOptions(make_artifact(work / "tiny", anchors), repo, "tiny", runtime="python", pipeline=True))
    install(InstallOptions(make_fused_artifact(work / "tinyf", anchors), repo, "tinyf", runtime="python", pipeline=True))
    install(InstallOptions(with_crop(make_artifact(work / "tinyc", anchors), CROP), repo, "tinyc", runtime="python"))
    cropped = with_crop(make_artifact(work / "tinycf", anchors), CROP)

    from edge_deploy.export.fused_preprocess import fuse_artifact

    manifest = Manifest.read(cropped)
    fuse_artifact(cropped, manifest, SIZE)
    manifest.write(cropped)
    install(InstallOptions(cropped, repo, "tinycf", runtime="python"))
    # --no-fp16: the FP32 models, as the fused-vs-client comparison was measured
    install(InstallOptions(laneatt_artifact, repo, "lanedet", runtime="python", precision=Precision.FP32))
    install(InstallOptions(laneatt_fused_artifact, repo, "lanedetf", runtime="python", pipeline=True, precision=Precision.FP32))
    options = ServerOptions(model_repository=repo, grpc_port=free_port())
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"), options, work / "triton.log")
    proc.start()
    try:
        proc.wait_ready(180)
    except Exception:
        proc.stop(timeout=15)
        raise
    proc.repo = repo
    yield proc
    proc.stop(timeout=15)


def test_fused_laneatt_gives_the_client_side_lanes(server):
    with LaneDetClient(server.url, "lanedet") as plain, LaneDetClient(server.url, "lanedetf") as fused:
        assert fused.model.kind == "fused" and fused.model.frame_size == SIZE and fused.model.num_rows == 1000
        assert fused.model.input_datatype == "UINT8"
        total = 0
        for frame in frames(0, 1):
            want, got = plain.detect(frame), fused.detect(frame)
            total += len(got)
            # The bar: same lane count, mean |dx| <= 0.5 px at 640 wide (1640-wide frame pixels here).
            assert close_lanes(want, got, 0.5 * SIZE[1] / 640), (want, got)
        assert total > 0


def test_fused_detect_only_copies_the_frame_into_its_region(server):
    frame = frames(2)[0]
    with LaneDetClient(server.url, "tinyf") as client:
        client.detect(frame)
        slot = client._slots[0]
        assert slot.pre is None  # no client-side preprocessing at all
        assert slot.regions[0].byte_size == 4 * frame.nbytes  # batch capacity 4 of uint8 frames
        assert np.array_equal(slot.input[0], frame)  # the frame itself went to the server


@pytest.mark.parametrize("transport", ["shm", "grpc"])
def test_fused_tiny_batches_and_colour_order(server, transport):
    test_frames = frames(3, 4, 5, 6, 7)  # capacity 4: two requests
    with LaneDetClient(server.url, "tiny") as plain, LaneDetClient(server.url, "tinyf", transport=transport) as fused:
        want = [plain.detect(f) for f in test_frames]
        assert sum(len(lanes) for lanes in want) > 0
        got = fused.detect_batch(test_frames)
        for a, b in zip(want, got):
            assert close_lanes(a, b, 0.01), (a, b)
        rgb = fused.detect(np.ascontiguousarray(test_frames[0][:, :, ::-1]), color="rgb")
        assert close_lanes(want[0], rgb, 0.01)


def test_fused_crop_maps_lanes_to_the_frame(server):
    with LaneDetClient(server.url, "tinyc") as plain, LaneDetClient(server.url, "tinycf") as fused:
        for frame in frames(8, 9):
            want, got = plain.detect(frame), fused.detect(frame)
            assert len(want) > 0 and close_lanes(want, got, 0.01), (want, got)
            assert min(float(lane.points[:, 1].min()) for lane in got) >= CROP["top"]


def test_other_frame_sizes_are_resized_once_warned_or_refused_when_strict(server):
    small = frames(10, size=(720, 1280))[0]
    with LaneDetClient(server.url, "tiny") as plain, LaneDetClient(server.url, "tinyf") as fused:
        want = plain.detect(small)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [fused.detect(small), fused.detect(small)]
        resize_warnings = [w for w in caught if "resized on the CPU" in str(w.message)]
        assert len(resize_warnings) == 1
        # Lanes come back in the caller's 1280x720 frame (resized twice on the way: a few px at most).
        assert len(want) > 0 and all(close_lanes(want, lanes, 3.0) for lanes in got), (want, got)
    with LaneDetClient(server.url, "tinyf", strict=True) as strict:
        with pytest.raises(FrameError, match="1280x720.*1640x590"):
            strict.detect(small)
        assert isinstance(strict.detect(frames(10)[0]), list)  # the right size still works


def test_fused_pipeline_has_no_preprocess_step(server):
    from edge_deploy.core.triton_layout import parse_config

    assert not (server.repo / "tinyf_preprocess").exists() and not (server.repo / "lanedetf_preprocess").exists()
    assert (server.repo / "tiny_preprocess").is_dir()
    config = parse_config((server.repo / "tinyf_pipeline" / "config.pbtxt").read_text())
    assert [s.model_name for s in config.ensemble_scheduling.step] == ["tinyf", "tinyf_postprocess"]
    test_frames = frames(11, 12)
    with LaneDetClient(server.url, "tiny_pipeline") as today, LaneDetClient(server.url, "tinyf_pipeline") as pipe:
        assert pipe.model.kind == "pipeline" and pipe.model.frame_size == SIZE
        for frame in test_frames:
            want, got = today.detect(frame), pipe.detect(frame)
            assert len(want) > 0 and close_lanes(want, got, 0.01), (want, got)
        small = frames(13, size=(720, 1280))[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert close_lanes(today.detect(small), pipe.detect(small), 3.0)


def test_async_client_serves_the_fused_model(server):
    import asyncio

    from edge_deploy.client.async_client import AsyncLaneDetClient

    test_frames = frames(14, 15, 16)
    with LaneDetClient(server.url, "tinyf") as sync:
        want = [sync.detect(f) for f in test_frames]
    assert sum(len(lanes) for lanes in want) > 0

    async def run():
        async with AsyncLaneDetClient(server.url, "tinyf", max_in_flight=2) as client:
            assert client.model.kind == "fused"
            return await asyncio.gather(*(client.detect(f) for f in test_frames))

    for a, b in zip(want, asyncio.run(run())):
        assert close_lanes(a, b, 1e-4), (a, b)
