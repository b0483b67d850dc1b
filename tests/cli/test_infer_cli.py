"""`edge-deploy infer` and `edge-deploy sample`, run as the real command (`python3 -m edge_deploy`)."""
from __future__ import annotations

import asyncio
import json
import subprocess

import cv2
import numpy as np
import pytest
from cli_process import run_cli
from conftest import free_port

from edge_deploy.client.sync_client import LaneDetClient


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli(args, timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- no server ----------------------------------------------------------------------------------


def test_sample_writes_road_frames(tmp_path):
    result = cli("sample", "--out", str(tmp_path / "s"), "-n", "2", "--width", "800", "--height", "300")
    assert result.returncode == 0, result.stderr
    files = sorted((tmp_path / "s").glob("*.png"))
    assert [f.name for f in files] == ["road-000.png", "road-001.png"]
    images = [cv2.imread(str(f)) for f in files]
    assert all(img.shape == (300, 800, 3) for img in images)
    assert not np.array_equal(images[0], images[1])


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    assert "no images" in one_line_error(cli("infer", "--out", str(out)))
    assert "does not exist" in one_line_error(cli("infer", str(tmp_path / "missing.png"), "--out", str(out)))
    (tmp_path / "notes.png").write_text("not an image")
    assert "cannot decode" in one_line_error(cli("infer", str(tmp_path / "notes.png"), "--out", str(out)))
    assert not out.exists()


def test_unreachable_server_is_one_line(tmp_path):
    cli("sample", "--out", str(tmp_path), "-n", "1")
    result = cli("infer", str(tmp_path / "road-000.png"), "--url", f"127.0.0.1:{free_port()}",
                 "--out", str(tmp_path / "out"), "--timeout", "2")
    assert "refused the connection" in one_line_error(result)
    assert not (tmp_path / "out").exists()


# --- against tritonserver -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, laneatt_data):
    from small_artifact import make_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    work = tmp_path_factory.mktemp("infer_cli")
    artifact = make_artifact(work / "artifact", laneatt_data / "anchors_2784x77.npy")
    install(InstallOptions(artifact, work / "repo", "tiny", runtime="python", pipeline=True))
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=work / "repo", grpc_port=free_port()), work / "triton.log")
    proc.start()
    try:
        proc.wait_ready(120)
        yield proc
    finally:
        proc.stop(timeout=15)


@pytest.mark.triton
@pytest.mark.parametrize("model", ["tiny", "tiny_pipeline"])
def test_infer_writes_png_and_json_matching_detect(tmp_path, tiny_server, model):
    images = tmp_path / "images"
    assert cli("sample", "--out", str(images), "-n", "2").returncode == 0
    # a second, smaller image with the same stem in another directory: names must not collide
    (tmp_path / "small").mkdir()
    small = cv2.resize(cv2.imread(str(images / "road-001.png")), (820, 295))
    cv2.imwrite(str(tmp_path / "small" / "road-001.png"), small)
    paths = [images / "road-000.png", images / "road-001.png", tmp_path / "small" / "road-001.png"]
    out = tmp_path / "out"
    result = cli("infer", *map(str, paths), "--url", tiny_server.url, "--model", model, "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    stems = ["road-000", "road-001", "road-001-1"]
    with LaneDetClient(tiny_server.url, model) as client:
        expected = [client.detect(cv2.imread(str(p))) for p in paths]
    assert sum(len(lanes) for lanes in expected) > 0
    for path, stem, want in zip(paths, stems, expected):
        drawn = cv2.imread(str(out / f"{stem}.lanes.png"))
        original = cv2.imread(str(path))
        assert drawn is not None and drawn.shape == original.shape
        assert not np.array_equal(drawn, original) or not want  # lanes were drawn on it
        record = json.loads((out / f"{stem}.lanes.json").read_text())
        assert record["image"] == str(path) and (record["height"], record["width"]) == original.shape[:2]
        assert len(record["lanes"]) == len(want)
        for got, lane in zip(record["lanes"], want):
            assert np.array_equal(np.asarray(got["points"], np.float32), lane.points)
            assert got["score"] == pytest.approx(lane.score, abs=1e-6)


@pytest.mark.triton
def test_infer_synthetic_json_only_with_overrides(tmp_path, tiny_server):
    out = tmp_path / "out"
    result = cli("infer", "--synthetic", "2", "--url", tiny_server.url, "--model", "tiny", "--out", str(out),
                 "--json", "--no-png", "--conf", "0.2", "--top-k", "6", "--transport", "grpc")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "road-000.lanes.json", "road-000.png", "road-001.lanes.json", "road-001.png"]
    with LaneDetClient(tiny_server.url, "tiny") as client:
        for i in range(2):
            want = client.detect(cv2.imread(str(out / f"road-{i:03d}.png")), conf_threshold=0.2, top_k=6)
            got = json.loads((out / f"road-{i:03d}.lanes.json").read_text())["lanes"]
            assert len(got) == len(want) and all(lane["score"] > 0.2 for lane in got)


