"""`edge-deploy infer` on ROS recordings (written by the `rosbags` writers from `edge-deploy sample` frames) and its
ROS 2 output: the same lanes as on the frames as PNG; --mcap read back by two independent decoders (`mcap` +
`mcap-ros2-support`, and `rosbags`); bad input one line with nothing written. Against the real tritonserver."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

pytest.importorskip("rosbags")
pytest.importorskip("mcap_ros2")

from cli_process import run_cli  # noqa: E402
from conftest import free_port  # noqa: E402
from recordings import FRAME_ID, bayer_rggb, mono, stamp_of, write_recording  # noqa: E402

from edge_deploy.geometry import Camera  # noqa: E402

SUFFIX = {"mcap": "", "sqlite3": "", "bare-mcap": ".mcap", "ros1": ".bag"}
CHANNELS = {
    "/edge_deploy/image/compressed": "sensor_msgs/msg/CompressedImage",
    "/edge_deploy/camera_info": "sensor_msgs/msg/CameraInfo",
    "/tf_static": "tf2_msgs/msg/TFMessage",
    "/edge_deploy/lanes": "visualization_msgs/msg/ImageMarker",
    "/edge_deploy/markers": "visualization_msgs/msg/MarkerArray",
    "/edge_deploy/lane_markers": "edge_deploy_msgs/msg/LaneMarkers",
}
LANE_DX_PX_AT_640 = 1.0  # the FP16 lane check's limit: mean |dx| at 640 wide (docs/design.md)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli(args, timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, laneatt_data):
    from small_artifact import make_artifact
    from triton_helpers import serving

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = tmp_path_factory.mktemp("infer_recordings")
    install(InstallOptions(make_artifact(work / "artifact", laneatt_data / "anchors_2784x77.npy"), work / "repo", "tiny", runtime="python", pipeline=True))
    with serving(work / "repo", work) as proc:
        yield proc


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, list[np.ndarray], Camera]:
    out = tmp_path_factory.mktemp("sample")
    assert cli("sample", "-o", str(out), "-n", "3", "--width", "656", "--height", "240").returncode == 0
    frames = [cv2.imread(str(out / f"road-00{i}.png")) for i in range(3)]
    return out, frames, Camera.from_yaml(out / "road-000.calib.yaml")


def png_lanes(server: Any, frames: list[np.ndarray], where: Path, *extra: str) -> list[dict[str, Any]]:
    """`infer --json` on `frames` written as PNG files: each frame's record."""
    where.mkdir(parents=True)
    paths = [where / f"frame-{i}.png" for i in range(len(frames))]
    for path, frame in zip(paths, frames):
        cv2.imwrite(str(path), frame)
    result = cli("infer", *map(str, paths), "--url", server.url, "--model", "tiny", "--out", str(where / "out"),
                 "--json", "--no-png", *extra)
    assert result.returncode == 0, result.stderr
    return [json.loads((where / "out" / f"frame-{i}.lanes.json").read_text()) for i in range(len(frames))]


def bag_lines(server: Any, bag: Path, out: Path, *extra: str) -> list[dict[str, Any]]:
    result = cli("infer", str(bag), "--url", server.url, "--model", "tiny", "--out", str(out), *extra)
    assert result.returncode == 0, result.stderr
    stem = bag.stem if bag.is_file() else bag.name
    return [json.loads(line) for line in (out / f"{stem}.lanes.jsonl").read_text().splitlines()]


def as_png(frame: np.ndarray, encoding: str) -> np.ndarray:
    """The frame a lossless encoding stores, as a PNG would hold it."""
    if encoding == "mono8":
        return cv2.cvtColor(mono(frame), cv2.COLOR_GRAY2BGR)
    if encoding == "bayer_rggb8":
        return cv2.cvtColor(bayer_rggb(frame), cv2.COLOR_BayerBG2BGR)
    return frame


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.parametrize("kind,encoding", [("mcap", "bgr8"), ("sqlite3", "rgb8"), ("ros1", "mono8"),
                                           ("bare-mcap", "png"), ("sqlite3", "bayer_rggb8")])
