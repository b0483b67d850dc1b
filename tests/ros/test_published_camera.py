"""What a run publishes about its camera (issue 55's second planted set, item 14 at another line): with a camera
known, the CameraInfo is the camera's height by width (a non-square camera, so a swap shows), with its K, and every
message's header keeps the frame's stamp to the nanosecond.

The messages are built by ros/messages.py and read back with the rosbags typestore (no recording needed)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rosbags")

from edge_deploy.geometry import Camera  # noqa: E402
from edge_deploy.geometry.camera import Mounting  # noqa: E402
from edge_deploy.media.stamped import CameraSetup, FrameResult, StampedFrame  # noqa: E402
from edge_deploy.ros.messages import CAMERA_INFO, IMAGE, LANES, frame_messages  # noqa: E402
from edge_deploy.ros.types import typestore  # noqa: E402

W, H = 328, 120  # not square


def _messages(stamp_ns: int) -> dict[str, object]:
    k = np.array([[150.0, 0.0, W / 2], [0.0, 151.0, H / 2], [0.0, 0.0, 1.0]])
    camera = Camera(W, H, k, np.zeros(5), Mounting(1.4, 2.0), "plumb_bob")
    frame = np.zeros((H, W, 3), np.uint8)
    result = FrameResult(StampedFrame(frame, stamp_ns, "front_optical_frame", 0), [],
                         setup=CameraSetup(camera, "front_optical_frame"))
    store = typestore()
    return {m.topic: store.deserialize_cdr(m.data, m.msgtype) for m in frame_messages(result)}


def test_camera_info_with_a_camera_is_its_height_by_width() -> None:
    """Planted: height and width swapped in the camera's branch of ros/messages.py `_camera_info`."""
    info = _messages(1_000_000_000)[CAMERA_INFO]
    assert (info.height, info.width) == (H, W)
    assert list(info.k) == [150.0, 0.0, W / 2, 0.0, 151.0, H / 2, 0.0, 0.0, 1.0]


def test_every_header_keeps_the_frames_stamp_to_the_nanosecond() -> None:
    """Planted: the header's nanoseconds dropped (ros/messages.py `_header`): a 30 frames/s stream's frames within
    one second would all carry the same stamp."""
    stamp_ns = 1_700_000_000_123_456_789
    for topic in (IMAGE, CAMERA_INFO, LANES):
        stamp = _messages(stamp_ns)[topic].header.stamp
        assert (stamp.sec, stamp.nanosec) == (1_700_000_000, 123_456_789), topic
