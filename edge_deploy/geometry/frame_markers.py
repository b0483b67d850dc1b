"""One camera's frames, one after another: lanes -> markers (tracked across frames when asked), figures, and whether
they can be real."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .camera import Camera
from .figures import LaneFigures, check_speed
from .markers import LaneMarkers, assign, to_markers
from .plausibility import Plausibility, PlausibilityLimits, StreamPlausibility
from .tracker import MarkerTracker
from ..errors import CalibrationError, GeometryError
from ..core.numbers import FPS

__all__ = ["FrameMarkers", "LaneGeometry"]


@dataclass(frozen=True)
class FrameMarkers:
    """A frame's markers, the figures of its ego lane, and the verdict on them (docs/geometry.md, "Plausibility")."""

    markers: LaneMarkers
    figures: LaneFigures
    plausibility: Plausibility = field(default_factory=lambda: Plausibility(True))

    def to_dict(self) -> dict[str, Any]:
        return {"markers": self.markers.to_dict(), "figures": self.figures.to_dict(),
                "plausibility": self.plausibility.to_dict()}


class LaneGeometry:
    """The frames of one camera: `frame_markers(lanes, frame)` checks the frame's size against the calibration,
    fits the markers, and with track=True follows them across calls (call it for frames in order).

    speed_mps (optional) gives the time to line crossing; with fps too, the tracker moves its curves
    by the distance driven between frames. fps also says the calls are a stream's consecutive frames: each
    verdict then checks the offset's jump from the last plausible frame. `limits`: the plausibility bounds.
    """

    def __init__(self, camera: Camera, *, track: bool = False, speed_mps: float | None = None,
                 fps: float | None = None, limits: PlausibilityLimits | None = None) -> None:
        if not isinstance(camera, Camera):
            raise CalibrationError(f"camera must be a Camera (Camera.from_yaml(path)), not {type(camera).__name__}.")

        self.camera = camera
        self.tracker = MarkerTracker() if track else None
        self.speed_mps = check_speed(speed_mps)
        self.fps = None if fps is None else FPS.check("fps", fps, GeometryError)  # -30 or inf: no stream's rate
        self.plausibility = StreamPlausibility(limits)
        self._unseen_s = 0.0  # time of the frames skipped or missed since the last frame_markers

    def reset(self) -> None:
        """Start a new stream: the tracks and the last plausible frame forgotten."""
        if self.tracker is not None:
            self.tracker.reset()
        self.plausibility.reset()
        self._unseen_s = 0.0

    def frame_markers(self, lanes: Sequence[Any], frame: Any) -> FrameMarkers:
        height, width = frame.shape[:2]
        self.camera.check_frame(width, height)
        markers = to_markers(lanes, self.camera)
        dt = 1.0 / self.fps if self.fps else None
        if self.tracker is not None:
            markers = self.tracker.update(markers, speed_mps=self.speed_mps or 0.0, dt_s=dt or 0.0)
        figures = markers.figures(self.speed_mps)
        since = dt + self._unseen_s if dt is not None else None  # frames dropped or failed since the last one
        self._unseen_s = 0.0
        return FrameMarkers(markers, figures, self.plausibility.check(markers, figures, dt_s=since,
                                                                        speed_mps=self.speed_mps))

    def skipped_frame(self) -> None:
        """A frame that was dropped unseen (LaneStream): the tracker (if any) advances by a frame, counting no miss,
        and the next verdict's jump check allows for the time it took."""
        dt = 1.0 / self.fps if self.fps else 0.0
        self._unseen_s += dt
        if self.tracker is not None:
            self.tracker.predict(speed_mps=self.speed_mps or 0.0, dt_s=dt)

    def missed_frame(self) -> FrameMarkers | None:
        """A frame whose lanes never came (the detection failed): with track=True the markers coast (each with
        `missed` > 0, its uncertainty growing) until the tracker drops them; None without a tracker. Coasting
        markers are predictions, not measurements: no verdict is given on them (`plausibility.checked` empty)."""
        dt = 1.0 / self.fps if self.fps else 0.0
        self._unseen_s += dt
        if self.tracker is None:
            return None
        markers = self.tracker.update(assign([]), speed_mps=self.speed_mps or 0.0, dt_s=dt)
        return FrameMarkers(markers, markers.figures(self.speed_mps))
