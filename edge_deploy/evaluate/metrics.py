"""Lane metrics: CULane F1 (the official definition), TuSimple accuracy, and model-vs-model retention.

Lanes are (N, 2) arrays of (x, y) pixels in the evaluated image (`Lane` objects are accepted too:
their `.points` are used).

CULane, as LaneATT's evaluation script (utils/culane_metric.py, `official=True`) defines it; that
script follows the SCNN C++ tool except for the spline (the C++ fits a natural cubic spline with 50
samples per segment and draws 2-point lanes straight):

* lanes with fewer than 2 points are dropped (predictions and truth alike);
* each lane is resampled by an interpolating parametric spline (scipy `splprep`, s=0, degree
  min(3, N-1), chord-length parameter) at 5 samples per original segment, (N-1)*5+1 points;
* the samples are truncated to integers and drawn as an open polyline `lane_width` px thick
  (cv2, 8-connected, round joins and caps) on an image of `image_size`; a "30 px" lane covers
  31 pixel columns where it is vertical;
* IoU of every prediction/truth mask pair, one-to-one matching by the Hungarian method on 1 - IoU,
  and a matched pair is a true positive when IoU > threshold (strictly greater: both official
  tools compare so); FP = predictions - TP, FN = truth - TP;
* counts are summed over the data set; precision, recall and F1 are 0 when TP is 0.

Deviations, all for inputs on which the official script fails: consecutive duplicate points are
dropped before the spline (splprep refuses them), a pair whose masks are both empty (lanes wholly
outside the image) has IoU 0 instead of NaN, and coordinates are clipped to +-2**20 before the
integer cast. Nothing is rescaled: like the official tools, lanes are drawn at the image's own
size (1640x590 for CULane) with width 30; pass `image_size` for other frames.

Mean |dx| (not part of CULane): for each true-positive pair, |x_pred - x_truth| at every integer
row both lanes span inside the image (x linear between each lane's own points), averaged over all
such rows of the data set.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import cv2
import numpy as np

from ..core import strict_json
from ..errors import EvaluationError

__all__ = [
    "CULANE_IMAGE_SIZE",
    "CULANE_LANE_WIDTH",
    "CULANE_SAMPLES_PER_SEGMENT",
    "TUSIMPLE_PIXEL_THRESHOLD",
    "TUSIMPLE_POINT_THRESHOLD",
    "CULaneEvaluator",
    "CULaneResult",
    "FrameCounts",
    "FrameMatch",
    "LanePair",
    "RetentionComparison",
    "RetentionResult",
    "TuSimpleEvaluator",
    "TuSimpleFrame",
    "TuSimpleResult",
    "culane_ious",
    "culane_match",
    "interpolate_lane",
    "lane_mask",
    "lanes_to_tusimple",
    "tusimple_frame",
    "tusimple_line_accuracy",
    "tusimple_threshold",
]

CULANE_IMAGE_SIZE = (1640, 590)  # (width, height)
CULANE_LANE_WIDTH = 30
CULANE_SAMPLES_PER_SEGMENT = 5
TUSIMPLE_PIXEL_THRESHOLD = 20.0
TUSIMPLE_POINT_THRESHOLD = 0.85
_COORD_LIMIT = float(1 << 20)


# --- lane input --------------------------------------------------------------------------


def _points(lane: Any) -> np.ndarray:
    """A lane (array-like (N, 2) or an object with `.points`) as a finite float64 (N, 2) array."""
    raw = getattr(lane, "points", lane)
    try:
        pts = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise EvaluationError(f"a lane must be an (N, 2) array of (x, y) pixels, got {type(raw).__name__}") from None
    if pts.size == 0:
        return np.zeros((0, 2))
    if pts.ndim != 2 or pts.shape[1] != 2:
        raise EvaluationError(f"a lane must be an (N, 2) array of (x, y) pixels, got shape {pts.shape}")
    if not np.isfinite(pts).all():
        raise EvaluationError("a lane holds NaN or infinite coordinates; lanes must be finite (x, y) pixels")
    return pts


def _distinct(pts: np.ndarray) -> np.ndarray:
    """`pts` without consecutive repeats (the spline fit refuses zero-length steps)."""
    if len(pts) < 2:
        return pts
    keep = np.ones(len(pts), dtype=bool)
    keep[1:] = np.any(pts[1:] != pts[:-1], axis=1)
    return pts[keep]


def _usable(lanes: Sequence[Any]) -> tuple[list[int], list[np.ndarray]]:
    """(input indices, points) of the lanes with at least 2 distinct points."""
    index, kept = [], []
    for i, lane in enumerate(lanes):
        pts = _distinct(_points(lane))
        if len(pts) >= 2:
            index.append(i)
            kept.append(pts)
    return index, kept


def _check_size(image_size: Sequence[int]) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in image_size)
    except (TypeError, ValueError):
        raise EvaluationError(f"image_size must be (width, height), got {image_size!r}") from None
    if width < 1 or height < 1:
        raise EvaluationError(f"image_size must be positive (width, height), got {image_size!r}")
    return width, height


def _check_width(lane_width: int) -> int:
    if isinstance(lane_width, bool) or not isinstance(lane_width, (int, np.integer)) or lane_width < 1:
        raise EvaluationError(f"lane_width must be a positive integer (pixels), got {lane_width!r}")
    return int(lane_width)


def _check_threshold(threshold: float) -> float:
    value = float(threshold)
    if not 0.0 <= value < 1.0:
        raise EvaluationError(f"IoU threshold must be in [0, 1), got {threshold!r}")
    return value


# --- CULane rasterisation ------------------------------------------------------------------


def interpolate_lane(lane: Any, samples_per_segment: int = CULANE_SAMPLES_PER_SEGMENT) -> np.ndarray:
    """The official CULane resampling of a lane: (M-1)*n+1 points of its interpolating spline.

    M is the number of distinct consecutive points; lanes with fewer than 2 come back as they are.
    """
    pts = _distinct(_points(lane))
    if len(pts) < 2:
        return pts
    from scipy.interpolate import splev, splprep

    tck, u = splprep([pts[:, 0], pts[:, 1]], s=0, k=min(3, len(pts) - 1))
    fine = np.linspace(0.0, 1.0, (len(u) - 1) * samples_per_segment + 1)
    return np.stack(splev(fine, tck), axis=1)


@dataclass(frozen=True, eq=False)
class _Mask:
    """A lane's drawn pixels: `pixels` (uint8 0/1) is the image crop starting at (x0, y0)."""

    x0: int
    y0: int
    pixels: np.ndarray
    area: int


