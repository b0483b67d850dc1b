"""Score labels of lanes that meet near the vanishing point do not print over each other (issue 45 #12)."""
from __future__ import annotations

import numpy as np

from edge_deploy.lanedet.draw import draw_lanes, label_boxes
from edge_deploy.lanedet.lane import Lane


def converging(n: int = 5) -> list[np.ndarray]:
    """`n` straight lanes from the bottom of a 1640x590 frame to within a few pixels of one vanishing point."""
    ys = np.linspace(260, 589, 40)
    return [np.stack([820 + k + (x0 - 820) * (ys - 260) / 329, ys], axis=1)
            for k, x0 in enumerate(np.linspace(100, 1540, n))]


def overlapping(boxes, gap: int = 4) -> list[tuple[int, int]]:  # noqa: ANN001 - touching reads as one number
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[:i])
            if a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap]


def test_labels_of_converging_lanes_do_not_overlap_and_stay_on_their_lane() -> None:
    lanes = converging()
    boxes = label_boxes([(pts, "0.97") for pts in lanes], (590, 1640), 0.98)
    assert overlapping(boxes) == [], boxes
    for (x0, y0, x1, y1), pts in zip(boxes, lanes):
        assert 0 <= x0 < x1 <= 1640 and 0 <= y0 < y1 <= 590
        at = pts[np.argmin(np.abs(pts[:, 1] - (y1 + 8)))]  # the lane point the label was put at
        assert x0 <= at[0] <= x1 or x0 == 0 or x1 == 1640, (x0, x1, at)
    assert boxes[0][3] < 280  # the first keeps the top end


def test_draw_lanes_writes_every_label() -> None:
    frame = np.full((590, 1640, 3), 90, np.uint8)
    lanes = [Lane(points=pts.astype(np.float32), score=0.9) for pts in converging(3)]
    drawn = draw_lanes(frame, lanes)
    unlabelled = draw_lanes(frame, lanes, labels=False)
    for (x0, y0, x1, y1) in label_boxes([(lane.points, "0.90") for lane in lanes], (590, 1640), 0.984):
        assert (drawn[y0:y1, x0:x1] != unlabelled[y0:y1, x0:x1]).any()


def test_labels_that_would_touch_are_moved_apart() -> None:
    """Top ends exactly one label apart: side by side their labels would read as one number ("0.970.97")."""
    import cv2

    (w, _), _ = cv2.getTextSize("0.97", cv2.FONT_HERSHEY_SIMPLEX, 0.98, 3)
    ys = np.linspace(260, 589, 40)
    lanes = [np.stack([820 + k * w + (x0 - 820) * (ys - 260) / 329, ys], axis=1)
             for k, x0 in enumerate((200, 800, 1400))]
    boxes = label_boxes([(pts, "0.97") for pts in lanes], (590, 1640), 0.98)
    assert overlapping(boxes) == [], boxes
