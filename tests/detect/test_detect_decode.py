"""edge_deploy.detect: YOLO and EfficientNMS outputs -> Detections, checked against a loop-based reference of this
file's own (per anchor, per class greedy NMS, a plain IoU); the letterbox there and back; refusals in one line."""
from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from edge_deploy.detect import (EFFICIENT_NMS_OUTPUTS, DetectionLayout, Detections, DetectParams, Letterbox,
                                decode_detections, layout_of, nms, parse_layout)
from edge_deploy.errors import DetectionError, EdgeDeployError

PACKAGE = Path(__file__).resolve().parents[2] / "edge_deploy" / "detect"


# ---------------------------------------------------------------------------------------------------------------
# The reference: Python loops, one anchor and one pair of boxes at a time.

def ref_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """IoU of two x1, y1, x2, y2 boxes in Python floats; widths clamped at 0, no area at all: 0."""
    inter = (max(0.0, min(a[2], b[2]) - max(a[0], b[0]))) * (max(0.0, min(a[3], b[3]) - max(a[1], b[1])))
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def ref_greedy(rows: list[dict], iou_threshold: float) -> list[dict]:
    """Greedy NMS of rows of one class: best score first (ties: lower anchor), drop what a kept row overlaps."""
    kept: list[dict] = []
    kept_boxes: list[tuple[float, ...]] = []
    for row in sorted(rows, key=lambda r: (-float(r["score"]), r["anchor"])):
        box = tuple(float(v) for v in row["box"])
        if all(not ref_iou(k, box) > iou_threshold for k in kept_boxes):
            kept.append(row)
            kept_boxes.append(box)
    return kept


def ref_decode_yolo(out: np.ndarray, conf: float, iou: float, max_det: int) -> list[tuple[np.ndarray, ...]]:
    """(boxes, scores, classes) per batch item, one anchor at a time."""
    out = out.astype(np.float32)
    two = np.float32(2)
    result = []
    for b in range(out.shape[0]):
        rows = []
        for a in range(out.shape[2]):
            column = out[b, :, a]
            if not all(math.isfinite(float(v)) for v in column):
                continue
            class_scores = column[4:]
            best = 0
            for c in range(len(class_scores)):
                if class_scores[c] > class_scores[best]:
                    best = c
            score = class_scores[best]
            cx, cy, w, h = column[0], column[1], column[2], column[3]
            with np.errstate(over="ignore", invalid="ignore"):
                box = (cx - w / two, cy - h / two, cx + w / two, cy + h / two)
            if not all(math.isfinite(float(v)) for v in box) or not float(score) > conf:
                continue
            rows.append({"anchor": a, "box": box, "score": score, "class": best})
        kept = []
        for c in sorted({r["class"] for r in rows}):
            kept += ref_greedy([r for r in rows if r["class"] == c], iou)
        kept = sorted(kept, key=lambda r: (-float(r["score"]), r["anchor"]))[:max_det]
        result.append((np.array([r["box"] for r in kept], np.float32).reshape(-1, 4),
                       np.array([r["score"] for r in kept], np.float32),
                       np.array([r["class"] for r in kept], np.int32)))
    return result


def assert_same(found: Detections, expected: tuple[np.ndarray, ...]) -> None:
    boxes, scores, classes = expected
    assert found.boxes.dtype == np.float32 and found.scores.dtype == np.float32 and found.classes.dtype == np.int32
    assert np.array_equal(found.boxes, boxes), (found.boxes, boxes)
    assert np.array_equal(found.scores, scores), (found.scores, scores)
    assert np.array_equal(found.classes, classes), (found.classes, classes)


def assert_one_line(exc: pytest.ExceptionInfo) -> None:
    text = str(exc.value)
    assert text and "\n" not in text and isinstance(exc.value, EdgeDeployError) and isinstance(exc.value, ValueError)


# ---------------------------------------------------------------------------------------------------------------
# YOLO against the reference.

