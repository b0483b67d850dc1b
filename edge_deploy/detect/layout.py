"""Which output layout an object detector has: one YOLO tensor, or TensorRT's EfficientNMS_TRT outputs."""
from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

from ..errors import DetectionError, brief

__all__ = ["EFFICIENT_NMS_OUTPUTS", "DetectionLayout", "OutputSpec", "layout_of", "parse_layout"]

# EfficientNMS_TRT's outputs: num_detections INT32 [B, 1]; detection_boxes [B, K, 4] (x1, y1, x2, y2 in model-input
# pixels); detection_scores [B, K]; detection_classes INT32 [B, K].
EFFICIENT_NMS_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


class DetectionLayout(str, enum.Enum):
    """yolo: one output [B, 4 + classes, anchors] (cx, cy, w, h, class scores), ultralytics' YOLOv8/v11 export,
    decoded with class-aware NMS. efficient_nms: the four EFFICIENT_NMS_OUTPUTS, already suppressed in the engine."""

    YOLO = "yolo"
    EFFICIENT_NMS = "efficient_nms"


class OutputSpec(Protocol):
    """A model output as layout_of reads it: its name and shape (-1 for a dynamic dimension)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...


def _described(outputs: Sequence[OutputSpec], limit: int = 4) -> str:
    shown = ", ".join(f"{brief(str(o.name), 40)} {list(o.shape)}" for o in outputs[:limit])
    more = f" and {len(outputs) - limit} more" if len(outputs) > limit else ""
    return (shown + more) or "none"


def layout_of(outputs: Sequence[OutputSpec]) -> DetectionLayout:
    """The layout of a detector with these outputs: EFFICIENT_NMS when all four EFFICIENT_NMS_OUTPUTS are there,
    YOLO when there is exactly one output, of rank 3 with dimension 1 (4 + classes) at least 5."""
    outputs = list(outputs)
    names = {str(o.name) for o in outputs}
    if all(name in names for name in EFFICIENT_NMS_OUTPUTS):
        return DetectionLayout.EFFICIENT_NMS
    if len(outputs) == 1:
        shape = tuple(outputs[0].shape)
        if len(shape) == 3 and shape[1] >= 5:
            return DetectionLayout.YOLO
    raise DetectionError(f"cannot tell the detector's output layout from its outputs ({_described(outputs)}): neither "
                         f"the EfficientNMS_TRT outputs ({', '.join(EFFICIENT_NMS_OUTPUTS)}) nor one YOLO output "
                         f"[batch, 4 + classes, anchors]; pass --layout yolo|efficient_nms at convert time.")


def parse_layout(text: str | DetectionLayout) -> DetectionLayout:
    """A layout from its name ("yolo", "efficient_nms"; case and "-" for "_" do not matter)."""
    if isinstance(text, DetectionLayout):
        return text
    if isinstance(text, str):
        key = text.strip().lower().replace("-", "_")
        for layout in DetectionLayout:
            if layout.value == key:
                return layout
    choices = ", ".join(layout.value for layout in DetectionLayout)
    raise DetectionError(f"unknown detection layout {brief(text)}; choose one of: {choices}.")
