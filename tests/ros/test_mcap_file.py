"""edge_deploy.ros: a frame's messages on the edge_deploy channels, the MCAP file written atomically and valid
after Ctrl-C (the run loop's own interrupt handling, driven by a detector that is interrupted)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mcap_ros2")

from ros_results import road_results  # noqa: E402
from mcap.reader import make_reader  # noqa: E402
from mcap_ros2.decoder import DecoderFactory  # noqa: E402

from edge_deploy.errors import ClientError  # noqa: E402
from edge_deploy.media.detect import detect_stream  # noqa: E402
from edge_deploy.ros import CHANNELS, Publisher  # noqa: E402
from edge_deploy.ros.messages import frame_messages  # noqa: E402


def read(path):
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        return summary, [(c.topic, m.log_time, d) for _, c, m, d in reader.iter_decoded_messages()]


def test_without_a_camera_only_the_image_camera_info_and_lanes_are_published():
    (result,) = road_results(1, camera=False)
    messages = frame_messages(result)
    assert [m.topic for m in messages] == ["/edge_deploy/image/compressed", "/edge_deploy/camera_info",
                                           "/edge_deploy/lanes"]
    assert all(m.msgtype == CHANNELS[m.topic] and m.log_time_ns == result.frame.stamp_ns for m in messages)


def test_markers_are_in_base_link_moved_by_the_cameras_offset(tmp_path):
    (result,) = road_results(1)
    publisher = Publisher.open(tmp_path / "one.mcap")
    publisher(result)
    publisher.close()
    _, messages = read(tmp_path / "one.mcap")
    array = next(msg for topic, _, msg in messages if topic == "/edge_deploy/markers")
    markers = list(result.found.markers)
    assert len(array.markers) == 1 + len(markers) and len(markers) >= 2
    for marker, drawn in zip(markers, array.markers[1:]):
        xs = np.array([p.x for p in drawn.points]) - 1.5  # the camera sits 1.5 m ahead of base_link
        assert xs[0] == pytest.approx(max(0.0, marker.longitude_start))
        assert [p.y for p in drawn.points] == pytest.approx(marker.y_at(xs))
    ego = {id(m) for m in (result.found.markers.ego_left, result.found.markers.ego_right) if m is not None}
    widths = [d.scale.x for m, d in zip(markers, array.markers[1:])]
    assert widths == [0.3 if id(m) in ego else 0.12 for m in markers]  # the ego lane highlighted
    tf = next(msg for topic, _, msg in messages if topic == "/tf_static").transforms[0].transform
    assert (tf.translation.x, tf.translation.z) == pytest.approx((1.5, result.setup.camera.mounting.height_m))


def test_ctrl_c_keeps_a_valid_file_with_the_frames_done(tmp_path):
    results = road_results(4)
    by_frame = {id(r.frame.image): r for r in results}
    calls = []

    def detect(frame):
        calls.append(frame)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C while the third frame is detected
        return by_frame[id(frame)].lanes

    path = tmp_path / "drive.mcap"
    publisher = Publisher.open(path)
    try:
        try:
            detect_stream(detect, (r.frame for r in results), "drive", "drive", tmp_path / "out", model="m",
                          fps=20.0, publish=publisher, setup=results[0].setup)
        except KeyboardInterrupt:
            pytest.fail("Ctrl-C escaped the run loop instead of ending the run")
        assert not path.exists() and list(tmp_path.glob(".drive.mcap.*.tmp"))  # not under its name before the end
    finally:
        publisher.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drive.mcap", "out"]
    summary, messages = read(path)  # a complete file: summary and footer
    assert set(summary.statistics.channel_message_counts.values()) == {2}
    assert sorted({t for _, t, _ in messages}) == [r.frame.stamp_ns for r in results[:2]]


def test_nothing_published_leaves_no_file(tmp_path):
    publisher = Publisher.open(tmp_path / "none.mcap")
    publisher.close()
    assert list(tmp_path.iterdir()) == []


def test_an_output_in_a_missing_directory_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ClientError, match="the directory .*missing does not exist"):
        Publisher.open(tmp_path / "missing" / "x.mcap")
    with pytest.raises(ClientError, match="is a directory"):
        Publisher.open(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_recordings_jpeg_is_published_as_it_was_recorded(tmp_path):
    import cv2
    from recordings import write_recording

    from edge_deploy.media import frames_of
    from edge_deploy.media.stamped import FrameResult

    results = road_results(2)
    bag = write_recording(tmp_path / "drive", [r.frame.image for r in results], encoding="jpeg")
    publisher = Publisher.open(tmp_path / "out.mcap")
    for frame in frames_of(bag):
        publisher(FrameResult(frame, []))
    publisher.close()
    _, messages = read(tmp_path / "out.mcap")
    images = [msg for topic, _, msg in messages if topic == "/edge_deploy/image/compressed"]
    assert [bytes(m.data) for m in images] == [cv2.imencode(".jpg", r.frame.image)[1].tobytes() for r in results]


def test_a_sink_failure_reaches_the_run():
    class Full:  # a sink whose disk is full: what cannot be made to happen here on purpose
        closed = None

        def write(self, message):
            raise OSError(28, "No space left on device")

        def close(self, keep):
            self.closed = keep

    sink = Full()
    publisher = Publisher([sink])
    publisher(road_results(1, camera=False)[0])
    with pytest.raises(OSError, match="No space left"):
        publisher.close()
    assert sink.closed is False  # nothing was published: not kept


def test_a_stuck_sink_costs_the_run_at_most_its_bound(monkeypatch):
    """Issue 54, class 1: neither handing a frame over nor close() waits past STUCK_AFTER for a worker that is stuck
    (plant: an unbounded join or put in ros/publisher.py, and this test hangs until its own 30 s release)."""
    import threading
    import time

    from edge_deploy.errors import EdgeDeployError
    from edge_deploy.ros import publisher as publishing
    from edge_deploy.ros.publisher import QUEUE_FRAMES

    monkeypatch.setattr(publishing, "STUCK_AFTER", 0.3)
    release = threading.Event()

    class Hung:  # a sink whose write never returns (a hung network disk): what cannot be made to happen here
        closed = None

        def write(self, message):
            release.wait(30)

        def close(self, keep):
            self.closed = keep

    frame = road_results(1, camera=False)[0]
    try:
        sink = Hung()
        publisher = Publisher([sink])
        for _ in range(QUEUE_FRAMES + 1):  # one in the worker's hands, the queue full
            publisher(frame)
        started = time.monotonic()
        with pytest.raises(EdgeDeployError, match=r"took no frame within 0\.3 s: a sink is stuck") as handed:
            publisher(frame)
        assert time.monotonic() - started < 0.3 + 0.5 and "\n" not in str(handed.value)

        sink = Hung()
        publisher = Publisher([sink])
        publisher(frame)
        started = time.monotonic()
        with pytest.raises(EdgeDeployError, match=r"did not finish the frames handed over within 0\.3 s") as closed:
            publisher.close()
        assert time.monotonic() - started < 0.3 + 0.5 and "\n" not in str(closed.value)
        assert sink.closed is False  # what a stuck worker wrote is not kept
    finally:
        release.set()
