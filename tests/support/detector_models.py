"""Stand-in object detectors for the stack tests, exported to ONNX here by torch.onnx.export (not by the code under
test), with boxes a test can know in advance.

The "detector" looks at the four quadrants of its input (64 x 64 by default): a quadrant brighter than
QUADRANT_THRESHOLD on average scores high. Eight anchors: anchors 0-3 are the four quadrant boxes (class 0),
anchors 4-7 the same boxes shifted by 2 px (IoU about 0.78 with their quadrant's box) scored 0.8x as class 1
and 0.1x as class 0. So class-aware NMS keeps one box of each class per bright quadrant, and NMS across classes
would drop the class-1 box: a test can tell the two apart.

- `YoloQuadrants`: the ultralytics YOLOv8 layout, one output [B, 4 + 2, 8] (cx, cy, w, h, class scores).
- `EfficientNmsQuadrants`: TensorRT's EfficientNMS outputs (num_detections [B, 1], detection_boxes [B, K, 4] x1y1x2y2,
  detection_scores [B, K], detection_classes [B, K]), top-K of the same anchors by score, class-aware NMS done;
  num_detections is K (the rows of dark quadrants score near 0).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SIZE = 64
QUADRANT_THRESHOLD = 0.3


def anchor_boxes(size: int = SIZE) -> np.ndarray:
    """The eight anchors' (x1, y1, x2, y2) in model-input pixels: those of the product's stand-in
    (`edge-deploy sample --stack`), whose graph onnx.helper writes; these models compute the same with torch."""
    from edge_deploy.export.stand_in_detector import stand_in_anchors

    return stand_in_anchors(size)


def _torch_modules(size: int):
    import torch
    from torch import nn

    xyxy = torch.from_numpy(anchor_boxes(size))
    cxcywh = torch.stack([(xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2,
                          xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]])  # [4, 8]

    class Quadrants(nn.Module):
        def scores(self, images: torch.Tensor) -> torch.Tensor:
            bright = nn.functional.avg_pool2d(images.mean(dim=1, keepdim=True), size // 2).flatten(1)  # [B, 4]
            s = torch.sigmoid((bright - QUADRANT_THRESHOLD) * 20.0)
            class0 = torch.cat([s, s * 0.1], dim=1)  # [B, 8]
            class1 = torch.cat([s * 0.0, s * 0.8], dim=1)
            return torch.stack([class0, class1], dim=1)  # [B, 2, 8]

    class YoloQuadrants(Quadrants):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("boxes", cxcywh.clone())

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            scores = self.scores(images)
            boxes = self.boxes.unsqueeze(0) + scores[:, :1, :1] * 0.0  # [B, 4, 8]
            return torch.cat([boxes, scores], dim=1)

    class EfficientNmsQuadrants(Quadrants):
        """Top-4 of the anchors by their best class score; with the shifted anchors' class-0 score at 0.1x this is
        exactly what class-aware NMS keeps (one box per class and bright quadrant) for up to two bright quadrants."""

        def __init__(self, keep: int = 4) -> None:
            super().__init__()
            self.keep = keep
            self.register_buffer("xyxy", xyxy.clone())

        def forward(self, images: torch.Tensor):
            scores = self.scores(images)
            best, classes = scores.max(dim=1)  # [B, 8]
            top, index = best.topk(self.keep, dim=1)
            boxes = self.xyxy[index]  # [B, K, 4]
            # every row counts (integer ops only: onnxconverter-common's FP16 pass mistypes float constants here);
            # the decode's score threshold drops the dark quadrants' rows
            count = (index * 0 + 1).sum(dim=1, keepdim=True).to(torch.int32)
            return count, boxes, top, classes.gather(1, index).to(torch.int32)

    return YoloQuadrants, EfficientNmsQuadrants


def export_detector(path: Path, layout: str = "yolo", *, size: int = SIZE, opset: int = 17,
                    dynamic_batch: bool = True, symbolic_size: bool = False) -> Path:
    """Export the stand-in of `layout` ("yolo" or "efficient_nms") to `path` with torch.onnx.export."""
    import inspect
    import warnings

    import torch

    yolo, nms = _torch_modules(size)
    module = (yolo() if layout == "yolo" else nms()).eval()
    names = ["output0"] if layout == "yolo" else ["num_detections", "detection_boxes", "detection_scores",
                                                    "detection_classes"]
    axes: dict[str, dict[int, str]] = {}
    if dynamic_batch:
        axes = {"images": {0: "batch"}, **{name: {0: "batch"} for name in names}}
    if symbolic_size:
        axes.setdefault("images", {}).update({2: "height", 3: "width"})
    kwargs = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(2, 3, size, size),), str(path), input_names=["images"],
                          output_names=names, dynamic_axes=axes or None, opset_version=opset, **kwargs)
    return path


def frame_with_bright(quadrants: list[int], frame_hw: tuple[int, int] = (720, 1280)) -> np.ndarray:
    """A BGR frame, black but for the parts that land in the given input quadrants after a letterbox to SIZE
    (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right): those are white."""
    height, width = frame_hw
    frame = np.zeros((height, width, 3), np.uint8)
    for q in quadrants:
        x0 = 0 if q in (0, 2) else width // 2
        y0 = 0 if q in (0, 1) else height // 2
        frame[y0 : y0 + height // 2, x0 : x0 + width // 2] = 255
    return frame
