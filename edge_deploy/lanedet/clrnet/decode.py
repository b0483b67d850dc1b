"""CLRNet's eval-mode head output (predictions [192, 78] of one image) -> lanes in image pixels.

CLRNet's decoder (the family's `decoder_module`). The rules are the official `CLRHead.get_lanes` and
`predictions_to_pred` (clrnet/models/heads/clr_head.py) with the NMS of the CUDA extension
(clrnet/ops/csrc/nms_kernel.cu), vectorised (docs/design.md, "CLRNet"). A row of predictions is: two
class logits, start_y, start_x, theta, length, then 72 x values divided by (input width - 1), the
first at the bottom row of the model's view and the last at its top.

- A prior is a candidate when softmax(logits)[1] >= conf_threshold (a score equal to it is kept; compared in
  float32, as torch compares the float32 scores with the threshold).
- NMS in descending score (a stable sort: equal scores keep their prior order): a candidate is kept
  unless a kept one overlaps it; at most top_k are kept (the kernel stops there). Two lanes overlap
  when their mean |dx| in input pixels (x * (width - 1)) over their common rows is below
  nms_threshold: each lane's first row is int(start_y * 71 + 0.5) (truncated towards zero, as C
  does), its last int(first + length * 71 - 0.5 - (length * 71 < 1)), the common rows run from the
  larger first row to the smaller last row (at most 71), and lanes with no common row never overlap.
- A kept lane's points: its first row round(start_y * 71) clipped to 0..71, round(length * 71) rows
  from there (Python's rounding, half to even); rows below the first one are added while every x from
  there up to the first row lies in [0, 1]; points with x < 0 are dropped; a lane of fewer than 2
  points is dropped (after NMS and top_k, as officially). The official `xs[end + 1:] = -2` is kept as
  it is, Python's negative index included (a lane whose length rounds below 0 loses only its top rows).
- Row k (0 = the bottom of the model's view) is at y = cut + (1 - k / 71) * (H - cut) in an image of
  `image_size` (H, W), with cut = cut_fraction * H: the rows above the model's view scale with the
  frame. x = x_k * W, as the official `Lane.to_array` maps them. Points run top to bottom.

What differs from the official code, on purpose: the kernel's loop over the common rows has an 8-bit
index (`unsigned char i = 5 + start`); when both lanes start below the frame (start_y < -0.02, so
the common first row is negative) the official sum reads the score and geometry columns (first row -5
to -1) or wraps past 255 and sums nothing (first row < -5, so the lanes always "overlap"). Here the
common rows start at row 0 at the lowest, so such lanes are compared on their x values like any other.
The kernel's sort is not stable on equal scores; this one is. Lanes keep their official points on the
72 fixed rows (the official evaluation's spline through them is not drawn).

Self-contained on purpose (numpy, the standard library and `lane.py` only): install copies it beside
the Triton Python-backend models. Errors are `DecodeError` with one-line messages.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

try:
    from ..lane import DecodeError, Lane, check_image_size
except ImportError:  # the flat copy beside a Triton Python-backend model (no package around it)
    from lane import DecodeError, Lane, check_image_size  # type: ignore[no-redef]

OUTPUT_NAME = "predictions"
BLOCK_ELEMENTS = 512  # NMS: (block rows x alive rows) compared at once, at most (see nms_keep)
NUM_PRIORS, NUM_POINTS = 192, 72
PREDICTION_SIZE = 6 + NUM_POINTS  # 2 logits, start_y, start_x, theta, length, then the x values
MODEL_WIDTH, MODEL_HEIGHT = 800, 320
# The official frames and test parameters (configs/clrnet/clr_resnet18_*.py), so that this module stands alone:
# (H, W) of the frames, cut_height, conf_threshold, nms_thres (input pixels), max_lanes.
OFFICIAL = {
    "culane": ((590, 1640), 270, 0.4, 50.0, 4),
    "tusimple": ((720, 1280), 160, 0.4, 50.0, 5),
    "llamas": ((717, 1276), 300, 0.45, 60.0, 4),
}


def resized_height(image_height: int, cut_height: int) -> int:
    """The height a whole frame is resized to so that its bottom MODEL_HEIGHT rows are the rows from cut_height
    down (the official crop-then-resize, expressed so that the cut scales with any frame's height)."""
    return round(MODEL_HEIGHT * image_height / (image_height - cut_height))


def cut_fraction(image_height: int, cut_height: int) -> float:
    """The fraction of a frame's height above the model's view, as `resized_height` makes it."""
    return 1.0 - MODEL_HEIGHT / resized_height(image_height, cut_height)


__all__ = ["OUTPUT_NAME", "DecodeError", "Lane", "decode_clrnet", "decode_outputs", "nms_keep",
           "validate_predictions"]


def validate_predictions(predictions: Any) -> np.ndarray:
    """One image's predictions as a float32 [priors, 6 + points] array, checked (finite, no batch axis)."""
    if predictions is None:
        raise DecodeError("CLRNet decoding needs the predictions array of one image, got None")
    arr = np.asarray(predictions)
    if arr.dtype.kind != "f":
        raise DecodeError(f"CLRNet predictions have dtype {arr.dtype}; expected a float array")
    if arr.ndim != 2 or arr.shape[1] < 8 or arr.shape[0] < 1:
        raise DecodeError(f"CLRNet predictions have shape {tuple(arr.shape)}; expected [priors, 6 + points] "
                          f"(e.g. [{NUM_PRIORS}, {PREDICTION_SIZE}]) for one image, without the batch axis")
    if not np.isfinite(arr).all():
        raise DecodeError("CLRNet predictions contain NaN or infinite values; check the model (FP16 overflow?)")
    return arr.astype(np.float32, copy=False)


def _scores(logits: np.ndarray) -> np.ndarray:
    """softmax(logits)[:, 1] in float32, as torch computes it (the larger logit subtracted first)."""
    l0, l1 = logits[:, 0], logits[:, 1]
    top = np.maximum(l0, l1)
    e1 = np.exp(l1 - top)
    return e1 / (np.exp(l0 - top) + e1)



def nms_keep(rows: np.ndarray, scores: np.ndarray, threshold: float, top_k: int, x_scale: float) -> np.ndarray:
    """Indices into `rows` (the candidates' predictions) that the kernel's NMS keeps, best first.

    Greedy over the stably sorted scores: each kept lane removes the later ones it overlaps (module docstring).
    The overlaps of a block of the next alive rows with every alive row are computed at once, then the block is
    walked in Python; the next block starts after it, among the rows still alive."""
    order = np.argsort(-scores, kind="stable")
    ranked = rows[order]
    strips = ranked.shape[1] - 7  # 71
    length = ranked[:, 5] * np.float32(strips)
    first = (ranked[:, 2] * np.float32(strips) + np.float32(0.5)).astype(np.int64)  # C's (int): towards zero
    last = (first.astype(np.float32) + length - np.float32(1) + np.float32(0.5)
            - (length < 1).astype(np.float32)).astype(np.int64)
    first_rows = np.maximum(first, 0)  # the 8-bit decision: the common rows never start below row 0
    last_rows = np.minimum(last, strips)
    xs = ranked[:, 6:] * np.float32(x_scale)
    k = np.arange(xs.shape[1])
    # each lane's rows; two lanes' common rows are where both are set (an interval, clipped to 0..71)
    spans = (k >= first_rows[:, None]) & (k <= last_rows[:, None])
    alive = np.arange(len(order))  # ranks not yet kept or removed, best first
    kept: list[int] = []
    while len(alive) and len(kept) < top_k:
        # a block of the next alive rows against every alive row: as many as may still be kept, fewer when the
        # alive rows are many (the arrays grow with block x rows x 72)
        size = max(1, min(top_k - len(kept), BLOCK_ELEMENTS // len(alive)))
        block = alive[:size]
        lo = np.maximum(first_rows[block, None], first_rows[alive])  # [block, alive]
        hi = np.minimum(last_rows[block, None], last_rows[alive])
        dist = (np.abs(xs[block, None] - xs[alive]) * (spans[block, None] & spans[alive])).sum(axis=-1,
                                                                                                dtype=np.float64)
        overlaps = (hi >= lo) & (dist < threshold * (hi - lo + 1))
        removed = np.zeros(len(alive), dtype=bool)
        for b in range(len(block)):
            if removed[b]:
                continue
            kept.append(int(block[b]))
            if len(kept) == top_k:
                break
            removed[b + 1:] |= overlaps[b, b + 1:]
        alive = alive[len(block):][~removed[len(block):]]
    return order[kept]


def _lane_points(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(xs, valid) [lanes, points] of kept predictions: x / (width - 1) per row and whether that row is a point
    (the official predictions_to_pred masks)."""
    strips = rows.shape[1] - 7
    xs = rows[:, 6:].astype(np.float64)
    start = np.clip(np.rint(rows[:, 2].astype(np.float64) * strips), 0, strips).astype(np.int64)
    length = np.rint(rows[:, 5] * np.float32(strips)).astype(np.int64)
    cut = np.minimum(start + length - 1, strips) + 1  # xs[end + 1:] = -2, with Python's negative index
    cut = np.where(cut < 0, np.maximum(cut + xs.shape[1], 0), cut)
    k = np.arange(xs.shape[1])
    below = k < start[:, None]
    outside = below & ((xs < 0) | (xs > 1))
    # a row below the start stays while no row from it up to the start is outside [0, 1]
    outside_above = np.flip(np.logical_or.accumulate(np.flip(outside, axis=1), axis=1), axis=1)
    return xs, (xs >= 0) & (k < cut[:, None]) & ~(below & outside_above)


def decode_outputs(outputs: Sequence[Any], *, image_size: tuple[float, float], model_width: float | None = None,
                   conf_threshold: float, nms_threshold: float, top_k: int, cut_fraction: float) -> list[Lane]:
    """One image's lane outputs ([predictions]) -> up to `top_k` lanes in an image of `image_size` (H, W), best
    first. `model_width`: the model's input width (the NMS compares x in its pixels; default 800)."""
    if isinstance(outputs, np.ndarray) or len(outputs) != 1:
        raise DecodeError("CLRNet decoding takes one output (predictions); pass [predictions]")
    rows = validate_predictions(outputs[0])
    conf = float(conf_threshold)
    if not 0.0 <= conf <= 1.0:
        raise DecodeError(f"conf_threshold is a score threshold from 0 to 1 (got {conf_threshold!r})")
    if not (math.isfinite(float(nms_threshold)) and float(nms_threshold) >= 0):
        raise DecodeError(f"nms_threshold must be 0 or more pixels (got {nms_threshold!r})")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise DecodeError(f"top_k must be an integer >= 1, got {top_k!r}")
    if not 0.0 <= float(cut_fraction) < 1.0:
        raise DecodeError(f"cut_fraction must be from 0 to below 1 (the part of the frame above the model's view), "
                          f"got {cut_fraction!r}")
    height, width = check_image_size(image_size)
    input_width = float(model_width) if model_width else float(MODEL_WIDTH)

    scores = _scores(rows[:, :2])
    candidates = np.flatnonzero(scores >= np.float32(conf))
    if not len(candidates):
        return []
    picked = candidates[nms_keep(rows[candidates], scores[candidates], float(nms_threshold), int(top_k),
                                 input_width - 1)]
    xs, valid = _lane_points(rows[picked])
    strips = rows.shape[1] - 7
    cut = float(cut_fraction) * height
    ys = cut + (1.0 - np.arange(strips + 1) / strips) * (height - cut)
    points = np.empty((*xs.shape, 2), dtype=np.float32)
    points[..., 0] = xs * width
    points[..., 1] = ys
    points, valid = points[:, ::-1], valid[:, ::-1]  # top to bottom
    return [Lane(points[j][valid[j]], float(scores[index])) for j, (index, count) in
            enumerate(zip(picked, valid.sum(axis=1))) if count > 1]


def decode_clrnet(predictions: Any, *, image_size: tuple[float, float] | None = None, dataset: str = "culane",
                  conf_threshold: float | None = None, nms_threshold: float | None = None,
                  top_k: int | None = None) -> list[Lane]:
    """Lanes of one image from CLRNet's predictions [192, 78] (no batch axis), as floats in an image of
    `image_size` (H, W; default: the data set's frames, 1640x590 CULane, 1280x720 TuSimple, 1276x717 LLAMAS),
    best first. None takes the data set's official test parameter (CULane 0.4 / 50 px / 4 lanes, TuSimple
    0.4 / 50 / 5, LLAMAS 0.45 / 60 / 4: the ResNet-18 config; its DLA-34 one has NMS 50)."""
    if dataset not in OFFICIAL:
        raise DecodeError(f"unknown dataset {dataset!r}; use {', '.join(OFFICIAL)}")
    size, cut_height, conf, nms, lanes = OFFICIAL[dataset]
    return decode_outputs([predictions], image_size=image_size or size, model_width=MODEL_WIDTH,
                          conf_threshold=conf if conf_threshold is None else conf_threshold,
                          nms_threshold=nms if nms_threshold is None else nms_threshold,
                          top_k=lanes if top_k is None else top_k,
                          cut_fraction=cut_fraction(size[0], cut_height))
