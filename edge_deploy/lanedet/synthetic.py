"""Deterministic synthetic data: road-scene frames and LaneATT-shaped raw outputs.

No external data: the README demo, tests and benchmarks draw their frames here.
Everything is a pure function of its arguments (seeded numpy Generator + cv2 drawing).
"""
from __future__ import annotations

import cv2
import numpy as np

__all__ = ["road_scene", "raw_output"]

_SKY_TOP = np.array([205, 150, 95], dtype=np.float32)  # BGR
_SKY_HORIZON = np.array([240, 225, 210], dtype=np.float32)
_ROAD_FAR = np.array([120, 118, 115], dtype=np.float32)
_ROAD_NEAR = np.array([70, 70, 68], dtype=np.float32)
_GRASS = np.array([60, 120, 80], dtype=np.float32)
_WHITE = (235, 235, 235)
_YELLOW = (40, 200, 230)
_SUBPIXEL = 4  # cv2 shift bits for anti-aliased sub-pixel drawing


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def road_scene(
    width: int = 1640, height: int = 590, *, seed: int = 0, lanes: int = 4
) -> tuple[np.ndarray, list[np.ndarray]]:
    """A road seen from a car: (frame uint8 HxWx3 BGR, ground truth).

    The ground truth holds one float32 (N, 2) polyline (x, y) per lane marking, in
    frame pixels, top to bottom, restricted to the frame. Same seed -> same scene.
    The outermost markings are solid (the left one yellow), inner ones dashed.
    """
    width = _check_int("width", width, 64, 8192)
    height = _check_int("height", height, 64, 8192)
    lanes = _check_int("lanes", lanes, 1, 8)
    rng = np.random.default_rng(seed)

    horizon = height * rng.uniform(0.36, 0.44)
    vp_x = width * (0.5 + rng.uniform(-0.06, 0.06))
    curve = width * rng.uniform(-0.12, 0.12)  # bend of the road towards the horizon
    spacing = width * rng.uniform(0.55, 0.75) / max(lanes - 1, 1) * (2.0 if lanes == 1 else 1.0)
    centre = vp_x + width * rng.uniform(-0.08, 0.08)
    bottoms = centre + (np.arange(lanes) - (lanes - 1) / 2.0) * spacing

    def x_of(bottom: float, t: np.ndarray) -> np.ndarray:
        # t = 0 at the horizon, 1 at the frame bottom.
        return vp_x + (bottom - vp_x) * t + curve * t * (1.0 - t) ** 2

    ys = np.arange(height, dtype=np.float32)
    sky_t = np.clip(ys / max(horizon, 1.0), 0, 1)[:, None]
    road_t = np.clip((ys - horizon) / (height - horizon), 0, 1)[:, None]
    sky = _SKY_TOP * (1 - sky_t) + _SKY_HORIZON * sky_t
    ground = np.where((ys < horizon)[:, None], sky, _GRASS * (0.8 + 0.4 * road_t))
    road = _ROAD_FAR * (1 - road_t) + _ROAD_NEAR * road_t

    def rows_to_image(rows: np.ndarray) -> np.ndarray:
        return cv2.resize(rows.astype(np.uint8)[:, None, :], (width, height), interpolation=cv2.INTER_NEAREST)

    # Asphalt between the outer markings (plus a shoulder), as one anti-aliased polygon.
    t_rows = np.linspace(0.0, 1.0, 64)
    y_rows = horizon + t_rows * (height - horizon)
    margin = 0.25 * spacing * t_rows
    left = x_of(bottoms[0], t_rows) - margin
    right = x_of(bottoms[-1], t_rows) + margin
    poly = np.concatenate([np.stack([left, y_rows], 1), np.stack([right, y_rows], 1)[::-1]])
    mask = np.zeros((height, width), dtype=np.uint8)
    cv2.fillPoly(mask, [np.round(poly * (1 << _SUBPIXEL)).astype(np.int32)], 255, cv2.LINE_AA, _SUBPIXEL)
    alpha = mask.astype(np.float32) / 255.0
    canvas = cv2.blendLinear(rows_to_image(road), rows_to_image(ground), alpha, 1.0 - alpha)

    # A few soft shadows on the road.
    for _ in range(rng.integers(1, 4)):
        cy = int(rng.uniform(horizon + 0.2 * (height - horizon), height))
        cx = int(rng.uniform(0, width))
        ax, ay = int(rng.uniform(0.05, 0.2) * width), int(rng.uniform(0.02, 0.06) * height)
        pad = 30
        x0, x1 = max(cx - ax - pad, 0), min(cx + ax + pad, width)
        y0, y1 = max(cy - ay - pad, 0), min(cy + ay + pad, height)
        if x1 <= x0 or y1 <= y0:
            continue
        shadow = np.zeros((y1 - y0, x1 - x0), dtype=np.uint8)
        cv2.ellipse(shadow, (cx - x0, cy - y0), (ax, ay), 0, 0, 360, 255, -1, cv2.LINE_AA)
        shade = 1.0 - 0.35 * (cv2.GaussianBlur(shadow, (0, 0), 9).astype(np.float32) / 255.0) * alpha[y0:y1, x0:x1]
        roi = canvas[y0:y1, x0:x1]
        roi[:] = (roi * shade[:, :, None]).astype(np.uint8)

    top_t = 0.04
    t_fine = np.linspace(top_t, 1.0, 160)
    y_fine = horizon + t_fine * (height - horizon)
    dash_phase = rng.uniform(0, 1)
    truth = []
    for i, bottom in enumerate(bottoms):
        xs = x_of(bottom, t_fine)
        half = 0.5 * (2.0 + 0.012 * width * t_fine)
        dashed = 0 < i < lanes - 1
        colour = _YELLOW if (i == 0 and lanes > 1) else _WHITE
        # Dashes are periodic in road distance, which grows like 1/t with perspective.
        on = (np.floor(6.0 / t_fine + dash_phase) % 2 == 0) if dashed else np.ones_like(t_fine, dtype=bool)
        quads = []
        for k in range(len(t_fine) - 1):
            if not on[k]:
                continue
            quads.append(
                [
                    (xs[k] - half[k], y_fine[k]),
                    (xs[k] + half[k], y_fine[k]),
                    (xs[k + 1] + half[k + 1], y_fine[k + 1]),
                    (xs[k + 1] - half[k + 1], y_fine[k + 1]),
                ]
            )
        if quads:
            pts = [np.round(np.asarray(q) * (1 << _SUBPIXEL)).astype(np.int32) for q in quads]
            cv2.fillPoly(canvas, pts, colour, cv2.LINE_AA, _SUBPIXEL)
        inside = (xs >= 0) & (xs <= width - 1)
        truth.append(np.stack([xs[inside], y_fine[inside]], axis=1).astype(np.float32))

    # Sensor noise: triangular in [-7, 7] from random bytes (much cheaper than Gaussian draws).
    size = canvas.size
    raw = np.frombuffer(rng.bytes(2 * size), dtype=np.uint8)
    noise = (raw[:size] & 7).astype(np.int16) + (raw[size:] & 7) - 7
    canvas = cv2.add(canvas, noise.reshape(canvas.shape), dtype=cv2.CV_8U)
    return canvas, truth