def _rasterise(pts: np.ndarray, size: tuple[int, int], lane_width: int) -> _Mask:
    width, height = size
    fine = np.clip(interpolate_lane(pts), -_COORD_LIMIT, _COORD_LIMIT)
    ipts = fine.astype(np.int32)  # truncation toward zero, as the official script casts
    # Everything drawn lies within half the thickness of a vertex: draw into that box only.
    pad = lane_width // 2 + 2
    x0, y0 = max(int(ipts[:, 0].min()) - pad, 0), max(int(ipts[:, 1].min()) - pad, 0)
    x1, y1 = min(int(ipts[:, 0].max()) + pad + 1, width), min(int(ipts[:, 1].max()) + pad + 1, height)
    if x1 <= x0 or y1 <= y0:
        return _Mask(0, 0, np.zeros((0, 0), dtype=np.uint8), 0)
    crop = np.zeros((y1 - y0, x1 - x0), dtype=np.uint8)
    shifted = (ipts - np.array([x0, y0], dtype=np.int32)).reshape(-1, 1, 2)
    # cv2's stubs take a color only as a sequence, cv2 a scalar too (the ignore below)
    cv2.polylines(crop, [shifted], False, 1, thickness=lane_width)  # type: ignore[call-overload]
    return _Mask(x0, y0, crop, int(np.count_nonzero(crop)))


