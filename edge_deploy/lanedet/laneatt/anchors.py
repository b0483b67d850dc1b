"""LaneATT anchors (NumPy only): the anchor table, anchor-pooling columns, top-k selection.

An anchor is a straight line entering the image at a left, bottom or right
origin with an angle. Its row is `[0, 0, 1 - y0, x0, 0, x_0..x_71]`, where x_k is
the line's x (in 640-px units) at y_k = linspace(1, 0, 72)[k] (k = 0: bottom).
"""
from __future__ import annotations

import numpy as np

IMG_H = 360
IMG_W = 640
N_OFFSETS = 72
STRIDE = 32
FMAP_H = IMG_H // STRIDE  # 11 rows are pooled; the backbone yields 12 (the last is never read)
FMAP_W = IMG_W // STRIDE  # 20
ROW_LEN = 5 + N_OFFSETS  # 77

LEFT_ANGLES = (72.0, 60.0, 49.0, 39.0, 30.0, 22.0)
BOTTOM_ANGLES = (165.0, 150.0, 141.0, 131.0, 120.0, 108.0, 100.0, 90.0, 80.0, 72.0, 60.0, 49.0, 39.0, 30.0, 15.0)
RIGHT_ANGLES = (108.0, 120.0, 131.0, 141.0, 150.0, 158.0)
N_SIDE_ORIGINS = 72
N_BOTTOM_ORIGINS = 128
N_ANCHORS = (len(LEFT_ANGLES) + len(RIGHT_ANGLES)) * N_SIDE_ORIGINS + len(BOTTOM_ANGLES) * N_BOTTOM_ORIGINS  # 2784


def _origins_and_angles() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x0, y0, angle in degrees) per anchor in official order: left, bottom, right; origin-major."""
    side = np.linspace(1.0, 0.0, N_SIDE_ORIGINS)
    bottom = np.linspace(1.0, 0.0, N_BOTTOM_ORIGINS)
    parts = [
        (np.zeros_like(side), side, LEFT_ANGLES),
        (bottom, np.ones_like(bottom), BOTTOM_ANGLES),
        (np.ones_like(side), side, RIGHT_ANGLES),
    ]
    xs, ys, angles = [], [], []
    for origin_x, origin_y, side_angles in parts:
        n_angles = len(side_angles)
        xs.append(np.repeat(origin_x, n_angles))
        ys.append(np.repeat(origin_y, n_angles))
        angles.append(np.tile(np.asarray(side_angles), len(origin_x)))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(angles)


def _line_xs(n_points: int) -> np.ndarray:
    """x (640-px units, float64) of every anchor at n_points ys from the bottom (y=1) to the top (y=0)."""
    x0, y0, angle = _origins_and_angles()
    sample_ys = np.linspace(1.0, 0.0, n_points)
    tan = np.tan(np.radians(angle))
    return (x0[:, None] + (y0[:, None] - sample_ys[None, :]) / tan[:, None]) * IMG_W


def generate_anchors() -> np.ndarray:
    """The full anchor table, float32 [2784, 77], rows in official order."""
    x0, y0, _ = _origins_and_angles()
    table = np.zeros((N_ANCHORS, ROW_LEN), dtype=np.float64)
    table[:, 2] = 1.0 - y0
    table[:, 3] = x0
    table[:, 5:] = _line_xs(N_OFFSETS)
    return table.astype(np.float32)


def pooling_columns() -> tuple[np.ndarray, np.ndarray]:
    """Feature-map column per (anchor, row) and the valid mask, for all 2784 anchors.

    Returns `(columns, valid)`: int64 [2784, 11] clamped to [0, FMAP_W - 1] and bool
    [2784, 11]; row 0 is the top feature row. A row is invalid only when the unclamped
    column is < 0 or > FMAP_W (so FMAP_W itself reads column FMAP_W - 1, as the official
    model does and its checkpoints were trained with).
    """
    # float32 like the official table; no value is near a .5 tie, so the rounding is robust
    xs = _line_xs(FMAP_H).astype(np.float32)
    unclamped = np.round(xs / STRIDE).astype(np.int64)[:, ::-1]
    valid = (unclamped >= 0) & (unclamped <= FMAP_W)
    columns = np.clip(unclamped, 0, FMAP_W - 1)
    return np.ascontiguousarray(columns), np.ascontiguousarray(valid)
