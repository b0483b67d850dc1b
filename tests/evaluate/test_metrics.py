"""CULane, TuSimple and retention metrics against hand-made cases and an independent reference.

The reference CULane scorer below shares no code with the product: it rasterises each lane by
testing every pixel's distance to every segment (the lanes it sees are dense and smooth, so the
official spline resampling changes nothing it can measure), computes IoU with plain sums, and
finds the one-to-one matching by trying every assignment.
"""
from __future__ import annotations

import itertools
import json
import math

import cv2
import numpy as np
import pytest

from edge_deploy.errors import EvaluationError
from edge_deploy.evaluate import metrics as m
from edge_deploy.lanedet.laneatt.decode import Lane

W, H = 1640, 590
HALF = 15.0  # half of the CULane lane width (30 px)


# --- independent reference --------------------------------------------------------------


def ref_mask(lane: np.ndarray) -> np.ndarray:
    """Pixels (integer centres) within 15 px of the lane's polyline (vertices truncated like the official cast)."""
    pts = np.trunc(np.asarray(lane, dtype=np.float64))
    mask = np.zeros((H, W), dtype=bool)
    for (ax, ay), (bx, by) in itertools.pairwise(pts):
        x0, x1 = int(max(min(ax, bx) - HALF - 1, 0)), int(min(max(ax, bx) + HALF + 2, W))
        y0, y1 = int(max(min(ay, by) - HALF - 1, 0)), int(min(max(ay, by) + HALF + 2, H))
        if x1 <= x0 or y1 <= y0:
            continue
        gy, gx = np.mgrid[y0:y1, x0:x1].astype(np.float64)
        dx, dy = bx - ax, by - ay
        length2 = dx * dx + dy * dy
        t = np.clip(((gx - ax) * dx + (gy - ay) * dy) / length2, 0.0, 1.0) if length2 else np.zeros_like(gx)
        dist = np.hypot(gx - (ax + t * dx), gy - (ay + t * dy))
        mask[y0:y1, x0:x1] |= dist <= HALF
    return mask


def ref_ious(preds: list[np.ndarray], truths: list[np.ndarray]) -> np.ndarray:
    pm, tm = [ref_mask(p) for p in preds], [ref_mask(t) for t in truths]
    out = np.zeros((len(pm), len(tm)))
    for i, a in enumerate(pm):
        for j, b in enumerate(tm):
            union = int((a | b).sum())
            out[i, j] = int((a & b).sum()) / union if union else 0.0
    return out


def ref_best_assignment(ious: np.ndarray) -> list[tuple[int, int]]:
    """The complete one-to-one assignment with the largest total IoU, by trying them all."""
    p, g = ious.shape
    best, best_sum = [], -1.0
    if p >= g:
        for preds in itertools.permutations(range(p), g):
            pairs = list(zip(preds, range(g)))
            total = sum(ious[i, j] for i, j in pairs)
            if total > best_sum:
                best, best_sum = pairs, total
    else:
        for truths in itertools.permutations(range(g), p):
            pairs = list(zip(range(p), truths))
            total = sum(ious[i, j] for i, j in pairs)
            if total > best_sum:
                best, best_sum = pairs, total
    return best


def ref_x_at(lane: np.ndarray, y: float) -> float:
    pts = sorted(map(tuple, np.asarray(lane, dtype=np.float64)), key=lambda p: p[1])
    for (xa, ya), (xb, yb) in itertools.pairwise(pts):
        if ya <= y <= yb:
            return xa if yb == ya else xa + (xb - xa) * (y - ya) / (yb - ya)
    raise ValueError("row outside the lane")


