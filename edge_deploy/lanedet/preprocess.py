"""Camera frame (HxWx3 uint8) -> model input (NCHW float32/float16), into a preallocated buffer.

Steps: optional crop (a view), cv2.resize into a preallocated HxWx3 uint8 buffer (or, with
`resized_height`, a taller one whose bottom H rows are kept, as UFLDv2's test transform does: only the
source rows that reach those H rows are resized, `kept_rows`; "antialiased_bilinear" is Pillow's bilinear
resize, resampled here by `AntialiasedBilinear`, which computes only the kept rows),
cv2.split into three uint8 planes (the HWC -> CHW transpose, and the colour swap
when the frame's order differs from the model's), then one 256-entry look-up
table per channel applied with cv2.LUT straight into the output planes. The
table holds ((v * scale - mean) / std) for every byte v, computed in float64 and
rounded once to float32; for FP16 those float32 values rounded to float16 (as
raw uint16 bit patterns), so FP16 output == FP32 output.astype(float16) exactly,
without numpy's slow whole-frame float16 cast.

Self-contained on purpose (numpy, cv2 and the standard library only): Triton
Python-backend models copy this file. Errors are ValueError subclasses with
one-line messages; edge_deploy wraps them.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, cast

import cv2
import numpy as np

__all__ = [
    "INTERPOLATIONS",
    "InvalidFrameError",
    "PreprocessSpec",
    "PreprocessSpecError",
    "Preprocessor",
    "AntialiasedBilinear",
    "antialiased_bilinear_weights",
    "preprocess",
    "resize",
]

INTERPOLATIONS = {
    "bicubic": cv2.INTER_CUBIC,
    "bilinear": cv2.INTER_LINEAR,
    "nearest": cv2.INTER_NEAREST,
    "area": cv2.INTER_AREA,
    # Pillow's bilinear resize (antialiased when shrinking: torchvision's Resize on a PIL image). No cv2.resize
    # flag does it: AntialiasedBilinear resamples it (`resize`), and None makes a cv2.resize with it fail loudly.
    "antialiased_bilinear": None,
}
ANTIALIASED_BILINEAR = "antialiased_bilinear"
COLORS = ("bgr", "rgb")
_CROP_SIDES = ("top", "bottom", "left", "right")


class PreprocessSpecError(ValueError):
    """A preprocessing spec (or Preprocessor option) is invalid."""


class InvalidFrameError(ValueError):
    """A frame is not an HxWx3 uint8 image (wrong type, shape, dtype, or empty)."""


def _triple(name: str, value: Any) -> tuple[float, float, float]:
    try:
        vals = tuple(float(v) for v in (value if isinstance(value, (list, tuple, np.ndarray)) else [value] * 3))
    except (TypeError, ValueError):
        raise PreprocessSpecError(f"preprocess {name} must be 3 numbers, got {value!r}") from None
    if len(vals) != 3 or not all(math.isfinite(v) for v in vals):
        raise PreprocessSpecError(f"preprocess {name} must be 3 finite numbers, got {value!r}")
    return vals


@dataclass(frozen=True)
class PreprocessSpec:
    """How frames become model input (the manifest's "preprocess" entry).

    crop: None, or pixels removed from each side of the original frame before
    resizing, {"top", "bottom", "left", "right"} (missing sides are 0). With a
    crop, decoded lanes are in the cropped frame: decode with image_size =
    `crop_box(...)` height/width and add its top/left.

    resized_height: None, or the height frames are resized to (at `width`) before the
    bottom `height` rows are kept (UFLDv2: input_height / crop_ratio). Decoders map
    lanes to the whole frame themselves (the model was trained on this view).
    """

    height: int = 360
    width: int = 640
    color: str = "bgr"
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    interpolation: str = "bicubic"
    crop: Mapping[str, int] | None = field(default=None, hash=False)
    resized_height: int | None = None
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("height", "width"):
            value = getattr(self, name)
            try:
                as_int = int(value)
            except (TypeError, ValueError):
                as_int = 0
            if isinstance(value, bool) or as_int != value or not 1 <= as_int <= 16384:
                raise PreprocessSpecError(f"preprocess {name} must be a positive integer, got {value!r}")
            set_(self, name, as_int)
        if self.resized_height is not None:
            value = self.resized_height
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not self.height <= value <= 16384:
                raise PreprocessSpecError(f"preprocess resized_height must be null or an integer from height "
                                          f"({self.height}) to 16384, got {value!r}")
            set_(self, "resized_height", int(value))
        color = str(self.color).lower()
        if color not in COLORS:
            raise PreprocessSpecError(f"preprocess color must be 'bgr' or 'rgb', got {self.color!r}")
        set_(self, "color", color)
        try:
            scale = float(self.scale)
        except (TypeError, ValueError):
            scale = math.nan
        if not math.isfinite(scale):
            raise PreprocessSpecError(f"preprocess scale must be a finite number, got {self.scale!r}")
        set_(self, "scale", scale)
        set_(self, "mean", _triple("mean", self.mean))
        std = _triple("std", self.std)
        if 0.0 in std:
            raise PreprocessSpecError(f"preprocess std must be non-zero, got {self.std!r}")
        set_(self, "std", std)
        interpolation = str(self.interpolation).lower()
        if interpolation not in INTERPOLATIONS:
            raise PreprocessSpecError(
                f"preprocess interpolation {self.interpolation!r} is not supported; use one of "
                + ", ".join(INTERPOLATIONS)
            )
        set_(self, "interpolation", interpolation)
        if self.layout != "NCHW":
            raise PreprocessSpecError(f"preprocess layout {self.layout!r} is not supported; only NCHW")
        if self.crop is not None:
            if not isinstance(self.crop, Mapping) or set(self.crop) - set(_CROP_SIDES):
                raise PreprocessSpecError(
                    f"preprocess crop must be null or a mapping of {', '.join(_CROP_SIDES)} to pixels, "
                    f"got {self.crop!r}"
                )
            crop = {side: self.crop.get(side, 0) for side in _CROP_SIDES}
            if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in crop.values()):
                raise PreprocessSpecError(f"preprocess crop values must be integers >= 0, got {self.crop!r}")
            set_(self, "crop", {k: int(v) for k, v in crop.items()})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PreprocessSpec":
        """Build from a manifest / config "preprocess" mapping (unknown keys are an error)."""
        if not isinstance(data, Mapping):
            raise PreprocessSpecError(f"preprocess spec must be a mapping, got {type(data).__name__}")
        unknown = set(data) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise PreprocessSpecError(f"preprocess spec has unknown keys: {', '.join(sorted(unknown))}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The manifest form (the keys and shapes every family's spec has)."""
        return {
            "height": self.height,
            "width": self.width,
            "color": self.color,
            "scale": self.scale,
            "mean": list(self.mean),
            "std": list(self.std),
            "interpolation": self.interpolation,
            "crop": None if self.crop is None else dict(self.crop),
            "resized_height": self.resized_height,
            "layout": self.layout,
        }

    def crop_box(self, frame_height: int, frame_width: int) -> tuple[int, int, int, int]:
        """(top, left, height, width) of the part of a frame that is resized; raises if nothing is left."""
        c = self.crop or {}
        top, left = c.get("top", 0), c.get("left", 0)
        height = frame_height - top - c.get("bottom", 0)
        width = frame_width - left - c.get("right", 0)
        if height < 1 or width < 1:
            raise InvalidFrameError(
                f"frame of {frame_height}x{frame_width} pixels is too small for the crop {self.crop}; "
                "send full-size camera frames"
            )
        return top, left, height, width


def check_frame(frame: Any) -> np.ndarray:
    """Return `frame` if it is a non-empty HxWx3 uint8 ndarray, else raise InvalidFrameError."""
    if not isinstance(frame, np.ndarray):
        raise InvalidFrameError(f"frame must be a numpy array (HxWx3 uint8 BGR), got {type(frame).__name__}")
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise InvalidFrameError(
            f"frame has shape {tuple(frame.shape)}; expected HxWx3 (3 colour channels); "
            "convert grey or BGRA images with cv2.cvtColor first"
        )
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise InvalidFrameError(f"frame is empty (shape {tuple(frame.shape)})")
    if frame.dtype != np.uint8:
        raise InvalidFrameError(f"frame has dtype {frame.dtype}; expected uint8 (8-bit image as read by OpenCV)")
    return frame


# How far (in source rows, summed over the kept rows) the sampling grid of a part-frame resize may drift from the
# whole-frame resize it stands for.
KEPT_ROWS_DRIFT = 0.01
_kept_rows_cache: dict[tuple[int, int, int], tuple[int, int]] = {}


def kept_rows(frame_height: int, resized_height: int, height: int) -> tuple[int, int]:
    """(source rows, rows to resize them to) for "resize to `resized_height` rows, keep the bottom `height`".

    Resizing the whole frame throws the top rows away. Instead the bottom K source rows are resized to M rows,
    with K / M the whole resize's ratio to within KEPT_ROWS_DRIFT rows over the kept rows (the smallest such
    M >= height), so every kept row samples the same source positions as in the whole resize: UFLDv2 CULane
    resizes rows 207..589 to 346 rows instead of 590 to 533. (frame_height, resized_height) when no M fits.
    """
    key = (frame_height, resized_height, height)
    found = _kept_rows_cache.get(key)
    if found is None:
        ratio = frame_height / resized_height
        found = (frame_height, resized_height)
        for rows in range(height, resized_height):
            source = round(rows * ratio)
            if source <= frame_height and abs(source / rows - ratio) * height <= KEPT_ROWS_DRIFT:
                found = (source, rows)
                break
        _kept_rows_cache[key] = found
    return found


def antialiased_bilinear_weights(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's bilinear coefficients (Resample.c, precompute_coeffs): per output pixel, the triangle filter
    (support 1, widened by the scale when shrinking) at the source pixel centres within reach, normalised.

    Returns (first source index per output pixel, int64 [out]; weights, float64 [out, taps], zero-padded).
    """
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = filter_scale
    center = (np.arange(out_size) + 0.5) * scale
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    end = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size)
    source = first[:, None] + np.arange(int((end - first).max()))
    weights = np.clip(1.0 - np.abs((source - center[:, None] + 0.5) * (1.0 / filter_scale)), 0.0, None)
    weights[source >= end[:, None]] = 0.0
    return first, weights / weights.sum(axis=1, keepdims=True)


# OpenCV's bilinear resize stands in for Pillow's filter along the columns up to this scale (source / output
# pixels), at about half the cost of the exact taps: UFLDv2 CULane's 1640 -> 1600 (1.025) is then 0.05 mean / 5 max
# levels from Pillow on road scenes (exact taps: 0.006 / 1), 0.85 / 9 on uniform noise (0.15 / 2). At 1.08 noise
# is 2.4 / 26 levels off; TuSimple's 1280 -> 800 (1.6) would be 0.51 / 31 on road scenes (BENCHMARKS.md).
BILINEAR_UP_TO_SCALE = 1.05
# Repeated per-row weight planes (cv2.multiply's fast path) up to this many bytes per pass, else numpy broadcasting.
_REPEATED_WEIGHTS_BYTES = 32 << 20


class _Taps:
    """One pass along axis 0 of a (rows, n) uint16 array: out[i] = sum_t w[i, t] * src[index[t][i]], weights in
    8.8 fixed point (each output's sum exactly 256, so 255 * 256 fits uint16), rounded half up to uint8."""

    def __init__(self, first: np.ndarray, weights: np.ndarray, n: int, offset: int = 0) -> None:
        fixed = np.rint(weights * 256.0).astype(np.int64)
        rows = np.arange(len(fixed))
        fixed[rows, weights.argmax(axis=1)] += 256 - fixed.sum(axis=1)
        last = first + np.count_nonzero(weights, axis=1) - 1
        self.index = [np.minimum(first + t, last) - offset for t in range(weights.shape[1])]
        repeat = fixed.size * n * 2 <= _REPEATED_WEIGHTS_BYTES
        self.weights = [np.ascontiguousarray(np.repeat(column, n, axis=1)) if repeat else column
                        for column in np.hsplit(fixed.astype(np.uint16), weights.shape[1])]
        # scratch reused by every call: fresh arrays of this size cost page faults each time
        self.gathered, self.term, self.acc = (np.empty((len(fixed), n), np.uint16) for _ in range(3))

    def __call__(self, src: np.ndarray, out: np.ndarray) -> np.ndarray:
        for t, (index, weights) in enumerate(zip(self.index, self.weights)):
            np.take(src, index, axis=0, out=self.gathered, mode="clip")  # "clip": no buffering (in range anyway)
            dst = self.term if t else self.acc
            if weights.shape[1] > 1:
                cv2.multiply(self.gathered, weights, dst=dst)
            else:
                np.multiply(self.gathered, weights, out=dst)
            if t:
                cv2.add(self.acc, self.term, dst=self.acc)
        # beta: rounds acc / 256 = k + 0.5 up, as Pillow does (convertScaleAbs rounds half to even)
        return cv2.convertScaleAbs(self.acc, out, alpha=1.0 / 256.0, beta=1.0 / 1024.0)


class AntialiasedBilinear:
    """Pillow's bilinear resize (Image.resize(..., BILINEAR): antialiased when shrinking) of (H, W) uint8 frames
    to (height, width), of which only the bottom `keep` rows are computed.

    Like Pillow: columns first, rounded to uint8, then rows, only the source rows the kept rows reach. Each pass
    uses Pillow's weights (8.8 fixed point instead of its 22-bit: within 2 levels), except that OpenCV's bilinear
    resize does the columns where the scale is at most `bilinear_up_to_scale`. The weights are computed here, once.
    Holds its scratch buffers: not thread-safe (`antialiased_bilinear` keeps one per thread).
    """

    def __init__(self, source: tuple[int, int], size: tuple[int, int], keep: int | None = None,
                 bilinear_up_to_scale: float = BILINEAR_UP_TO_SCALE) -> None:
        (src_h, src_w), (height, width) = source, size
        keep = height if keep is None else keep
        if min(src_h, src_w, height, width, keep) < 1 or keep > height:
            raise PreprocessSpecError(f"cannot resize {src_w}x{src_h} to {width}x{height} keeping {keep} rows")
        self.source, self.size, self.keep = (src_h, src_w), (height, width), keep
        first, weights = antialiased_bilinear_weights(src_h, height)
        first, weights = first[height - keep:], weights[height - keep:]
        self.top = int(first.min())
        self.bottom = int((first + np.count_nonzero(weights, axis=1)).max())
        rows = self.bottom - self.top
        self.rows = None if (src_h, keep) == (height, height) else _Taps(first, weights, width * 3, self.top)
        self.columns: _Taps | None = None
        self.bilinear_columns = src_w != width and src_w / width <= bilinear_up_to_scale
        if src_w != width and not self.bilinear_columns:
            self.columns = _Taps(*antialiased_bilinear_weights(src_w, width), rows * 3)
            self._flipped = np.empty((src_w, rows, 3), np.uint8)
            self._flipped16 = np.empty((src_w, rows * 3), np.uint16)
            self._narrow = np.empty((width, rows * 3), np.uint8)
        self._mid = np.empty((rows, width, 3), np.uint8)
        self._mid16 = np.empty((rows, width * 3), np.uint16)

    def __call__(self, frame: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The kept rows of `frame` resized, into `out` (C-contiguous uint8 [keep, width, 3]) or a new array."""
        if frame.shape[:2] != self.source:
            raise InvalidFrameError(f"frame is {frame.shape[1]}x{frame.shape[0]}; this resize takes "
                                    f"{self.source[1]}x{self.source[0]}")
        height, width = self.size
        if out is None:
            out = np.empty((self.keep, width, 3), np.uint8)
        src = frame[self.top:self.bottom]
        rows = len(src)
        if self.bilinear_columns:
            src = cv2.resize(src, (width, rows), dst=self._mid, interpolation=cv2.INTER_LINEAR)
        elif self.columns is not None:  # the column pass is a row pass on the transposed frame
            cv2.transpose(src, self._flipped)
            np.copyto(self._flipped16, self._flipped.reshape(self._flipped16.shape))
            self.columns(self._flipped16, self._narrow)
            src = cv2.transpose(self._narrow.reshape(width, rows, 3), self._mid)
        if self.rows is None:
            np.copyto(out, src)
        else:
            np.copyto(self._mid16, src.reshape(self._mid16.shape))
            self.rows(self._mid16, out.reshape(self.keep, width * 3))
        return out


_local = threading.local()


def antialiased_bilinear(source: tuple[int, int], size: tuple[int, int], keep: int | None = None
                         ) -> AntialiasedBilinear:
    """This thread's AntialiasedBilinear for these sizes, made once (a few recent ones are kept)."""
    resamplers = _local.__dict__.setdefault("resamplers", {})
    key = (tuple(source), tuple(size), keep)
    found = resamplers.get(key)
    if found is None:
        if len(resamplers) >= 8:
            resamplers.pop(next(iter(resamplers)))
        found = resamplers[key] = AntialiasedBilinear(source, size, keep)
    return found


def resize(frame: np.ndarray, size: tuple[int, int], interpolation: str) -> np.ndarray:
    """`frame` (HxWx3 uint8) resized to `size` (height, width) as a spec's `interpolation` resizes."""
    if interpolation == ANTIALIASED_BILINEAR:
        return antialiased_bilinear((frame.shape[0], frame.shape[1]), size)(frame)
    return cv2.resize(frame, (size[1], size[0]), interpolation=cast(int, INTERPOLATIONS[interpolation]))  # None: above


class Preprocessor:
    """Writes frames into a preallocated (batch, 3, H, W) float32/float16 buffer.

    `pre(frame)` returns a (1, 3, H, W) view of slot `index` of `pre.output`; the
    buffer is reused by the next call, so consume (or copy) it first. `out` lets
    the buffer be memory you own (e.g. a shared-memory region). Not thread-safe:
    use one Preprocessor per thread.
    """

    def __init__(
        self,
        spec: PreprocessSpec | None = None,
        dtype: Any = np.float32,
        batch: int = 1,
        *,
        out: np.ndarray | None = None,
    ) -> None:
        self.spec = spec if spec is not None else PreprocessSpec()
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float16)):
            raise PreprocessSpecError(f"model input dtype must be float32 or float16, got {dt}")
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise PreprocessSpecError(f"batch must be an integer >= 1, got {batch!r}")
        self.dtype = dt
        shape = (int(batch), 3, self.spec.height, self.spec.width)
        if out is None:
            out = np.empty(shape, dtype=dt)
        elif out.shape != shape or out.dtype != dt or not out.flags.c_contiguous or not out.flags.writeable:
            raise PreprocessSpecError(
                f"out must be a writable C-contiguous {dt} array of shape {shape}, "
                f"got {out.dtype} {tuple(out.shape)}"
            )
        self.output = out
        self._target = out.view(np.uint16) if dt == np.float16 else out
        self._resized = np.empty((self.spec.resized_height or self.spec.height, self.spec.width, 3), dtype=np.uint8)
        self._planes = [np.empty((self.spec.height, self.spec.width), dtype=np.uint8) for _ in range(3)]
        self._interp = INTERPOLATIONS[self.spec.interpolation]  # None: AntialiasedBilinear resamples
        self._luts = self._make_luts()

    @property
    def batch_size(self) -> int:
        return self.output.shape[0]

    def _make_luts(self) -> list[np.ndarray]:
        v = np.arange(256, dtype=np.float64)
        luts = []
        for mean, std in zip(self.spec.mean, self.spec.std):
            lut = ((v * self.spec.scale - mean) / std).astype(np.float32)
            if self.dtype == np.float16:
                with np.errstate(over="ignore"):
                    half = lut.astype(np.float16)
                if not np.isfinite(half).all():
                    raise PreprocessSpecError(
                        "preprocess scale/mean/std give values outside the float16 range; use an FP32 model input"
                    )
                lut = half.view(np.uint16)
            luts.append(lut)
        return luts

    def __call__(self, frame: np.ndarray, index: int = 0, color: str = "bgr") -> np.ndarray:
        """Preprocess one HxWx3 uint8 frame (any size) into slot `index`; returns that (1, 3, H, W) view."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.output):
            raise PreprocessSpecError(f"index must be in [0, {len(self.output) - 1}], got {index!r}")
        color = str(color).lower()
        if color not in COLORS:
            raise InvalidFrameError(f"color must be 'bgr' or 'rgb', got {color!r}")
        frame = check_frame(frame)
        if self.spec.crop is not None:
            top, left, h, w = self.spec.crop_box(frame.shape[0], frame.shape[1])
            frame = frame[top : top + h, left : left + w]
        height = self.spec.resized_height or self.spec.height
        if self._interp is None:
            source = (frame.shape[0], frame.shape[1])
            resample = antialiased_bilinear(source, (height, self.spec.width), self.spec.height)
            resized = resample(frame, self._resized[: self.spec.height])
        else:
            resized = self._resize(frame, height, self._interp)
        cv2.split(resized, self._planes)
        swap = color != self.spec.color
        for c in range(3):
            src = self._planes[2 - c] if swap else self._planes[c]
            cv2.LUT(src, self._luts[c], dst=self._target[index, c])
        return self.output[index : index + 1]

    def _resize(self, frame: np.ndarray, height: int, interpolation: int) -> np.ndarray:
        """cv2.resize to (height, width), only the source rows that reach the kept rows; the kept rows."""
        if height != self.spec.height:
            source_rows, height = kept_rows(frame.shape[0], height, self.spec.height)
            frame = frame[frame.shape[0] - source_rows:]
        if frame.shape[:2] == (height, self.spec.width):
            resized = frame  # a resize to the same size is a copy
        else:
            buffer = self._resized[:height] if height <= len(self._resized) else None
            resized = cv2.resize(frame, (self.spec.width, height), dst=buffer, interpolation=interpolation)
        if height != self.spec.height:
            resized = resized[height - self.spec.height:]  # the bottom rows: still C-contiguous
        return resized

    def batch(self, frames: Sequence[np.ndarray], color: str = "bgr") -> np.ndarray:
        """Preprocess up to `batch_size` frames into slots 0..n-1; returns the (n, 3, H, W) view."""
        if not 1 <= len(frames) <= len(self.output):
            raise InvalidFrameError(f"got {len(frames)} frames; this Preprocessor takes 1 to {len(self.output)}")
        for i, frame in enumerate(frames):
            self(frame, i, color)
        return self.output[: len(frames)]


def preprocess(
    frame: np.ndarray, spec: PreprocessSpec | None = None, dtype: Any = np.float32, color: str = "bgr"
) -> np.ndarray:
    """One-off convenience: a new (1, 3, H, W) array for `frame` (use Preprocessor in loops)."""
    return Preprocessor(spec, dtype)(frame, 0, color)