# Few distinct values: many boxes overlap, many are equal, many scores tie; IoU lands exactly on 0.5 and 1/3 often.
GRID = st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 2.5, 3.25])
CENTRES = st.one_of(GRID, GRID, GRID, st.floats(-5, 15, width=32))
SIZES = st.one_of(st.sampled_from([2.0, 3.0, 4.0, 6.0, 8.0]), st.sampled_from([0.0, 0.5, 1.0, -1.0]),
                  st.floats(0, 12, width=32))
SCORES = st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.45, 0.5, 0.7, 0.9, 1.0]), st.floats(0, 1, width=32))
# IoU of grid boxes is often exactly 1/4, 1/3 or 1/2; scores are often exactly 0.25 or 0.5.
THRESHOLDS = st.one_of(st.sampled_from([0.25, 1 / 3, 0.5]), st.sampled_from([0.0, 0.1, 0.45, 0.7, 1.0]),
                       st.floats(0, 1))
POISON = [np.nan, np.inf, -np.inf]
# No shrinking: it runs the loop reference thousands of times, up to Hypothesis' 5-minute limit, before a failure
# is reported; the unshrunk example is printed at once instead.
PROPERTY = settings(derandomize=True, max_examples=60, deadline=None, phases=(Phase.explicit, Phase.generate))


@st.composite
def yolo_outputs(draw: st.DrawFn) -> np.ndarray:
    batch, classes, anchors = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(0, 60))
    out = np.zeros((batch, 4 + classes, anchors), np.float32)
    for b in range(batch):
        for a in range(anchors):
            out[b, 0, a], out[b, 1, a] = draw(CENTRES), draw(CENTRES)
            out[b, 2, a], out[b, 3, a] = draw(SIZES), draw(SIZES)
            for c in range(classes):
                out[b, 4 + c, a] = draw(SCORES)
    for b, row, a, value in draw(st.lists(st.tuples(st.integers(0, batch - 1), st.integers(0, 3 + classes),
                                                    st.integers(0, max(0, anchors - 1)), st.sampled_from(POISON)),
                                          max_size=3 if anchors else 0)):
        out[b, row, a] = value
    return out


@PROPERTY
@given(out=yolo_outputs(), conf=THRESHOLDS, iou=THRESHOLDS, max_det=st.integers(1, 25))
def test_yolo_decode_equals_the_loop_reference(out, conf, iou, max_det):
    found = decode_detections({"output0": out}, params=DetectParams(conf, iou, max_det))
    expected = ref_decode_yolo(out, conf, iou, max_det)
    assert len(found) == len(expected) == out.shape[0]
    for item, reference in zip(found, expected):
        assert_same(item, reference)


@PROPERTY
@given(out=yolo_outputs(), iou=THRESHOLDS)
def test_nms_alone_equals_the_greedy_reference(out, iou):
    item = out[0]
    finite = np.isfinite(item).all(axis=0)
    cx, cy, w, h = item[:4, finite]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    scores = item[4, finite]
    rows = [{"anchor": i, "box": tuple(boxes[i]), "score": scores[i]} for i in range(len(scores))]
    assert nms(boxes, scores, iou).tolist() == [r["anchor"] for r in ref_greedy(rows, iou)]


def yolo(rows: list[tuple[float, ...]], classes: int = 2) -> np.ndarray:
    """A [1, 4 + classes, A] output from rows of (cx, cy, w, h, score, class)."""
    out = np.zeros((1, 4 + classes, len(rows)), np.float32)
    for a, (cx, cy, w, h, score, cls) in enumerate(rows):
        out[0, :4, a] = (cx, cy, w, h)
        out[0, 4 + int(cls), a] = score
    return out


def test_boxes_of_different_classes_never_suppress_each_other():
    out = yolo([(10, 10, 4, 4, 0.9, 0), (10, 10, 4, 4, 0.8, 1), (10, 10, 4, 4, 0.7, 0)])
    found = decode_detections({"output0": out}, params=DetectParams(0.25, 0.45, 100))[0]
    assert found.classes.tolist() == [0, 1] and found.scores.tolist() == pytest.approx([0.9, 0.8])
    assert found.boxes.tolist() == [[8, 8, 12, 12]] * 2


