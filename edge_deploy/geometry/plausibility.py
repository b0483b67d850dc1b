"""Whether a frame's markers and figures can be real: an ego lane as wide as roads' lanes are, a vehicle that has not
moved sideways faster than a vehicle can, markers that do not cross. A consumer tells a measurement from a miss by it
(a missed centre line makes the ego lane two lanes wide and the offset jump by half a lane).

The bounds and where they come from: docs/geometry.md, "Plausibility".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import GeometryError

__all__ = ["CHECKS", "Plausibility", "PlausibilityLimits", "PlausibilityReason", "StreamPlausibility",
           "frame_plausibility"]

# The checks' names, in the order they run: contracts of the JSON's "checked" and each reason's "check".
LANE_WIDTH, OFFSET_JUMP, MARKERS_CROSSING = "lane_width", "offset_jump", "markers_crossing"
CHECKS = (LANE_WIDTH, OFFSET_JUMP, MARKERS_CROSSING)


@dataclass(frozen=True)
class PlausibilityLimits:
    """What roads and vehicles allow.

    lane_width_m: (narrowest, widest) ego lane; 2.5-4.6 m: AASHTO's narrowest lanes (2.7 m, 9 ft) less 0.2 m of
    measurement error, and the widest lane design guides keep (4.6 m, 15 ft: a wide outside lane shared with
    bicycles; wider ones are not recommended). max_lateral_speed_mps: the fastest the vehicle moves sideways
    relative to its lane, 6 m/s (1 g, the tyre-friction limit, built up over half a 3.6 m lane:
    sqrt(2 * 9.81 * 1.8) = 5.9 m/s; ordinary lane changes take about 6 s, under 1 m/s). jump_allowance_m: what the
    measured offset may move between frames on top of that, for the detections' own noise.
    """

    lane_width_m: tuple[float, float] = (2.5, 4.6)
    max_lateral_speed_mps: float = 6.0
    jump_allowance_m: float = 0.3

    def __post_init__(self) -> None:
        try:
            low, high = (float(v) for v in self.lane_width_m)
        except (TypeError, ValueError):
            low = high = math.nan
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            raise GeometryError(f"lane_width_m must be (narrowest, widest) with 0 < narrowest < widest metres "
                                f"(got {self.lane_width_m!r}).")
        object.__setattr__(self, "lane_width_m", (low, high))
        for name in ("max_lateral_speed_mps", "jump_allowance_m"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise GeometryError(f"{name} must be 0 or more (got {value!r}).")


@dataclass(frozen=True)
class PlausibilityReason:
    """One failed check: its name (one of CHECKS) and a line saying what was seen against what is possible."""

    check: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "message": self.message}


@dataclass(frozen=True)
class Plausibility:
    """A frame's verdict: ok when no check that ran failed; `checked` names the checks that ran (a check needs
    its inputs: lane_width both ego markers, offset_jump also an earlier plausible frame and the frame interval,
    markers_crossing two markers seen over a common stretch); `reasons` the ones that failed."""

    ok: bool
    reasons: tuple[PlausibilityReason, ...] = ()
    checked: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "reasons": [r.to_dict() for r in self.reasons], "checked": list(self.checked)}


def frame_plausibility(markers: Any, figures: Any, limits: PlausibilityLimits | None = None) -> Plausibility:
    """The checks one frame allows on its own (lane_width, markers_crossing) of a LaneMarkers and its LaneFigures."""
    return _verdict(markers, figures, limits or _DEFAULT_LIMITS, None)


class _Reference:
    """The last plausible frame with both ego markers: their c0, the offset, and the time since (s)."""

    __slots__ = ("left_c0", "right_c0", "offset_m", "age_s")

    def __init__(self, left_c0: float, right_c0: float, offset_m: float) -> None:
        self.left_c0, self.right_c0, self.offset_m, self.age_s = left_c0, right_c0, offset_m, 0.0


class StreamPlausibility:
    """The verdicts of one stream's frames, in order: `check(markers, figures, dt_s=, speed_mps=)` per frame adds
    offset_jump, against the last frame that was plausible (so one bad frame is not a reference for the next)."""

    def __init__(self, limits: PlausibilityLimits | None = None) -> None:
        self.limits = limits or _DEFAULT_LIMITS
        self._reference: _Reference | None = None

    def reset(self) -> None:
        """Forget the earlier frames (a new stream)."""
        self._reference = None

    def check(self, markers: Any, figures: Any, *, dt_s: float | None = None,
              speed_mps: float | None = None) -> Plausibility:
        """The frame's verdict. dt_s: the time since the previous frame (None: unknown, no offset_jump);
        speed_mps: the vehicle's speed, which also bounds its lateral speed (None: unknown)."""
        reference = self._reference
        if reference is not None:
            if dt_s is None or not dt_s > 0:
                reference = self._reference = None  # an unknown interval ends what the last frame can tell
            else:
                reference.age_s += dt_s
        verdict = _verdict(markers, figures, self.limits, reference, speed_mps)
        if verdict.ok and figures.lateral_offset_m is not None:
            self._reference = _Reference(markers.ego_left.c0, markers.ego_right.c0, figures.lateral_offset_m)
        return verdict


_DEFAULT_LIMITS = PlausibilityLimits()