def lane_mask(
    lane: Any, image_size: Sequence[int] = CULANE_IMAGE_SIZE, lane_width: int = CULANE_LANE_WIDTH
) -> np.ndarray:
    """The full-size boolean (H, W) mask the CULane metric draws for `lane` (for inspection and tests)."""
    width, height = _check_size(image_size)
    out = np.zeros((height, width), dtype=bool)
    pts = _distinct(_points(lane))
    if len(pts) < 2:
        return out
    mask = _rasterise(pts, (width, height), _check_width(lane_width))
    h, w = mask.pixels.shape
    out[mask.y0 : mask.y0 + h, mask.x0 : mask.x0 + w] = mask.pixels > 0
    return out


def _iou(a: _Mask, b: _Mask) -> float:
    ax1, ay1 = a.x0 + a.pixels.shape[1], a.y0 + a.pixels.shape[0]
    bx1, by1 = b.x0 + b.pixels.shape[1], b.y0 + b.pixels.shape[0]
    x0, y0, x1, y1 = max(a.x0, b.x0), max(a.y0, b.y0), min(ax1, bx1), min(ay1, by1)
    inter = 0
    if x1 > x0 and y1 > y0:
        pa = a.pixels[y0 - a.y0 : y1 - a.y0, x0 - a.x0 : x1 - a.x0]
        pb = b.pixels[y0 - b.y0 : y1 - b.y0, x0 - b.x0 : x1 - b.x0]
        inter = int(np.count_nonzero(pa & pb))
    union = a.area + b.area - inter
    return inter / union if union else 0.0


@dataclass(frozen=True, eq=False)
class _Drawn:
    """A frame's lanes as the metric sees them: input indices, points and masks of the kept lanes."""

    index: list[int]
    points: list[np.ndarray]
    masks: list[_Mask]


def _draw(lanes: Sequence[Any], size: tuple[int, int], lane_width: int) -> _Drawn:
    index, points = _usable(lanes)
    return _Drawn(index, points, [_rasterise(p, size, lane_width) for p in points])


def _iou_matrix(preds: _Drawn, truths: _Drawn) -> np.ndarray:
    ious = np.zeros((len(preds.masks), len(truths.masks)))
    for i, a in enumerate(preds.masks):
        for j, b in enumerate(truths.masks):
            ious[i, j] = _iou(a, b)
    return ious


def culane_ious(
    predictions: Sequence[Any],
    truth: Sequence[Any],
    *,
    image_size: Sequence[int] = CULANE_IMAGE_SIZE,
    lane_width: int = CULANE_LANE_WIDTH,
) -> np.ndarray:
    """IoU (P, G) of every prediction/truth pair of drawn lanes; rows and columns follow the inputs.

    Lanes the metric drops (fewer than 2 distinct points) get IoU 0 with everything.
    """
    size, width = _check_size(image_size), _check_width(lane_width)
    preds, truths = _draw(predictions, size, width), _draw(truth, size, width)
    out = np.zeros((len(predictions), len(truth)))
    out[np.ix_(preds.index, truths.index)] = _iou_matrix(preds, truths)
    return out


# --- CULane matching and counts --------------------------------------------------------


def _abs_dx(a: np.ndarray, b: np.ndarray, height: int) -> tuple[float, int]:
    """(sum of |x_a - x_b|, rows) over the integer rows both lanes span inside the image."""
    lo = max(a[:, 1].min(), b[:, 1].min(), 0.0)
    hi = min(a[:, 1].max(), b[:, 1].max(), height - 1.0)
    if hi < lo:
        return 0.0, 0
    rows = np.arange(math.ceil(lo), math.floor(hi) + 1, dtype=np.float64)
    if rows.size == 0:
        return 0.0, 0
    oa, ob = np.argsort(a[:, 1], kind="stable"), np.argsort(b[:, 1], kind="stable")
    xa = np.interp(rows, a[oa, 1], a[oa, 0])
    xb = np.interp(rows, b[ob, 1], b[ob, 0])
    return float(np.abs(xa - xb).sum()), int(rows.size)


