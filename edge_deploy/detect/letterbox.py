"""How a frame was fitted into a detector's input, and back: letterbox (aspect ratio kept, padded as ultralytics
pads) or stretch (independent x and y scales)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from ..errors import DetectionError, brief

__all__ = ["MODES", "Letterbox"]

MODES = ("letterbox", "stretch")


def _size(value: Any, what: str) -> tuple[int, int]:
    try:
        height, width = value
    except (TypeError, ValueError):
        height = width = None
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in (height, width)):
        raise DetectionError(f"{what} must be (height, width) in positive whole pixels (got {brief(value)}); "
                             f"pass two integers above 0.")
    return int(height), int(width)


@dataclass(frozen=True)
class Letterbox:
    """A frame of frame_hw (height, width) fitted into a model input of input_hw.

    letterbox: scale_x == scale_y == min(input_h / frame_h, input_w / frame_w), the resized image centred; pad_x,
    pad_y are the left and top padding, round((input - round(frame * scale)) / 2 - 0.1) as ultralytics pads.
    stretch: scale_x = input_w / frame_w, scale_y = input_h / frame_h, no padding. Make one with Letterbox.of.
    """

    mode: str
    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    frame_hw: tuple[int, int]
    input_hw: tuple[int, int]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise DetectionError(f"unknown letterbox mode {brief(self.mode)}; choose one of: {', '.join(MODES)}.")
        if not all(math.isfinite(s) and s > 0 for s in (self.scale_x, self.scale_y)):
            raise DetectionError(f"letterbox scales must be finite and above 0 (got {self.scale_x!r}, "
                                 f"{self.scale_y!r}); make it with Letterbox.of.")

    @classmethod
    def of(cls, frame_hw: Sequence[int], input_hw: Sequence[int], mode: str = "letterbox") -> Letterbox:
        """How a frame of frame_hw fits into an input of input_hw in `mode` ("letterbox" or "stretch")."""
        fh, fw = _size(frame_hw, "the frame size")
        ih, iw = _size(input_hw, "the model input size")
        if mode == "stretch":
            return cls(mode, iw / fw, ih / fh, 0, 0, (fh, fw), (ih, iw))
        if mode != "letterbox":
            raise DetectionError(f"unknown letterbox mode {brief(mode)}; choose one of: {', '.join(MODES)}.")
        scale = min(ih / fh, iw / fw)
        rh, rw = _resized(fh, fw, scale, ih, iw)
        return cls(mode, scale, scale, round((iw - rw) / 2 - 0.1), round((ih - rh) / 2 - 0.1), (fh, fw), (ih, iw))

    @property
    def resized_hw(self) -> tuple[int, int]:
        """The size the frame is resized to before padding."""
        if self.mode == "stretch":
            return self.input_hw
        return _resized(*self.frame_hw, self.scale_x, *self.input_hw)

    def apply(self, frame: np.ndarray, pad_value: int = 114) -> npt.NDArray[np.uint8]:
        """The frame (uint8 [frame_h, frame_w, 3]) resized (bilinear) and padded with pad_value to the input size."""
        if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.shape != (*self.frame_hw, 3):
            got = f"{frame.dtype} {list(frame.shape)}" if isinstance(frame, np.ndarray) else brief(frame)
            raise DetectionError(f"the frame must be uint8 [{self.frame_hw[0]}, {self.frame_hw[1]}, 3] for this "
                                 f"letterbox (got {got}); make the Letterbox for this frame size.")
        if isinstance(pad_value, bool) or not isinstance(pad_value, (int, np.integer)) or not 0 <= pad_value <= 255:
            raise DetectionError(f"pad_value must be an integer from 0 to 255 (got {brief(pad_value)}).")
        rh, rw = self.resized_hw
        resized = frame if (rh, rw) == self.frame_hw else cv2.resize(frame, (rw, rh), interpolation=cv2.INTER_LINEAR)
        out = np.full((*self.input_hw, 3), pad_value, np.uint8)
        out[self.pad_y:self.pad_y + rh, self.pad_x:self.pad_x + rw] = resized
        return out

    def undo(self, boxes: np.ndarray) -> npt.NDArray[np.float32]:
        """Boxes [..., 4] x1, y1, x2, y2 in model-input pixels -> frame pixels, clipped to the frame."""
        boxes = np.asarray(boxes, dtype=np.float64)
        if boxes.ndim == 0 or boxes.shape[-1] != 4:
            raise DetectionError(f"boxes must be [..., 4] (x1, y1, x2, y2) (got shape {list(boxes.shape)}).")
        out = np.empty(boxes.shape, np.float64)
        out[..., 0::2] = np.clip((boxes[..., 0::2] - self.pad_x) / self.scale_x, 0, self.frame_hw[1])
        out[..., 1::2] = np.clip((boxes[..., 1::2] - self.pad_y) / self.scale_y, 0, self.frame_hw[0])
        return out.astype(np.float32)


def _resized(fh: int, fw: int, scale: float, ih: int, iw: int) -> tuple[int, int]:
    # At least a pixel, at most the input (rounding never passes it, but a float may).
    return min(ih, max(1, round(fh * scale))), min(iw, max(1, round(fw * scale)))
