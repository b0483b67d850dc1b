"""LaneATT raw output (N x 77 per image) -> lanes in image pixels.

LaneATT's decoder (the family's `decoder_module`): LaneDetClient, the server-side
postprocess model, evaluate and the FP16/plan lane checks all reach `decode_lanes`
through `decode_outputs`, the entry point every family's decoder module has. The rules are the
ones in docs/design.md ("Decoding"); everything is vectorised with NumPy.

This module is self-contained on purpose (numpy, the standard library and
`lane.py` only) because Triton Python-backend models copy it into
their model directory. Errors are `DecodeError` (a ValueError) with one-line
messages; edge_deploy wraps them in its own error family.

Row layout: [logit_neg, logit_pos, start_y, start_x, length, x_0 .. x_71], x_k
in model-input pixels (640 wide) at y_k = linspace(1, 0, 72)[k] (k = 0 is the
image bottom).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

try:
    from ..lane import DecodeError, Lane, check_image_size
except ImportError:  # the flat copy beside a Triton Python-backend model (no package around it)
    from lane import DecodeError, Lane, check_image_size  # type: ignore[no-redef]

N_OFFSETS = 72
N_STRIPS = N_OFFSETS - 1
ROW_WIDTH = 5 + N_OFFSETS
MODEL_WIDTH = 640
ANCHOR_YS = np.linspace(1.0, 0.0, N_OFFSETS)
_OFFSET_INDEX = np.arange(N_OFFSETS)
# _SPAN_MASK[s, e + 1, k]: s <= k <= e, for NMS ranges clamped to s in 0..72, e in -1..71 (the same pairs overlap)
_SPAN_MASK = ((_OFFSET_INDEX >= np.arange(N_OFFSETS + 1)[:, None, None])
              & (_OFFSET_INDEX < np.arange(N_OFFSETS + 1)[:, None]))
_RANGE_LOW, _RANGE_HIGH = np.array([[0.0], [-1.0]]), np.array([[float(N_OFFSETS)], [float(N_OFFSETS - 1)]])
_START_LENGTH_SCALE = np.array([[float(N_OFFSETS - 1)], [1.0]])  # rows' (start_y, length) -> strip units
# CULane's official test parameters: the decode defaults of the LaneATT family (edge_deploy.lanedet.laneatt).
CONF_THRESHOLD, NMS_THRESHOLD, TOP_K = 0.5, 50.0, 4
# Tolerance of "each row sums to 1" when telling probabilities from logits
# (FP16 outputs are off by a few 1e-4).
PROB_SUM_TOL = 1e-3
_MAX_BLOCK = 512  # NMS block rows: small temporaries stay in cache
_RANKED_FIRST = 64  # rows ranked before the first NMS scan; the rest only when the NMS needs them
_INDEX_LIMIT = 1 << 20  # clamp for start/end indices so absurd values cannot overflow int64

__all__ = [
    "ANCHOR_YS",
    "MODEL_WIDTH",
    "ROW_WIDTH",
    "DecodeError",
    "Lane",
    "decode_batch",
    "decode_lanes",
    "decode_outputs",
    "lane_scores",
    "nms_keep",
    "rows_to_points",
    "select_rows",
    "validate_raw",
]


# --- validation ------------------------------------------------------------------------


def validate_raw(raw: Any, *, batched: bool = False) -> np.ndarray:
    """Return `raw` as a real-valued ndarray of shape (N, 77) ((B, N, 77) if batched) or raise DecodeError."""
    arr = np.asarray(raw)
    want = "(B, N, 77)" if batched else "(N, 77)"
    ndim = 3 if batched else 2
    if arr.dtype.kind not in "fiu":
        raise DecodeError(f"raw lane output has dtype {arr.dtype}; expected a float array of shape {want}")
    if arr.ndim != ndim or arr.shape[-1] != ROW_WIDTH:
        raise DecodeError(
            f"raw lane output has shape {tuple(arr.shape)}; expected {want} with 77 = 2 logits + "
            "start_y, start_x, length + 72 x offsets (a LaneATT output)"
        )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise DecodeError("raw lane output contains NaN or infinite values; check the model (FP16 overflow?)")
    return arr


def _check_params(conf_threshold: float, nms_threshold: float, top_k: int) -> tuple[float, float, int]:
    try:
        conf = float(conf_threshold)
        nms = float(nms_threshold)
    except (TypeError, ValueError):
        raise DecodeError(
            f"conf_threshold and nms_threshold must be numbers, got {conf_threshold!r} and {nms_threshold!r}"
        ) from None
    if not math.isfinite(conf):
        raise DecodeError(f"conf_threshold must be a finite number, got {conf_threshold!r}")
    if not math.isfinite(nms) or nms < 0:
        raise DecodeError(f"nms_threshold must be a finite number >= 0 (pixels), got {nms_threshold!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise DecodeError(f"top_k must be an integer >= 1, got {top_k!r}")
    return conf, nms, int(top_k)


def _check_size(image_size: Any) -> tuple[float, float] | None:
    return None if image_size is None else check_image_size(image_size)


# --- the three steps -------------------------------------------------------------------


def lane_scores(raw: np.ndarray) -> np.ndarray:
    """Per-row confidence (float64): softmax(col0, col1)[1], or col1 if the rows already hold probabilities."""
    c0 = raw[:, 0].astype(np.float64)
    c1 = raw[:, 1].astype(np.float64)
    # Every row in [0, 1] and summing to 1; logits fail the first test almost always, so it comes first.
    if len(c0) and min(c0.min(), c1.min()) >= 0 and max(c0.max(), c1.max()) <= 1 \
            and bool((np.abs(c0 + c1 - 1.0) <= PROB_SUM_TOL).all()):
        return c1
    with np.errstate(over="ignore", under="ignore"):
        return 1.0 / (1.0 + np.exp(c0 - c1))


def _clamp(values: np.ndarray) -> np.ndarray:
    """Indices kept inside +-_INDEX_LIMIT (np.clip's Python wrapper costs more than the work on a few rows)."""
    return np.minimum(np.maximum(values, -_INDEX_LIMIT), _INDEX_LIMIT)


def _nms_ranges(c2_c4: np.ndarray) -> np.ndarray:
    """NMS index range [lo, hi] per row of (col2, col4) (M x 2): lo = round-half-up(col2*71), hi = the CUDA
    kernel's end, clipped to 0..71; (2, M) int64."""
    c2_c4 = c2_c4.astype(np.float64)
    c4 = c2_c4[:, 1]
    ranges = np.empty((2, len(c2_c4)))
    np.floor(c2_c4[:, 0] * N_STRIPS + 0.5, out=ranges[0])
    np.trunc(ranges[0] + c4 - 1.0 + 0.5 - (c4 < 1.0), out=ranges[1])
    # x_k exists only for k in 0..71: a start below 0 (col2 < 0, not a LaneATT output) begins at 0. A start past
    # 71 or an end below 0 overlaps nothing, as 72 and -1 do.
    return np.minimum(np.maximum(ranges, _RANGE_LOW), _RANGE_HIGH).astype(np.int64)


def _suppressed(
    a_x: np.ndarray, a_lo: int, a_hi: int, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, nms_threshold: float
) -> np.ndarray:
    """Which rows (x: float64 M x 72, ranges lo/hi) the kept row (a_x, [a_lo, a_hi]) suppresses."""
    if a_hi < a_lo or len(x) == 0:
        return np.zeros(len(x), dtype=bool)
    # Only a's own range can contribute; mask each pair's [start, end] inside it.
    d = x[:, a_lo : a_hi + 1] - a_x[a_lo : a_hi + 1]
    np.abs(d, out=d)
    if lo.max() <= a_lo and hi.min() >= a_hi:  # every pair overlaps on all of a's range
        return d.sum(axis=1) < nms_threshold * (a_hi - a_lo + 1)
    start = np.maximum(lo, a_lo)
    end = np.minimum(hi, a_hi)
    d *= _SPAN_MASK[start, end + 1, a_lo : a_hi + 1]
    width = end - start + 1
    suppressed = d.sum(axis=1) < nms_threshold * width
    # a pair without a common range (width <= 0) sums to 0: never below nms_threshold * width unless that is < 0
    return suppressed if nms_threshold >= 0 else suppressed & (width > 0)


def nms_keep(
    rows: np.ndarray, *, order: np.ndarray | None = None, nms_threshold: float = NMS_THRESHOLD, top_k: int = TOP_K
) -> np.ndarray:
    """Greedy lane NMS over `rows` (M x 77); indices into `rows` of the kept rows, in priority order.

    order: the row indices to consider, highest priority first (default: all rows as given).

    Row b is suppressed by a kept row a when, over their common range [start, end],
    sum |x_k(a) - x_k(b)| < nms_threshold * (end - start + 1); rows without a common range
    never suppress each other. Stops after `top_k` rows are kept.

    Rows are scanned in blocks of growing size, each row compared once with each kept
    row, so the cost is O(top_k * rows scanned * 72) and scanning stops as soon as
    `top_k` rows are kept.
    """
    idx = np.arange(len(rows)) if order is None else np.asarray(order, dtype=np.int64)
    m = len(idx)
    kept: list[int] = []
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = _nms_ranges(rows[idx, 2:5:2])
    kept_x: list[np.ndarray] = []
    pos, size = 0, 16
    while pos < m and len(kept) < top_k:
        stop = min(m, pos + size)
        x = rows[idx[pos:stop], 5:].astype(np.float64)  # gathered per block: scanning may stop early
        b_lo, b_hi = lo[pos:stop], hi[pos:stop]
        alive = np.empty(stop - pos, dtype=bool)
        alive.fill(True)
        for a, a_x in zip(kept, kept_x):
            alive &= ~_suppressed(a_x, lo[a], hi[a], x, b_lo, b_hi, nms_threshold)
        q = 0
        while len(kept) < top_k:
            q += int(alive[q:].argmax())  # the method: np.argmax's Python wrapper costs more than the work
            if not alive[q]:
                break
            kept.append(pos + q)
            kept_x.append(x[q])
            q += 1
            if q >= len(alive) or len(kept) >= top_k:
                break
            a = pos + q - 1
            alive[q:] &= ~_suppressed(x[q - 1], lo[a], hi[a], x[q:], b_lo[q:], b_hi[q:], nms_threshold)
        pos, size = stop, min(size * 2, _MAX_BLOCK)
    return idx[np.asarray(kept, dtype=np.int64)]


def select_rows(
    raw: Any, *, conf_threshold: float = CONF_THRESHOLD, nms_threshold: float = NMS_THRESHOLD, top_k: int = TOP_K
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `raw` (N x 77) that survive threshold + NMS: (row indices in output order, their scores)."""
    conf, nms, k = _check_params(conf_threshold, nms_threshold, top_k)
    return _select(validate_raw(raw), conf, nms, k)


def _select(arr: np.ndarray, conf: float, nms: float, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = lane_scores(arr)
    cand = (scores > conf).nonzero()[0]
    head = _best_first(scores, cand, max(_RANKED_FIRST, 16 * top_k))
    if head is not None:
        # The greedy NMS over the head of the score order decides those rows as over the whole order; only when
        # it keeps fewer than top_k is the rest needed (then the whole order is ranked and scanned).
        kept = nms_keep(arr, order=head, nms_threshold=nms, top_k=top_k)
        if len(kept) >= top_k:
            return kept, scores[kept]
    order = cand[(-scores[cand]).argsort(kind="stable")]
    kept = nms_keep(arr, order=order, nms_threshold=nms, top_k=top_k)
    return kept, scores[kept]


def _best_first(scores: np.ndarray, cand: np.ndarray, count: int) -> np.ndarray | None:
    """The first (at least) `count` of `cand` in the full order (score descending, index ascending on ties),
    without sorting all of them; None when there are not more than `count` (sort them all)."""
    if len(cand) <= count:
        return None
    s = scores[cand]
    floor = s[(-s).argpartition(count - 1)[:count]].min()
    head = cand[s >= floor]  # every tie of the floor too, so the order is the full order's prefix
    return head[(-scores[head]).argsort(kind="stable")]


def rows_to_points(
    rows: np.ndarray, image_size: tuple[float, float] | None = (360, 640), *, model_width: float = MODEL_WIDTH
) -> list[np.ndarray]:
    """Points (float32 (n, 2), top to bottom) of each row in `rows` (K x 77); n may be < 2.

    image_size=(H, W) scales to original-image pixels; None keeps normalised [0, 1] coordinates.
    """
    size = _check_size(image_size)
    if len(rows) == 0:
        return []
    xs = rows[:, 5:].astype(np.float64) / float(model_width)
    # np.rint rounds half to even, like Python's round().
    start, length = _clamp(np.rint(rows[:, 2:5:2].astype(np.float64).T * _START_LENGTH_SCALE)).astype(np.int64)
    end = np.minimum(start + length - 1, N_STRIPS)
    k = _OFFSET_INDEX
    # Below start only the unbroken in-image run from start-1 downwards survives: find the
    # highest out-of-image point below start (-1: none); everything under it is dropped.
    left_edge = xs >= 0
    bad = (k < start[:, None]) & ~(left_edge & (xs <= 1))
    last_bad = np.where(bad, k, -1).max(axis=1)
    keep = (k > last_bad[:, None]) & (k <= end[:, None]) & left_edge  # last_bad < start: k >= start passes
    h, w = size if size is not None else (1.0, 1.0)
    ys = ANCHOR_YS[::-1] * h
    out = []
    for row_keep, row_xs in zip(keep[:, ::-1], xs[:, ::-1]):  # reversed: top (k = 71) first
        pts = np.empty((int(np.count_nonzero(row_keep)), 2), dtype=np.float32)
        pts[:, 0] = row_xs[row_keep] * w
        pts[:, 1] = ys[row_keep]
        out.append(pts)
    return out


def decode_lanes(
    raw: Any,
    *,
    conf_threshold: float = CONF_THRESHOLD,
    nms_threshold: float = NMS_THRESHOLD,
    top_k: int = TOP_K,
    image_size: tuple[float, float] | None = (360, 640),
    model_width: float = MODEL_WIDTH,
) -> list[Lane]:
    """Decode one image's raw LaneATT output (N x 77) into at most `top_k` lanes, best first.

    image_size=(H, W) of the original image (points are scaled to it); None gives
    normalised [0, 1] coordinates. Raises DecodeError (a ValueError) on bad input.
    """
    conf, nms, k = _check_params(conf_threshold, nms_threshold, top_k)
    size = _check_size(image_size)
    if not (isinstance(model_width, (int, float)) and math.isfinite(model_width) and model_width > 0):
        raise DecodeError(f"model_width must be the model's input width in pixels (> 0), got {model_width!r}")
    arr = validate_raw(raw)
    kept, scores = _select(arr, conf, nms, k)
    points = rows_to_points(arr[kept], size, model_width=model_width)
    return [Lane(pts, score) for pts, score in zip(points, scores.tolist()) if len(pts) >= 2]


def decode_batch(
    raw: Any,
    *,
    conf_threshold: float = CONF_THRESHOLD,
    nms_threshold: float = NMS_THRESHOLD,
    top_k: int = TOP_K,
    image_size: tuple[float, float] | Sequence[tuple[float, float]] | None = (360, 640),
    model_width: float = MODEL_WIDTH,
) -> list[list[Lane]]:
    """`decode_lanes` for each image of a (B, N, 77) output; image_size is one (H, W) or one per image."""
    arr = validate_raw(raw, batched=True)
    sizes: list[Any]
    if image_size is None or (len(image_size) == 2 and np.ndim(image_size[0]) == 0):
        sizes = [image_size] * len(arr)
    else:
        sizes = list(image_size)
        if len(sizes) != len(arr):
            raise DecodeError(f"decode_batch got {len(sizes)} image sizes for a batch of {len(arr)} outputs")
    return [
        decode_lanes(
            one,
            conf_threshold=conf_threshold,
            nms_threshold=nms_threshold,
            top_k=top_k,
            image_size=size,
            model_width=model_width,
        )
        for one, size in zip(arr, sizes)
    ]


def decode_outputs(
    outputs: Sequence[Any],
    *,
    conf_threshold: float,
    nms_threshold: float,
    top_k: int,
    image_size: tuple[float, float],
    model_width: float,
) -> list[Lane]:
    """The family decoder contract: one image's lane outputs (LaneATT: the N x 77 rows) -> lanes."""
    return decode_lanes(outputs[0], conf_threshold=conf_threshold, nms_threshold=nms_threshold, top_k=top_k,
                        image_size=image_size, model_width=model_width)
