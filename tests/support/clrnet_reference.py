"""A straightforward port of the official CLRNet decoding, the reference decode_clrnet is checked against.

Written from the official code's facts, deliberately plain (NumPy only, no torch): `CLRHead.get_lanes`
(clrnet/models/heads/clr_head.py: softmax, `scores >= conf_threshold`, the NMS rows [logits, start_y, start_x,
length * 71, x * (img_w - 1)]), the CUDA extension's `devIoU` and `nms_collect` (clrnet/ops/csrc/nms_kernel.cu)
as per-pair and per-row loops in float32, with its 8-bit loop index (`unsigned char i`) emulated unless
`clamp_start` asks for the project's decision (the common rows never start below row 0), and
`predictions_to_pred` lane by lane with Python slicing, then the frame mapping of the official
`Lane.to_array` (x * frame width; y through the cut).
"""
from __future__ import annotations

import numpy as np

N_OFFSETS = 72
N_STRIPS = N_OFFSETS - 1


def softmax_class1(logits: np.ndarray) -> np.ndarray:
    out = []
    for l0, l1 in np.asarray(logits, np.float32):
        m = max(l0, l1)
        e0, e1 = np.exp(np.float32(l0 - m)), np.exp(np.float32(l1 - m))
        out.append(np.float32(e1 / (e0 + e1)))
    return np.array(out, np.float32)


def dev_iou(a: np.ndarray, b: np.ndarray, threshold: float, clamp_start: bool) -> bool:
    """The kernel's overlap test of two NMS rows (True: b is suppressed by a)."""
    f32 = np.float32
    start_a = int(f32(a[2] * f32(N_STRIPS)) + f32(0.5))  # C's (int): truncation towards zero
    start_b = int(f32(b[2] * f32(N_STRIPS)) + f32(0.5))
    start = max(start_a, start_b)
    if clamp_start:
        start = max(start, 0)
    end_a = int(f32(f32(f32(start_a + a[4]) - f32(1)) + f32(0.5)) - f32((a[4] - 1) < 0))
    end_b = int(f32(f32(f32(start_b + b[4]) - f32(1)) + f32(0.5)) - f32((b[4] - 1) < 0))
    end = min(end_a, end_b, N_OFFSETS - 1)
    if end < start:
        return False
    dist = f32(0)
    i = (5 + start) & 0xFF  # unsigned char
    while i <= 5 + end:
        dist = f32(dist + abs(f32(a[i]) - f32(b[i])))
        i = (i + 1) & 0xFF
    return bool(dist < f32(threshold) * f32(end - start + 1))


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, top_k: int, clamp_start: bool) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # Python's sort is stable
    removed = [False] * len(order)
    keep: list[int] = []
    for i in range(len(order)):
        if removed[i]:
            continue
        keep.append(order[i])
        for j in range(i + 1, len(order)):
            if dev_iou(boxes[order[i]], boxes[order[j]], threshold, clamp_start):
                removed[j] = True
        if len(keep) == top_k:
            break
    return keep


def prediction_to_points(lane: np.ndarray, image_size: tuple[float, float], cut_fraction: float) -> np.ndarray | None:
    prior_ys = np.linspace(1, 0, N_OFFSETS, dtype=np.float32).astype(np.float64)
    lane_xs = lane[6:].astype(np.float64).copy()
    start = min(max(0, int(round(float(lane[2]) * N_STRIPS))), N_STRIPS)
    length = int(round(float(lane[5])))
    end = min(start + length - 1, len(prior_ys) - 1)
    inside = ((lane_xs[:start] >= 0.0) & (lane_xs[:start] <= 1.0))[::-1].cumprod()[::-1].astype(bool)
    lane_xs[end + 1:] = -2
    head = lane_xs[:start]
    head[~inside] = -2
    lane_ys = prior_ys[lane_xs >= 0]
    lane_xs = lane_xs[lane_xs >= 0]
    if len(lane_xs) <= 1:
        return None
    height, width = image_size
    cut = cut_fraction * height
    ys = lane_ys[::-1] * (height - cut) + cut
    return np.stack([lane_xs[::-1] * width, ys], axis=1)


def official_decode(predictions: np.ndarray, *, conf_threshold: float, nms_threshold: float, top_k: int,
                    image_size: tuple[float, float], cut_fraction: float, img_w: int = 800,
                    clamp_start: bool = False) -> list[tuple[float, np.ndarray]]:
    """(score, points) of the lanes get_lanes returns, best first."""
    predictions = np.asarray(predictions, np.float32)
    scores = softmax_class1(predictions[:, :2])
    keep = scores >= np.float32(conf_threshold)
    kept, kept_scores = predictions[keep], scores[keep]
    if not len(kept):
        return []
    boxes = np.concatenate([kept[:, :4], kept[:, 5:]], axis=1).copy()
    boxes[:, 4] = boxes[:, 4] * np.float32(N_STRIPS)
    boxes[:, 5:] = boxes[:, 5:] * np.float32(img_w - 1)
    chosen = nms(boxes, kept_scores, nms_threshold, top_k, clamp_start)
    lanes = []
    for index in chosen:
        lane = kept[index].copy()
        lane[5] = np.round(lane[5] * np.float32(N_STRIPS))
        points = prediction_to_points(lane, image_size, cut_fraction)
        if points is not None:
            lanes.append((float(kept_scores[index]), points))
    return lanes


def crafted_predictions(seed: int, candidates: int = 40, priors: int = 192) -> np.ndarray:
    """Model-like predictions: a few lanes, each with near-duplicates, some rows above the threshold."""
    rng = np.random.default_rng(seed)
    pred = np.zeros((priors, 6 + N_OFFSETS), np.float32)
    pred[:, 0] = rng.normal(1.0, 0.5, priors)
    pred[:, 1] = pred[:, 0] + rng.normal(-2.0, 1.0, priors)
    hot = rng.choice(priors, candidates, replace=False)
    pred[hot, 1] = pred[hot, 0] + rng.uniform(-0.5, 3.0, candidates)
    base = rng.uniform(0.0, 1.0, (5, 1)) + rng.uniform(-0.6, 0.6, (5, 1)) * np.linspace(0, 1, N_OFFSETS)
    lanes = base[rng.integers(0, 5, priors)] + rng.normal(0, 0.02, (priors, 1)) \
        + rng.normal(0, 0.003, (priors, N_OFFSETS))
    pred[:, 6:] = lanes
    pred[:, 2] = rng.uniform(-0.01, 0.6, priors)
    pred[:, 3] = pred[:, 6]
    pred[:, 4] = rng.uniform(0.1, 0.9, priors)
    pred[:, 5] = rng.uniform(0.05, 1.0, priors)
    return pred
