"""`Lane`, what every lane-model family's decoder returns, and `DecodeError`.

Self-contained on purpose (numpy and the standard library only): install copies
this file beside the Triton Python-backend models together with a family's
decoder, because Triton's Python on a Jetson may not have edge_deploy installed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DecodeError", "Lane", "check_image_size"]


class DecodeError(ValueError):
    """The raw output or a decode parameter is not usable (one-line message)."""


def check_image_size(image_size: Any) -> tuple[float, float]:
    """(height, width) of a decoder's `image_size`, two positive finite numbers, or DecodeError."""
    try:
        height, width = (float(v) for v in image_size)
    except (TypeError, ValueError):
        raise DecodeError(f"image_size must be (height, width), got {image_size!r}") from None
    if not (height > 0 and width > 0 and math.isfinite(height) and math.isfinite(width)):
        raise DecodeError(f"image_size must be two positive numbers (height, width), got {image_size!r}")
    return height, width


@dataclass(frozen=True, eq=False)
class Lane:
    """One detected lane.

    points: (N, 2) float32 (x, y) in original-image pixels, top to bottom
    (y increasing), N >= 2. score: the lane's confidence in [0, 1].
    """

    points: np.ndarray
    score: float

    def __post_init__(self) -> None:
        pts = np.array(self.points, dtype=np.float32).reshape(-1, 2)
        pts.setflags(write=False)
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "score", float(self.score))

    def x_at(self, y: float | np.ndarray) -> float | np.ndarray:
        """x of the lane at image row(s) y, linearly interpolated; NaN outside the lane's y-range."""
        ys = self.points[:, 1].astype(np.float64)
        xs = self.points[:, 0].astype(np.float64)
        out = np.interp(np.asarray(y, dtype=np.float64), ys, xs, left=np.nan, right=np.nan)
        return float(out) if np.ndim(out) == 0 else out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: {"score": float, "points": [[x, y], ...]}."""
        return {"score": self.score, "points": self.points.tolist()}

    def __len__(self) -> int:
        return len(self.points)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Lane):
            return NotImplemented
        return self.score == other.score and np.array_equal(self.points, other.points)

    __hash__ = None  # type: ignore[assignment]  # mutable-looking content: not hashable

    def __repr__(self) -> str:
        if len(self.points):
            (x0, y0), (x1, y1) = self.points[0], self.points[-1]
            span = f" ({x0:.1f}, {y0:.1f})..({x1:.1f}, {y1:.1f})"
        else:
            span = ""
        return f"Lane(score={self.score:.3f}, {len(self.points)} points{span})"
