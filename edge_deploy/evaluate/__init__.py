"""Lane-quality evaluation: CULane / TuSimple metrics, model retention, and the evaluation data sets.

`metrics` scores lanes ((N, 2) (x, y) pixel arrays or `Lane` objects) against truth; `datasets`
reads CULane and TuSimple layouts and draws reserved-seed synthetic frames.
"""
from __future__ import annotations

from .datasets import (
    EVAL_SEED_BASE,
    CULaneEntry,
    TuSimpleLabel,
    culane_frames,
    read_culane_list,
    read_image,
    read_lines_file,
    read_tusimple_labels,
    synthetic_frames,
    tusimple_frames,
    write_lines_file,
)
from .metrics import (
    CULANE_IMAGE_SIZE,
    CULANE_LANE_WIDTH,
    CULaneEvaluator,
    CULaneResult,
    FrameCounts,
    FrameMatch,
    LanePair,
    RetentionComparison,
    RetentionResult,
    TuSimpleEvaluator,
    TuSimpleFrame,
    TuSimpleResult,
    culane_ious,
    culane_match,
    interpolate_lane,
    lane_mask,
    lanes_to_tusimple,
    tusimple_frame,
)

__all__ = [
    "CULANE_IMAGE_SIZE",
    "CULANE_LANE_WIDTH",
    "EVAL_SEED_BASE",
    "CULaneEntry",
    "CULaneEvaluator",
    "CULaneResult",
    "FrameCounts",
    "FrameMatch",
    "LanePair",
    "RetentionComparison",
    "RetentionResult",
    "TuSimpleEvaluator",
    "TuSimpleFrame",
    "TuSimpleLabel",
    "TuSimpleResult",
    "culane_frames",
    "culane_ious",
    "culane_match",
    "interpolate_lane",
    "lane_mask",
    "lanes_to_tusimple",
    "read_culane_list",
    "read_image",
    "read_lines_file",
    "read_tusimple_labels",
    "synthetic_frames",
    "tusimple_frame",
    "tusimple_frames",
    "write_lines_file",
]
