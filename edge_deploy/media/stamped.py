"""A frame with its time and camera frame, and what detection made of it: the typed seam between the run loop
(detect.py) and whatever publishes its results (edge_deploy.ros: an MCAP file, a Foxglove server)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StampedFrame:
    """An HxWx3 uint8 BGR frame, its time (ns since the epoch: the message's header stamp for a recording, the
    time it was read for a video or camera), the camera frame it was taken in (a recording's header frame_id;
    "camera" otherwise), its position in its source (0, 1, ...) and, when the source held it as a JPEG, those
    bytes (published as they are: no second encoding)."""

    image: Any
    stamp_ns: int
    frame_id: str = "camera"
    index: int = 0
    jpeg: bytes | None = None

    @classmethod
    def now(cls, image: Any, index: int) -> "StampedFrame":
        return cls(image, time.time_ns(), "camera", index)


@dataclass(frozen=True)
class CameraSetup:
    """A camera (geometry Camera: intrinsics and mounting) on the vehicle: its ROS frame (an optical frame: z
    forward, x right, y down) and where it sits in base_link (x, y in metres; the Camera's vehicle frame has its
    origin on the road below the camera, so markers are moved by this to be in base_link)."""

    camera: Any
    frame_id: str = "camera"
    offset_xy: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class FrameResult:
    """One frame's lanes (edge_deploy.lanedet.lane.Lane), its markers (geometry FrameMarkers, None without a
    camera), its camera (None when not known) and an object detector's boxes beside the lanes (an
    edge_deploy.detect.Detections; None without a detector)."""

    frame: StampedFrame
    lanes: list[Any]
    found: Any = None
    setup: CameraSetup | None = None
    detections: Any = None


Publish = Callable[[FrameResult], None]
