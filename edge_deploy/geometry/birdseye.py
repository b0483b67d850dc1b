"""The bird's-eye panel: a frame's markers drawn on the road from above, in metres, beside the frame."""
from __future__ import annotations

from typing import Any

import numpy as np

from .markers import LaneMarkers

__all__ = ["annotated_frame", "draw_birdseye", "with_birdseye"]

_AHEAD_M = (-6.0, 60.0)  # x shown, m (behind the camera .. ahead)
_SIDE_M = 12.0  # |y| shown, m
_BACKGROUND = (48, 48, 48)
_GRID = (80, 80, 80)
_EGO_FILL = (60, 110, 60)
_VEHICLE = (230, 230, 230)
_EGO_LINE = (0, 255, 255)
_OTHER_LINE = (255, 200, 120)
_TEXT = (255, 255, 255)
_IMPLAUSIBLE = (60, 60, 255)  # red: the figures failed a plausibility check
_PLAUSIBLE = (120, 220, 120)
_VEHICLE_SIZE_M = (4.5, 1.8)  # length, width; the camera sits 1.5 m behind the front


def _to_pixels(x: np.ndarray, y: np.ndarray, width: int, height: int) -> np.ndarray:
    """Road (x forward, y left, m) -> panel pixels: forward is up, left is left."""
    u = (0.5 - y / (2 * _SIDE_M)) * width
    v = (1.0 - (x - _AHEAD_M[0]) / (_AHEAD_M[1] - _AHEAD_M[0])) * height
    return np.stack([u, v], -1)


def draw_birdseye(markers: LaneMarkers, height: int, figures: Any = None, plausibility: Any = None) -> np.ndarray:
    """A height x (0.55 height) BGR panel: a 10 m grid, the ego lane shaded, each marker over the range it was
    seen (ego markers yellow, the others blue, ids when tracked), the vehicle, and the figures if given, in a strip
    of their own under the road; with
    `plausibility` (a Plausibility) a line under them, "plausible" in green or "IMPLAUSIBLE" and the failed
    checks in red, the figures then in red too."""
    import cv2

    width = max(int(height * 0.55), 120)
    panel = np.full((height, width, 3), _BACKGROUND, np.uint8)
    lines, colours = _figure_lines(figures, plausibility)
    # The figures get a strip of their own under the road, so no marker (nor its extrapolated dots, nor the
    # vehicle) runs through them: the road is drawn into the rows above it (a view of the panel, which clips).
    strip = 8 + 14 * (len(lines) - 1) + 14 if lines else 0
    road = panel[: height - strip] if strip < height // 2 else panel
    _draw_road(road, markers)
    for i, (text, colour) in enumerate(zip(lines, colours)):
        cv2.putText(panel, text, (4, height - 8 - 14 * (len(lines) - 1 - i)), cv2.FONT_HERSHEY_SIMPLEX, 0.38,
                    colour, 1, cv2.LINE_AA)
    return panel


def _figure_lines(figures: Any, plausibility: Any) -> tuple[list[str], list[tuple[int, int, int]]]:
    """The figures' lines under the road and their colours ([] without figures)."""
    if figures is None:
        return [], []
    lines = [f"offset {_fmt(figures.lateral_offset_m, '+.2f')} m",
             f"width {_fmt(figures.lane_width_m, '.2f')} m",
             f"heading {_fmt(figures.heading_deg, '+.1f')} deg",
             f"radius {_radius(figures.curvature_1pm)}"]
    colours = [_TEXT if plausibility is None or plausibility.ok else _IMPLAUSIBLE] * len(lines)
    if plausibility is not None:
        lines.append(_verdict_line(plausibility))
        colours.append(_PLAUSIBLE if plausibility.ok else _IMPLAUSIBLE)
    return lines, colours