def test_iou_exactly_at_the_threshold_is_not_suppressed():
    # (0, 0, 2, 2) and (0, 0, 2, 1): inter 2, union 4, IoU exactly 0.5.
    out = yolo([(1, 1, 2, 2, 0.9, 0), (1, 0.5, 2, 1, 0.8, 0)])
    assert len(decode_detections({"output0": out}, params=DetectParams(0.25, 0.5))[0]) == 2
    assert len(decode_detections({"output0": out}, params=DetectParams(0.25, 0.49))[0]) == 1
    boxes = np.array([[0, 0, 2, 2], [0, 0, 2, 1]], np.float32)
    assert nms(boxes, np.array([0.9, 0.8]), 0.5).tolist() == [0, 1]
    assert nms(boxes, np.array([0.9, 0.8]), 0.49).tolist() == [0]


def test_score_equal_to_conf_is_dropped_and_ties_keep_anchor_order():
    out = yolo([(10, 10, 2, 2, 0.5, 0), (30, 30, 2, 2, 0.25, 1), (50, 50, 2, 2, 0.5, 1), (70, 70, 2, 2, 0.5, 0)])
    found = decode_detections({"output0": out}, params=DetectParams(0.25, 0.45, 2))[0]
    assert found.boxes[:, 0].tolist() == [9, 49] and found.classes.tolist() == [0, 1]


def test_top_max_detections_by_score():
    out = yolo([(10 * i, 0, 2, 2, 0.3 + 0.05 * i, 0) for i in range(10)])
    found = decode_detections({"output0": out}, params=DetectParams(0.25, 0.45, 3))[0]
    assert found.boxes[:, 0].tolist() == [89, 79, 69]


def test_non_finite_rows_are_not_detections_and_do_not_crash():
    out = yolo([(np.nan, 10, 2, 2, 0.9, 0), (20, np.inf, 2, 2, 0.9, 0), (30, 30, 2, 2, np.nan, 1),
                (40, 40, 2, 2, np.inf, 0), (50, 50, 2, 2, 0.8, 0), (3e38, 3e38, 3e38, 3e38, 0.9, 0)])
    out[0, 5, 4] = -np.inf  # a non-finite score of another class in the otherwise good row
    out = np.concatenate([out, yolo([(50, 50, 2, 2, 0.8, 0)])], axis=2)
    with np.errstate(all="raise"):
        found = decode_detections({"output0": out})[0]
    assert found.boxes.tolist() == [[49, 49, 51, 51]] and found.scores.tolist() == pytest.approx([0.8])

    boxes = np.array([[[0, 0, 1, 1], [np.nan, 0, 1, 1], [0, 0, 2, 2], [0, 0, 3, 3]]], np.float32)
    found = decode_detections(efficient_nms(boxes, [[0.9, 0.8, np.inf, 0.7]], [[1, 2, 3, 4]], [[4]]))[0]
    assert found.classes.tolist() == [1, 4]


def test_a_float16_yolo_output_and_an_empty_batch():
    out = yolo([(10, 10, 4, 4, 0.9, 0)]).astype(np.float16)
    assert decode_detections({"output0": out})[0].boxes.tolist() == [[8, 8, 12, 12]]
    assert decode_detections({"output0": np.zeros((0, 6, 5), np.float32)}) == []
    assert len(decode_detections({"output0": np.zeros((2, 6, 0), np.float32)})[1]) == 0


# ---------------------------------------------------------------------------------------------------------------
# EfficientNMS.

def efficient_nms(boxes, scores, classes, count) -> dict[str, np.ndarray]:
    return dict(zip(EFFICIENT_NMS_OUTPUTS, (np.asarray(count, np.int32), np.asarray(boxes, np.float32),
                                            np.asarray(scores, np.float32), np.asarray(classes, np.int32))))


BOXES = [[[10, 20, 30, 40], [0, 0, 5, 5], [100, 100, 200, 300], [1, 1, 2, 2], [7, 7, 8, 8]],
         [[50, 60, 70, 80], [0, 0, 640, 640], [9, 9, 9, 9], [3, 3, 4, 4], [5, 5, 6, 6]]]
