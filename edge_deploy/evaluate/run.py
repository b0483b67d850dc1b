"""`evaluate`: run a model (and optionally a second one) over labelled frames and score the lanes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import EvaluationError
from ..progress import Reporter
from .marker_score import MarkerEvaluator, MarkerScore
from .metrics import (
    CULaneEvaluator,
    CULaneResult,
    RetentionComparison,
    RetentionResult,
    TuSimpleEvaluator,
    TuSimpleResult,
    lanes_to_tusimple,
)

TRUTH_COLOR = (80, 220, 80)  # BGR green
PRED_COLOR = (60, 60, 255)  # BGR red


@dataclass
class FrameRecord:
    """One frame's outcome: lane counts, the frame's F1 at the first threshold, and the model's time."""

    name: str
    predicted: int
    truth: int
    f1: float
    seconds: float
    tags: tuple[str, ...] = ()


@dataclass
class EvaluationReport:
    """What `evaluate` prints and writes as JSON."""

    model: str
    frames: int
    culane: list[CULaneResult]
    latency_ms: dict[str, float]
    records: list[FrameRecord] = field(repr=False, default_factory=list)
    against: str | None = None
    retention: list[RetentionResult] | None = None
    by_condition: dict[str, list[CULaneResult]] = field(default_factory=dict)
    against_latency_ms: dict[str, float] | None = None
    tusimple: TuSimpleResult | None = None
    markers: MarkerScore | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "frames": self.frames,
            "culane": [r.to_dict() for r in self.culane],
            "tusimple": self.tusimple.to_dict() if self.tusimple is not None else None,
            "latency_ms": self.latency_ms,
            "frames_per_second": 1000.0 / self.latency_ms["mean"] if self.latency_ms.get("mean") else None,
            "by_condition": {k: [r.to_dict() for r in v] for k, v in self.by_condition.items()},
            "against": self.against,
            "retention": [r.to_dict() for r in self.retention] if self.retention is not None else None,
            "against_latency_ms": self.against_latency_ms,
            "worst_frames": [vars(r) for r in sorted(self.records, key=lambda r: r.f1)[:20]],
            "markers": self.markers.to_dict() if self.markers is not None else None,
        }


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp else (1.0 if not (fp or fn) else 0.0)


def _timed(runner: Any, frame: np.ndarray) -> tuple[list[Any], float]:
    start = time.perf_counter()
    lanes = runner.detect(frame)
    return lanes, time.perf_counter() - start


