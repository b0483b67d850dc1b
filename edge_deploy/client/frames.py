"""Camera frames as the clients accept them: checked, colour order known, fitted to a fused model's size."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import FrameError
from ..lanedet.preprocess import INTERPOLATIONS, resize

COLORS = ("bgr", "rgb")
FLOAT_OVERSHOOT = 255  # how far beyond 0..255 a float frame may go and still be clipped


def check_frame(frame: Any, index: int | None = None) -> np.ndarray:
    """`frame` as an HxWx3 uint8 image, or FrameError.

    uint8 frames pass through untouched; float frames (0..255, e.g. after OpenCV
    float maths) must be finite and are rounded and clipped to uint8 (values further than FLOAT_OVERSHOOT
    beyond 0..255 are refused: another scale).
    """
    where = "frame" if index is None else f"frame {index}"
    if not isinstance(frame, np.ndarray):
        raise FrameError(f"{where} is a {type(frame).__name__}, not a numpy array; pass an HxWx3 uint8 image (cv2.imread).")
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise FrameError(
            f"{where} has shape {tuple(frame.shape)}; expected HxWx3 (a colour image: convert grey or BGRA "
            "images with cv2.cvtColor)."
        )
    if frame.size == 0:
        raise FrameError(f"{where} is empty (shape {tuple(frame.shape)}); check the camera or the file it came from.")
    if frame.dtype == np.uint8:
        return frame
    if frame.dtype.kind == "f":
        if not np.isfinite(frame).all():
            raise FrameError(f"{where} contains NaN or infinite values; pass a uint8 image or finite 0..255 floats.")
        low, high = float(frame.min()), float(frame.max())
        # The overshoot of float maths (up to one range beyond 0..255) is clipped; more is a frame of another scale
        # (0..1000, 16-bit) that clipping would turn into a white or black image.
        if low < -FLOAT_OVERSHOOT or high > 255 + FLOAT_OVERSHOOT:
            raise FrameError(f"{where} holds float values from {low:g} to {high:g}, beyond 0..255 and its "
                             f"overshoot of {FLOAT_OVERSHOOT}; pass a uint8 image or floats in 0..255 (scale it first).")
        return np.clip(np.rint(frame), 0, 255).astype(np.uint8)
    raise FrameError(f"{where} has dtype {frame.dtype}; expected uint8 (or float in 0..255).")


def check_frames(frames: Sequence[Any], color: str) -> list[np.ndarray]:
    """Every frame through `check_frame` (numbered when there are several), and the colour order checked."""
    checked = [check_frame(f, i if len(frames) > 1 else None) for i, f in enumerate(frames)]
    if color not in COLORS:
        raise FrameError(f"unknown color order {color!r}; use 'bgr' (OpenCV) or 'rgb'.")
    return checked


def fit_frame(frame: np.ndarray, size: tuple[int, int], interpolation: str, strict: bool) -> np.ndarray:
    """`frame` at `size` (H, W): itself when it has that size, else resized here (FrameError with `strict`)."""
    if frame.shape[:2] == tuple(size):
        return frame
    if strict:
        raise FrameError(
            f"frame is {frame.shape[1]}x{frame.shape[0]} but the model takes {size[1]}x{size[0]} camera frames "
            "(preprocessing fused in); send frames of that size, or pass strict=False to resize them here."
        )

    return resize(frame, (size[0], size[1]), interpolation if interpolation in INTERPOLATIONS else "bicubic")
