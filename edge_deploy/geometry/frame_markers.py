"""One camera's frames, one after another: lanes -> markers (tracked across frames when asked) and figures."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .camera import Camera
from .figures import LaneFigures
from .markers import LaneMarkers, to_markers
from .tracker import MarkerTracker

__all__ = ["FrameMarkers", "LaneGeometry"]


@dataclass(frozen=True)
class FrameMarkers:
    """A frame's markers and the figures of its ego lane."""

    markers: LaneMarkers
    figures: LaneFigures

    def to_dict(self) -> dict[str, Any]:
        return {"markers": self.markers.to_dict(), "figures": self.figures.to_dict()}


class LaneGeometry:
    """The frames of one camera: `frame_markers(lanes, frame)` checks the frame's size against the calibration,
    fits the markers, and with track=True follows them across calls (call it for frames in order).

    speed_mps (optional) gives the time to line crossing; with fps too, the tracker moves its curves
    by the distance driven between frames.
    """

    def __init__(self, camera: Camera, *, track: bool = False, speed_mps: float | None = None,
                 fps: float | None = None) -> None:
        if not isinstance(camera, Camera):
            from ..errors import CalibrationError

            raise CalibrationError(f"camera must be a Camera (Camera.from_yaml(path)), not {type(camera).__name__}.")
        from .figures import check_speed

        self.camera = camera
        self.tracker = MarkerTracker() if track else None
        self.speed_mps = check_speed(speed_mps)
        self.fps = fps

    def frame_markers(self, lanes: Sequence[Any], frame: Any) -> FrameMarkers:
        height, width = frame.shape[:2]
        self.camera.check_frame(width, height)
        markers = to_markers(lanes, self.camera)
        if self.tracker is not None:
            dt = 1.0 / self.fps if self.fps else 0.0
            markers = self.tracker.update(markers, speed_mps=self.speed_mps or 0.0, dt_s=dt)
        return FrameMarkers(markers, markers.figures(self.speed_mps))