def ref_dx(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    lo = max(a[:, 1].min(), b[:, 1].min(), 0.0)
    hi = min(a[:, 1].max(), b[:, 1].max(), H - 1.0)
    total, rows = 0.0, 0
    y = math.ceil(lo)
    while y <= hi:
        total += abs(ref_x_at(a, y) - ref_x_at(b, y))
        rows += 1
        y += 1
    return total, rows


def ref_frame(preds, truths, threshold):
    """(tp, fp, fn, dx_sum, dx_rows) of one frame, and the reference IoU matrix."""
    if not preds or not truths:
        return (0, len(preds), len(truths), 0.0, 0), np.zeros((len(preds), len(truths)))
    ious = ref_ious(preds, truths)
    tp, dx_sum, dx_rows = 0, 0.0, 0
    for i, j in ref_best_assignment(ious):
        if ious[i, j] > threshold:
            tp += 1
            s, r = ref_dx(preds[i], truths[j])
            dx_sum, dx_rows = dx_sum + s, dx_rows + r
    return (tp, len(preds) - tp, len(truths) - tp, dx_sum, dx_rows), ious


# --- random frames ------------------------------------------------------------------------


def _curve(rng, top_x, bottom_x, y_top, y_bottom, n):
    ys = np.linspace(y_top, y_bottom, n)
    t = (ys - y_top) / (y_bottom - y_top)
    xs = top_x + (bottom_x - top_x) * t + rng.uniform(-12, 12) * 4 * t * (1 - t)
    return np.stack([xs, ys], axis=1)


def _shift(lane, d):
    """The lane moved d px perpendicular to its chord."""
    v = lane[-1] - lane[0]
    return lane + d * np.array([v[1], -v[0]]) / np.hypot(*v)


def random_frame(rng):
    """Truth lanes and predictions whose IoUs keep clear of 0.5 and 0.7: good (> 0.78),
    middle (0.57..0.62: TP at 0.5 only), bad (< 0.4), dropped, duplicated, and spurious lanes."""
    g = int(rng.integers(0, 5))
    y_top, y_bottom = rng.uniform(200, 300), rng.uniform(480, 650)
    tops = rng.uniform(100, 300) + np.cumsum(np.r_[0, rng.uniform(150, 200, 4)])
    bottoms = rng.uniform(-120, 100) + np.cumsum(np.r_[0, rng.uniform(200, 260, 4)])
    truths = [_curve(rng, tops[k], bottoms[k], y_top, y_bottom, int(rng.integers(30, 80))) for k in range(g)]
    preds, duplicated = [], False
    for lane in truths:
        kind = rng.choice(["good", "middle", "bad", "short", "drop", "dup"], p=[0.35, 0.15, 0.15, 0.1, 0.1, 0.15])
        sign = rng.choice([-1.0, 1.0])
        if kind == "good" or (kind == "dup" and duplicated):
            preds.append(_shift(lane, rng.uniform(-3, 3)))
        elif kind == "dup":
            duplicated = True
            preds += [_shift(lane, rng.uniform(-3, 3)), _shift(lane, rng.uniform(-3, 3))]
        elif kind == "middle":
            preds.append(_shift(lane, sign * rng.uniform(7.2, 8.4)))
        elif kind == "bad":
            preds.append(_shift(lane, sign * rng.uniform(16, 26)))
        elif kind == "short":
            cut = int(len(lane) * rng.uniform(0.2, 0.35))
            start = int(rng.integers(0, len(lane) - cut))
            preds.append(_shift(lane[start : start + cut], rng.uniform(-2, 2)))
    for _ in range(int(rng.choice([0, 0, 1, 2]))):  # spurious lanes far right of every truth lane
        n = int(rng.choice([2, 3, 25]))
        preds.append(_curve(rng, rng.uniform(1300, 1500), rng.uniform(1350, 1750), rng.uniform(150, 300), 620, n))
    rng.shuffle(preds)
    return preds, truths


@pytest.fixture(scope="module")
def random_frames():
    rng = np.random.default_rng(20240611)
    return [random_frame(rng) for _ in range(50)]


@pytest.mark.parametrize("threshold", [0.5, 0.7])
def test_culane_counts_match_the_independent_reference(random_frames, threshold):
    ev = m.CULaneEvaluator(thresholds=(threshold,))
    totals = np.zeros(3, dtype=int)
    ref_dx_sum, ref_dx_rows, worst_iou_gap, borderline = 0.0, 0, 0.0, 0
    for preds, truths in random_frames:
        counts = ev.add(preds, truths).counts(threshold)
        (tp, fp, fn, dx_sum, dx_rows), ious = ref_frame(preds, truths, threshold)
        assert (counts.tp, counts.fp, counts.fn) == (tp, fp, fn)
        assert counts.dx_rows == dx_rows
        assert counts.dx_sum == pytest.approx(dx_sum, rel=1e-9, abs=1e-6)
        if ious.size:
            worst_iou_gap = max(worst_iou_gap, float(np.abs(m.culane_ious(preds, truths) - ious).max()))
            borderline += int((np.abs(ious - threshold) < 0.03).sum())
        totals += (tp, fp, fn)
        ref_dx_sum, ref_dx_rows = ref_dx_sum + dx_sum, ref_dx_rows + dx_rows
    (result,) = ev.results()
    tp, fp, fn = totals.tolist()
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert (result.tp, result.fp, result.fn, result.frames) == (tp, fp, fn, 50)
    assert result.precision == pytest.approx(precision)
    assert result.recall == pytest.approx(recall)
    assert result.f1 == pytest.approx(2 * precision * recall / (precision + recall))
    assert result.mean_abs_dx == pytest.approx(ref_dx_sum / ref_dx_rows)
    # The two rasterisations differ only in boundary pixels (cv2 strokes are slightly fuller on slants),
    # no IoU lies within that difference of the threshold, and the frames are not trivial.
    assert worst_iou_gap < 0.03
    assert borderline == 0
    assert 0 < tp and 0 < fp and 0 < fn and result.f1 < 0.95


def test_random_frames_exercise_both_thresholds(random_frames):
    ev = m.CULaneEvaluator(thresholds=(0.5, 0.7))
    for preds, truths in random_frames:
        ev.add(preds, truths)
    at05, at07 = ev.results()
    assert at05.tp > at07.tp > 0  # the "middle" predictions count at 0.5 only
    assert at05.tp + at05.fn == at07.tp + at07.fn  # same truth lanes


# --- hand-made CULane cases ---------------------------------------------------------------


def _vertical(x: float) -> np.ndarray:
    """A straight vertical lane through the whole image (its ends, and their round caps, lie outside)."""
    return np.array([[x, -50.0], [x, H + 60.0]])


@pytest.mark.parametrize("offset", [0, 1, 5, 10, 20, 30])
def test_iou_of_parallel_vertical_lanes_is_analytic(offset):
    # A 30 px cv2 stroke covers 31 columns (centre +-15): IoU = (31 - d) / (31 + d) for d <= 31.
    ious = m.culane_ious([_vertical(100.5)], [_vertical(100.5 + offset)])
    assert ious[0, 0] == pytest.approx((31 - offset) / (31 + offset), rel=1e-12)
    assert m.lane_mask(_vertical(100.5)).sum() == 31 * H


def test_disjoint_lanes_have_iou_zero_and_width_is_a_parameter():
    assert m.culane_ious([_vertical(100.5)], [_vertical(132.5)])[0, 0] == 0.0
    # A 10 px stroke covers 11 columns.
    assert m.culane_ious([_vertical(100.5)], [_vertical(104.5)], lane_width=10)[0, 0] == pytest.approx(7 / 15)


def test_lane_mask_is_the_official_segment_by_segment_drawing():
    """The cropped polyline drawing equals the official loop of cv2.line calls on the full image."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(2, 30))
        if trial % 2:
            pts = np.cumsum(rng.normal(0, 25, size=(n, 2)), axis=0) + rng.uniform([-50, -50], [W + 50, H + 50])
        else:
            pts = rng.uniform([-300, -200], [W + 300, H + 200], size=(n, 2))
        official = np.zeros((H, W, 3), dtype=np.uint8)
        samples = m.interpolate_lane(pts).astype(np.int32)
        for p, q in itertools.pairwise(samples):
            cv2.line(official, tuple(int(v) for v in p), tuple(int(v) for v in q), (255, 255, 255), thickness=30)
        assert np.array_equal(m.lane_mask(pts), official[:, :, 0] > 0)


def test_interpolation_takes_five_samples_per_segment_through_the_points():
    pts = np.stack([np.linspace(100, 400, 7), np.linspace(50, 550, 7)], axis=1)  # evenly spaced, collinear
    fine = m.interpolate_lane(pts)
    assert fine.shape == (31, 2)
    np.testing.assert_allclose(fine[::5], pts, atol=1e-6)
    np.testing.assert_allclose(fine[:, 0], 100 + (fine[:, 1] - 50) * 300 / 500, atol=1e-6)
    # A curve through 4 points: cubic, passes through the end points.
    curve = np.array([[0.0, 0.0], [10.0, 30.0], [30.0, 60.0], [60.0, 90.0]])
    fine = m.interpolate_lane(curve)
    assert fine.shape == (16, 2)
    np.testing.assert_allclose(fine[[0, -1]], curve[[0, -1]], atol=1e-6)
    # Repeated points (which the official spline fit refuses) are dropped.
    assert m.interpolate_lane(np.repeat(pts, 2, axis=0)).shape == (31, 2)


def test_threshold_is_strictly_greater_as_in_the_official_tools():
    match = m.FrameMatch(1, 1, (m.LanePair(0, 0, 0.5, 0.0, 0),))
    assert match.counts(0.5) == m.FrameCounts(tp=0, fp=1, fn=1)
    assert match.counts(0.4999).tp == 1
    with pytest.raises(EvaluationError):
        match.counts(1.5)


def test_matching_is_one_to_one():
    truth = [_vertical(300.5)]
    match = m.culane_match([_vertical(301.5), _vertical(300.5)], truth)
    assert match.counts(0.5) == m.FrameCounts(tp=1, fp=1, fn=0, dx_sum=0.0, dx_rows=H)
    assert [(p.pred, p.truth) for p in match.pairs] == [(1, 0)]  # the better of the two


def test_hungarian_beats_greedy():
    # Greedy by best IoU pairs p0-t1 (d=8: 0.59) and leaves p1-t0 (d=30: 0.02);
    # the optimum pairs p0-t0 (d=10: 0.51) and p1-t1 (d=12: 0.44).
    t0, t1 = _vertical(200.5), _vertical(218.5)
    p0, p1 = _vertical(210.5), _vertical(230.5)
    ious = m.culane_ious([p0, p1], [t0, t1])
    np.testing.assert_allclose(ious, [[21 / 41, 23 / 39], [1 / 61, 19 / 43]])
    match = m.culane_match([p0, p1], [t0, t1])
    assert sorted((p.pred, p.truth) for p in match.pairs) == [(0, 0), (1, 1)]
    assert match.counts(0.4).tp == 2


def test_empty_frames_and_dropped_lanes():
    lanes = [_vertical(100.5), _vertical(400.5)]
    assert m.culane_match([], lanes).counts() == m.FrameCounts(0, 0, 2)
    assert m.culane_match(lanes, []).counts() == m.FrameCounts(0, 2, 0)
    assert m.culane_match([], []).counts() == m.FrameCounts(0, 0, 0)
    # Lanes with fewer than 2 distinct points are dropped on both sides, as the official reader does.
    short = [np.zeros((0, 2)), np.array([[5.0, 5.0]]), np.array([[5.0, 5.0], [5.0, 5.0]])]
    assert m.culane_match(lanes + short, lanes + short).counts() == m.FrameCounts(2, 0, 0, 0.0, 2 * H)
    # A lane wholly outside the image draws nothing: IoU 0, not NaN.
    outside = np.array([[-500.0, 10.0], [-400.0, 500.0]])
    assert m.culane_ious([outside], [outside])[0, 0] == 0.0
    assert m.culane_match([outside], [outside]).counts() == m.FrameCounts(0, 1, 1)


def test_lane_objects_and_bad_lanes():
    lane = Lane(np.array([[100.5, 0.0], [100.5, 589.0]], dtype=np.float32), 0.9)
    assert m.culane_match([lane], [lane.points]).counts().tp == 1
    with pytest.raises(EvaluationError, match="NaN"):
        m.culane_match([np.array([[np.nan, 1.0], [2.0, 3.0]])], [])
    with pytest.raises(EvaluationError, match="shape"):
        m.culane_match([np.zeros((3, 3))], [])
    with pytest.raises(EvaluationError, match="lane_width"):
        m.culane_match([], [], lane_width=0)


def test_mean_abs_dx_over_shared_rows():
    ev = m.CULaneEvaluator(thresholds=(0.5,))
    ev.add([_vertical(110.5), np.array([[410.5, 100.0], [410.5, 500.0]])],
           [_vertical(100.5), np.array([[406.5, 150.0], [406.5, 550.0]])])
    (result,) = ev.results()
    # 590 rows 10 px apart, and rows 150..500 4 px apart (that pair overlaps enough: IoU > 0.5).
    assert result.tp == 2
    assert result.dx_rows == H + 351
    assert result.mean_abs_dx == pytest.approx((10 * H + 4 * 351) / (H + 351))


def test_result_aggregation_and_json():
    counts = [m.FrameCounts(3, 1, 0, 30.0, 10), m.FrameCounts(1, 0, 2, 10.0, 10), m.FrameCounts(0, 2, 1)]
    r = m.CULaneResult.from_counts(counts, iou_threshold=0.5)
    assert (r.frames, r.tp, r.fp, r.fn) == (3, 4, 3, 3)
    assert r.precision == pytest.approx(4 / 7) and r.recall == pytest.approx(4 / 7)
    assert r.f1 == pytest.approx(4 / 7)
    assert r.mean_abs_dx == pytest.approx(2.0)
    assert json.loads(r.to_json())["image_size"] == [1640, 590]
    zero = m.CULaneResult.from_counts([m.FrameCounts(0, 2, 3)])
    assert (zero.precision, zero.recall, zero.f1, zero.mean_abs_dx) == (0.0, 0.0, 0.0, None)


# --- retention --------------------------------------------------------------------------------


def test_retention_of_identical_models_is_complete():
    cmp = m.RetentionComparison(thresholds=(0.5,))
    truth = [_vertical(200.5), _vertical(600.5)]
    pred = [_vertical(203.5), _vertical(597.5)]
    for _ in range(3):
        cmp.add(pred, [p.copy() for p in pred], truth)
    (r,) = cmp.results()
    assert (r.frames, r.frames_with_truth, r.lane_count_agreement) == (3, 3, 1.0)
    assert r.reference.f1 == r.candidate.f1 == 1.0 and r.f1_retention == 1.0
    assert r.agreement.f1 == 1.0 and r.mean_abs_dx == 0.0
    assert r.reference.mean_abs_dx == pytest.approx(3.0)
    assert json.loads(r.to_json())["agreement"]["tp"] == 6


def test_retention_of_a_degraded_candidate():
    cmp = m.RetentionComparison(thresholds=(0.5,))
    truth = [_vertical(200.5), _vertical(600.5), _vertical(1000.5)]
    reference = [_vertical(200.5), _vertical(600.5), _vertical(1000.5)]
    candidate = [_vertical(204.5), _vertical(600.5)]  # one lane lost, one 4 px off
    cmp.add(reference, candidate, truth)
    cmp.add(reference, reference, truth)
    cmp.add(reference, candidate)  # a frame without truth still counts for agreement
    (r,) = cmp.results()
    assert (r.frames, r.frames_with_truth) == (3, 2)
    assert r.lane_count_agreement == pytest.approx(1 / 3)
    assert (r.candidate.tp, r.candidate.fn) == (5, 1)
    assert r.f1_retention == pytest.approx(r.candidate.f1 / 1.0)
    assert (r.agreement.tp, r.agreement.fp, r.agreement.fn) == (7, 0, 2)
    assert r.mean_abs_dx == pytest.approx(4 * 2 * H / (7 * H))
    no_truth = m.RetentionComparison(thresholds=(0.5,))
    no_truth.add(reference, candidate)
    (r,) = no_truth.results()
    assert r.reference is None and r.candidate is None and r.f1_retention is None


# --- TuSimple -----------------------------------------------------------------------------------

H_SAMPLES = list(range(160, 720, 10))  # 56 rows, as TuSimple labels


def _xs(values):
    return [float(v) for v in values]


def test_tusimple_pixel_threshold_is_strict_and_angle_scaled():
    gt = _xs([500] * 56)
    assert m.tusimple_threshold(gt, H_SAMPLES) == pytest.approx(20.0)
    assert m.tusimple_line_accuracy(_xs([519.9] * 56), gt, 20.0) == 1.0
    assert m.tusimple_line_accuracy(_xs([520] * 56), gt, 20.0) == 0.0
    slanted = _xs(np.asarray(H_SAMPLES) * 1.0 + 100)  # 45 degrees: threshold 20 * sqrt(2)
    thr = m.tusimple_threshold(slanted, H_SAMPLES)
    assert thr == pytest.approx(20 * math.sqrt(2))
    assert m.tusimple_frame([_xs(np.asarray(slanted) + 28)], [slanted], H_SAMPLES).matched == 1
    assert m.tusimple_frame([_xs(np.asarray(slanted) + 29)], [slanted], H_SAMPLES).matched == 0


def test_tusimple_threshold_uses_the_least_squares_slope_of_valid_points():
    rng = np.random.default_rng(3)
    xs = 300 + 0.7 * np.asarray(H_SAMPLES) + rng.normal(0, 5, 56)
    xs[:10] = -2
    slope = np.polyfit(np.asarray(H_SAMPLES)[10:], xs[10:], 1)[0]
    assert m.tusimple_threshold(xs, H_SAMPLES) == pytest.approx(20 / math.cos(math.atan(slope)))


def test_tusimple_missing_points_and_the_85_percent_rule():
    gt = _xs([400] * 40 + [-2] * 16)
    # Points the truth lacks count as wrong when predicted, right when also missing.
    assert m.tusimple_line_accuracy(_xs([400] * 56), gt, 20) == pytest.approx(40 / 56)
    assert m.tusimple_line_accuracy(_xs([400] * 40 + [-2] * 16), gt, 20) == 1.0
    h20 = H_SAMPLES[:20]
    gt20 = _xs([400] * 20)
    exactly = m.tusimple_frame([_xs([400] * 17 + [900] * 3)], [gt20], h20)  # 17/20 = 0.85: matched
    assert (exactly.accuracy, exactly.fp, exactly.fn, exactly.matched) == (pytest.approx(0.85), 0.0, 0.0, 1)
    below = m.tusimple_frame([_xs([400] * 16 + [900] * 4)], [gt20], h20)
    assert (below.accuracy, below.fp, below.fn, below.matched) == (pytest.approx(0.8), 1.0, 1.0, 0)


def test_tusimple_frame_rules_of_the_official_bench():
    lanes = [_xs([100 + 200 * k] * 56) for k in range(5)]
    # 5 truth lanes, 4 found: the worst lane is dropped from accuracy and from FN.
    r = m.tusimple_frame(lanes[:4], lanes, H_SAMPLES)
    assert (r.accuracy, r.fp, r.fn, r.matched) == (1.0, 0.0, 0.0, 4)
    # With 4 truth lanes nothing is dropped.
    r = m.tusimple_frame(lanes[:3], lanes[:4], H_SAMPLES)
    assert (r.accuracy, r.fp, r.fn, r.matched) == (0.75, 0.0, 0.25, 3)
    # More than truth + 2 predictions: the frame scores (0, 0, 1).
    r = m.tusimple_frame(lanes[:4], lanes[:1], H_SAMPLES)
    assert (r.accuracy, r.fp, r.fn) == (0.0, 0.0, 1.0)
    # Not one-to-one: one prediction between two close truth lanes matches both, and FP goes negative.
    r = m.tusimple_frame([_xs([110] * 56)], [_xs([100] * 56), _xs([120] * 56)], H_SAMPLES)
    assert (r.matched, r.fp, r.fn) == (2, -1.0, 0.0)
    # No predictions.
    r = m.tusimple_frame([], lanes[:2], H_SAMPLES)
    assert (r.accuracy, r.fp, r.fn) == (0.0, 0.0, 1.0)
    with pytest.raises(EvaluationError, match="h_samples"):
        m.tusimple_frame([_xs([1, 2])], lanes[:1], H_SAMPLES)


def test_tusimple_evaluator_averages_frames():
    ev = m.TuSimpleEvaluator()
    gt = [_xs([300] * 56), _xs([700] * 56)]
    ev.add(gt, gt, H_SAMPLES)
    ev.add([gt[0]], gt, H_SAMPLES)
    r = ev.result()
    assert (r.frames, r.accuracy, r.fp, r.fn) == (2, pytest.approx(0.75), 0.0, pytest.approx(0.25))
    assert json.loads(r.to_json())["frames"] == 2


def test_lanes_to_tusimple_samples_polylines():
    lane = np.array([[100.0, 200.0], [300.0, 400.0]])
    off_left = np.array([[10.0, 160.0], [-90.0, 260.0]])
    xs, left = m.lanes_to_tusimple([lane, off_left], H_SAMPLES)
    ys = np.asarray(H_SAMPLES)
    inside = (ys >= 200) & (ys <= 400)
    np.testing.assert_allclose(xs[inside], 100 + (ys[inside] - 200))
    assert (xs[~inside] == -2).all()
    assert left[0] == 10.0 and left[1] == 0.0 and (left[2:] == -2).all()