def test_lossless_recordings_give_the_lanes_of_their_frames_as_png(tmp_path, tiny_server, sample, kind, encoding):
    _, frames, _ = sample
    bag = write_recording(tmp_path / f"drive{SUFFIX[kind]}", frames, kind=kind, encoding=encoding)
    lines = bag_lines(tiny_server, bag, tmp_path / "out")
    want = png_lanes(tiny_server, [as_png(f, encoding) for f in frames], tmp_path / "png")
    assert [line["frame"] for line in lines] == [0, 1, 2]
    assert [line["stamp_ns"] for line in lines] == [stamp_of(i) for i in range(3)]
    assert sum(len(r["lanes"]) for r in want) > 0
    assert [line["lanes"] for line in lines] == [r["lanes"] for r in want]  # identical


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.parametrize("kind", ["mcap", "ros1"])
def test_jpeg_recordings_give_the_lanes_within_the_fp16_tolerance(tmp_path, tiny_server, sample, kind):
    _, frames, _ = sample
    bag = write_recording(tmp_path / f"drive{SUFFIX[kind]}", frames, kind=kind, encoding="jpeg",
                          topic="/front/image_raw/compressed")
    lines = bag_lines(tiny_server, bag, tmp_path / "out", "--topic", "/front/image_raw/compressed")
    want = png_lanes(tiny_server, frames, tmp_path / "png")
    limit = LANE_DX_PX_AT_640 * frames[0].shape[1] / 640
    for line, record in zip(lines, want, strict=True):
        assert len(line["lanes"]) == len(record["lanes"])
        for got, lane in zip(line["lanes"], record["lanes"]):
            assert got["score"] == pytest.approx(lane["score"], abs=1e-2)
            dx = np.abs(np.asarray(got["points"])[:, 0] - np.asarray(lane["points"])[:, 0]).mean()
            assert dx <= limit


# --- the MCAP output -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def published(tmp_path_factory, tiny_server, sample) -> dict[str, Any]:
    """`infer BAG --mcap OUT.mcap` on a recording with CameraInfo and /tf_static (the sample's calibration), and
    `infer PNG --camera CALIB --json` on the same frames."""
    work = tmp_path_factory.mktemp("published")
    folder, frames, camera = sample
    bag = write_recording(work / "drive", frames, kind="mcap", camera=camera)
    out = work / "lanes.mcap"
    lines = bag_lines(tiny_server, bag, work / "out", "--mcap", str(out))
    want = png_lanes(tiny_server, frames, work / "png", "--camera", str(folder / "road-000.calib.yaml"))
    return {"mcap": out, "lines": lines, "png": want, "files": sorted(p.name for p in work.iterdir())}


@pytest.mark.slow
@pytest.mark.triton
def test_infer_with_the_recordings_camera_gives_the_markers_of_its_calibration(published):
    assert all(line["markers"] for line in published["lines"])
    for line, record in zip(published["lines"], published["png"], strict=True):
        assert line["lanes"] == record["lanes"]
        assert _same_markers(line["markers"], record["markers"])


def _same_markers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal up to float rounding in the camera's pose (quaternion from /tf_static, back to degrees)."""
    def flat(markers: dict[str, Any]) -> list[float]:
        ms = [markers["ego_left"], markers["ego_right"], *markers["next_left"], *markers["next_right"]]
        return [v for m in ms if m for v in (m["c0"], m["c1"], m["c2"], m["c3"], m["view_range"], m["quality"])]

    assert [m is None for m in (a["ego_left"], a["ego_right"])] == [m is None for m in (b["ego_left"], b["ego_right"])]
    assert (len(a["next_left"]), len(a["next_right"])) == (len(b["next_left"]), len(b["next_right"]))
    assert flat(a) == pytest.approx(flat(b), rel=1e-6, abs=1e-9)
    return True


@pytest.mark.triton
def test_the_mcap_is_written_atomically(published):
    assert "lanes.mcap" in published["files"] and not any(n.startswith(".lanes.mcap") for n in published["files"])