@dataclass(frozen=True)
class LanePair:
    """One Hungarian pair: indices into the frame's prediction and truth lists, IoU, |dx| over shared rows."""

    pred: int
    truth: int
    iou: float
    dx_sum: float
    dx_rows: int


@dataclass(frozen=True)
class FrameCounts:
    """A frame's CULane counts at one threshold; dx_* cover the true-positive pairs."""

    tp: int
    fp: int
    fn: int
    dx_sum: float = 0.0
    dx_rows: int = 0


@dataclass(frozen=True, eq=False)
class FrameMatch:
    """A frame's Hungarian matching (threshold-free); `counts(t)` gives TP/FP/FN at IoU > t.

    n_pred / n_truth count the lanes the metric keeps (at least 2 distinct points);
    pair indices refer to the lists as given.
    """

    n_pred: int
    n_truth: int
    pairs: tuple[LanePair, ...]

    def counts(self, threshold: float = 0.5) -> FrameCounts:
        threshold = _check_threshold(threshold)
        hits = [p for p in self.pairs if p.iou > threshold]
        tp = len(hits)
        return FrameCounts(
            tp=tp,
            fp=self.n_pred - tp,
            fn=self.n_truth - tp,
            dx_sum=float(sum(p.dx_sum for p in hits)),
            dx_rows=int(sum(p.dx_rows for p in hits)),
        )


def culane_match(
    predictions: Sequence[Any],
    truth: Sequence[Any],
    *,
    image_size: Sequence[int] = CULANE_IMAGE_SIZE,
    lane_width: int = CULANE_LANE_WIDTH,
) -> FrameMatch:
    """Match one frame's predicted lanes to its truth lanes as the CULane metric does."""
    size, width = _check_size(image_size), _check_width(lane_width)
    return _match(_draw(predictions, size, width), _draw(truth, size, width), size[1])


def _match(preds: _Drawn, truths: _Drawn, height: int) -> FrameMatch:
    if not preds.masks or not truths.masks:
        return FrameMatch(len(preds.masks), len(truths.masks), ())
    from scipy.optimize import linear_sum_assignment

    ious = _iou_matrix(preds, truths)
    rows, cols = linear_sum_assignment(1.0 - ious)
    pairs = []
    for r, c in zip(rows.tolist(), cols.tolist()):
        dx_sum, dx_rows = _abs_dx(preds.points[r], truths.points[c], height) if ious[r, c] > 0 else (0.0, 0)
        pairs.append(LanePair(preds.index[r], truths.index[c], float(ious[r, c]), dx_sum, dx_rows))
    return FrameMatch(len(preds.masks), len(truths.masks), tuple(pairs))


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


