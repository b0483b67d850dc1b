"""`evaluate`: run a model (and optionally a second one) over labelled frames and score the lanes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import EvaluationError
from ..core.progress import Reporter
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
from .runners import open_runner
from ..geometry import Camera, to_markers

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
    total: int | None = None,
) -> tuple[EvaluationReport, list[tuple[FrameRecord, np.ndarray, list[Any], Sequence[Any]]]]:
    """Score `runner` on `frames` ((name, BGR frame, truth lanes[, condition tags[, SceneTruth]])).

    With `camera` (a geometry.Camera, or "scene" for each synthetic scene's own), the lanes' markers are
    scored against the SceneTruth too (the report's `markers`).

    The truth may be a TuSimple label (`datasets.TuSimpleLabel`): the report then adds TuSimple's
    accuracy/FP/FN, and the CULane metric scores its lanes as polylines. With `against` (the reference), both
    models see every frame and the retention table says how much of the reference's quality `runner` keeps.
    Returns the report and the `keep_frames` worst frames (record, frame, lanes, truth) for pictures.
    `total`: how many frames there are, for the reporter's bar (None: counted without one).
    """
    reporter = reporter or Reporter()
    scores = _Scores(thresholds, against is not None, camera, keep_frames)
    with reporter.count("frames", total) as advance:
        for item in frames:
            scores.check_size(item[0], item[1])
            lanes, seconds = _timed(runner, item[1])
            other = _timed(against, item[1]) if against is not None else None  # after the runner, on the same frame
            scores.add(item, lanes, seconds, other)
            advance(1)
    return scores.report(runner, against), scores.worst


class _Scores:
    """What evaluate accumulates frame by frame: the CULane metric overall and per condition tag, TuSimple's
    metric for TuSimple labels, the retention against the reference, the markers, each frame's record and the
    worst frames."""

    def __init__(self, thresholds: Sequence[float], with_reference: bool, camera: Any, keep_frames: int) -> None:
        self.thresholds, self.with_reference = thresholds, with_reference
        self.camera, self.keep_frames = camera, keep_frames
        self.evaluators: dict[str, CULaneEvaluator] = {}
        self.size: tuple[int, int] | None = None
        self.retention: RetentionComparison | None = None
        self.records: list[FrameRecord] = []
        self.worst: list[tuple[FrameRecord, np.ndarray, list[Any], Sequence[Any]]] = []
        self.against_seconds: list[float] = []
        self.tusimple: TuSimpleEvaluator | None = None
        self.markers = MarkerEvaluator() if camera is not None else None

    def check_size(self, name: str, frame: np.ndarray) -> None:
        """The first frame sets the image size the metrics use; a frame of another size is refused."""
        frame_size = (int(frame.shape[1]), int(frame.shape[0]))
        if self.size is None:
            self.size = frame_size
            self.evaluators["all"] = CULaneEvaluator(thresholds=self.thresholds, image_size=frame_size)
            if self.with_reference:
                self.retention = RetentionComparison(thresholds=self.thresholds, image_size=frame_size)
        elif frame_size != self.size:
            raise EvaluationError(f"frame {name} is {frame_size[0]}x{frame_size[1]}, the first frame was "
                                  f"{self.size[0]}x{self.size[1]}; evaluate one image size at a time.")

    def add(self, item: Sequence[Any], lanes: list[Any], seconds: float,
            reference: tuple[list[Any], float] | None) -> None:
        name, frame, truth = item[0], item[1], item[2]
        tags = tuple(item[3]) if len(item) > 3 else ()
        label = truth if hasattr(truth, "h_samples") else None
        if label is not None:
            truth = label.polylines()
            self.tusimple = self.tusimple or TuSimpleEvaluator()
            self.tusimple.add(lanes_to_tusimple(lanes, label.h_samples), label.lanes, label.h_samples)
        match = self.evaluators["all"].add(lanes, truth)
        counts = match.counts(self.thresholds[0])
        assert self.size is not None  # the first frame's (check_size)
        for tag in tags:  # the same lanes, truth and size: the frame's matching, not drawn and matched again
            self.evaluators.setdefault(tag, CULaneEvaluator(thresholds=self.thresholds, image_size=self.size)
                                       ).add_match(match)
        record = FrameRecord(name, len(lanes), len(truth), _f1(counts.tp, counts.fp, counts.fn), seconds, tags)
        if self.markers is not None:
            _score_markers(self.markers, self.camera, lanes, item, tags)
        self.records.append(record)
        if self.retention is not None and reference is not None:
            self.retention.add(reference[0], lanes, truth)  # `against` is the reference, the model the candidate
            self.against_seconds.append(reference[1])
        if self.keep_frames:
            self.worst.append((record, frame, lanes, truth))
            self.worst.sort(key=lambda w: w[0].f1)
            del self.worst[self.keep_frames:]

    def report(self, runner: Any, against: Any | None) -> EvaluationReport:
        if not self.records:
            raise EvaluationError("no frames to evaluate; check the data set (list file, labels or --synthetic N).")

        def summary(ms: np.ndarray) -> dict[str, float]:
            return {"mean": float(ms.mean()), "p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90))}

        return EvaluationReport(
            model=str(getattr(runner, "name", runner)),
            frames=len(self.records),
            culane=self.evaluators.pop("all").results(),
            latency_ms=summary(np.array([r.seconds for r in self.records]) * 1000.0),
            records=self.records,
            against=str(getattr(against, "name", against)) if against is not None else None,
            retention=self.retention.results() if self.retention is not None else None,
            by_condition={tag: ev.results() for tag, ev in sorted(self.evaluators.items())},
            against_latency_ms=(summary(np.array(self.against_seconds) * 1000.0) if self.against_seconds
                                else None),
            tusimple=self.tusimple.result() if self.tusimple is not None else None,
            markers=self.markers.result() if self.markers is not None else None,
        )


def evaluate_models(model: str, frames: Iterable[Any], *, against: str | None = None, tls: Any = None,
                    **options: Any) -> tuple[EvaluationReport, list[tuple[FrameRecord, np.ndarray, list[Any], Sequence[Any]]]]:
    """`evaluate` for models named as `edge-deploy evaluate` names them (an artifact directory, DIR:fp16 or
    grpc://HOST:PORT/MODEL: runners.open_runner, over TLS with `tls`), opened here and closed after; `options` are
    `evaluate`'s keyword arguments."""
    runner = open_runner(model, tls)
    try:
        other = open_runner(against, tls) if against else None
        try:
            return evaluate(runner, frames, against=other, **options)
        finally:
            if other is not None:
                other.close()
    finally:
        runner.close()


def _score_markers(markers: MarkerEvaluator, camera: Any, lanes: list[Any], item: Sequence[Any],
                   tags: Sequence[str]) -> None:
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
