"""A recording's image topic among other topics (issue 55's second planted set, items 11 and 12 at other lines):
its frame rate comes from its own messages' times, not from whatever topic is logged next to it (a CameraInfo
logged just before each image); an image topic without a CameraInfo of its own, in a recording with two other
cameras' CameraInfo, has none (it never borrows another camera's intrinsics).

Recordings written by the `rosbags` writer with the helpers of tests/support/recordings.py (never by the code under
test)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rosbags")

from recordings import FRAME_ID, PERIOD_NS, camera_info, fill, image_message, stamp_of  # noqa: E402
from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from edge_deploy.geometry import Camera  # noqa: E402
from edge_deploy.geometry.camera import Mounting  # noqa: E402
from edge_deploy.media import open_recording  # noqa: E402

W, H = 96, 64


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 255, (H, W, 3), dtype=np.uint8) for _ in range(n)]


def _camera(fx: float) -> Camera:
    k = np.array([[fx, 0.0, W / 2], [0.0, fx, H / 2], [0.0, 0.0, 1.0]])
    return Camera(W, H, k, np.zeros(5), Mounting(1.4, 2.0), "plumb_bob")


def _header(store: Any, ns: int, frame_id: str) -> Any:
    time = fill(store, "builtin_interfaces/msg/Time", sec=ns // 10**9, nanosec=ns % 10**9)
    return fill(store, "std_msgs/msg/Header", stamp=time, frame_id=frame_id)


def test_the_frame_rate_is_the_image_topics_own_beside_a_camera_info_logged_with_each_frame(tmp_path: Path) -> None:
    """10 Hz images, each with its CameraInfo logged 1 ms before it (as a camera driver publishes them): the rate is
    10 Hz. Planted: `_rate` reading every connection's times (bag.py) gives 1000 Hz, out of range, so 30."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    path = tmp_path / "with_info"
    camera = _camera(120.0)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        info = writer.add_connection("/cam/camera_info", "sensor_msgs/msg/CameraInfo", typestore=store)
        image = writer.add_connection("/cam/image_raw", "sensor_msgs/msg/Image", typestore=store)
        for i, frame in enumerate(_frames(3)):
            at = stamp_of(0) + i * PERIOD_NS
            header = _header(store, at, FRAME_ID)
            writer.write(info, at - 1_000_000, bytes(store.serialize_cdr(camera_info(store, camera, header),
                                                                         "sensor_msgs/msg/CameraInfo")))
            msgtype, msg = image_message(store, frame, "bgr8", header)
            writer.write(image, at, bytes(store.serialize_cdr(msg, msgtype)))
    recording = open_recording(path)
    assert recording.topic == "/cam/image_raw" and recording.camera_info is not None
    assert recording.fps == pytest.approx(1e9 / PERIOD_NS)


def test_an_image_topic_without_its_own_camera_info_takes_none_of_the_others(tmp_path: Path) -> None:
    """/front and /side have images and CameraInfo, /rear only images: /rear's recording has no CameraInfo (two
    CameraInfo topics, neither /rear's: "the recording's only CameraInfo" cannot answer). Planted: the first
    CameraInfo topic taken whenever there is one (bag.py `_camera_info`), and /rear gets /front's intrinsics."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    path = tmp_path / "three"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        infos = {name: writer.add_connection(f"{name}/camera_info", "sensor_msgs/msg/CameraInfo", typestore=store)
                 for name in ("/front", "/side")}
        images = {name: writer.add_connection(f"{name}/image_raw/compressed", "sensor_msgs/msg/CompressedImage",
                                              typestore=store) for name in ("/front", "/side", "/rear")}
        for i, frame in enumerate(_frames(2)):
            for name, connection in infos.items():
                header = _header(store, stamp_of(i), f"{name[1:]}_frame")
                fx = 111.0 if name == "/front" else 222.0
                writer.write(connection, stamp_of(i), bytes(store.serialize_cdr(
                    camera_info(store, _camera(fx), header), "sensor_msgs/msg/CameraInfo")))
            for name, connection in images.items():
                msgtype, msg = image_message(store, frame, "jpeg", _header(store, stamp_of(i), f"{name[1:]}_frame"))
                writer.write(connection, stamp_of(i) + 1000, bytes(store.serialize_cdr(msg, msgtype)))
    for name, fx in (("/front", 111.0), ("/side", 222.0)):
        own = open_recording(path, f"{name}/image_raw/compressed").camera_info
        assert own is not None and own.topic == f"{name}/camera_info" and own.k[0] == fx, own
    rear = open_recording(path, "/rear/image_raw/compressed")
    assert rear.frame_id == "rear_frame" and rear.camera_info is None, rear.camera_info
