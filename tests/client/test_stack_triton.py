"""A perception stack on one real tritonserver (the bundled 2.51, Python backend): a lane model beside two object
detectors that arrive as ONNX files, exported here by torch.onnx.export (tests/support/detector_models.py: known
boxes), converted by `edge-deploy convert MODEL.onnx`, installed by `edge-deploy install --priority ...`.

- `lanedet`: the tiny LaneATT stand-in (tests/support/small_artifact.py), --priority high;
- `objects`: the YOLO-layout stand-in ([B, 6, 8]), --priority low;
- `nms_objects`: the EfficientNMS-layout stand-in, --priority low.
"""
from __future__ import annotations

import asyncio
import os
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
from edge_deploy.errors import ClientError, LanesUnavailable  # noqa: E402

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
        with pytest.raises(ClientError) as caught:
            client.infer({"frames": np.zeros((1, 3, SIZE, SIZE), np.float32)}, deadline=5)
        assert "takes the inputs images" in str(caught.value) and "\n" not in str(caught.value)
        with pytest.raises(ClientError) as caught:
            client.infer({"images": np.zeros((1, 3, 32, 32), np.float32)}, deadline=5)
        assert str(caught.value) == f"input 'images' of 'objects' takes ['1..4', 3, {SIZE}, {SIZE}] (-1: any), not [1, 3, 32, 32]."


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
    detectors = [clients["objects"], clients["nms"]]
    copies_before = sum(c.input_copies for c in detectors)
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
        # (stopped: the counts are final) each shared input uploaded once, by whichever detector made it, and the
        # other sends it by name: nothing is copied into a detector's own region but the inputs of a worker that was
        # on an older frame than the newest
        assert sum(c.shared_uploads for c in detectors) == stream.inputs_made > 0
        assert sum(c.input_copies for c in detectors) - copies_before == stream.private_inputs
    finally:
        admin.load_model("nms_objects")
        admin.close()
        for client in clients.values():
            client.close()
    from edge_deploy.client.shm import leftover_regions

    assert leftover_regions(os.getpid()) == []  # the shared uploads' regions too


def test_bench_stack_measures_the_lanes_alone_and_beside_with_and_without_the_settings(stack):
    import tritonclient.grpc as grpcclient

    from edge_deploy.bench.config import BenchConfig
    from edge_deploy.bench.stack import run_stack, stack_lines

    proc, _, _ = stack
    config = BenchConfig(url=proc.url, seconds=0.5, warmup_seconds=0.2, max_frames=2)
    report = run_stack(config, "lanedet", ["objects"], cpu_frames=5)
    assert [run.settings for run in report.runs] == ["installed", "defaults"], report.notes
    for run in report.runs:
        assert run.lane_alone.frames > 0 and run.lane_beside.frames > 0 and run.p99_ratio > 0
        assert set(run.others_frames_per_s) == {"objects"} and run.others_frames_per_s["objects"] > 0
    assert report.cpu is not None and report.cpu.shared == ("objects",) and report.cpu.ratio > 0
    lines = stack_lines(report)
    assert all(len(line) <= 80 for line in lines) and any("beside / alone" in line for line in lines)
    # the models are served from their files again: the lane model keeps the priority install wrote
    admin = grpcclient.InferenceServerClient(proc.url)
    try:
        config_now = admin.get_model_config("lanedet").config
        assert config_now.optimization.priority == 1  # PRIORITY_MAX
        assert config_now.dynamic_batching.default_priority_level == 1
    finally:
        admin.close()


