"""Pictures of results: lanes drawn on a frame, written as PNG."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import cv2
import numpy as np

from ..fsutil import write_bytes_atomic

__all__ = ["PALETTE", "draw_lanes", "save_png"]

# BGR, distinguishable on grey asphalt.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (0, 255, 0),
    (255, 128, 0),
    (0, 128, 255),
    (255, 0, 255),
    (0, 255, 255),
    (255, 255, 0),
    (128, 0, 255),
    (0, 0, 255),
)
_SHIFT = 4  # sub-pixel bits for cv2 drawing


def _points_and_score(lane: Any) -> tuple[np.ndarray, float | None]:
    if hasattr(lane, "points"):
        return np.asarray(lane.points, dtype=np.float64).reshape(-1, 2), getattr(lane, "score", None)
    return np.asarray(lane, dtype=np.float64).reshape(-1, 2), None


def draw_lanes(
    frame: np.ndarray,
    lanes: Iterable[Any],
    *,
    color: tuple[int, int, int] | None = None,
    thickness: int = 3,
    labels: bool = True,
    caption: str | None = None,
) -> np.ndarray:
    """A copy of `frame` (HxWx3 uint8 BGR) with each lane drawn as a polyline.

    `lanes` holds Lane objects (points + score; the score is written at the lane's
    top end when labels=True) or plain (N, 2) point arrays such as ground truth.
    color=None gives each lane its own colour from PALETTE. `caption` is written in
    the top-left corner on a dark band (e.g. the model and the number of lanes).
    """
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError("draw_lanes needs an HxWx3 uint8 BGR frame")
    out = frame.copy()
    scale = max(out.shape[:2]) / 1000.0
    for i, lane in enumerate(lanes):
        pts, score = _points_and_score(lane)
        pts = pts[np.isfinite(pts).all(axis=1)]
        if len(pts) == 0:
            continue
        bgr = tuple(int(c) for c in (color if color is not None else PALETTE[i % len(PALETTE)]))
        fixed = np.round(pts * (1 << _SHIFT)).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(out, [fixed], False, bgr, int(thickness), cv2.LINE_AA, _SHIFT)
        if labels and score is not None:
            x, y = pts[np.argmin(pts[:, 1])]
            org = (int(np.clip(x, 0, out.shape[1] - 60)), int(np.clip(y - 8, 15, out.shape[0] - 5)))
            font_scale = max(0.4, 0.6 * scale)
            cv2.putText(out, f"{score:.2f}", org, cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0), 3, cv2.LINE_AA)
            cv2.putText(out, f"{score:.2f}", org, cv2.FONT_HERSHEY_SIMPLEX, font_scale, bgr, 1, cv2.LINE_AA)
    if caption:
        font_scale = max(0.5, 0.8 * scale)
        (w, h), base = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 2)
        out[: h + base + 12, : w + 16] //= 3
        cv2.putText(out, caption, (8, h + 6), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (255, 255, 255), 2, cv2.LINE_AA)
    return out


def save_png(path: str | os.PathLike[str], image: np.ndarray) -> Path:
    """Write `image` (HxW or HxWx3 uint8, BGR) as PNG atomically (temp file + rename); returns the path."""
    path = Path(path)
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim not in (2, 3):
        raise ValueError("save_png needs an HxW or HxWx3 uint8 image")
    ok, data = cv2.imencode(".png", image)
    if not ok:
        raise ValueError(f"could not encode an image of shape {image.shape} as PNG")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_bytes_atomic(path, data.tobytes(), 0o644)  # a picture is for sharing, whatever the umask
