"""A recording's camera and rate, as rosbag2 records them (issue 55, items 11-13): with two cameras each compressed
image topic finds its own CameraInfo; the frame rate comes from the recording's own times (10 Hz is 10 Hz, not the
30 fps default); a /tf_static chain composes rotations (a child's offset is rotated by its parent).

Recordings written by the `rosbags` writers with the test helpers of tests/support/recordings.py (never by the code
under test)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rosbags")

from recordings import FRAME_ID, camera_info, fill, image_message, stamp_of, write_recording  # noqa: E402
from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402
from scipy.spatial.transform import Rotation  # noqa: E402

from edge_deploy.geometry import Camera  # noqa: E402
from edge_deploy.geometry.camera import Mounting  # noqa: E402
from edge_deploy.media import open_recording  # noqa: E402
from edge_deploy.media.bag_camera import recording_camera  # noqa: E402

W, H = 96, 64


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 255, (H, W, 3), dtype=np.uint8) for _ in range(n)]


def _camera(fx: float, mounting: Mounting = Mounting(1.4, 2.0)) -> Camera:
    k = np.array([[fx, 0.0, W / 2], [0.0, fx, H / 2], [0.0, 0.0, 1.0]])
    return Camera(W, H, k, np.zeros(5), mounting, "plumb_bob")


def _header(store: Any, ns: int, frame_id: str) -> Any:
    time = fill(store, "builtin_interfaces/msg/Time", sec=ns // 10**9, nanosec=ns % 10**9)
    return fill(store, "std_msgs/msg/Header", stamp=time, frame_id=frame_id)


def test_each_compressed_image_topic_finds_its_own_camera_info(tmp_path: Path) -> None:
    """Two cameras, each with <ns>/image_raw/compressed and <ns>/camera_info: neither takes the other's intrinsics
    (the recording has two CameraInfo topics, so "the only one" cannot answer)."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    cameras = {"/front": _camera(111.0), "/rear": _camera(222.0)}
    path = tmp_path / "two"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        for ns_name, camera in cameras.items():
            frame_id = f"{ns_name[1:]}_optical_frame"
            info = writer.add_connection(f"{ns_name}/camera_info", "sensor_msgs/msg/CameraInfo", typestore=store)
            image = writer.add_connection(f"{ns_name}/image_raw/compressed", "sensor_msgs/msg/CompressedImage",
                                          typestore=store)
            for i, frame in enumerate(_frames(2)):
                header = _header(store, stamp_of(i), frame_id)
                writer.write(info, stamp_of(i), bytes(store.serialize_cdr(
                    camera_info(store, camera, header), "sensor_msgs/msg/CameraInfo")))
                msgtype, msg = image_message(store, frame, "jpeg", header)
                writer.write(image, stamp_of(i) + 1000, bytes(store.serialize_cdr(msg, msgtype)))
    for ns_name, camera in cameras.items():
        recording = open_recording(path, f"{ns_name}/image_raw/compressed")
        assert recording.camera_info is not None, ns_name
        assert recording.camera_info.topic == f"{ns_name}/camera_info"
        assert recording.camera_info.k[0] == camera.camera_matrix[0, 0]


@pytest.mark.parametrize("hz", [10.0, 4.0])
def test_the_frame_rate_comes_from_the_recordings_times(tmp_path: Path, hz: float) -> None:
    """tests/support/recordings.py writes a frame every PERIOD_NS (10 Hz); a 4 Hz one is written here."""
    frames = _frames(3)
    if hz == 10.0:
        path = write_recording(tmp_path / "ten", frames)
    else:
        store = get_typestore(Stores.ROS2_HUMBLE)
        path = tmp_path / "four"
        period = int(1e9 / hz)
        with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            image = writer.add_connection("/cam/image_raw", "sensor_msgs/msg/Image", typestore=store)
            for i, frame in enumerate(frames):
                msgtype, msg = image_message(store, frame, "bgr8", _header(store, stamp_of(0) + i * period, FRAME_ID))
                writer.write(image, stamp_of(0) + i * period, bytes(store.serialize_cdr(msg, msgtype)))
    assert open_recording(path).fps == pytest.approx(hz)


