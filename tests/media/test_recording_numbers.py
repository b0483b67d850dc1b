"""A recording's numbers (issue 54, class 4): a negative header stamp, a zero or NaN quaternion on /tf_static (on the
path base_link -> the camera), a CameraInfo with fx = 1e300. Each was an internal error (exit 70) or garbage
markers; each is now refused in one line naming the range (docs/recordings.md). The recordings are written by the
`rosbags` writer (never by the code under test)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rosbags")

from recordings import FRAME_ID, camera_info, fill, image_message, write_recording  # noqa: E402

from edge_deploy.errors import CalibrationError, FrameError  # noqa: E402
from edge_deploy.geometry import Camera  # noqa: E402
from edge_deploy.media import frames_of, open_recording  # noqa: E402
from edge_deploy.media.bag_camera import recording_camera  # noqa: E402
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene, scene_truth  # noqa: E402


@pytest.fixture(scope="module")
def drive() -> tuple[np.ndarray, Camera]:
    return scene(EVAL_SEED_BASE, 328, 120).frame, Camera.from_mapping(scene_truth(EVAL_SEED_BASE, 328, 120).camera)


def write(path: Path, frame: np.ndarray, camera: Camera, *, stamp_sec: int = 1_700_000_000,
          quaternion: tuple[float, float, float, float] = (-0.5, 0.5, -0.5, 0.5),
          translation: tuple[float, float, float] = (0.0, 0.0, 1.5)) -> Path:
    """One frame (header stamp `stamp_sec`), its CameraInfo, and /tf_static base_link -> the optical frame with
    `quaternion` (x, y, z, w; the default is a level camera looking ahead) and `translation`."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    stamp = fill(store, "builtin_interfaces/msg/Time", sec=stamp_sec, nanosec=0)
    header = fill(store, "std_msgs/msg/Header", stamp=stamp, frame_id=FRAME_ID)
    x, y, z, w = quaternion
    transform = fill(store, "geometry_msgs/msg/TransformStamped",
                     header=fill(store, "std_msgs/msg/Header", frame_id="base_link"), child_frame_id=FRAME_ID,
                     transform=fill(store, "geometry_msgs/msg/Transform",
                                    translation=fill(store, "geometry_msgs/msg/Vector3", x=translation[0],
                                                     y=translation[1], z=translation[2]),
                                    rotation=fill(store, "geometry_msgs/msg/Quaternion", x=x, y=y, z=z, w=w)))
    messages: list[tuple[str, str, Any]] = [
        ("/tf_static", "tf2_msgs/msg/TFMessage", fill(store, "tf2_msgs/msg/TFMessage", transforms=[transform])),
        ("/front/camera_info", "sensor_msgs/msg/CameraInfo", camera_info(store, camera, header)),
        ("/front/image_raw", *image_message(store, frame, "bgr8", header)),
    ]
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        for i, (topic, msgtype, msg) in enumerate(messages):
            connection = writer.add_connection(topic, msgtype, typestore=store)
            writer.write(connection, 1_000 + i, bytes(store.serialize_cdr(msg, msgtype)))
    return path


def test_a_level_camera_reads_as_written(tmp_path, drive) -> None:
    frame, camera = drive
    setup = recording_camera(open_recording(write(tmp_path / "ok", frame, camera)))
    assert setup is not None and abs(setup.camera.mounting.pitch_deg) < 1e-6
    assert abs(setup.camera.mounting.height_m - 1.5) < 1e-9


@pytest.mark.parametrize("quaternion, length", [((0.0, 0.0, 0.0, 0.0), "not 0.0"), ((math.nan, 0.0, 0.0, 1.0), "not nan"),
                                                ((0.0, 0.0, 0.0, 2.0), "not 2.0")])
def test_a_quaternion_that_is_no_rotation_is_refused_in_one_line(tmp_path, drive, quaternion, length) -> None:
    frame, camera = drive
    recording = open_recording(write(tmp_path / "bad", frame, camera, quaternion=quaternion))
    with pytest.raises(CalibrationError) as refused:  # scipy's ValueError (exit 70) for a zero quaternion before
        recording_camera(recording)
    message = str(refused.value)
    assert "\n" not in message and f"/tf_static base_link -> {FRAME_ID}: the rotation" in message, message
    assert "must be a unit quaternion's length in [0.9, 1.1], " + length in message, message


def test_a_translation_that_is_not_finite_metres_is_refused(tmp_path, drive) -> None:
    frame, camera = drive
    recording = open_recording(write(tmp_path / "far", frame, camera, translation=(0.0, math.inf, 1.5)))
    with pytest.raises(CalibrationError, match=r"the translation .* must be a number of metres in \[-1000, 1000\], "
                                               r"not inf"):
        recording_camera(recording)


def test_a_negative_header_stamp_is_refused_in_one_line(tmp_path, drive) -> None:
    frame, camera = drive
    path = write(tmp_path / "before1970", frame, camera, stamp_sec=-5)
    with pytest.raises(FrameError) as refused:  # --mcap's writer failed on it with an internal error before
        list(frames_of(path))
    message = str(refused.value)
    assert "\n" not in message and "frame 0's header stamp must be a whole number of nanoseconds since 1970 in " \
                                   "[0, 9223372036854775807], not -5000000000." in message, message


def test_a_camera_info_with_fx_1e300_is_refused_naming_the_range(tmp_path, drive) -> None:
    frame, camera = drive
    path = write_recording(tmp_path / "tele", [frame], camera=camera, fx=1e300)
    with pytest.raises(CalibrationError) as refused:  # taken before: every marker at the camera
        recording_camera(open_recording(path))
    message = str(refused.value)
    assert "\n" not in message and "camera_matrix fx must be a focal length in pixels in [16.4, 16400] (for a " \
                                   "frame 328 pixels wide), not 1e+300" in message, message
