"""What `edge-deploy infer` writes for machines, one typed record each: an image's lanes (<stem>.lanes.json, and the
rows `detect_images` returns; with `infer --detector`, the detector's boxes too), a video's or a recording's frame (a line of <stem>.lanes.jsonl) and a live frame's
(the same, with the stream's state, latency, drops and error). `to_dict()` is the JSON document, key for key.

Written, not read here: `from_dict` (the Record base) checks the plain values and keeps lanes, markers, figures and
plausibility as their JSON.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..core.json_record import Record, read_int, read_number, read_str

if TYPE_CHECKING:
    from ..detect.detections import Detections
    from ..geometry.figures import LaneFigures
    from ..geometry.frame_markers import FrameMarkers
    from ..geometry.markers import LaneMarkers
    from ..geometry.plausibility import Plausibility
    from ..lanedet.lane import Lane

__all__ = ["FrameLanes", "ImageLanes", "LiveFrameLanes"]


def _geometry(found: FrameMarkers | None) -> tuple[LaneMarkers | None, LaneFigures | None, Plausibility | None]:
    """The markers, figures and verdict of a frame (with a camera), in the records' field order."""
    return (None, None, None) if found is None else (found.markers, found.figures, found.plausibility)


@dataclass(frozen=True, eq=False)
class ImageLanes(Record):
    """One image's lanes: its name, size, the served model, the lanes (image pixels) and, with a camera, the
    markers, figures and plausibility; `png` and `json`: the files written (the JSON file holds `png`, not
    itself)."""

    image: str
    height: int
    width: int
    model: str
    lanes: Sequence[Lane] = ()
    markers: LaneMarkers | None = None
    figures: LaneFigures | None = None
    plausibility: Plausibility | None = None
    detections: Detections | None = None  # an object detector's boxes beside the lanes (infer --detector)
    png: str | None = None
    json: str | None = None

    _SECTION = "image lanes"
    _READERS = {"image": read_str, "height": read_int, "width": read_int, "model": read_str, "png": read_str,
                "json": read_str}

    @classmethod
    def of(cls, name: str, frame: Any, lanes: Sequence[Lane], model: str,
           found: FrameMarkers | None = None, detections: Detections | None = None) -> ImageLanes:
        """The record of `lanes` (and `detections`) found in `frame` (an HxWx3 array) named `name`."""
        h, w = frame.shape[:2]
        return cls(name, int(h), int(w), model, tuple(lanes), *_geometry(found), detections)


@dataclass(frozen=True, eq=False)
class FrameLanes(Record):
    """One frame of a video or a recording: its number (0, 1, ...), a recording's header stamp (ns), its lanes and,
    with a camera, the markers, figures and plausibility. `LiveFrameLanes` adds the stream's fields."""

    frame: int
    stamp_ns: int | None = None
    state: str | None = None
    latency_s: float | None = None
    dropped: int | None = None
    error: str | None = None
    lanes: Sequence[Lane] = ()
    markers: LaneMarkers | None = None
    figures: LaneFigures | None = None
    plausibility: Plausibility | None = None
    detections: Detections | None = None

    _SECTION = "frame lanes"
    _READERS = {"frame": read_int, "stamp_ns": read_int, "state": read_str, "latency_s": read_number,
                "dropped": read_int, "error": read_str}

    @classmethod
    def of(cls, frame: int, lanes: Sequence[Lane], found: FrameMarkers | None = None, *,
           stamp_ns: int | None = None, detections: Detections | None = None) -> FrameLanes:
        return cls(frame, stamp_ns, None, None, None, None, tuple(lanes), *_geometry(found), detections)


@dataclass(frozen=True, eq=False)
class LiveFrameLanes(FrameLanes):
    """A live frame (`detect_live`): its number from the source (1, 2, ...), state ("ok", "stale",
    "unavailable"), capture -> lanes latency and error (both written as null when there is none), and the frames
    dropped before it."""

    _SECTION = "live frame lanes"
    _ALWAYS = frozenset({"latency_s", "error"})

    @classmethod
    def live(cls, frame: int, state: str, latency_s: float | None, dropped: int, error: str | None,
             lanes: Sequence[Lane], found: FrameMarkers | None = None) -> LiveFrameLanes:
        return cls(frame, None, state, latency_s, dropped, error, tuple(lanes), *_geometry(found))