@dataclass(frozen=True)
class CULaneResult:
    """CULane totals over a data set at one IoU threshold; mean_abs_dx is None without matched rows."""

    iou_threshold: float
    lane_width: int
    image_size: tuple[int, int]
    frames: int
    tp: int
    fp: int
    fn: int
    precision: float
    recall: float
    f1: float
    mean_abs_dx: float | None
    dx_rows: int

    @classmethod
    def from_counts(
        cls,
        counts: Iterable[FrameCounts],
        *,
        iou_threshold: float = 0.5,
        lane_width: int = CULANE_LANE_WIDTH,
        image_size: Sequence[int] = CULANE_IMAGE_SIZE,
    ) -> CULaneResult:
        """Sum per-frame counts (the official aggregation: totals first, then the ratios)."""
        frames = tp = fp = fn = rows = 0
        dx = 0.0
        for c in counts:
            frames += 1
            tp, fp, fn = tp + c.tp, fp + c.fp, fn + c.fn
            dx, rows = dx + c.dx_sum, rows + c.dx_rows
        if tp:
            precision, recall = tp / (tp + fp), tp / (tp + fn)
            f1 = 2 * precision * recall / (precision + recall)
        else:
            precision = recall = f1 = 0.0
        return cls(
            iou_threshold=float(iou_threshold),
            lane_width=_check_width(lane_width),
            image_size=_check_size(image_size),
            frames=frames,
            tp=tp,
            fp=fp,
            fn=fn,
            precision=precision,
            recall=recall,
            f1=f1,
            mean_abs_dx=dx / rows if rows else None,
            dx_rows=rows,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["image_size"] = list(self.image_size)
        return out

    def to_json(self) -> str:
        return strict_json.dumps(self.to_dict())


class CULaneEvaluator:
    """Accumulates frames and scores them at one or more IoU thresholds (0.5 and 0.7 by default).

    >>> ev = CULaneEvaluator()
    >>> for preds, truth in frames: ev.add(preds, truth)
    >>> f1_at_05 = ev.results()[0].f1
    """

    def __init__(
        self,
        *,
        thresholds: Sequence[float] = (0.5, 0.7),
        image_size: Sequence[int] = CULANE_IMAGE_SIZE,
        lane_width: int = CULANE_LANE_WIDTH,
    ) -> None:
        self.thresholds = tuple(_check_threshold(t) for t in thresholds)
        if not self.thresholds:
            raise EvaluationError("CULaneEvaluator needs at least one IoU threshold")
        self.image_size = _check_size(image_size)
        self.lane_width = _check_width(lane_width)
        self.matches: list[FrameMatch] = []

    def add(self, predictions: Sequence[Any], truth: Sequence[Any]) -> FrameMatch:
        """Score one frame and keep its matching."""
        return self._add(self._draw(predictions), self._draw(truth))

    def add_match(self, match: FrameMatch) -> FrameMatch:
        """Keep a frame's matching made by an evaluator of the same image size and lane width (`add`'s result):
        a frame scored in several subsets is drawn and matched once."""
        self.matches.append(match)
        return match

    def _draw(self, lanes: Sequence[Any]) -> _Drawn:
        return _draw(lanes, self.image_size, self.lane_width)

    def _add(self, preds: _Drawn, truths: _Drawn) -> FrameMatch:
        match = _match(preds, truths, self.image_size[1])
        self.matches.append(match)
        return match

    def results(self) -> list[CULaneResult]:
        """One result per threshold, in the order given."""
        return [
            CULaneResult.from_counts(
                (m.counts(t) for m in self.matches),
                iou_threshold=t,
                lane_width=self.lane_width,
                image_size=self.image_size,
            )
            for t in self.thresholds
        ]


# --- retention: a candidate model against a reference model -----------------------------


@dataclass(frozen=True)
class RetentionResult:
    """How much of a reference model's lane quality a candidate (e.g. INT8 engine) keeps, at one threshold.

    reference / candidate: each scored against the truth (None when no frame had truth).
    agreement: the candidate scored with the reference's lanes as truth; its mean_abs_dx is the
    mean |dx| between the two models' matched lanes. lane_count_agreement: fraction of frames
    where both models found the same number of lanes.
    """

    iou_threshold: float
    frames: int
    frames_with_truth: int
    reference: CULaneResult | None
    candidate: CULaneResult | None
    f1_retention: float | None
    lane_count_agreement: float | None
    agreement: CULaneResult
    mean_abs_dx: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "iou_threshold": self.iou_threshold,
            "frames": self.frames,
            "frames_with_truth": self.frames_with_truth,
            "reference": self.reference.to_dict() if self.reference else None,
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "f1_retention": self.f1_retention,
            "lane_count_agreement": self.lane_count_agreement,
            "agreement": self.agreement.to_dict(),
            "mean_abs_dx": self.mean_abs_dx,
        }

    def to_json(self) -> str:
        return strict_json.dumps(self.to_dict())


