"""Object-detector outputs -> Detections per batch item: YOLO ([B, 4 + classes, anchors], class-aware NMS here) or
EfficientNMS_TRT (suppressed in the engine), mapped back into the frame through a Letterbox."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import DetectionError, brief
from .detections import Detections
from .layout import EFFICIENT_NMS_OUTPUTS, DetectionLayout, layout_of, parse_layout
from .letterbox import Letterbox

__all__ = ["MAX_DETECTIONS", "DetectParams", "decode_detections", "nms"]

MAX_DETECTIONS = 10000


@dataclass(frozen=True)
class DetectParams:
    """conf_threshold: a detection's score must be above it (compared as float64); iou_threshold: NMS suppresses a
    box whose IoU with a better box of its class is above it; max_detections: the most kept per frame."""

    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 100

    def __post_init__(self) -> None:
        for name in ("conf_threshold", "iou_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not (math.isfinite(value) and 0 <= value <= 1):
                raise DetectionError(f"{name} must be a number from 0 to 1 (got {brief(value)}).")
            object.__setattr__(self, name, float(value))
        value = self.max_detections
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_DETECTIONS:
            raise DetectionError(f"max_detections must be a whole number from 1 to {MAX_DETECTIONS} "
                                 f"(got {brief(value)}).")
        object.__setattr__(self, "max_detections", int(value))


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> npt.NDArray[np.int64]:
    """Greedy non-maximum suppression: the indices kept, best first.

    Boxes [N, 4] x1, y1, x2, y2 (finite); scores [N]. The best remaining box is kept (ties: the lower index first)
    and every box whose IoU with it is above iou_threshold is dropped. IoU is computed in float64 with widths and
    heights clamped at 0; two boxes of no area together have IoU 0.
    """
    boxes = np.asarray(boxes, dtype=np.float64)
    scores = np.asarray(scores)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or scores.shape != (len(boxes),):
        raise DetectionError(f"nms needs boxes [N, 4] and scores [N] (got {list(boxes.shape)} and "
                             f"{list(scores.shape)}).")
    if not (np.isfinite(boxes).all() and np.isfinite(scores).all()):
        raise DetectionError("nms needs finite boxes and scores; drop the rows with NaN or infinity first.")
    x1, y1, x2, y2 = boxes.T
    areas = np.maximum(0.0, x2 - x1) * np.maximum(0.0, y2 - y1)
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        inter = (np.maximum(0.0, np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]))
                 * np.maximum(0.0, np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest])))
        union = areas[best] + areas[rest] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where(union > 0, inter / union, 0.0)
        order = rest[~(iou > iou_threshold)]
    return np.asarray(keep, dtype=np.int64)


class _Spec:
    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.shape = name, shape


def decode_detections(outputs: Mapping[str, np.ndarray], *, layout: DetectionLayout | str | None = None,
                      params: DetectParams = DetectParams(),
                      letterbox: Letterbox | Sequence[Letterbox] | None = None) -> list[Detections]:
    """One Detections per batch item of a detector's outputs (name -> array).

    layout: inferred from the arrays' names and shapes when None (layout_of). YOLO: per anchor, score = the highest
    class score (class: the first such), kept when above conf_threshold, then class-aware NMS and the best
    max_detections. EfficientNMS: the first num_detections[b] rows (clamped to 0..K) whose score is above
    conf_threshold, the best max_detections, no NMS (the engine did it). A row holding NaN or infinity (box or any
    score) is never a detection. Boxes go through letterbox.undo (one Letterbox, or one per item) when given, and
    stay in model-input pixels otherwise.
    """
    if not isinstance(params, DetectParams):
        raise DetectionError(f"params must be a DetectParams (got {brief(params)}).")
    arrays = {str(name): np.asarray(value) for name, value in outputs.items()}
    if layout is None:
        layout = layout_of([_Spec(name, tuple(array.shape)) for name, array in arrays.items()])
    layout = parse_layout(layout)
    if layout is DetectionLayout.YOLO:
        found = _yolo(_yolo_output(arrays), params)
    else:
        found = _efficient_nms(arrays, params)
    return _undone(found, letterbox)


def _real(array: np.ndarray, name: str) -> np.ndarray:
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise DetectionError(f"output {brief(name)} must hold real numbers (got {array.dtype}).")
    return array


def _yolo_output(arrays: dict[str, np.ndarray]) -> np.ndarray:
    candidates = list(arrays.items()) if len(arrays) == 1 else [(n, a) for n, a in arrays.items() if a.ndim == 3]
    if len(candidates) != 1:
        raise DetectionError(f"a YOLO detector has one output [batch, 4 + classes, anchors] (got {len(arrays)} "
                             f"outputs, {len(candidates)} of rank 3); pass the model's one detection output.")
    name, array = candidates[0]
    if array.ndim != 3 or array.shape[1] < 5:
        raise DetectionError(f"YOLO output {brief(name)} must be [batch, 4 + classes, anchors] with at least one "
                             f"class (got shape {list(array.shape)}); check the model or pass the other --layout.")
    return _real(array, name)


def _yolo(output: np.ndarray, params: DetectParams) -> list[Detections]:
    out = output.astype(np.float32, copy=False)
    found = []
    for item in out:  # [4 + C, A]
        finite = np.isfinite(item).all(axis=0)
        class_scores = item[4:]
        scores = class_scores.max(axis=0)
        classes = class_scores.argmax(axis=0).astype(np.int32)
        cx, cy, w, h = item[:4]
        with np.errstate(over="ignore", invalid="ignore"):
            boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        keep = finite & np.isfinite(boxes).all(axis=1) & (scores.astype(np.float64) > params.conf_threshold)
        candidates = np.flatnonzero(keep)
        kept = [cand[nms(boxes[cand], scores[cand], params.iou_threshold)]
                for cls in np.unique(classes[candidates]) for cand in [candidates[classes[candidates] == cls]]]
        chosen = np.sort(np.concatenate(kept)) if kept else np.zeros(0, np.int64)
        chosen = chosen[np.argsort(-scores[chosen], kind="stable")][:params.max_detections]
        found.append(Detections(boxes[chosen], scores[chosen], classes[chosen]))
    return found


def _efficient_nms(arrays: dict[str, np.ndarray], params: DetectParams) -> list[Detections]:
    missing = [name for name in EFFICIENT_NMS_OUTPUTS if name not in arrays]
    if missing:
        got = ", ".join(brief(name, 40) for name in list(arrays)[:6]) + (", ..." if len(arrays) > 6 else "")
        raise DetectionError(f"EfficientNMS output{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing "
                             f"(got {got or 'none'}); pass all of {', '.join(EFFICIENT_NMS_OUTPUTS)}.")
    count, boxes, scores, classes = (_real(arrays[name], name) for name in EFFICIENT_NMS_OUTPUTS)
    if count.ndim == 2 and count.shape[1] == 1:
        count = count[:, 0]
    batch = len(boxes) if boxes.ndim == 3 else -1
    top = boxes.shape[1] if boxes.ndim == 3 else -1
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.shape != (batch, top) or classes.shape != (batch, top) \
            or count.shape != (batch,):
        raise DetectionError(f"EfficientNMS outputs must be num_detections [B, 1], detection_boxes [B, K, 4], "
                             f"detection_scores [B, K], detection_classes [B, K] (got "
                             f"{', '.join(str(list(arrays[n].shape)) for n in EFFICIENT_NMS_OUTPUTS)}).")
    found = []
    for b in range(batch):
        n = count[b]
        n = int(min(max(n, 0), top)) if np.isfinite(n) else 0
        item_boxes = boxes[b, :n].astype(np.float32)
        item_scores = scores[b, :n].astype(np.float32)
        item_classes = classes[b, :n]
        with np.errstate(invalid="ignore"):
            valid_class = np.isfinite(item_classes) & (np.abs(item_classes.astype(np.float64)) < 2.0**31)
        keep = (np.isfinite(item_boxes).all(axis=1) & np.isfinite(item_scores) & valid_class
                & (item_scores.astype(np.float64) > params.conf_threshold))
        chosen = np.flatnonzero(keep)
        chosen = chosen[np.argsort(-item_scores[chosen], kind="stable")][:params.max_detections]
        found.append(Detections(item_boxes[chosen], item_scores[chosen], item_classes[chosen].astype(np.int32)))
    return found


def _undone(found: list[Detections], letterbox: Any) -> list[Detections]:
    if letterbox is None:
        return found
    try:
        fits = [letterbox] * len(found) if isinstance(letterbox, Letterbox) else list(letterbox)
    except TypeError:
        fits = []
    if len(fits) != len(found) or not all(isinstance(fit, Letterbox) for fit in fits):
        raise DetectionError(f"letterbox must be one Letterbox or one per batch item ({len(found)}) "
                             f"(got {brief(letterbox)}).")
    return [Detections(fit.undo(d.boxes), d.scores, d.classes) for fit, d in zip(fits, found)]
