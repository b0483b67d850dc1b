"""Recordings as rosbag2 and other ROS 2 tools write them (issue 54 class 7, issue 55 behaviour 10): Jazzy's
service-event channels beside the camera, an MCAP file with an empty profile, a recording without an image topic
(the refusal lists what it has), and a CompressedImage whose format says jpeg but which holds a PNG (republished
as what it is: encoded again as a JPEG, as the republished message says).

Recordings are written by rosbags' and mcap's own writers, never by the code under test.
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

pytest.importorskip("rosbags")
pytest.importorskip("mcap")

from recordings import FRAME_ID, fill, image_message  # noqa: E402
from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from edge_deploy.errors import FrameError  # noqa: E402
from edge_deploy.media import open_recording, read_frames  # noqa: E402

STORE = get_typestore(Stores.ROS2_HUMBLE)
# What rosbag2 (Jazzy) writes as the definition of a service-event channel: the .srv text, which no .msg parser
# reads (ros2/rosbag2#2365).
SERVICE_EVENT_SRV = "=" * 80 + "\nSRV: example_interfaces/srv/AddTwoInts\nint64 a\nint64 b\n---\nint64 sum\n"
FRAMES = [np.full((24, 32, 3), 40 * i + 20, np.uint8) for i in range(3)]


def header(i: int) -> object:
    stamp = fill(STORE, "builtin_interfaces/msg/Time", sec=1_700_000_000, nanosec=i * 100_000_000)
    return fill(STORE, "std_msgs/msg/Header", stamp=stamp, frame_id=FRAME_ID)


def write_bag(path: Path, *, storage: StoragePlugin = StoragePlugin.MCAP, services: bool = True,
              images: bool = True, compressed: str | None = None) -> Path:
    """A rosbag2 directory: /front/image_raw (bgr8, or a CompressedImage labelled "jpeg" holding `compressed`:
    "png" or "jpeg" bytes), a /front/camera_info channel, and (`services`) a service-event channel as Jazzy
    records it, a message on it between the frames."""
    with Writer(path, version=9, storage_plugin=storage) as writer:
        svc = (writer.add_connection("/add_two_ints/_service_event", "example_interfaces/srv/AddTwoInts_Event",
                                     msgdef=SERVICE_EVENT_SRV, rihs01="RIHS01_" + "0" * 64) if services else None)
        info = writer.add_connection("/front/camera_info", "sensor_msgs/msg/CameraInfo", typestore=STORE)
        image = None
        for i, frame in enumerate(FRAMES):
            ns = 1_700_000_000_000_000_000 + i * 100_000_000
            writer.write(info, ns, bytes(STORE.serialize_cdr(fill(STORE, "sensor_msgs/msg/CameraInfo",
                                                                  header=header(i)), "sensor_msgs/msg/CameraInfo")))
            if images:
                if compressed is None:
                    msgtype, msg = image_message(STORE, frame, "bgr8", header(i))
                else:
                    data = cv2.imencode(".png" if compressed == "png" else ".jpg", frame)[1].ravel()
                    msgtype = "sensor_msgs/msg/CompressedImage"
                    msg = fill(STORE, msgtype, header=header(i), format="jpeg", data=data)
                image = image or writer.add_connection("/front/image_raw", msgtype, typestore=STORE)
                writer.write(image, ns + 1000, bytes(STORE.serialize_cdr(msg, msgtype)))
            if svc is not None:
                writer.write(svc, ns + 2000, b"\x00\x01\x00\x00" + bytes(64))  # not read by anyone
    return path


@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3], ids=["mcap", "sqlite3"])
@pytest.mark.parametrize("topic", [None, "/front/image_raw"], ids=["no-topic", "topic"])
def test_service_event_channels_do_not_refuse_the_recording(tmp_path, storage, topic):
    path = write_bag(tmp_path / "jazzy", storage=storage)
    recording = open_recording(path, topic)
    assert recording.topic == "/front/image_raw" and recording.count == 3
    read = list(read_frames(recording))
    assert [f.image.mean() for f in read] == pytest.approx([f.mean() for f in FRAMES])


def test_the_bare_mcap_file_of_a_jazzy_bag_is_read_too(tmp_path):
    path = write_bag(tmp_path / "jazzy")
    (mcap,) = path.glob("*.mcap")
    assert len(list(read_frames(open_recording(mcap)))) == 3


def _mcap_with_profile(path: Path, profile: str) -> Path:
    from mcap.writer import Writer as McapWriter

    text, _ = STORE.generate_msgdef("sensor_msgs/msg/Image", ros_version=2)
    with path.open("wb") as fh:
        writer = McapWriter(fh)
        writer.start(profile=profile, library="another tool")
        schema = writer.register_schema("sensor_msgs/msg/Image", "ros2msg", text.encode())
        channel = writer.register_channel("/front/image_raw", "cdr", schema)
        for i, frame in enumerate(FRAMES):
            msgtype, msg = image_message(STORE, frame, "bgr8", header(i))
            writer.add_message(channel, 1000 + i, bytes(STORE.serialize_cdr(msg, msgtype)), 1000 + i)
        writer.finish()
    return path


def test_an_mcap_file_with_an_empty_profile_is_read(tmp_path):
    path = _mcap_with_profile(tmp_path / "noprofile.mcap", "")
    read = list(read_frames(open_recording(path)))
    assert [f.image.mean() for f in read] == pytest.approx([f.mean() for f in FRAMES])


def test_an_mcap_file_of_another_profile_is_named(tmp_path):
    path = _mcap_with_profile(tmp_path / "ros1.mcap", "ros1")
    with pytest.raises(FrameError) as exc:
        open_recording(path)
    assert str(exc.value) == (f"{path}: its MCAP profile is 'ros1', not ros2: it is not a ROS 2 recording; "
                              "edge-deploy reads ROS 2 and ROS 1 recordings")


def test_no_image_topic_lists_the_topics_the_recording_has(tmp_path):
    path = write_bag(tmp_path / "noimages", images=False)
    with pytest.raises(FrameError) as exc:
        open_recording(path)
    line = str(exc.value)
    assert "\n" not in line and f"{path} has no image topic" in line
    assert ("its topics: /add_two_ints/_service_event (example_interfaces/srv/AddTwoInts_Event), /front/camera_info "
            "(sensor_msgs/msg/CameraInfo)") in line


@pytest.mark.parametrize("held", ["png", "jpeg"])
def test_a_compressed_image_is_republished_as_what_it_holds(tmp_path, held):
    """Format "jpeg" on PNG bytes: the frame decodes, is not passed on as a JPEG, and the republished
    CompressedImage says jpeg and holds a JPEG (encoded again). Real JPEG bytes are passed on as they are."""
    from edge_deploy.media.stamped import FrameResult
    from edge_deploy.ros.messages import IMAGE, frame_messages

    path = write_bag(tmp_path / "mislabelled", compressed=held)
    frames = list(read_frames(open_recording(path)))
    assert len(frames) == 3
    for frame, original in zip(frames, FRAMES):
        assert abs(float(frame.image.mean()) - float(original.mean())) < 2
        (image,) = [m for m in frame_messages(FrameResult(frame, [])) if m.topic == IMAGE]
        msg = STORE.deserialize_cdr(image.data, "sensor_msgs/msg/CompressedImage")
        data = bytes(msg.data)
        assert msg.format == "jpeg" and data[:3] == b"\xff\xd8\xff", held  # what it says is what it holds
        assert (frame.jpeg is None) == (held == "png")
        if held == "jpeg":
            assert data == frame.jpeg
