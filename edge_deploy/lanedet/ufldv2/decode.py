"""UFLDv2 raw outputs (loc_row, loc_col, exist_row, exist_col of one image) -> lanes in image pixels.

UFLDv2's decoder (the family's `decoder_module`). The rules are the official `pred2coords`
(Ultra-Fast-Lane-Detection-v2, demo.py), vectorised (docs/design.md, "UFLDv2"):

- Lanes 1 and 2 are read on the row anchors, lanes 0 and 3 on the column anchors.
- A lane exists at an anchor when its exist logits say so (argmax over the 2 classes: class 1
  strictly above class 0); it is drawn when it exists at more than half of the row anchors (row
  lanes) or more than a quarter of the column anchors (column lanes).
- Its position at an anchor: the softmax-weighted mean of the cells argmax - local_width ..
  argmax + local_width (clipped to the grid), plus 0.5, divided by (cells - 1), times the image
  width (row anchors) or height (column anchors). The anchor gives the other coordinate:
  row_anchor[k] * height, col_anchor[k] * width, with the anchors linspace(start, end, count).

What differs from the official code, on purpose: coordinates are floats (the official code truncates
them with int()); a column lane's points are sorted top to bottom like every `Lane` (the official
list runs left to right); a lane with fewer than 2 points is dropped (only possible on tiny grids);
each lane has a score, the mean probability of "exists" over its points; at most `top_k` lanes
(the highest scores), returned in the official order 1, 2, 0, 3.

Self-contained on purpose (numpy, the standard library and `lane.py` only): install copies it beside
the Triton Python-backend models. Errors are `DecodeError` with one-line messages.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:  # numpy only at run time: this file is also copied beside a Triton Python-backend model
    from typing import TypeAlias, Union

    from numpy.typing import ArrayLike

    # One image's four outputs: arrays (or what np.asarray takes) in OUTPUT_NAMES order, or by those names.
    Outputs: TypeAlias = Union[Sequence[ArrayLike], Mapping[str, ArrayLike]]

try:
    from ..lane import DecodeError, Lane, check_image_size
except ImportError:  # the flat copy beside a Triton Python-backend model (no package around it)
    from lane import DecodeError, Lane, check_image_size  # type: ignore[no-redef]

OUTPUT_NAMES = ("loc_row", "loc_col", "exist_row", "exist_col")
NUM_LANES = 4
ROW_LANES = (1, 2)  # read on the row anchors
COL_LANES = (0, 3)  # read on the column anchors
ROW_MIN_FRACTION = 0.5  # a row lane is drawn when it exists at more than this fraction of the row anchors
COL_MIN_FRACTION = 0.25
LOCAL_WIDTH = 1
TOP_K = NUM_LANES
# Anchors as (start, end) of linspace over the image height (rows) / width (columns), per data set.
ROW_ANCHORS = {"culane": (0.42, 1.0), "tusimple": (160 / 720, 710 / 720)}
COL_ANCHOR = (0.0, 1.0)
IMAGE_SIZES = {"culane": (590, 1640), "tusimple": (720, 1280)}  # (H, W) of the data sets' frames
ANCHOR_COUNTS = {"culane": (72, 81), "tusimple": (56, 41)}  # (row, column) anchors of the official models

__all__ = ["OUTPUT_NAMES", "DecodeError", "Lane", "decode_outputs", "decode_ufldv2", "validate_outputs"]


def validate_outputs(outputs: Outputs) -> tuple[np.ndarray, ...]:
    """The four outputs of one image (a sequence in OUTPUT_NAMES order, or a mapping by those names) as
    float arrays, checked: loc_row [cells_row, rows, 4], loc_col [cells_col, cols, 4], exist_row
    [2, rows, 4], exist_col [2, cols, 4], finite."""
    if isinstance(outputs, (str, bytes)) or not hasattr(outputs, "__len__"):
        raise DecodeError(f"UFLDv2 decoding takes its 4 outputs ({', '.join(OUTPUT_NAMES)}) as a sequence or a "
                          f"mapping by name, got {type(outputs).__name__}")
    if isinstance(outputs, Mapping):
        missing = [n for n in OUTPUT_NAMES if n not in outputs]
        if missing:
            raise DecodeError(f"UFLDv2 outputs lack {', '.join(missing)}; pass {', '.join(OUTPUT_NAMES)}")
        outputs = [outputs[n] for n in OUTPUT_NAMES]
    if len(outputs) != len(OUTPUT_NAMES):
        raise DecodeError(f"UFLDv2 decoding takes 4 outputs ({', '.join(OUTPUT_NAMES)}), got {len(outputs)}")
    arrays = tuple(np.asarray(o) for o in outputs)
    for name, arr in zip(OUTPUT_NAMES, arrays):
        if arr.dtype.kind != "f":
            raise DecodeError(f"UFLDv2 output {name} has dtype {arr.dtype}; expected a float array")
        if arr.ndim != 3 or arr.shape[-1] != NUM_LANES:
            raise DecodeError(f"UFLDv2 output {name} has shape {tuple(arr.shape)}; expected 3 axes ending in "
                              f"{NUM_LANES} lanes, without the batch axis (one image)")
        if not np.isfinite(arr).all():
            raise DecodeError(f"UFLDv2 output {name} contains NaN or infinite values; check the model "
                              "(FP16 overflow?)")
    loc_row, loc_col, exist_row, exist_col = arrays
    if exist_row.shape != (2, *loc_row.shape[1:]) or exist_col.shape != (2, *loc_col.shape[1:]):
        raise DecodeError(f"UFLDv2 outputs do not fit together: loc_row {loc_row.shape}, exist_row "
                          f"{exist_row.shape}, loc_col {loc_col.shape}, exist_col {exist_col.shape}; expected "
                          "exist_* [2, anchors, 4] with the anchors of loc_*")
    if loc_row.shape[0] < 2 or loc_col.shape[0] < 2:
        raise DecodeError(f"UFLDv2 location outputs need at least 2 cells, got {loc_row.shape[0]} (rows) and "
                          f"{loc_col.shape[0]} (columns)")
    return arrays


def _check_anchor(name: str, value: Any) -> tuple[float, float]:
    try:
        start, end = (float(v) for v in value)
    except (TypeError, ValueError):
        raise DecodeError(f"{name} must be (start, end), two numbers, got {value!r}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0.0 <= start <= end <= 1.0):
        raise DecodeError(f"{name} must be (start, end) with 0 <= start <= end <= 1 (fractions of the image), "
                          f"got {value!r}")
    return start, end


def _positions(loc: np.ndarray, local_width: int) -> np.ndarray:
    """loc [cells, anchors, lanes] -> [anchors, lanes]: the softmax-weighted mean cell of argmax +- local_width
    (clipped to the grid), plus 0.5."""
    cells, anchors, lanes = loc.shape
    peak = loc.argmax(axis=0)  # [anchors, lanes]
    window = peak + np.arange(-local_width, local_width + 1).reshape(-1, 1, 1)  # [2w+1, anchors, lanes]
    inside = (window >= 0) & (window < cells)
    np.clip(window, 0, cells - 1, out=window)
    logits = loc[window, np.arange(anchors).reshape(-1, 1), np.arange(lanes)].astype(np.float64)
    logits[~inside] = -np.inf
    weights = np.exp(logits - logits.max(axis=0))
    return (weights * window).sum(axis=0) / weights.sum(axis=0) + 0.5


def _lanes_on(loc: np.ndarray, exist: np.ndarray, lanes: tuple[int, ...], min_fraction: float, local_width: int,
              ) -> list[tuple[int, np.ndarray, np.ndarray, float]]:
    """(lane index, anchor indices, positions in cells / (cells - 1), score) of the drawn lanes among `lanes`."""
    step = lanes[1] - lanes[0] if len(lanes) > 1 else 1
    picked = slice(lanes[0], lanes[-1] + 1, step)  # (1, 2) and (0, 3) are evenly spaced: views, not copies
    margin = exist[1, :, picked].astype(np.float64) - exist[0, :, picked]
    exists = margin > 0  # argmax over the two classes; a tie is class 0, as argmax returns the first
    drawn = np.flatnonzero(exists.sum(axis=0) > exist.shape[1] * min_fraction)
    if not len(drawn):
        return []
    chosen = [lanes[i] for i in drawn]
    if len(drawn) < len(lanes):
        picked = slice(chosen[0], chosen[0] + 1)  # one lane of two
        margin, exists = margin[:, drawn], exists[:, drawn]
    positions = _positions(loc[:, :, picked], local_width) / (loc.shape[0] - 1)
    probability = 1.0 / (1.0 + np.exp(-margin))
    found = []
    for j, lane in enumerate(chosen):
        at = np.flatnonzero(exists[:, j])
        found.append((lane, at, positions[at, j], float(probability[at, j].mean())))
    return found


def decode_outputs(outputs: Outputs, *, row_anchor: Sequence[float],
                   col_anchor: Sequence[float], local_width: int = LOCAL_WIDTH, top_k: int = TOP_K,
                   image_size: tuple[float, float], model_width: float | None = None) -> list[Lane]:
    """One image's four outputs -> up to `top_k` lanes in an image of `image_size` (H, W), in the official order
    (1, 2, 0, 3). `row_anchor` / `col_anchor`: (start, end) of the anchors as fractions of the image height /
    width. `model_width` is not used (the positions are fractions of the image already)."""
    loc_row, loc_col, exist_row, exist_col = validate_outputs(outputs)
    r0, r1 = _check_anchor("row_anchor", row_anchor)
    c0, c1 = _check_anchor("col_anchor", col_anchor)
    if isinstance(local_width, bool) or not isinstance(local_width, (int, np.integer)) or local_width < 0:
        raise DecodeError(f"local_width must be an integer >= 0, got {local_width!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise DecodeError(f"top_k must be an integer >= 1, got {top_k!r}")
    height, width = check_image_size(image_size)
    ys_row = np.linspace(r0, r1, loc_row.shape[1]) * height
    xs_col = np.linspace(c0, c1, loc_col.shape[1]) * width
    found: list[tuple[float, int, Lane]] = []
    for lane, at, pos, score in _lanes_on(loc_row, exist_row, ROW_LANES, ROW_MIN_FRACTION, int(local_width)):
        points = np.stack([pos * width, ys_row[at]], axis=1)
        found.append((score, lane, Lane(points, score)))
    for lane, at, pos, score in _lanes_on(loc_col, exist_col, COL_LANES, COL_MIN_FRACTION, int(local_width)):
        points = np.stack([xs_col[at], pos * height], axis=1)
        found.append((score, lane, Lane(points[np.argsort(points[:, 1], kind="stable")], score)))
    found = [f for f in found if len(f[2].points) >= 2]
    if len(found) > top_k:
        keep = {id(f) for f in sorted(found, key=lambda f: -f[0])[:top_k]}
        found = [f for f in found if id(f) in keep]
    return [lane for _, _, lane in found]


def decode_ufldv2(outputs: Outputs, *, image_size: tuple[float, float] | None = None,
                  dataset: str = "culane", local_width: int = LOCAL_WIDTH, top_k: int = TOP_K,
                  row_anchor: Sequence[float] | None = None, col_anchor: Sequence[float] = COL_ANCHOR) -> list[Lane]:
    """Lanes of one image from UFLDv2's four outputs (no batch axis; a sequence in the order loc_row, loc_col,
    exist_row, exist_col, or a mapping by those names), as floats in an image of `image_size` (H, W; default:
    the data set's 590x1640 or 720x1280). `dataset` picks the official row anchors (culane, tusimple) unless
    `row_anchor` gives (start, end)."""
    if dataset not in ROW_ANCHORS and row_anchor is None:
        raise DecodeError(f"unknown dataset {dataset!r}; use {' or '.join(ROW_ANCHORS)}, or give row_anchor")
    if row_anchor is None:  # the data set's anchors: the outputs must be that data set's model's
        outputs = validate_outputs(outputs)
        found = (outputs[0].shape[1], outputs[1].shape[1])
        if found != ANCHOR_COUNTS[dataset]:
            fits = [name for name, counts in ANCHOR_COUNTS.items() if counts == found]
            raise DecodeError(
                f"these UFLDv2 outputs have {found[0]} row and {found[1]} column anchors, dataset={dataset!r} "
                f"{ANCHOR_COUNTS[dataset][0]} and {ANCHOR_COUNTS[dataset][1]}; pass "
                + (f"dataset={fits[0]!r}" if fits else "row_anchor for this model") + " (the model's own data set)")
    return decode_outputs(outputs, row_anchor=row_anchor if row_anchor is not None else ROW_ANCHORS[dataset],
                          col_anchor=col_anchor, local_width=local_width, top_k=top_k,
                          image_size=image_size if image_size is not None else IMAGE_SIZES.get(dataset, (590, 1640)))
