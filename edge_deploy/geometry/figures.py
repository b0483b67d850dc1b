"""What a lane-keeping controller reads off the ego markers: where the vehicle is in its lane, how wide the lane
is, the heading relative to it, its curvature, and the time until a wheel reaches a line."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from ..errors import GeometryError, brief
from ..core.numbers import SPEED_MPS

__all__ = ["LaneFigures", "lane_figures", "time_to_crossing"]

HORIZON_S = 10.0  # time to line crossing is looked for this far ahead; None beyond


@dataclass(frozen=True)
class LaneFigures:
    """Figures of the ego lane (None where a needed marker is missing).

    lateral_offset_m: the vehicle's offset from the lane centre (positive: left of it); lane_width_m;
    heading_deg: the vehicle's heading relative to the lane (positive: pointing left of it); curvature_1pm:
    the lane centre's curvature at the vehicle (positive: bending left); time_to_left/right_s: time until
    the vehicle's left/right side reaches that line, driving straight on at speed_mps.
    """

    lateral_offset_m: float | None
    lane_width_m: float | None
    heading_deg: float | None
    curvature_1pm: float | None
    time_to_left_s: float | None = None
    time_to_right_s: float | None = None
    speed_mps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MAX_SPEED_MPS = float(SPEED_MPS.high)  # 100: 360 km/h: beyond it a speed is a typo (or inf), and the horizon a car sees is meaningless


def check_speed(speed_mps: Any, name: str = "speed_mps") -> float | None:
    """`speed_mps` as a float (None stays None), or GeometryError: a speed is 0 or more metres per second, finite, at
    most MAX_SPEED_MPS (NaN, inf and 1e308 are refused, here and by `infer --speed`)."""
    if speed_mps is None:
        return None
    try:
        speed = float(speed_mps) if not isinstance(speed_mps, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        speed = math.nan
    if not 0.0 <= speed <= MAX_SPEED_MPS:
        raise GeometryError(f"{name} must be 0 to {MAX_SPEED_MPS:g} metres per second (got {brief(speed_mps)}).")
    return speed


def time_to_crossing(marker: Any, side_m: float, speed_mps: float) -> float | None:
    """Seconds until a point at lateral offset `side_m`, going straight ahead at `speed_mps`, meets the curve of
    `marker` (a LaneMarker); None when it does not within HORIZON_S (or the speed is not positive)."""
    if not speed_mps > 0:
        return None
    x = np.linspace(0.0, speed_mps * HORIZON_S, 401)
    gap = marker.y_at(x) - side_m
    if gap[0] == 0:
        return 0.0
    crossed = np.flatnonzero(np.sign(gap[1:]) != np.sign(gap[0]))
    if len(crossed) == 0:
        return None
    i = int(crossed[0])
    x_cross = x[i] + (x[i + 1] - x[i]) * gap[i] / (gap[i] - gap[i + 1])
    return float(x_cross / speed_mps)


def lane_figures(markers: Any, speed_mps: float | None = None, vehicle_width_m: float = 1.8) -> LaneFigures:
    """The figures of a LaneMarkers' ego lane (speed_mps: `check_speed`)."""
    speed_mps = check_speed(speed_mps)
    return _lane_figures(markers, speed_mps, vehicle_width_m)


def _lane_figures(markers: Any, speed_mps: float | None, vehicle_width_m: float) -> LaneFigures:
    """The figures of a LaneMarkers' ego lane."""
    left, right = markers.ego_left, markers.ego_right
    if left is None or right is None:
        only = left or right
        heading = -math.degrees(math.atan(only.c1)) if only else None
        return LaneFigures(None, None, heading, 2 * only.c2 if only else None, speed_mps=speed_mps)
    centre_c0 = (left.c0 + right.c0) / 2
    centre_c1 = (left.c1 + right.c1) / 2
    centre_c2 = (left.c2 + right.c2) / 2
    ttc_left = ttc_right = None
    if speed_mps is not None:
        ttc_left = time_to_crossing(left, vehicle_width_m / 2, speed_mps)
        ttc_right = time_to_crossing(right, -vehicle_width_m / 2, speed_mps)
    return LaneFigures(
        lateral_offset_m=-centre_c0,
        lane_width_m=(left.c0 - right.c0) / math.sqrt(1 + centre_c1**2),
        heading_deg=-math.degrees(math.atan(centre_c1)),
        curvature_1pm=2 * centre_c2 / (1 + centre_c1**2) ** 1.5,
        time_to_left_s=ttc_left,
        time_to_right_s=ttc_right,
        speed_mps=speed_mps,
    )
