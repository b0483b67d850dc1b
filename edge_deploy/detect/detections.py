"""The boxes an object detector found in one frame, best first."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import DetectionError

__all__ = ["Detections"]


@dataclass(frozen=True, eq=False)
class Detections:
    """One frame's detections, sorted by score, highest first (ties keep the order given).

    boxes: float32 [N, 4], x1, y1, x2, y2 in the original frame's pixels (model-input pixels when decoded without a
    letterbox); scores: float32 [N]; classes: int32 [N]. The arrays are read-only.
    """

    boxes: npt.NDArray[np.float32]
    scores: npt.NDArray[np.float32]
    classes: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        boxes = np.array(self.boxes, dtype=np.float32)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        scores = np.array(self.scores, dtype=np.float32)
        classes = np.array(self.classes, dtype=np.int32)
        if boxes.ndim != 2 or boxes.shape[1] != 4 or scores.shape != (len(boxes),) or classes.shape != (len(boxes),):
            raise DetectionError(f"Detections needs boxes [N, 4], scores [N] and classes [N] (got {boxes.shape}, "
                                 f"{scores.shape}, {classes.shape}); pass arrays of one length.")
        order = np.argsort(-scores, kind="stable")
        for name, array in (("boxes", boxes[order]), ("scores", scores[order]), ("classes", classes[order])):
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @classmethod
    def empty(cls) -> Detections:
        """No detections."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.scores)

    def to_dict(self) -> list[dict[str, Any]]:
        """JSON-friendly: [{"box": [x1, y1, x2, y2], "score": s, "class_id": c}, ...] of plain floats and ints."""
        return [{"box": [float(v) for v in box], "score": float(score), "class_id": int(cls)}
                for box, score, cls in zip(self.boxes, self.scores, self.classes)]