SCORES_K = [[0.95, 0.8, 0.3, 0.2, 0.1], [0.9, 0.6, 0.5, 0.4, 0.3]]
CLASSES_K = [[3, 0, 7, 1, 1], [2, 2, 5, 0, 4]]


def test_efficient_nms_known_boxes_in_known_out_with_the_count_clamped():
    outputs = efficient_nms(BOXES, SCORES_K, CLASSES_K, [[3], [9]])
    first, second = decode_detections(outputs, params=DetectParams(0.25, 0.45, 100))
    assert first.boxes.tolist() == BOXES[0][:3] and first.classes.tolist() == [3, 0, 7]
    assert first.scores.tolist() == pytest.approx([0.95, 0.8, 0.3])
    assert second.boxes.tolist() == BOXES[1] and second.classes.tolist() == CLASSES_K[1]  # 9 > K = 5: all 5
    first, second = decode_detections(outputs, layout="efficient_nms", params=DetectParams(0.5, 0.45, 2))
    assert first.classes.tolist() == [3, 0] and second.classes.tolist() == [2, 2]
    assert [len(d) for d in decode_detections(efficient_nms(BOXES, SCORES_K, CLASSES_K, [[-4], [0]]))] == [0, 0]
    assert [len(d) for d in decode_detections(efficient_nms(BOXES, SCORES_K, CLASSES_K, [3, 1]))] == [3, 1]


def test_efficient_nms_boxes_letterboxed_back_into_the_frame():
    # 720 x 1280 into 640 x 640: scale 0.5, resized 360 x 640, 140 px of padding above.
    fit = Letterbox.of((720, 1280), (640, 640))
    assert (fit.scale_x, fit.scale_y, fit.pad_x, fit.pad_y) == (0.5, 0.5, 0, 140)
    boxes = [[[100, 240, 300, 340], [-10, 100, 700, 900]]]
    found = decode_detections(efficient_nms(boxes, [[0.9, 0.8]], [[1, 2]], [[2]]), letterbox=fit)[0]
    assert found.boxes.tolist() == [[200, 200, 600, 400], [0, 0, 1280, 720]]
    other = Letterbox.of((640, 640), (640, 640))
    found = decode_detections(efficient_nms(BOXES, SCORES_K, CLASSES_K, [[1], [1]]), letterbox=[fit, other])
    assert found[0].boxes.tolist() == [[20, 0, 60, 0]] and found[1].boxes.tolist() == [BOXES[1][0]]


# ---------------------------------------------------------------------------------------------------------------
# The letterbox.

def bright_box(image: np.ndarray) -> tuple[int, int, int, int]:
    """x1, y1, x2, y2 (exclusive) of the pixels brighter than half."""
    ys, xs = np.nonzero(image[..., 1] > 127)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def to_input(fit: Letterbox, box) -> np.ndarray:
    box = np.asarray(box, np.float64)
    return np.array([box[0] * fit.scale_x + fit.pad_x, box[1] * fit.scale_y + fit.pad_y,
                     box[2] * fit.scale_x + fit.pad_x, box[3] * fit.scale_y + fit.pad_y])


@pytest.mark.parametrize("frame_hw, input_hw, mode", [((480, 640), (320, 320), "letterbox"),
                                                      ((300, 400), (640, 640), "letterbox"),
                                                      ((720, 1280), (384, 640), "letterbox"),
                                                      ((640, 480), (640, 640), "letterbox"),
                                                      ((500, 333), (320, 320), "letterbox"),
                                                      ((333, 500), (640, 640), "letterbox"),
                                                      ((480, 640), (320, 320), "stretch"),
                                                      ((300, 400), (640, 480), "stretch")])