def _check_messages(channels: dict[str, tuple[str, str, str]], messages: list[tuple[str, int, Any]],
                    lines: list[dict[str, Any]]) -> None:
    """What both decoders must find: channels/schemas/encodings as specified, one message per frame per channel,
    log times = the input stamps, ImageMarker points = the JSON lanes, LaneMarkers = the JSON markers."""
    assert channels == {topic: (msgtype, "ros2msg", "cdr") for topic, msgtype in CHANNELS.items()}
    stamps = [stamp_of(i) for i in range(3)]
    for topic in CHANNELS:
        assert [t for name, t, _ in messages if name == topic] == stamps, topic
    for (_, _, marker), line in zip([m for m in messages if m[0] == "/edge_deploy/lanes"], lines, strict=True):
        assert marker.type == 2 and marker.header.frame_id == FRAME_ID  # LINE_LIST in the image's frame
        got = [(p.x, p.y) for p in marker.points]
        want = [tuple(pt) for lane in line["lanes"] for a, b in zip(lane["points"], lane["points"][1:])
                for pt in (a, b)]
        assert got == want and len(marker.outline_colors) == len(got)
    for (_, _, msg), line in zip([m for m in messages if m[0] == "/edge_deploy/lane_markers"], lines, strict=True):
        markers = line["markers"]

        def same(m: Any, d: dict[str, Any] | None) -> None:
            assert d is not None
            assert (m.id, m.c0, m.c1, m.c2, m.c3, m.view_range, m.quality) == (
                -1 if d["id"] is None else d["id"], d["c0"], d["c1"], d["c2"], d["c3"], d["view_range"], d["quality"])

        assert (msg.has_ego_left, msg.has_ego_right) == (markers["ego_left"] is not None,
                                                        markers["ego_right"] is not None)
        if msg.has_ego_left:
            same(msg.ego_left, markers["ego_left"])
        if msg.has_ego_right:
            same(msg.ego_right, markers["ego_right"])
        assert len(msg.next_left) == len(markers["next_left"]) and len(msg.next_right) == len(markers["next_right"])
        for m, d in zip([*msg.next_left, *msg.next_right], [*markers["next_left"], *markers["next_right"]]):
            same(m, d)
    for _, _, array in [m for m in messages if m[0] == "/edge_deploy/markers"]:
        assert array.markers[0].action == 3 and all(m.header.frame_id == "base_link" for m in array.markers)
        assert len(array.markers) - 1 == sum(1 for _ in array.markers[1:] if _.type == 4)
    tf = next(msg for name, _, msg in messages if name == "/tf_static").transforms[0]
    assert (tf.header.frame_id, tf.child_frame_id) == ("base_link", FRAME_ID)


@pytest.mark.triton
def test_the_mcap_reads_back_with_mcap_and_mcap_ros2(published):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    with open(published["mcap"], "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        channels = {c.topic: (summary.schemas[c.schema_id].name, summary.schemas[c.schema_id].encoding,
                              c.message_encoding) for c in summary.channels.values()}
        assert all(c.metadata["offered_qos_profiles"] for c in summary.channels.values())  # the ros2 profile's
        messages = [(channel.topic, message.log_time, decoded)
                    for _, channel, message, decoded in reader.iter_decoded_messages(log_time_order=True)]
    _check_messages(channels, messages, published["lines"])