class RetentionComparison:
    """Compares two prediction sets on the same frames (reference vs candidate), with or without truth."""

    def __init__(
        self,
        *,
        thresholds: Sequence[float] = (0.5, 0.7),
        image_size: Sequence[int] = CULANE_IMAGE_SIZE,
        lane_width: int = CULANE_LANE_WIDTH,
    ) -> None:
        self.reference, self.candidate, self.agreement = (
            CULaneEvaluator(thresholds=thresholds, image_size=image_size, lane_width=lane_width) for _ in range(3))
        self.frames = 0
        self.same_count = 0

    def add(self, reference: Sequence[Any], candidate: Sequence[Any], truth: Sequence[Any] | None = None) -> None:
        """One frame: both models' lanes, and the truth lanes when the frame has them."""
        ref, cand = self.agreement._draw(reference), self.agreement._draw(candidate)  # each set drawn once
        self.frames += 1
        self.same_count += len(ref.masks) == len(cand.masks)
        self.agreement._add(cand, ref)
        if truth is not None:
            drawn_truth = self.agreement._draw(truth)
            self.reference._add(ref, drawn_truth)
            self.candidate._add(cand, drawn_truth)

    def results(self) -> list[RetentionResult]:
        """One result per threshold."""
        with_truth = len(self.reference.matches)
        out = []
        for ref, cand, agree in zip(self.reference.results(), self.candidate.results(), self.agreement.results()):
            out.append(
                RetentionResult(
                    iou_threshold=agree.iou_threshold,
                    frames=self.frames,
                    frames_with_truth=with_truth,
                    reference=ref if with_truth else None,
                    candidate=cand if with_truth else None,
                    f1_retention=cand.f1 / ref.f1 if with_truth and ref.f1 else None,
                    lane_count_agreement=self.same_count / self.frames if self.frames else None,
                    agreement=agree,
                    mean_abs_dx=agree.mean_abs_dx,
                )
            )
        return out


# --- TuSimple ----------------------------------------------------------------------------
# The official LaneEval (tusimple-benchmark evaluate/lane.py): lanes are x values at the label's
# h_samples, negative = no point. A truth lane's threshold is 20 px / cos(angle) with the angle
# from a least-squares fit x(y) over its points; a prediction's accuracy on it is the share of
# h_samples where |x_pred - x_truth| < threshold (missing points count as -100, so two missing
# points agree); the truth lane is matched when its best accuracy >= 0.85. Matching is not
# one-to-one (one prediction may match several truth lanes; FP can then go negative), frames with
# more than 4 truth lanes drop the worst one, and a frame with more than truth + 2 predictions
# scores (accuracy 0, FP 0, FN 1). The runtime gate of the online benchmark is not applied.


def lanes_to_tusimple(lanes: Sequence[Any], h_samples: Sequence[float]) -> list[np.ndarray]:
    """Polylines -> TuSimple form: x at each h_sample (linear between points), -2 outside the lane or x < 0."""
    ys = np.asarray(h_samples, dtype=np.float64)
    out = []
    for lane in lanes:
        pts = _points(lane)
        xs = np.full(ys.shape, -2.0)
        if len(pts):
            order = np.argsort(pts[:, 1], kind="stable")
            py, px = pts[order, 1], pts[order, 0]
            inside = (ys >= py[0]) & (ys <= py[-1])
            xs[inside] = np.interp(ys[inside], py, px)
            xs[xs < 0] = -2.0
        out.append(xs)
    return out


def tusimple_threshold(truth_xs: Sequence[float] | np.ndarray, h_samples: Sequence[float]) -> float:
    """20 px scaled by 1 / cos(angle of the truth lane), the angle of its least-squares x(y) line."""
    xs, ys = np.asarray(truth_xs, dtype=np.float64), np.asarray(h_samples, dtype=np.float64)
    valid = xs >= 0
    xs, ys = xs[valid], ys[valid]
    slope = 0.0
    if len(xs) > 1:
        dy = ys - ys.mean()
        var = float(dy @ dy)
        slope = float(dy @ (xs - xs.mean())) / var if var > 0 else 0.0
    return TUSIMPLE_PIXEL_THRESHOLD / math.cos(math.atan(slope))