def _tf_chain(store: Any, hops: list[tuple[str, str, tuple[float, float, float], Rotation]]) -> Any:
    def stamped(parent: str, child: str, xyz: tuple[float, float, float], rotation: Rotation) -> Any:
        q = rotation.as_quat()
        transform = fill(store, "geometry_msgs/msg/Transform",
                         translation=fill(store, "geometry_msgs/msg/Vector3", x=xyz[0], y=xyz[1], z=xyz[2]),
                         rotation=fill(store, "geometry_msgs/msg/Quaternion", x=q[0], y=q[1], z=q[2], w=q[3]))
        return fill(store, "geometry_msgs/msg/TransformStamped", header=_header(store, 10**9, parent),
                    child_frame_id=child, transform=transform)

    return fill(store, "tf2_msgs/msg/TFMessage", transforms=[stamped(*hop) for hop in hops])


def test_a_tf_static_chain_rotates_each_childs_offset_by_its_parent(tmp_path: Path) -> None:
    """base_link -> mast (raised 1 m, turned 30 deg left and pitched 25 deg) -> front_camera_link (0.8 m along
    the mast's x, 0.3 m up its z, turned back so that the camera looks as (yaw, pitch, roll) say) -> the optical frame. The
    camera sits at mast + R_mast @ offset; adding the offsets unrotated puts it elsewhere (and at another height)."""
    yaw, pitch, roll = 2.0, 3.0, -1.0  # the camera's own angles (its height is what the chain says)
    body = Rotation.from_euler("ZYX", [yaw, pitch, roll], degrees=True)
    mast_r = Rotation.from_euler("ZYX", [30.0, 25.0, 0.0], degrees=True)
    mast_t, link_t = (0.5, -0.2, 1.0), (0.8, 0.0, 0.3)
    optical = Rotation.from_matrix([[0, 0, 1], [-1, 0, 0], [0, -1, 0]])
    expected = np.asarray(mast_t) + mast_r.apply(link_t)
    assert abs(expected[2] - (mast_t[2] + link_t[2])) > 0.2 and abs(expected[1] - mast_t[1]) > 0.2  # it matters

    store = get_typestore(Stores.ROS2_HUMBLE)
    path = tmp_path / "chain"
    camera = _camera(120.0)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        tf = writer.add_connection("/tf_static", "tf2_msgs/msg/TFMessage", typestore=store)
        writer.write(tf, stamp_of(0) - 1, bytes(store.serialize_cdr(_tf_chain(store, [
            ("base_link", "mast", mast_t, mast_r),
            ("mast", "front_camera_link", link_t, mast_r.inv() * body),
            ("front_camera_link", FRAME_ID, (0.0, 0.0, 0.0), optical)]), "tf2_msgs/msg/TFMessage")))
        info = writer.add_connection("/front/camera_info", "sensor_msgs/msg/CameraInfo", typestore=store)
        image = writer.add_connection("/front/image_raw", "sensor_msgs/msg/Image", typestore=store)
        header = _header(store, stamp_of(0), FRAME_ID)
        writer.write(info, stamp_of(0), bytes(store.serialize_cdr(camera_info(store, camera, header),
                                                                  "sensor_msgs/msg/CameraInfo")))
        msgtype, msg = image_message(store, _frames(1)[0], "bgr8", header)
        writer.write(image, stamp_of(0) + 1000, bytes(store.serialize_cdr(msg, msgtype)))
    setup = recording_camera(open_recording(path))
    assert setup is not None and setup.frame_id == FRAME_ID
    got = setup.camera.mounting
    assert got.height_m == pytest.approx(expected[2], abs=1e-9)
    assert setup.offset_xy == pytest.approx((expected[0], expected[1]), abs=1e-9)
    assert (got.pitch_deg, got.roll_deg, got.yaw_deg) == pytest.approx((pitch, roll, yaw), abs=1e-9)