def test_a_box_drawn_on_the_frame_is_found_at_the_mapped_place(frame_hw, input_hw, mode):
    frame = np.zeros((*frame_hw, 3), np.uint8)
    drawn = (100, 50, 300, 150)  # x1, y1, x2, y2, exclusive
    frame[drawn[1]:drawn[3], drawn[0]:drawn[2]] = 255
    fit = Letterbox.of(frame_hw, input_hw, mode)
    image = fit.apply(frame)
    assert image.shape == (*input_hw, 3) and image.dtype == np.uint8
    found = bright_box(image)
    assert np.abs(np.array(found) - to_input(fit, drawn)).max() <= 1
    assert np.abs(fit.undo(np.array([found], np.float32))[0] - drawn).max() <= max(1, 1 / min(fit.scale_x,
                                                                                               fit.scale_y))
    rh, rw = fit.resized_hw
    pad = np.ones(input_hw, bool)
    pad[fit.pad_y:fit.pad_y + rh, fit.pad_x:fit.pad_x + rw] = False
    assert (image[pad] == 114).all() and (image[~pad].max(axis=-1) > 0).sum() > 0
    if mode == "stretch":
        assert (fit.pad_x, fit.pad_y, fit.resized_hw) == (0, 0, input_hw) and not pad.any()


def test_letterbox_padding_is_split_as_ultralytics_splits_it():
    fit = Letterbox.of((333, 500), (640, 640))  # resized 426 x 640: 214 px of padding, 107 above and 107 below
    assert (fit.resized_hw, fit.pad_x, fit.pad_y) == ((426, 640), 0, 107)
    fit = Letterbox.of((500, 333), (640, 640))  # resized 640 x 426
    assert (fit.resized_hw, fit.pad_x, fit.pad_y) == ((640, 426), 107, 0)
    fit = Letterbox.of((100, 101), (64, 64))  # resized 63 x 64: one row of padding, below (round(0.4) == 0)
    assert (fit.resized_hw, fit.pad_y) == ((63, 64), 0)
    image = fit.apply(np.full((100, 101, 3), 7, np.uint8), pad_value=0)
    assert (image[:63] == 7).all() and (image[63] == 0).all()
    fit = Letterbox.of((480, 640), (640, 640))  # resized 480 x 640: 160 px, 80 above
    assert fit.pad_y == 80 and fit.scale_x == fit.scale_y == 1.0


def test_undo_of_the_mapped_coordinates_returns_the_original_and_clips():
    boxes = np.array([[0, 0, 700, 700], [17.5, 33.25, 500, 601], [640, 360, 641, 361]], np.float64)
    for frame_hw in ((720, 1280), (1280, 720)):  # padding above and below, then left and right
        for mode in ("letterbox", "stretch"):
            fit = Letterbox.of(frame_hw, (640, 640), mode)
            back = fit.undo(np.stack([to_input(fit, b) for b in boxes]))
            assert back.dtype == np.float32 and np.abs(back - boxes).max() < 1e-3
            outside = np.array([[-50, -50, 700, 700], [650, 650, 900, 900]], np.float32)
            h, w = frame_hw
            assert fit.undo(outside).tolist() == [[0, 0, w, h], [w, h, w, h]]
    assert fit.undo(np.zeros((0, 4))).shape == (0, 4)


@pytest.mark.parametrize("frame_hw, input_hw, mode", [((0, 10), (640, 640), "letterbox"),
                                                      ((-1, 10), (640, 640), "letterbox"),
                                                      ((480, 640), (640.0, 640), "letterbox"),
                                                      ((True, 640), (640, 640), "letterbox"),
                                                      ((480,), (640, 640), "letterbox"),
                                                      (None, (640, 640), "letterbox"),
                                                      ((480, 640), "ab", "letterbox"),
                                                      ((480, 640), (640, 640), "crop")])
def test_bad_letterbox_sizes_and_modes_are_refused_in_one_line(frame_hw, input_hw, mode):
    with pytest.raises(DetectionError) as exc:
        Letterbox.of(frame_hw, input_hw, mode)
    assert_one_line(exc)