@pytest.mark.triton
def test_the_mcap_reads_back_with_rosbags(published):
    from rosbags.highlevel import AnyReader

    with AnyReader([published["mcap"]]) as reader:
        channels = {c.topic: (c.msgtype, "ros2msg" if c.msgdef.format.name == "MSG" else c.msgdef.format.name,
                              c.ext.serialization_format) for c in reader.connections}
        messages = [(c.topic, t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]
        durability = {c.topic: [q.durability.name for q in c.ext.offered_qos_profiles] for c in reader.connections}
    _check_messages(channels, messages, published["lines"])
    assert durability == {topic: ["TRANSIENT_LOCAL" if topic == "/tf_static" else "VOLATILE"] for topic in CHANNELS}
    image = next(msg for topic, _, msg in messages if topic == "/edge_deploy/image/compressed")
    assert image.format == "jpeg" and cv2.imdecode(image.data, cv2.IMREAD_COLOR).shape == (240, 656, 3)


@pytest.mark.slow
@pytest.mark.triton
def test_a_video_is_published_frame_by_frame_without_a_camera(tmp_path, tiny_server):
    from mcap.reader import make_reader

    assert cli("sample", "-o", str(tmp_path), "--video", "-n", "4", "--width", "328", "--height", "120").returncode == 0
    out = tmp_path / "video.mcap"
    result = cli("infer", str(tmp_path / "drive.mp4"), "--url", tiny_server.url, "--model", "tiny", "--out",
                 str(tmp_path / "out"), "--mcap", str(out))
    assert result.returncode == 0, result.stderr
    with open(out, "rb") as f:
        summary = make_reader(f).get_summary()
    counts = {c.topic: summary.statistics.channel_message_counts[c.id] for c in summary.channels.values()}
    assert counts == {"/edge_deploy/image/compressed": 4, "/edge_deploy/camera_info": 4, "/edge_deploy/lanes": 4}


@pytest.mark.slow
@pytest.mark.triton
def test_infer_publishes_live_on_loopback_and_warns_beyond_it(tmp_path, tiny_server, sample):
    _, frames, _ = sample
    bag = write_recording(tmp_path / "drive", frames)
    port = free_port()
    result = cli("infer", str(bag), "--url", tiny_server.url, "--model", "tiny", "--out", str(tmp_path / "a"),
                 "--foxglove", str(port))
    assert result.returncode == 0, result.stderr
    assert f"Foxglove: ws://127.0.0.1:{port}" in result.stderr and "unauthenticated" not in result.stderr
    result = cli("infer", str(bag), "--url", tiny_server.url, "--model", "tiny", "--out", str(tmp_path / "b"),
                 "--foxglove", f"0.0.0.0:{port}", "--foxglove-insecure")  # without it: refused (test_foxglove_clients)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "unauthenticated" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: --foxglove-insecure: the Foxglove WebSocket server listens on 0.0.0.0:{port}")


# --- bad input: one line, nothing written ------------------------------------------------------------------------


@pytest.mark.slow
def test_bad_recordings_and_outputs_are_one_line_and_write_nothing(tmp_path, sample):
    _, frames, camera = sample
    url = f"127.0.0.1:{free_port()}"  # nothing listens: every refusal comes before a request
    out, mcap = tmp_path / "out", tmp_path / "lanes.mcap"

    def refused(bag: Path, *extra: str) -> str:
        line = one_line_error(cli("infer", str(bag), "--url", url, "--out", str(out), "--mcap", str(mcap), *extra))
        assert not out.exists() and not mcap.exists() and not list(tmp_path.glob(".lanes.mcap*"))
        return line

    two = write_recording(tmp_path / "two", frames, extra_topics=("/rear/image_raw",))
    assert "/front/image_raw (3 messages), /rear/image_raw (1 messages)" in refused(two)
    assert "has no topic /side/image_raw" in refused(two, "--topic", "/side/image_raw")
    assert "encoding 'yuv422' is not supported" in refused(write_recording(tmp_path / "yuv", frames,
                                                                           encoding="yuv422"))
    broken = write_recording(tmp_path / "broken.mcap", frames, kind="bare-mcap")
    broken.write_bytes(broken.read_bytes()[:700])
    assert "truncated, damaged" in refused(broken)
    assert "focal lengths fx=0" in refused(write_recording(tmp_path / "uncal", frames, camera=camera, fx=0.0))
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    with Writer(tmp_path / "empty", version=9) as writer:
        writer.add_connection("/front/image_raw", "sensor_msgs/msg/Image", typestore=get_typestore(Stores.ROS2_HUMBLE))
    assert "no messages on /front/image_raw" in refused(tmp_path / "empty")
    good = write_recording(tmp_path / "good", frames)
    assert "does not exist" in one_line_error(cli("infer", str(good), "--url", url, "--out", str(out), "--mcap",
                                                  str(tmp_path / "missing" / "lanes.mcap")))
    assert not out.exists() and not (tmp_path / "missing").exists()
    assert "no recording" in one_line_error(cli("infer", "--synthetic", "1", "--topic", "/x", "--url", url))
    assert "[HOST:]PORT" in one_line_error(cli("infer", str(good), "--foxglove", "localhost:http", "--url", url))
    assert "run image files" in one_line_error(cli("infer", "--synthetic", "1", "--mcap", str(mcap), "--url", url))
