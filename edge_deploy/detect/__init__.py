"""Object-detector output decode: YOLO ([B, 4 + classes, anchors]) or TensorRT EfficientNMS outputs -> boxes,
scores and classes in the frame's pixels. numpy (and OpenCV for Letterbox.apply) only."""
from __future__ import annotations

from .decode import DetectParams, decode_detections, nms
from .detections import Detections
from .layout import EFFICIENT_NMS_OUTPUTS, DetectionLayout, layout_of, parse_layout
from .letterbox import Letterbox

__all__ = ["EFFICIENT_NMS_OUTPUTS", "DetectParams", "DetectionLayout", "Detections", "Letterbox", "decode_detections",
           "layout_of", "nms", "parse_layout"]
