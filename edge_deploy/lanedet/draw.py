"""Pictures of results: lanes drawn on a frame, written as PNG."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import cv2
import numpy as np

from ..core.fsutil import write_bytes_atomic

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
    font_scale = max(0.4, 0.6 * scale)
    scored: list[tuple[np.ndarray, str, tuple[int, ...]]] = []
    for i, lane in enumerate(lanes):
        pts, score = _points_and_score(lane)
        pts = pts[np.isfinite(pts).all(axis=1)]
        if len(pts) == 0:
            continue
        bgr = tuple(int(c) for c in (color if color is not None else PALETTE[i % len(PALETTE)]))
        fixed = np.round(pts * (1 << _SHIFT)).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(out, [fixed], False, bgr, int(thickness), cv2.LINE_AA, _SHIFT)
        if labels and score is not None:
            scored.append((pts, f"{score:.2f}", bgr))
    boxes = label_boxes([(pts, text) for pts, text, _ in scored], (out.shape[0], out.shape[1]), font_scale)
    for (_, text, bgr), (x0, _y0, _x1, y1) in zip(scored, boxes):  # after every line: no lane crosses a label
        cv2.putText(out, text, (x0, y1), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0), 3, cv2.LINE_AA)
        cv2.putText(out, text, (x0, y1), cv2.FONT_HERSHEY_SIMPLEX, font_scale, bgr, 1, cv2.LINE_AA)
    if caption:
        font_scale = max(0.5, 0.8 * scale)
        (w, h), base = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 2)
        out[: h + base + 12, : w + 16] //= 3
        cv2.putText(out, caption, (8, h + 6), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (255, 255, 255), 2, cv2.LINE_AA)
    return out


def label_boxes(labelled: list[tuple[np.ndarray, str]], shape: tuple[int, int],
                font_scale: float) -> list[tuple[int, int, int, int]]:
    """Where each lane's label goes, (x0, y0, x1, y1) with y1 the text's baseline: at the lane's top end, else the
    first point further down its line where it overlaps no label placed before it (lanes meet near the vanishing
    point, where their labels would print over each other); the top end when no point is free."""
    height, width = shape
    placed: list[tuple[int, int, int, int]] = []
    for pts, text in labelled:
        (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 3)
        order = pts[np.argsort(pts[:, 1])]  # top end first

        def box_at(x: float, y: float) -> tuple[int, int, int, int]:
            x0 = int(np.clip(x - w / 2, 0, max(width - w, 0)))
            y1 = int(np.clip(y - 8, h + 2, height - base - 2))
            return x0, y1 - h - 2, x0 + w, y1 + base

        candidates = [box_at(x, y) for x, y in order]
        gap = max(4, h // 2)  # labels that merely touch read as one number ("0.940.93")
        free = [b for b in candidates if not any(_overlap(b, other, gap) for other in placed)]
        placed.append(free[0] if free else candidates[0])
    return placed


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int], gap: int = 0) -> bool:
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


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