def raw_output(
    rows: int = 2784,
    *,
    candidates: int = 50,
    seed: int = 0,
    lanes: int = 4,
    probabilities: bool = False,
    conf_threshold: float = 0.5,
) -> np.ndarray:
    """A LaneATT-shaped raw output (rows x 77, float32) with exactly `candidates` rows scoring > conf_threshold.

    Rows scatter around `lanes` straight lanes that converge towards a vanishing point
    (in 640x360 model pixels), so NMS has real work: clusters to merge, lanes that
    leave the image, short and zero-length rows. probabilities=True writes softmax
    probabilities into columns 0-1 instead of logits.
    """
    rows = _check_int("rows", rows, 0, 1 << 20)
    candidates = _check_int("candidates", candidates, 0, rows)
    lanes = _check_int("lanes", lanes, 1, 16)
    if not 0.0 < conf_threshold < 1.0:
        raise ValueError(f"conf_threshold must be in (0, 1), got {conf_threshold!r}")
    rng = np.random.default_rng(seed)
    ys = np.linspace(1.0, 0.0, 72)
    horizon = rng.uniform(0.35, 0.45)  # normalised y from the top
    vp = 320 + rng.uniform(-40, 40)
    bottoms = 320 + (np.arange(lanes) - (lanes - 1) / 2) * rng.uniform(180, 260)

    lane_of = rng.integers(0, lanes, size=rows)
    bottom_x = bottoms[lane_of] + rng.normal(0, 25, size=rows)
    top_x = vp + rng.normal(0, 15, size=rows)
    # x(y) along a line from (bottom_x, y=1) to (top_x, y=horizon); keeps going above the horizon.
    slope = (bottom_x - top_x) / (1.0 - horizon)
    xs = top_x[:, None] + slope[:, None] * (ys[None, :] - horizon)
    xs += rng.normal(0, 2.0, size=xs.shape)

    out = np.zeros((rows, 77), dtype=np.float64)
    out[:, 5:] = xs
    # start_y = 1 - y0: 0 for anchors from the bottom edge, up to 0.5 for side anchors.
    out[:, 2] = np.where(rng.random(rows) < 0.6, 0.0, rng.uniform(0, 0.5, size=rows))
    out[:, 3] = np.clip(bottom_x / 640.0, 0, 1)
    start = np.rint(out[:, 2] * 71)
    out[:, 4] = np.maximum((1.0 - horizon) * 71 - start + rng.normal(0, 6, size=rows), 0)
    out[rng.random(rows) < 0.03, 4] = 0.0

    margin = np.where(np.arange(rows) < candidates, 1.0, -1.0) * rng.uniform(0.05, 6.0, size=rows)
    margin = margin[rng.permutation(rows)]
    if conf_threshold != 0.5:
        margin += np.log(conf_threshold / (1 - conf_threshold))
    neg = rng.normal(0, 1, size=rows)
    out[:, 0] = neg
    out[:, 1] = neg + margin
    if probabilities:
        p = 1.0 / (1.0 + np.exp(-margin))
        out[:, 0] = 1.0 - p
        out[:, 1] = p
    return out.astype(np.float32)
