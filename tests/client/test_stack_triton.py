"""A perception stack on one real tritonserver (the bundled 2.51, Python backend): a lane model beside two object
detectors that arrive as ONNX files, exported here by torch.onnx.export (tests/support/detector_models.py: known
boxes), converted by `edge-deploy convert MODEL.onnx`, installed by `edge-deploy install --priority ...`.

- `lanedet`: the tiny LaneATT stand-in (tests/support/small_artifact.py), --priority high;
- `objects`: the YOLO-layout stand-in ([B, 6, 8]), --priority low;
- `nms_objects`: the EfficientNMS-layout stand-in, --priority low.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

torch_or_skip()

from detector_models import SIZE, anchor_boxes, export_detector, frame_with_bright  # noqa: E402
from triton_helpers import run_cli, serving  # noqa: E402

from edge_deploy import (AsyncDetectorClient, DetectorClient, LaneDetClient, ModelClient,  # noqa: E402
                         ModelUnavailable, PerceptionStream)
from edge_deploy.detect import DetectParams, Letterbox, decode_detections  # noqa: E402
from edge_deploy.errors import LanesUnavailable  # noqa: E402

pytestmark = pytest.mark.triton

FRAME_HW = (720, 1280)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, laneatt_data):
    """(server, repository, {name: artifact}) with the three models served."""
    from small_artifact import make_artifact

    work = tmp_path_factory.mktemp("stack")
    artifacts = {"lanedet": make_artifact(work / "lane", laneatt_data / "anchors_2784x77.npy")}
    for name, layout in (("objects", "yolo"), ("nms_objects", "efficient_nms")):
        onnx_file = export_detector(work / f"{name}.onnx", layout)
        done = run_cli(work, "convert", str(onnx_file), "-o", str(work / name))
        assert done.returncode == 0, done.stderr
        artifacts[name] = work / name
    repo = work / "repo"
    for name, priority in (("lanedet", "high"), ("objects", "low"), ("nms_objects", "low")):
        done = run_cli(work, "install", str(artifacts[name]), "-r", str(repo), "--name", name, "--priority", priority)
        assert done.returncode == 0, done.stderr
    with serving(repo, work) as proc:
        yield proc, repo, artifacts


def expected_boxes(quadrant: int) -> tuple[np.ndarray, np.ndarray]:
    """The boxes (frame pixels) and classes the stand-ins give for one bright quadrant: its box as class 0, the
    shifted box as class 1 (class-aware NMS keeps both)."""
    fit = Letterbox.of(FRAME_HW, (SIZE, SIZE))
    anchors = anchor_boxes()
    return fit.undo(anchors[[quadrant, quadrant + 4]]), np.array([0, 1], np.int32)


def served_reference(artifact: Path, frame: np.ndarray, layout: str) -> object:
    """The decode of the very file the server runs (model_fp16.onnx: the artifact was converted for FP16), run here
    in ONNX Runtime on the client's input tensor."""
    import onnxruntime as ort

    fit = Letterbox.of(frame.shape[:2], (SIZE, SIZE))
    tensor = (fit.apply(frame)[:, :, ::-1].astype(np.float32) / 255.0).transpose(2, 0, 1)[None].copy()
    session = ort.InferenceSession(str(artifact / "model_fp16.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, {"images": tensor})))
    return decode_detections(outputs, layout=layout, params=DetectParams(), letterbox=fit)[0]


@pytest.mark.parametrize("name, layout", [("objects", "yolo"), ("nms_objects", "efficient_nms")])
def test_an_onnx_detector_serves_the_known_boxes_in_frame_pixels(stack, name, layout):
    proc, _, artifacts = stack
    frame = frame_with_bright([2], FRAME_HW)
    with DetectorClient(proc.url, name) as client:
        found = client.detect(frame, deadline=30)
    boxes, classes = expected_boxes(2)
    assert np.array_equal(found.classes, classes)
    np.testing.assert_allclose(found.boxes, boxes, atol=1e-3)
    reference = served_reference(artifacts[name], frame, layout)
    assert np.array_equal(found.boxes, reference.boxes) and np.array_equal(found.scores, reference.scores)
    assert np.array_equal(found.classes, reference.classes)


def test_model_client_runs_named_arrays_through_shared_memory(stack):
    import onnxruntime as ort

    proc, _, artifacts = stack
    batch = np.random.default_rng(3).random((2, 3, SIZE, SIZE), dtype=np.float32)
    with ModelClient(proc.url, "objects") as client:
        assert client.transport == "shm" and client.model.kind == "detector"
        out = client.infer({"images": batch}, deadline=30)
        assert client.shm_regions
    session = ort.InferenceSession(str(artifacts["objects"] / "model_fp16.onnx"), providers=["CPUExecutionProvider"])
    assert np.array_equal(out["output0"], session.run(None, {"images": batch})[0])


def test_a_wrong_input_is_one_line(stack):
    proc, _, _ = stack
    with ModelClient(proc.url, "objects") as client:
        with pytest.raises(Exception) as caught:
            client.infer({"frames": np.zeros((1, 3, SIZE, SIZE), np.float32)}, deadline=5)
        assert "takes the inputs images" in str(caught.value) and "\n" not in str(caught.value)
        with pytest.raises(Exception) as caught:
            client.infer({"images": np.zeros((1, 3, 32, 32), np.float32)}, deadline=5)
        assert "[32, 32]" not in str(caught.value) or "takes" in str(caught.value)


def test_a_lane_client_is_a_model_client_with_the_lane_decode(stack):
    proc, _, _ = stack
    assert issubclass(LaneDetClient, ModelClient) and issubclass(LanesUnavailable, ModelUnavailable)
    with LaneDetClient(proc.url, "lanedet") as client:
        assert isinstance(client.detect(np.zeros((590, 1640, 3), np.uint8), deadline=30), list)


def test_the_async_detector_client_keeps_its_deadline(stack):
    proc, _, _ = stack
    frame = frame_with_bright([0], FRAME_HW)

    async def run():
        async with AsyncDetectorClient(proc.url, "objects", max_in_flight=2) as client:
            found = await asyncio.gather(*(client.detect(frame, deadline=30) for _ in range(3)))
            return found

    for found in asyncio.run(run()):
        np.testing.assert_allclose(found.boxes, expected_boxes(0)[0], atol=1e-3)

    async def unreachable():
        async with AsyncDetectorClient("127.0.0.1:9", "objects", connect=False) as client:
            started = time.monotonic()
            with pytest.raises(ModelUnavailable) as caught:
                await client.detect(frame, deadline=0.2)
            return time.monotonic() - started, caught.value.reason

    took, reason = asyncio.run(unreachable())
    assert took < 1.0 and reason in ("unreachable", "slow")


def wait_for(check, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_one_frame_to_every_model_one_input_for_the_detectors_and_each_model_on_its_own(stack):
    """The two detectors share one converted input per frame; unloading one (Triton's unload API) makes it
    "unavailable" within max_age plus a frame while the others stay "ok"."""
    import tritonclient.grpc as grpcclient

    proc, _, _ = stack
    frame = frame_with_bright([1], FRAME_HW)
    clients = {"lanes": LaneDetClient(proc.url, "lanedet"), "objects": DetectorClient(proc.url, "objects"),
               "nms": DetectorClient(proc.url, "nms_objects")}
    for client in clients.values():  # warmed: the first calls of a fresh server model are slow
        client.detect(frame if not isinstance(client, LaneDetClient) else np.zeros((590, 1640, 3), np.uint8),
                      deadline=30)
    max_age, fps = 2.0, 5.0
    admin = grpcclient.InferenceServerClient(proc.url)
    try:
        with PerceptionStream(lambda: frame, clients, max_age=max_age, fps=fps) as stream:
            now = wait_for(lambda: (r := stream.latest()) and all(m.seq for m in r.models.values()) and r, 30)
            assert set(now.models) == {"lanes", "objects", "nms"}
            np.testing.assert_allclose(now["objects"].result.boxes, expected_boxes(1)[0], atol=1e-3)
            np.testing.assert_allclose(now["nms"].result.boxes, expected_boxes(1)[0], atol=1e-3)
            answered = {name: m.seq for name, m in now.models.items()}
            # every frame the two detectors both answered was converted once for both
            assert stream.inputs_made <= max(answered["objects"], answered["nms"]) + 1
            assert stream.inputs_made < answered["objects"] + answered["nms"]

            admin.unload_model("nms_objects")
            unloaded = time.monotonic()
            wait_for(lambda: stream.latest()["nms"].state == "unavailable", max_age + 1.0 / fps + 5.0)
            took = time.monotonic() - unloaded
            others = stream.latest()
            assert others["lanes"].state == "ok" and others["objects"].state == "ok", others.states
            assert took <= max_age + 1.0 / fps + 2.0  # the frame period plus scheduling slack on 2 busy cores
    finally:
        admin.load_model("nms_objects")
        admin.close()
        for client in clients.values():
            client.close()