def test_apply_refuses_a_frame_of_another_size_or_type():
    fit = Letterbox.of((48, 64), (32, 32))
    for frame in (np.zeros((64, 48, 3), np.uint8), np.zeros((48, 64, 3), np.float32), np.zeros((48, 64), np.uint8),
                  "frame"):
        with pytest.raises(DetectionError) as exc:
            fit.apply(frame)  # type: ignore[arg-type]
        assert_one_line(exc)
    for pad_value in (-1, 256, 1.5, True):
        with pytest.raises(DetectionError) as exc:
            fit.apply(np.zeros((48, 64, 3), np.uint8), pad_value=pad_value)
        assert_one_line(exc)


# ---------------------------------------------------------------------------------------------------------------
# Refusals, in one line.

@pytest.mark.parametrize("outputs, layout", [
    ({"output0": np.zeros((1, 84), np.float32)}, "yolo"),
    ({"output0": np.zeros((1, 84), np.float32)}, None),
    ({"output0": np.zeros((1, 84, 10, 1), np.float32)}, "yolo"),
    ({"output0": np.zeros((1, 4, 10), np.float32)}, "yolo"),
    ({"output0": np.zeros((1, 4, 10), np.float32)}, None),
    ({"a": np.zeros((1, 6, 10)), "b": np.zeros((1, 6, 10))}, "yolo"),
    ({"output0": np.zeros((1, 6, 10), object)}, "yolo"),
    ({name: np.zeros((1, 1)) for name in EFFICIENT_NMS_OUTPUTS[:3]}, "efficient_nms"),
    ({name: np.zeros((1, 1)) for name in EFFICIENT_NMS_OUTPUTS[:3]}, None),
    ({}, "efficient_nms"),
    ({}, None),
    (efficient_nms(np.zeros((1, 5, 3)), np.zeros((1, 5)), np.zeros((1, 5)), [[1]]), None),
    (efficient_nms(np.zeros((1, 5, 4)), np.zeros((1, 4)), np.zeros((1, 5)), [[1]]), None),
    (efficient_nms(np.zeros((1, 5, 4)), np.zeros((1, 5)), np.zeros((2, 5)), [[1]]), None),
    (efficient_nms(np.zeros((1, 5, 4)), np.zeros((1, 5)), np.zeros((1, 5)), [[1, 2]]), None),
    ({"output0": np.zeros((1, 6, 10), np.float32)}, "ssd"),
])
def test_bad_outputs_are_refused_in_one_line(outputs, layout):
    with pytest.raises(DetectionError) as exc:
        decode_detections(outputs, layout=layout)
    assert_one_line(exc)


@pytest.mark.parametrize("field", ["conf_threshold", "iou_threshold"])
@pytest.mark.parametrize("value", [-0.1, 1.01, math.nan, math.inf, -math.inf, 1e308, True, "0.5", None])
def test_thresholds_out_of_range_are_refused_in_one_line(field, value):
    with pytest.raises(DetectionError) as exc:
        DetectParams(**{field: value})
    assert_one_line(exc)
    assert "0 to 1" in str(exc.value)


@pytest.mark.parametrize("value", [0, -1, 10001, 1e308, math.nan, math.inf, 1.5, 100.0, True, False, "100", 10**400])
def test_max_detections_out_of_range_is_refused_in_one_line(value):
    with pytest.raises(DetectionError) as exc:
        DetectParams(max_detections=value)
    assert_one_line(exc)
    assert "1 to 10000" in str(exc.value)


def test_params_at_the_ends_of_their_ranges_are_taken():
    assert DetectParams(0, 1, 10000) == DetectParams(0.0, 1.0, 10000)
    assert DetectParams(np.float32(0.5), 0.0, np.int64(1)).max_detections == 1
    with pytest.raises(DetectionError) as exc:
        decode_detections({"output0": np.zeros((1, 6, 3))}, params=(0.25, 0.45, 100))  # type: ignore[arg-type]
    assert_one_line(exc)


def test_a_letterbox_per_item_must_match_the_batch():
    outputs = {"output0": yolo([(10, 10, 4, 4, 0.9, 0)])}
    fit = Letterbox.of((10, 10), (20, 20))
    for letterbox in ([fit, fit], [], ["letterbox"], 3):
        with pytest.raises(DetectionError) as exc:
            decode_detections(outputs, letterbox=letterbox)  # type: ignore[arg-type]
        assert_one_line(exc)