def _draw_road(panel: np.ndarray, markers: LaneMarkers) -> None:
    """The grid, the ego lane, the markers and the vehicle, into `panel` (its whole height is the road)."""
    import cv2

    height, width = panel.shape[:2]
    for x in np.arange(0.0, _AHEAD_M[1] + 1, 10.0):
        (u, v), = _to_pixels(np.array([x]), np.array([0.0]), width, height)
        cv2.line(panel, (0, int(v)), (width, int(v)), _GRID, 1)
        cv2.putText(panel, f"{x:.0f} m", (3, int(v) - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.35, _GRID, 1, cv2.LINE_AA)
    left, right = markers.ego_left, markers.ego_right
    if left is not None and right is not None:
        xs = np.linspace(0.0, min(left.view_range, right.view_range, _AHEAD_M[1]), 40)
        polygon = np.concatenate([_to_pixels(xs, np.asarray(left.y_at(xs)), width, height),
                                  _to_pixels(xs[::-1], np.asarray(right.y_at(xs[::-1])), width, height)])
        cv2.fillPoly(panel, [np.round(polygon).astype(np.int32)], _EGO_FILL, cv2.LINE_AA)
    for marker in markers:
        xs = np.linspace(max(marker.longitude_start, _AHEAD_M[0]), min(marker.longitude_end, _AHEAD_M[1]), 60)
        colour = _EGO_LINE if marker is left or marker is right else _OTHER_LINE
        pts = _to_pixels(xs, marker.y_at(xs), width, height)
        cv2.polylines(panel, [np.round(pts).astype(np.int32)], False, colour, 2, cv2.LINE_AA)
        # dotted: the stretch from the vehicle to where it was first seen (the cubic extrapolated)
        for x in np.arange(0.0, marker.longitude_start, 2.0):
            u, v = _to_pixels(np.array([x]), np.array([marker.y_at(x)]), width, height)[0]
            cv2.circle(panel, (int(u), int(v)), 1, colour, -1)
        if marker.id is not None:  # beside the nearest end, where it is always inside the panel
            u, v = pts[0]
            cv2.putText(panel, str(marker.id), (int(u) + 4, min(int(v), height - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                        colour, 1, cv2.LINE_AA)
    length, car_width = _VEHICLE_SIZE_M
    corners = _to_pixels(np.array([1.5 - length, 1.5]), np.array([car_width / 2, -car_width / 2]), width, height)
    cv2.rectangle(panel, tuple(int(c) for c in corners[0]), tuple(int(c) for c in corners[1]), _VEHICLE, -1)


def with_birdseye(frame: np.ndarray, markers: LaneMarkers, figures: Any = None, plausibility: Any = None) -> np.ndarray:
    """`frame` with the bird's-eye panel of its markers to its right."""
    return np.concatenate([frame, draw_birdseye(markers, frame.shape[0], figures, plausibility)], 1)


_SHORT = {"lane_width": "width", "offset_jump": "jump", "markers_crossing": "crossing"}


def _verdict_line(plausibility: Any) -> str:
    if plausibility.ok:
        return "plausible" if plausibility.checked else "plausible (nothing to check)"
    return "IMPLAUSIBLE: " + ", ".join(_SHORT.get(r.check, r.check) for r in plausibility.reasons)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _radius(curvature: float | None) -> str:
    if curvature is None:
        return "-"
    if abs(curvature) < 1e-4:
        return "straight"
    return f"{1 / abs(curvature):.0f} m {'left' if curvature > 0 else 'right'}"


def annotated_frame(frame: np.ndarray, lanes: list[Any], caption: str, found: Any = None) -> np.ndarray:
    """The frame with its lanes drawn, and the bird's-eye panel of its markers beside it when `found`
    (FrameMarkers) is given."""
    from ..lanedet.draw import draw_lanes

    drawn = draw_lanes(frame, lanes, caption=caption)
    return drawn if found is None else with_birdseye(drawn, found.markers, found.figures, found.plausibility)