def tusimple_line_accuracy(pred_xs: Sequence[float] | np.ndarray, truth_xs: Sequence[float] | np.ndarray,
                           threshold: float) -> float:
    """Share of h_samples where the prediction is within `threshold` px of the truth (missing = -100)."""
    p = np.asarray(pred_xs, dtype=np.float64)
    g = np.asarray(truth_xs, dtype=np.float64)
    p = np.where(p >= 0, p, -100.0)
    g = np.where(g >= 0, g, -100.0)
    return float(np.count_nonzero(np.abs(p - g) < threshold)) / len(g) if len(g) else 0.0


@dataclass(frozen=True)
class TuSimpleFrame:
    """One frame's official TuSimple scores (accuracy, fp and fn rates) and raw counts."""

    accuracy: float
    fp: float
    fn: float
    matched: int
    n_pred: int
    n_truth: int


def tusimple_frame(
    predictions: Sequence[Sequence[float] | np.ndarray], truth: Sequence[Sequence[float] | np.ndarray],
    h_samples: Sequence[float],
) -> TuSimpleFrame:
    """Score one frame as the official LaneEval.bench does (lanes as x per h_sample, negative = none)."""
    n = len(h_samples)
    preds = [np.asarray(p, dtype=np.float64) for p in predictions]
    gts = [np.asarray(g, dtype=np.float64) for g in truth]
    for lane in preds + gts:
        if lane.shape != (n,):
            raise EvaluationError(f"a TuSimple lane has {lane.size} x values for {n} h_samples; they must match")
    if len(gts) + 2 < len(preds):
        return TuSimpleFrame(0.0, 0.0, 1.0, 0, len(preds), len(gts))
    best, fn, matched = [], 0, 0
    for g in gts:
        thr = tusimple_threshold(g, h_samples)
        acc = max((tusimple_line_accuracy(p, g, thr) for p in preds), default=0.0)
        if acc < TUSIMPLE_POINT_THRESHOLD:
            fn += 1
        else:
            matched += 1
        best.append(acc)
    fp = len(preds) - matched
    if len(gts) > 4 and fn > 0:
        fn -= 1
    total = sum(best) - (min(best) if len(gts) > 4 else 0.0)
    scale = max(min(4.0, len(gts)), 1.0)
    return TuSimpleFrame(
        accuracy=total / scale,
        fp=fp / len(preds) if preds else 0.0,
        fn=fn / scale,
        matched=matched,
        n_pred=len(preds),
        n_truth=len(gts),
    )


@dataclass(frozen=True)
class TuSimpleResult:
    """Official TuSimple scores: the per-frame accuracy, FP and FN averaged over frames."""

    frames: int
    accuracy: float
    fp: float
    fn: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return strict_json.dumps(self.to_dict())


class TuSimpleEvaluator:
    """Accumulates TuSimple frames (x per h_sample; see `lanes_to_tusimple` for polylines)."""

    def __init__(self) -> None:
        self.frames: list[TuSimpleFrame] = []

    def add(
        self, predictions: Sequence[Sequence[float] | np.ndarray], truth: Sequence[Sequence[float] | np.ndarray],
        h_samples: Sequence[float],
    ) -> TuSimpleFrame:
        frame = tusimple_frame(predictions, truth, h_samples)
        self.frames.append(frame)
        return frame

    def result(self) -> TuSimpleResult:
        n = len(self.frames)
        return TuSimpleResult(
            frames=n,
            accuracy=_ratio(sum(f.accuracy for f in self.frames), n),
            fp=_ratio(sum(f.fp for f in self.frames), n),
            fn=_ratio(sum(f.fn for f in self.frames), n),
        )