# --- videos and cameras ---------------------------------------------------------------------------


def read_video(path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def test_sample_video_writes_one_drive(tmp_path):
    result = cli("sample", "--video", "--out", str(tmp_path), "-n", "12", "--width", "640", "--height", "360")
    assert result.returncode == 0, result.stderr
    frames = read_video(tmp_path / "drive.mp4")
    assert len(frames) == 12 and frames[0].shape == (360, 640, 3)
    assert cv2.VideoCapture(str(tmp_path / "drive.mp4")).get(cv2.CAP_PROP_FPS) == 30.0
    # one road seen moving: consecutive frames differ, but far less than two different roads do
    step = np.abs(frames[1].astype(int) - frames[0]).mean()
    cli("sample", "--out", str(tmp_path / "still"), "-n", "2", "--width", "640", "--height", "360")
    roads = [cv2.imread(str(tmp_path / "still" / f"road-00{i}.png")).astype(int) for i in range(2)]
    assert 0 < step < np.abs(roads[1] - roads[0]).mean() / 2
    assert "even width and height" in one_line_error(cli("sample", "--video", "--out", str(tmp_path / "odd"),
                                                         "--width", "641"))


def test_bad_video_sources_are_one_line(tmp_path):
    out = tmp_path / "out"
    assert "does not exist" in one_line_error(cli("infer", str(tmp_path / "missing.mp4"), "--out", str(out)))
    (tmp_path / "notes.mp4").write_text("not a video")
    assert "cannot open video" in one_line_error(cli("infer", str(tmp_path / "notes.mp4"), "--out", str(out)))
    assert "cannot open camera /dev/video99" in one_line_error(cli("infer", "/dev/video99", "--out", str(out)))
    gst = "videotestsrc num-buffers=3 ! videoconvert ! appsink"
    assert "GStreamer" in one_line_error(cli("infer", gst, "--out", str(out)))
    assert not out.exists()


@pytest.mark.triton
def test_infer_video_writes_an_annotated_video_and_a_json_line_per_frame(tmp_path, tiny_server):
    made = cli("sample", "--video", "--out", str(tmp_path), "-n", "8", "--width", "820", "--height", "296")
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    result = cli("infer", str(tmp_path / "drive.mp4"), "--url", tiny_server.url, "--model", "tiny",
                 "--out", str(out), "--max-frames", "6")
    assert result.returncode == 0, result.stderr
    assert "6 frames at" in result.stdout and "frames/s" in result.stdout
    lines = [json.loads(line) for line in (out / "drive.lanes.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(6))
    annotated = read_video(out / "drive.lanes.mp4")
    assert len(annotated) == 6 and annotated[0].shape == (296, 820, 3)
    with LaneDetClient(tiny_server.url, "tiny") as client:
        expected = [client.detect(frame) for frame in read_video(tmp_path / "drive.mp4")[:6]]
    assert sum(len(lanes) for lanes in expected) > 0
    for line, want in zip(lines, expected):
        assert len(line["lanes"]) == len(want)
        for got, lane in zip(line["lanes"], want):
            np.testing.assert_allclose(np.asarray(got["points"], np.float32), lane.points, atol=1e-3)
    assert sorted(p.name for p in out.iterdir()) == ["drive.lanes.jsonl", "drive.lanes.mp4"]


@pytest.mark.triton
def test_infer_realtime_plays_a_video_at_its_rate_through_a_lane_stream(tmp_path, tiny_server):
    """Issue 42: --realtime reads the file at its 30 frames/s and detects only the newest frame; the JSON lines
    carry each detected frame's number, state, latency and the frames dropped before it; the summary line counts
    read / processed / dropped and the latency percentiles."""
    made = cli("sample", "--video", "--out", str(tmp_path), "-n", "20", "--width", "820", "--height", "296")
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    result = cli("infer", str(tmp_path / "drive.mp4"), "--url", tiny_server.url, "--model", "tiny",
                 "--out", str(out), "--realtime", "--max-age", "1.0", "--mcap", str(tmp_path / "drive.mcap"))
    assert result.returncode == 0, result.stderr
    summary = next(line for line in result.stdout.splitlines() if "frames read" in line)
    read, processed, dropped = (int(summary.split(word)[1].split(",")[0]) for word in
                                ("frames read ", "processed ", "dropped "))
    lines = [json.loads(line) for line in (out / "drive.lanes.jsonl").read_text().splitlines()]
    assert read == 20 and processed == len(lines) and read >= processed + dropped
    assert [line["frame"] for line in lines] == sorted({line["frame"] for line in lines})
    assert sum(line["dropped"] for line in lines) <= dropped
    assert all(line["state"] == "ok" and line["latency_s"] > 0 for line in lines)
    assert "capture -> lanes p50" in summary
    assert len(read_video(out / "drive.lanes.mp4")) == len(lines)
    # the detected frames are published too (issue 43's --mcap with issue 42's --realtime), stamped by capture
    pytest.importorskip("mcap_ros2", reason="the ros extra (mcap-ros2-support) reads the MCAP back")
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    with open(tmp_path / "drive.mcap", "rb") as f:
        published = [(c.topic, m.log_time, d) for _, c, m, d in
                     make_reader(f, decoder_factories=[DecoderFactory()]).iter_decoded_messages(log_time_order=True)]
    overlays = [(t, d) for topic, t, d in published if topic == "/edge_deploy/lanes"]
    assert len(overlays) == len(lines) and [t for t, _ in overlays] == sorted(t for t, _ in overlays)
    assert all(d.type == 2 for _, d in overlays)  # ImageMarker.LINE_LIST


# --- lane markers (--camera) ------------------------------------------------------------------------


def check_markers_contract(markers: dict, tracked: bool) -> int:
    """The `markers` object of issue 35; returns how many markers it holds."""
    assert set(markers) == {"ego_left", "ego_right", "next_left", "next_right"}
    found = [m for m in (markers["ego_left"], markers["ego_right"]) if m is not None]
    found += markers["next_left"] + markers["next_right"]
    for m in found:
        assert {"c0", "c1", "c2", "c3", "view_range", "quality", "id"} <= set(m)
        assert all(isinstance(m[k], float) for k in ("c0", "c1", "c2", "c3", "view_range", "quality"))
        assert (m["id"] is not None) == tracked
    return len(found)


@pytest.mark.triton
def test_infer_camera_adds_markers_and_the_birdseye_panel(tmp_path, tiny_server):
    assert cli("sample", "--out", str(tmp_path), "-n", "1", "--width", "820", "--height", "296").returncode == 0
    out = tmp_path / "out"
    result = cli("infer", str(tmp_path / "road-000.png"), "--camera", str(tmp_path / "road-000.calib.yaml"),
                 "--url", tiny_server.url, "--model", "tiny", "--out", str(out), "--json", "--conf", "0.05",
                 "--speed", "20")
    assert result.returncode == 0, result.stderr
    record = json.loads((out / "road-000.lanes.json").read_text())
    assert record["lanes"] and check_markers_contract(record["markers"], tracked=False) > 0
    assert {"lateral_offset_m", "lane_width_m", "heading_deg", "curvature_1pm", "time_to_left_s",
            "time_to_right_s"} <= set(record["figures"]) and record["figures"]["speed_mps"] == 20.0
    drawn = cv2.imread(str(out / "road-000.lanes.png"))
    assert drawn.shape[0] == 296 and drawn.shape[1] > 820  # the panel beside the frame
    # the client gives the same markers (detect_markers), the async client too
    from edge_deploy.client.async_client import AsyncLaneDetClient
    from edge_deploy.errors import CalibrationError, ClientError
    from edge_deploy.geometry import Camera

    camera = Camera.from_yaml(tmp_path / "road-000.calib.yaml")
    frame = cv2.imread(str(tmp_path / "road-000.png"))
    with LaneDetClient(tiny_server.url, "tiny", camera=camera, conf_threshold=0.05) as client:
        lanes, found = client.detect_markers(frame)
        with pytest.raises(CalibrationError, match="frame is 410x148"):
            client.detect_markers(cv2.resize(frame, (410, 148)))
    assert len(lanes) == len(record["lanes"]) and found.to_dict()["markers"] == record["markers"]
    # the verdict (issue 45): the same in the JSON and the API; one image is no stream, so no jump is judged
    assert set(record["plausibility"]) == {"ok", "reasons", "checked"}
    assert found.to_dict()["plausibility"] == record["plausibility"] and found.plausibility.ok == (
        not record["plausibility"]["reasons"]) and "offset_jump" not in record["plausibility"]["checked"]

    async def detect_async():
        async with AsyncLaneDetClient(tiny_server.url, "tiny", camera=camera, conf_threshold=0.05) as client:
            return await client.detect_markers(frame)

    assert asyncio.run(detect_async())[1].to_dict()["markers"] == record["markers"]
    with pytest.raises(ClientError, match="need camera="):
        LaneDetClient(tiny_server.url, "tiny", track=True, connect=False)

    made = cli("sample", "--video", "--out", str(tmp_path), "-n", "5", "--width", "640", "--height", "360")
    assert made.returncode == 0, made.stderr
    result = cli("infer", str(tmp_path / "drive.mp4"), "--camera", str(tmp_path / "drive.calib.yaml"), "--track",
                 "--url", tiny_server.url, "--model", "tiny", "--out", str(out), "--conf", "0.05")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in (out / "drive.lanes.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and sum(check_markers_contract(line["markers"], tracked=True) for line in lines) > 0
    assert all(set(line["plausibility"]) == {"ok", "reasons", "checked"} for line in lines)
    assert "offset_jump" not in lines[0]["plausibility"]["checked"]  # the drive's first frame: nothing before it
    assert read_video(out / "drive.lanes.mp4")[0].shape[1] > 640
    # tracking with every frame in flight at once: the same markers as one frame after another
    drive_frames = read_video(tmp_path / "drive.mp4")
    drive_camera = Camera.from_yaml(tmp_path / "drive.calib.yaml")

    async def tracked_at_once():
        async with AsyncLaneDetClient(tiny_server.url, "tiny", camera=drive_camera, track=True,
                                      conf_threshold=0.05) as client:
            return await asyncio.gather(*(client.detect_markers(f) for f in drive_frames))

    with LaneDetClient(tiny_server.url, "tiny", camera=drive_camera, track=True, conf_threshold=0.05) as client:
        one_by_one = [client.detect_markers(f)[1].to_dict() for f in drive_frames]
    assert [found.to_dict() for _, found in asyncio.run(tracked_at_once())] == one_by_one
    markers = [frame["markers"] for frame in one_by_one]
    ids = [m["id"] for f in markers for m in (f["ego_left"], f["ego_right"], *f["next_left"], *f["next_right"]) if m]
    assert ids and None not in ids