def evaluate(
    runner: Any,
    frames: Iterable[tuple[str, np.ndarray, Sequence[Any]] | tuple[str, np.ndarray, Sequence[Any], Sequence[str]]],
    *,
    against: Any | None = None,
    thresholds: Sequence[float] = (0.5, 0.7),
    reporter: Reporter | None = None,
    keep_frames: int = 0,
    camera: Any = None,
) -> tuple[EvaluationReport, list[tuple[FrameRecord, np.ndarray, list[Any], Sequence[Any]]]]:
    """Score `runner` on `frames` ((name, BGR frame, truth lanes[, condition tags[, SceneTruth]])).

    With `camera` (a geometry.Camera, or "scene" for each synthetic scene's own), the lanes' markers are
    scored against the SceneTruth too (the report's `markers`).

    The truth may be a TuSimple label (`datasets.TuSimpleLabel`): the report then adds TuSimple's
    accuracy/FP/FN, and the CULane metric scores its lanes as polylines. With `against` (the reference), both
    models see every frame and the retention table says how much of the reference's quality `runner` keeps.
    Returns the report and the `keep_frames` worst frames (record, frame, lanes, truth) for pictures.
    """
    reporter = reporter or Reporter()
    evaluators: dict[str, CULaneEvaluator] = {}
    size: tuple[int, int] | None = None
    retention: RetentionComparison | None = None
    records: list[FrameRecord] = []
    worst: list[tuple[FrameRecord, np.ndarray, list[Any], Sequence[Any]]] = []
    against_seconds: list[float] = []
    tusimple: TuSimpleEvaluator | None = None
    markers = MarkerEvaluator() if camera is not None else None
    for item in frames:
        name, frame, truth = item[0], item[1], item[2]
        tags = tuple(item[3]) if len(item) > 3 else ()
        label = truth if hasattr(truth, "h_samples") else None
        if label is not None:
            truth = label.polylines()
        frame_size = (int(frame.shape[1]), int(frame.shape[0]))
        if size is None:
            size = frame_size
            evaluators["all"] = CULaneEvaluator(thresholds=thresholds, image_size=size)
            if against is not None:
                retention = RetentionComparison(thresholds=thresholds, image_size=size)
        elif frame_size != size:
            raise EvaluationError(f"frame {name} is {frame_size[0]}x{frame_size[1]}, the first frame was "
                                  f"{size[0]}x{size[1]}; evaluate one image size at a time.")
        lanes, seconds = _timed(runner, frame)
        if label is not None:
            tusimple = tusimple or TuSimpleEvaluator()
            tusimple.add(lanes_to_tusimple(lanes, label.h_samples), label.lanes, label.h_samples)
        match = evaluators["all"].add(lanes, truth)
        counts = match.counts(thresholds[0])
        for tag in tags:  # the same lanes, truth and size: the frame's matching, not drawn and matched again
            evaluators.setdefault(tag, CULaneEvaluator(thresholds=thresholds, image_size=size)).add_match(match)
        record = FrameRecord(name, len(lanes), len(truth), _f1(counts.tp, counts.fp, counts.fn), seconds, tags)
        if markers is not None:
            _score_markers(markers, camera, lanes, item, tags)
        records.append(record)
        if retention is not None:
            other, other_seconds = _timed(against, frame)
            retention.add(other, lanes, truth)  # `against` is the reference, the model the candidate
            against_seconds.append(other_seconds)
        if keep_frames:
            worst.append((record, frame, lanes, truth))
            worst.sort(key=lambda w: w[0].f1)
            del worst[keep_frames:]
        if len(records) % 25 == 0:
            reporter.info(f"{len(records)} frames")
    if not records:
        raise EvaluationError("no frames to evaluate; check the data set (list file, labels or --synthetic N).")
    ms = np.array([r.seconds for r in records]) * 1000.0

    def summary(ms: np.ndarray) -> dict[str, float]:
        return {"mean": float(ms.mean()), "p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90))}

    report = EvaluationReport(
        model=str(getattr(runner, "name", runner)),
        frames=len(records),
        culane=evaluators.pop("all").results(),
        latency_ms=summary(ms),
        records=records,
        against=str(getattr(against, "name", against)) if against is not None else None,
        retention=retention.results() if retention is not None else None,
        by_condition={tag: ev.results() for tag, ev in sorted(evaluators.items())},
        against_latency_ms=summary(np.array(against_seconds) * 1000.0) if against_seconds else None,
        tusimple=tusimple.result() if tusimple is not None else None,
        markers=markers.result() if markers is not None else None,
    )
    return report, worst


def _score_markers(markers: MarkerEvaluator, camera: Any, lanes: list[Any], item: Sequence[Any],
                   tags: Sequence[str]) -> None:
    from ..geometry import Camera, to_markers

    if len(item) < 5:
        raise EvaluationError(f"frame {item[0]} has no true markers; score markers on --synthetic N frames.")
    truth = item[4]
    seen_by = Camera.from_mapping(truth.camera, item[0]) if camera == "scene" else camera
    seen_by.check_frame(item[1].shape[1], item[1].shape[0])
    markers.add(to_markers(lanes, seen_by), truth, tags)


def worst_frames_grid(worst: Sequence[tuple[FrameRecord, np.ndarray, list[Any], Sequence[Any]]], path: Path,
                      columns: int = 2, width: int = 820, model: str | None = None) -> Path:
    """A PNG grid of frames: truth in green, predictions in red, captioned with the model, the frame's name and
    F1. `model` (the report's `model`): a runner name such as grpc://HOST:PORT/NAME or DIR:fp16, shown by its last part (the served model's name, e.g. ufldv2_random_weights in the demo)."""
    import cv2

    from ..lanedet.draw import draw_lanes, save_png

    shown = f"{str(model).rstrip('/').rsplit('/', 1)[-1]}  " if model else ""
    tiles = []
    for record, frame, lanes, truth in worst:
        image = draw_lanes(frame, truth, color=TRUTH_COLOR, thickness=6, labels=False)
        image = draw_lanes(image, lanes, color=PRED_COLOR, thickness=3,
                           caption=f"{shown}{record.name}  F1 {record.f1:.2f}  "
                                   f"({record.predicted} found / {record.truth} true)")
        scale = width / image.shape[1]
        tiles.append(cv2.resize(image, (width, int(round(image.shape[0] * scale))), interpolation=cv2.INTER_AREA))
    if not tiles:
        raise EvaluationError("no frames to draw.")
    columns = min(columns, len(tiles))
    blank = np.zeros_like(tiles[0])
    while len(tiles) % columns:
        tiles.append(blank)
    rows = [np.hstack(tiles[i:i + columns]) for i in range(0, len(tiles), columns)]
    return save_png(path, np.vstack(rows))
