"""The manifest's "detection" section, which install copies into the detector's config (`edge_deploy.detection`):
how an object detector's frames are fitted to its input and its outputs read. Light (edge_deploy.core.json_record only),
so the client reads it too."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.json_record import Record, check

__all__ = ["DETECTION_LAYOUTS", "DETECTION_RESIZES", "DetectionRecord"]



DETECTION_LAYOUTS = ("yolo", "efficient_nms")
DETECTION_RESIZES = ("letterbox", "stretch")


@dataclass(frozen=True, eq=False)
class DetectionRecord(Record):
    """The manifest's "detection": how an object detector's frames are fitted to its input and its outputs read
    (edge_deploy.detect). `layout`: "yolo" ([B, 4+C, A]) or "efficient_nms" (TensorRT's EfficientNMS outputs);
    `resize`: "letterbox" (aspect kept, padded with `pad_value`) or "stretch"."""

    layout: str | None = None
    resize: str | None = None
    pad_value: int | None = None

    _SECTION = "detection"
    _READERS = {"layout": check(lambda v: v in DETECTION_LAYOUTS, " or ".join(DETECTION_LAYOUTS)),
                "resize": check(lambda v: v in DETECTION_RESIZES, " or ".join(DETECTION_RESIZES)),
                "pad_value": check(lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255,
                                   "an integer from 0 to 255")}
