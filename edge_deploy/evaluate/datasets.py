"""Evaluation data: CULane and TuSimple layouts on disk, and reserved-seed synthetic frames.

Every reader gives lanes as float32 (N, 2) arrays of (x, y) pixels in the original image, the
form `Lane.points` and `road_scene` use.

CULane: a list file names images relative to a root (`/driver_23_30frame/05151649_0422.MP4/00000.jpg`,
leading slash optional; only the first field of a line is read, so `train_gt.txt`-style lines
work too). Each image has `<stem>.lines.txt` beside it (or under a separate annotation root), one
lane per line as `x0 y0 x1 y1 ...`. As in the official metric readers (the SCNN C++ tool and
LaneATT's culane_metric.py), every point is kept, negative x included (lanes run off the image
edge), and lines with fewer than 2 points are dropped. LaneATT's training loader also drops
negative coordinates: `drop_negative=True` does that. Lanes stored bottom-up are reversed so
points run top to bottom; the geometry is unchanged.

TuSimple: `label_data_*.json` holds one JSON object per line with `lanes` (x per h_sample, -2 for
no point), `h_samples` and `raw_file` (relative to the data set root).

Synthetic: `synthetic_frames(n, seed)` draws `road_scene(seed=EVAL_SEED_BASE + seed + i)`.
Seeds from EVAL_SEED_BASE up are reserved for evaluation: anything that trains or fits on
synthetic frames must refuse them (`lanedet.train.training_seed` does), so evaluation frames never leak into
training.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.bounded_read import read_regular
from ..errors import EvaluationError
from ..core.fsutil import write_text_atomic
from ..synthetic.roads import EVAL_SEED_BASE, scene, scene_truth

__all__ = [
    "EVAL_SEED_BASE",
    "CULaneEntry",
    "TuSimpleLabel",
    "culane_frames",
    "evaluation_frames",
    "read_culane_list",
    "read_image",
    "read_lines_file",
    "read_tusimple_labels",
    "synthetic_frames",
    "tusimple_frames",
    "write_lines_file",
]

LINES_SUFFIX = ".lines.txt"


DATA_FILE_LIMIT = 256 << 20  # bytes: a list or label file (CULane's test list is 2 MiB, TuSimple's labels 20 MiB)


def _read_text(path: Path, what: str, hint: str = "", *, shown: str | Path | None = None) -> str:
    """The text of a data set file, or one EvaluationError saying which file and why: a FIFO or device node is
    refused (bounded_read), never read until something writes to it."""
    if not path.exists():
        raise EvaluationError(f"{what} not found: {shown if shown is not None else path}{hint}")
    data = read_regular(path, what, EvaluationError, "give the data set's own file", DATA_FILE_LIMIT)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise EvaluationError(f"cannot read {what} {path}: {exc}") from None


# --- synthetic ----------------------------------------------------------------------------


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise EvaluationError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


def synthetic_frames(
    n: int, seed: int = 0, *, width: int = 1640, height: int = 590, lanes: int | None = None,
    marker_truth: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """`n` evaluation frames (name, BGR uint8 frame, truth lanes, condition tags) of the widened generator;
    marker_truth=True adds the scene's `SceneTruth` (its camera and true markers) as a fifth item.

    Frame i is `synthetic_roads.scene(EVAL_SEED_BASE + seed + i)`: seeds training refuses, so evaluation
    frames are unseen by construction. The name is `synthetic-<scene seed>`.
    """
    n, seed = _check_count("n", n), _check_count("seed", seed)
    if seed + n > EVAL_SEED_BASE:
        raise EvaluationError(f"seed + n must stay below {EVAL_SEED_BASE}, got seed={seed}, n={n}")

    def frames() -> Iterator[tuple[Any, ...]]:
        for i in range(n):
            scene_seed = EVAL_SEED_BASE + seed + i
            drawn = scene(scene_seed, width, height, lanes=lanes)
            truth = [np.asarray(t, dtype=np.float32) for t in drawn.lanes]
            item = (f"synthetic-{scene_seed}", drawn.frame, truth, drawn.conditions)
            yield (*item, scene_truth(scene_seed, width, height, lanes=lanes)) if marker_truth else item

    return frames()


def evaluation_frames(
    *,
    data: str | Path | None = None,
    tusimple: Sequence[str | Path] | None = None,
    synthetic: int | None = None,
    seed: int = 0,
    root: str | Path | None = None,
    limit: int | None = None,
    marker_truth: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """The labelled frames `evaluate` scores, from exactly one source: a CULane list file (`data`), TuSimple
    label files (`tusimple`) or `synthetic` reserved-seed frames from `seed`. `root`: the data set root
    (default: the list file's, or the first label file's, folder); `limit`: at most this many CULane or
    TuSimple frames; `marker_truth`: the synthetic frames' true markers too (only they have them). What cannot
    be scored is a one-line EvaluationError naming evaluate's option."""
    if synthetic is not None and (isinstance(synthetic, bool) or not isinstance(synthetic, (int, np.integer))
                                  or synthetic < 1):
        raise EvaluationError(f"--synthetic {synthetic}: give the number of synthetic frames to score, 1 or more.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise EvaluationError(f"--seed {seed}: the first synthetic evaluation seed is 0 or more.")
    if len([s for s in (data, tusimple, synthetic) if s]) != 1:
        raise EvaluationError("give exactly one of --data LIST, --tusimple LABELS or --synthetic N.")
    if marker_truth and not synthetic:
        raise EvaluationError("--camera scores lane markers against the synthetic roads' true markers, which "
                              "only they have: use it with --synthetic N.")
    if data is not None:
        return culane_frames(root or Path(data).parent, data, limit=limit)
    if tusimple:
        return tusimple_frames(root or Path(tusimple[0]).parent, tusimple, limit=limit)
    assert synthetic is not None  # exactly one source (above)
    return synthetic_frames(int(synthetic), int(seed), marker_truth=marker_truth)


# --- images -------------------------------------------------------------------------------


def read_image(path: str | Path) -> np.ndarray:
    """A BGR uint8 frame from disk, or EvaluationError."""
    import cv2

    path = Path(path)
    if not path.is_file():
        raise EvaluationError(f"image not found: {path}; check the data set root")
    frame = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if frame is None:
        raise EvaluationError(f"cannot decode image {path}; is it a complete JPEG/PNG?")
    return frame


# --- CULane -------------------------------------------------------------------------------


def _top_down(lane: np.ndarray) -> np.ndarray:
    return lane[::-1].copy() if len(lane) > 1 and lane[0, 1] > lane[-1, 1] else lane


def read_lines_file(path: str | Path, *, drop_negative: bool = False) -> list[np.ndarray]:
    """The lanes of a CULane `.lines.txt` file: float32 (N, 2), N >= 2, points top to bottom.

    drop_negative=True drops points with a negative coordinate first (LaneATT's training loader).
    """
    path = Path(path)
    text = _read_text(path, "lane annotation", f"; each image needs a {LINES_SUFFIX} beside it")
    lanes = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        try:
            values = [float(v) for v in fields]
        except ValueError:
            raise EvaluationError(
                f"malformed lane annotation {path}:{number}: expected numbers 'x0 y0 x1 y1 ...'"
            ) from None
        if len(values) % 2 or not all(math.isfinite(v) for v in values):
            raise EvaluationError(
                f"malformed lane annotation {path}:{number}: {len(values)} values, expected finite (x, y) pairs"
            )
        lane = np.asarray(values, dtype=np.float32).reshape(-1, 2)
        if drop_negative:
            lane = lane[(lane >= 0).all(axis=1)]
        if len(lane) >= 2:
            lanes.append(_top_down(lane))
    return lanes


def write_lines_file(path: str | Path, lanes: Sequence[Any]) -> Path:
    """Write lanes (arrays or objects with `.points`) in CULane `.lines.txt` form; lanes under 2 points are skipped."""
    path = Path(path)
    rows = []
    for lane in lanes:
        pts = np.asarray(getattr(lane, "points", lane), dtype=np.float64).reshape(-1, 2)
        if len(pts) >= 2:
            rows.append(" ".join(f"{x:.5f} {y:.5f}" for x, y in pts) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(rows))
    return path


@dataclass(frozen=True)
class CULaneEntry:
    """One listed frame: its list-file name, image path and annotation path."""

    name: str
    image: Path
    lines: Path


def read_culane_list(
    root: str | Path, list_file: str | Path, *, annotations_root: str | Path | None = None
) -> list[CULaneEntry]:
    """The frames a CULane list file names, each checked to have its image and `.lines.txt`.

    list_file may be absolute or relative to `root`; annotations default to sitting beside the images.
    """
    root = Path(root)
    anno_root = Path(annotations_root) if annotations_root is not None else root
    listed = Path(list_file)
    if not listed.is_absolute() and not listed.is_file() and (root / listed).is_file():
        listed = root / listed
    text = _read_text(listed, "CULane list file", "; give a path like <root>/list/test.txt", shown=list_file)
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        name = fields[0].lstrip("/")
        image = root / name
        lines = (anno_root / name).with_suffix(LINES_SUFFIX)
        if not image.is_file():
            raise EvaluationError(f"image not found: {image} (line {number} of {listed}); check the data set root")
        if not lines.is_file():
            raise EvaluationError(
                f"lane annotation not found: {lines} (line {number} of {listed}); check the annotation root"
            )
        entries.append(CULaneEntry(name=fields[0], image=image, lines=lines))
    if not entries:
        raise EvaluationError(f"CULane list file {listed} names no images")
    return entries


def culane_frames(
    root: str | Path,
    list_file: str | Path,
    *,
    annotations_root: str | Path | None = None,
    limit: int | None = None,
) -> Iterator[tuple[str, np.ndarray, list[np.ndarray]]]:
    """(name, BGR frame, truth lanes) for each listed frame; the list is checked before the first frame."""
    entries = read_culane_list(root, list_file, annotations_root=annotations_root)
    if limit is not None:
        entries = entries[: _check_count("limit", limit)]

    def frames() -> Iterator[tuple[str, np.ndarray, list[np.ndarray]]]:
        for entry in entries:
            yield entry.name, read_image(entry.image), read_lines_file(entry.lines)

    return frames()


# --- TuSimple -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TuSimpleLabel:
    """One TuSimple label: lanes as float64 x per h_sample (-2 = no point)."""

    raw_file: str
    h_samples: np.ndarray
    lanes: tuple[np.ndarray, ...]

    def polylines(self) -> list[np.ndarray]:
        """The lanes as float32 (N, 2) (x, y) polylines of their valid points, top to bottom; N >= 2."""
        out = []
        for xs in self.lanes:
            valid = xs >= 0
            if np.count_nonzero(valid) >= 2:
                out.append(_top_down(np.stack([xs[valid], self.h_samples[valid]], axis=1).astype(np.float32)))
        return out


def _label(obj: Any, where: str) -> TuSimpleLabel:
    if not isinstance(obj, dict) or not {"lanes", "h_samples", "raw_file"} <= obj.keys():
        raise EvaluationError(f"malformed TuSimple label at {where}: needs 'lanes', 'h_samples' and 'raw_file'")
    try:
        h = np.asarray(obj["h_samples"], dtype=np.float64)
        lanes = tuple(np.asarray(lane, dtype=np.float64) for lane in obj["lanes"])
    except (TypeError, ValueError):
        raise EvaluationError(f"malformed TuSimple label at {where}: lanes and h_samples must be numbers") from None
    if h.ndim != 1 or not np.isfinite(h).all() or not isinstance(obj["raw_file"], str):
        raise EvaluationError(f"malformed TuSimple label at {where}: h_samples must be a list of numbers")
    for lane in lanes:
        if lane.shape != h.shape or not np.isfinite(lane).all():
            raise EvaluationError(
                f"malformed TuSimple label at {where}: a lane has {lane.size} x values for {h.size} h_samples"
            )
    return TuSimpleLabel(raw_file=obj["raw_file"], h_samples=h, lanes=lanes)


def read_tusimple_labels(*paths: str | Path) -> list[TuSimpleLabel]:
    """All labels of one or more TuSimple `label_data_*.json` files (one JSON object per line)."""
    labels = []
    for path in map(Path, paths):
        text = _read_text(path, "TuSimple label file")
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvaluationError(f"malformed TuSimple label at {path}:{number}: {exc.msg}") from None
            labels.append(_label(obj, f"{path}:{number}"))
    return labels


def tusimple_frames(
    root: str | Path, label_files: Sequence[str | Path], *, limit: int | None = None
) -> Iterator[tuple[str, np.ndarray, TuSimpleLabel]]:
    """(raw_file, BGR frame, label) per label; label.polylines() are the truth lanes for the CULane metric.

    Label files are read and every image is checked to exist before the first frame.
    """
    root = Path(root)
    labels = read_tusimple_labels(*[p if Path(p).is_absolute() or Path(p).is_file() else root / p for p in label_files])
    if limit is not None:
        labels = labels[: _check_count("limit", limit)]
    for label in labels:
        if not (root / label.raw_file).is_file():
            raise EvaluationError(f"image not found: {root / label.raw_file}; check the TuSimple root")

    def frames() -> Iterator[tuple[str, np.ndarray, TuSimpleLabel]]:
        for label in labels:
            yield label.raw_file, read_image(root / label.raw_file), label

    return frames()
