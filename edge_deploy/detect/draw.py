"""An object detector's boxes drawn onto a picture (`infer --detector`): each box's outline, coloured by its score
from red (0) to green (1) as the lanes are, and its class and score above it. OpenCV only."""
from __future__ import annotations

import numpy as np

from .detections import Detections

__all__ = ["draw_detections"]


def draw_detections(picture: np.ndarray, detections: Detections, *, scale: tuple[float, float] = (1.0, 1.0)) -> np.ndarray:
    """`picture` (HxWx3 BGR, drawn on in place and returned) with the boxes; `scale`: (x, y) factors from the boxes'
    frame to the picture (a picture drawn larger or smaller than the frame)."""
    import cv2

    sx, sy = scale
    for (x1, y1, x2, y2), score, cls in zip(detections.boxes.tolist(), detections.scores.tolist(),
                                            detections.classes.tolist()):
        s = min(1.0, max(0.0, float(score)))
        color = (25, int(255 * min(1.0, 2.0 * s)), int(255 * min(1.0, 2.0 * (1.0 - s))))  # BGR
        top_left = (int(round(x1 * sx)), int(round(y1 * sy)))
        cv2.rectangle(picture, top_left, (int(round(x2 * sx)), int(round(y2 * sy))), color, 2, cv2.LINE_AA)
        cv2.putText(picture, f"{int(cls)} {s:.2f}", (top_left[0] + 2, max(12, top_left[1] - 4)),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.45, color, 1, cv2.LINE_AA)
    return picture