def _verdict(markers: Any, figures: Any, limits: PlausibilityLimits, reference: _Reference | None,
             speed_mps: float | None = None) -> Plausibility:
    checked: list[str] = []
    reasons: list[PlausibilityReason] = []
    width = figures.lane_width_m
    if width is not None:
        checked.append(LANE_WIDTH)
        low, high = limits.lane_width_m
        if not low <= width <= high:
            reasons.append(PlausibilityReason(LANE_WIDTH, f"ego lane {width:.2f} m wide: lanes are {low:g}-{high:g} m "
                                                          "(a missed or extra marker?)"))
    if reference is not None and figures.lateral_offset_m is not None:
        checked.append(OFFSET_JUMP)
        reason = _jump(markers, figures, limits, reference, speed_mps)
        if reason is not None:
            reasons.append(reason)
    crossing = _crossing(markers)
    if crossing is not None:
        checked.append(MARKERS_CROSSING)
        if crossing:
            reasons.append(PlausibilityReason(MARKERS_CROSSING, crossing))
    return Plausibility(not reasons, tuple(reasons), tuple(checked))


def _jump(markers: Any, figures: Any, limits: PlausibilityLimits, reference: _Reference,
          speed_mps: float | None) -> PlausibilityReason | None:
    """offset_jump: the least lateral move of the vehicle that explains the ego markers now against the reference:
    staying in its lane (the offset's change), or a lane change left (the old left marker is now the right one)
    or right; too large a move for the time between them fails."""
    lateral_speed = limits.max_lateral_speed_mps
    if speed_mps is not None and speed_mps >= 0:
        lateral_speed = min(lateral_speed, speed_mps)  # nothing moves sideways faster than it moves
    allowed = lateral_speed * reference.age_s + limits.jump_allowance_m
    stay = figures.lateral_offset_m - reference.offset_m
    moved = min(abs(stay), abs(reference.left_c0 - markers.ego_right.c0), abs(reference.right_c0 - markers.ego_left.c0))
    if moved <= allowed:
        return None
    now = figures.lateral_offset_m
    return PlausibilityReason(OFFSET_JUMP, f"lateral offset {reference.offset_m:+.2f} -> {now:+.2f} m in "
                                           f"{reference.age_s:.3g} s: at most {allowed:.2f} m "
                                           f"({lateral_speed:g} m/s sideways + {limits.jump_allowance_m:g} m)")


def _crossing(markers: Any) -> str | None:
    """markers_crossing: an ego marker and another marker cross where both were seen. None when no such pair was seen
    over a common stretch (not checked), "" when none crosses, else what crosses. Of each pair the first is the one
    on the left, which must stay left of the other. Two outer markers crossing leave the ego lane's figures as they
    are.

    Exact and in Python floats (a frame has a handful of pairs; numpy calls would cost more than the arithmetic):
    the gap between two cubics is a cubic, least at an end of the stretch or where its slope is 0."""
    left, right = markers.ego_left, markers.ego_right
    pairs = []
    for ego in (left, right):
        if ego is not None:
            pairs += [(outer, ego) for outer in markers.next_left] + [(ego, outer) for outer in markers.next_right]
    if left is not None and right is not None:
        pairs.append((left, right))
    checked = False
    for upper, lower in pairs:
        low = max(upper.longitude_start, lower.longitude_start)
        high = min(upper.longitude_end, lower.longitude_end)
        if not high > low:
            continue
        checked = True
        x, gap = _least_gap(upper.c0 - lower.c0, upper.c1 - lower.c1, upper.c2 - lower.c2, upper.c3 - lower.c3,
                            low, high)
        if gap <= 0:
            return (f"markers at y {upper.lateral_at_axis:+.2f} m and {lower.lateral_at_axis:+.2f} m cross "
                    f"{_first_zero(upper, lower, low, x):.0f} m ahead, where both were seen")
    return "" if checked else None


def _least_gap(d0: float, d1: float, d2: float, d3: float, low: float, high: float) -> tuple[float, float]:
    """(x, d(x)) where the cubic d(x) = d0 + d1 x + d2 x^2 + d3 x^3 is least on [low, high]."""
    best_x, best = low, d0 + low * (d1 + low * (d2 + low * d3))
    value = d0 + high * (d1 + high * (d2 + high * d3))
    if value < best:
        best_x, best = high, value
    a, b = 3.0 * d3, 2.0 * d2  # d'(x) = a x^2 + b x + d1
    roots: tuple[float, ...]
    if a != 0.0:
        disc = b * b - 4.0 * a * d1
        roots = () if disc < 0.0 else ((-b - math.sqrt(disc)) / (2.0 * a), (-b + math.sqrt(disc)) / (2.0 * a))
    else:
        roots = (-d1 / b,) if b != 0.0 else ()
    for x in roots:
        if low < x < high:
            value = d0 + x * (d1 + x * (d2 + x * d3))
            if value < best:
                best_x, best = x, value
    return best_x, best


def _first_zero(upper: Any, lower: Any, low: float, high: float) -> float:
    """Where `upper` first meets `lower` on [low, high] (they are apart at low, not at high; low if not apart)."""
    def gap(x: float) -> float:
        return float(upper.y_at(x)) - float(lower.y_at(x))

    if gap(low) <= 0:
        return low
    for _ in range(40):  # bisection: the stretch is under 150 m, 40 halvings leave far under a millimetre
        middle = (low + high) / 2
        low, high = (middle, high) if gap(middle) > 0 else (low, middle)
    return high