# ---------------------------------------------------------------------------------------------------------------
# The layout.

class Spec:
    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.shape = name, shape


@pytest.mark.parametrize("shape", [(1, 84, 8400), (-1, 84, -1), (1, 5, 1), (4, 6, 21)])
def test_layout_of_one_rank_3_output_is_yolo(shape):
    assert layout_of([Spec("output0", shape)]) is DetectionLayout.YOLO


def test_layout_of_the_efficient_nms_names_in_any_order_with_others():
    specs = [Spec(name, (-1, 100)) for name in reversed(EFFICIENT_NMS_OUTPUTS)] + [Spec("extra", (1, 84, 8400))]
    assert layout_of(specs) is DetectionLayout.EFFICIENT_NMS


@pytest.mark.parametrize("shapes", [[(1, 84)], [(1, 4, 8400)], [(1, -1, 8400)], [(1, 84, 8400, 1)],
                                    [(1, 84, 8400), (1, 32, 160, 160)], [],
                                    [(1, 1)] * 3])
def test_layout_of_anything_else_is_refused_in_one_line(shapes):
    names = list(EFFICIENT_NMS_OUTPUTS[:3]) if len(shapes) == 3 else [f"out{i}" for i in range(len(shapes))]
    with pytest.raises(DetectionError) as exc:
        layout_of([Spec(name, shape) for name, shape in zip(names, shapes)])
    assert_one_line(exc)
    assert "--layout yolo|efficient_nms" in str(exc.value)


def test_parse_layout():
    assert parse_layout("yolo") is DetectionLayout.YOLO and parse_layout(" Efficient-NMS ") is \
        DetectionLayout.EFFICIENT_NMS and parse_layout(DetectionLayout.YOLO) is DetectionLayout.YOLO
    for text in ("ssd", "", "yolo\nv8", 3, None):
        with pytest.raises(DetectionError) as exc:
            parse_layout(text)  # type: ignore[arg-type]
        assert_one_line(exc)
        assert "yolo, efficient_nms" in str(exc.value)


# ---------------------------------------------------------------------------------------------------------------
# Detections, and what the package imports.

def test_detections_sorted_json_friendly_and_empty():
    found = Detections(np.array([[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 1, 1]]), np.array([0.5, 0.9, 0.5]),
                       np.array([2, 1, 0]))
    assert len(found) == 3 and found.scores.tolist() == pytest.approx([0.9, 0.5, 0.5])
    assert found.classes.tolist() == [1, 2, 0] and found.boxes[0].tolist() == [5, 6, 7, 8]
    listed = found.to_dict()
    assert listed[0] == {"box": [5.0, 6.0, 7.0, 8.0], "score": 0.8999999761581421, "class_id": 1}
    assert all(type(v) is float for d in listed for v in [*d["box"], d["score"]])
    assert all(type(d["class_id"]) is int for d in listed)
    assert json.loads(json.dumps(listed)) == listed
    empty = Detections.empty()
    assert len(empty) == 0 and empty.to_dict() == [] and empty.boxes.shape == (0, 4)
    with pytest.raises(ValueError):
        found.boxes[0, 0] = 1
    with pytest.raises(DetectionError) as exc:
        Detections(np.zeros((2, 4)), np.zeros(3), np.zeros(2))
    assert_one_line(exc)


def test_the_package_imports_numpy_and_opencv_only():
    for path in PACKAGE.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imported.add((node.module or "").split(".")[0])
        allowed = {"__future__", "collections", "dataclasses", "enum", "math", "typing", "numpy"}
        assert imported <= allowed | ({"cv2"} if path.name in ("letterbox.py", "draw.py") else set()), (path.name, imported)
    code = ("import sys, edge_deploy.detect; heavy = {'torch', 'onnx', 'onnxruntime', 'tensorrt', 'tritonclient'}; "
            "sys.exit(sorted(heavy & set(sys.modules)) or 0)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