def test_the_defaults_run_takes_out_what_install_wrote():
    from edge_deploy.bench.stack import _defaults_of

    installed = {"name": "objects", "optimization": {"priority": "PRIORITY_MIN"},
                 "dynamic_batching": {"priority_levels": "3", "default_priority_level": "3"},
                 "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
                 "parameters": {"edge_deploy.ort_threads": {"string_value": "1"},
                                "edge_deploy.role": {"string_value": "model"}}}
    defaults = _defaults_of(installed)
    assert "optimization" not in defaults and defaults["dynamic_batching"] == {}
    assert defaults["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert set(defaults["parameters"]) == {"edge_deploy.role"}
    assert installed["instance_group"][0]["count"] == 2  # a copy: the config read is not changed


def test_infer_with_a_detector_writes_and_publishes_its_boxes(stack, tmp_path):
    """`infer --detector`: the boxes in the JSON (frame pixels), on the picture, and in the MCAP file as
    vision_msgs/Detection2DArray plus an ImageMarker overlay, decoded by mcap's own ROS 2 decoder."""
    pytest.importorskip("mcap_ros2")
    import json

    import cv2
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    proc, _, _ = stack
    image = tmp_path / "road.png"
    cv2.imwrite(str(image), frame_with_bright([3], FRAME_HW))
    video = tmp_path / "drive.mp4"
    from edge_deploy.media import write_video

    write_video(video, iter([frame_with_bright([3], FRAME_HW)] * 2), FRAME_HW[1], FRAME_HW[0], fps=10.0)
    out = tmp_path / "out"
    done = run_cli(tmp_path, "infer", str(image), "--url", proc.url, "--detector", "objects", "--json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "road.lanes.png").is_file()
    done = run_cli(tmp_path, "infer", str(video), "--url", proc.url, "--detector", "objects", "-o", str(out),
                   "--mcap", str(tmp_path / "stack.mcap"))
    assert done.returncode == 0, done.stderr
    boxes, classes = expected_boxes(3)
    record = json.loads((out / "road.lanes.json").read_text())
    found = sorted(record["detections"], key=lambda d: d["class_id"])
    assert [d["class_id"] for d in found] == classes.tolist()
    np.testing.assert_allclose([d["box"] for d in found], boxes, atol=1e-3)
    line = json.loads((out / "drive.lanes.jsonl").read_text().splitlines()[0])
    assert len(line["detections"]) == 2 and "lanes" in line
    with open(tmp_path / "stack.mcap", "rb") as f:
        decoded = [(c.topic, m) for _, c, _, m in make_reader(f, decoder_factories=[DecoderFactory()])
                   .iter_decoded_messages()]
    arrays = [m for topic, m in decoded if topic == "/edge_deploy/detections"]
    overlays = [m for topic, m in decoded if topic == "/edge_deploy/detections/image"]
    assert len(arrays) == len(overlays) == 2  # the video's two frames
    first = sorted(arrays[0].detections, key=lambda d: d.results[0].hypothesis.class_id)
    assert [d.results[0].hypothesis.class_id for d in first] == ["0", "1"]
    centre = ((boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2)
    np.testing.assert_allclose([d.bbox.center.position.x for d in first], centre[0], atol=1e-3)
    np.testing.assert_allclose([d.bbox.size_y for d in first], boxes[:, 3] - boxes[:, 1], atol=1e-3)
    assert len(overlays[0].points) == 2 * 4 * 2  # two boxes, four edges, two points each


def test_infer_refuses_a_detector_on_a_live_source_before_reading_anything(stack, tmp_path):
    proc, _, _ = stack
    done = run_cli(tmp_path, "infer", "/dev/video0", "--url", proc.url, "--detector", "objects",
                   "-o", str(tmp_path / "out"))
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert "PerceptionStream" in done.stderr and not (tmp_path / "out").exists()


def test_a_hung_server_then_a_killed_one_mid_stream(stack):
    """SIGSTOP: every model "unavailable" within max_age plus a frame, and stop() returns within its deadline plus
    50 ms (and a margin for a busy machine). SIGKILL and a restart: "unavailable", then "ok" again on the same
    clients (they reconnect). Last in the module: the server is restarted here."""
    import os
    import signal

    proc, _, _ = stack
    frame = frame_with_bright([0], FRAME_HW)
    clients = {"lanes": LaneDetClient(proc.url, "lanedet"), "objects": DetectorClient(proc.url, "objects")}
    max_age, fps, slack = 0.5, 10.0, 1.0
    try:
        stream = PerceptionStream(lambda: frame, clients, max_age=max_age, fps=fps).start()
        wait_for(lambda: set(stream.latest().states.values()) == {"ok"}, 30)
        os.kill(proc.proc.pid, signal.SIGSTOP)
        try:
            hung = time.monotonic()
            wait_for(lambda: set(stream.latest().states.values()) == {"unavailable"}, max_age + 1 / fps + slack)
            assert time.monotonic() - hung <= max_age + 1 / fps + slack
            began = time.monotonic()
            stream.stop()
            assert time.monotonic() - began <= max_age + 0.05 + 0.25  # its deadline + 50 ms; 0.25 s for the load
        finally:
            os.kill(proc.proc.pid, signal.SIGCONT)

        stream = PerceptionStream(lambda: frame, clients, max_age=max_age, fps=fps).start()
        wait_for(lambda: set(stream.latest().states.values()) == {"ok"}, 30)
        proc.proc.kill()
        killed = time.monotonic()
        wait_for(lambda: set(stream.latest().states.values()) == {"unavailable"}, max_age + 1 / fps + slack)
        assert time.monotonic() - killed <= max_age + 1 / fps + slack
        proc.proc.wait()
        proc.start().wait_ready(120)
        wait_for(lambda: set(stream.latest().states.values()) == {"ok"}, 60)
        stream.stop()
    finally:
        for client in clients.values():
            client.close()
