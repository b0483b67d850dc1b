"""Lane markers scored against the synthetic roads' truth (`synthetic.scene_truth`): is the ego lane found, how far
off are c0 and the heading at the vehicle, overall and per condition."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence, TypedDict

import numpy as np

__all__ = ["EGO_TOLERANCE_M", "MarkerEvaluator", "MarkerScore"]

EGO_TOLERANCE_M = 0.5  # an ego marker further than this from the true one at the vehicle is the wrong marker


class ConditionScore(TypedDict):
    """MarkerScore's figures for the frames of one condition tag (a dict: part of `to_dict`'s JSON)."""

    frames: int
    both_visible: int
    ego_found: int
    ego_found_rate: float | None
    c0_error_m: dict[str, float | None]
    heading_error_deg: dict[str, float | None]


@dataclass
class MarkerScore:
    """frames: scored; both_visible: frames whose two true ego markings are in the frame; ego_found: of those,
    frames with both ego markers found, each within EGO_TOLERANCE_M of the truth at the vehicle; c0_error_m and
    heading_error_deg: p50/p95 of |found - true| over the ego markers found; by_condition: the same per tag."""

    frames: int
    both_visible: int
    ego_found: int
    c0_error_m: dict[str, float | None]
    heading_error_deg: dict[str, float | None]
    by_condition: dict[str, ConditionScore] = field(default_factory=dict)

    @property
    def ego_found_rate(self) -> float | None:
        return self.ego_found / self.both_visible if self.both_visible else None

    def to_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "both_visible": self.both_visible, "ego_found": self.ego_found,
                "ego_found_rate": self.ego_found_rate, "c0_error_m": self.c0_error_m,
                "heading_error_deg": self.heading_error_deg, "by_condition": self.by_condition}


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95))}


class _Tally:
    def __init__(self) -> None:
        self.frames = self.both_visible = self.ego_found = 0
        self.c0: list[float] = []
        self.heading: list[float] = []

    def summary(self) -> ConditionScore:
        return {"frames": self.frames, "both_visible": self.both_visible, "ego_found": self.ego_found,
                "ego_found_rate": self.ego_found / self.both_visible if self.both_visible else None,
                "c0_error_m": _percentiles(self.c0), "heading_error_deg": _percentiles(self.heading)}


class MarkerEvaluator:
    """Add each frame's LaneMarkers with its SceneTruth and condition tags; `result()` gives the MarkerScore."""

    def __init__(self) -> None:
        self._all = _Tally()
        self._by_tag: dict[str, _Tally] = {}

    def add(self, markers: Any, truth: Any, tags: Sequence[str] = ()) -> bool:
        """Score one frame; returns whether its ego lane was found (both markers, each close to the truth)."""
        tallies = [self._all, *(self._by_tag.setdefault(t, _Tally()) for t in tags)]
        visible = [i is not None and truth.visible[i] for i in (truth.ego_left, truth.ego_right)]
        found_both = all(visible)
        c0_errors, heading_errors = [], []
        for got, index, seen in ((markers.ego_left, truth.ego_left, visible[0]),
                                 (markers.ego_right, truth.ego_right, visible[1])):
            if got is None or not seen:
                found_both = False
                continue
            c0, c1 = truth.markings[index][:2]
            error = abs(got.c0 - c0)
            if error > EGO_TOLERANCE_M:
                found_both = False
                continue
            c0_errors.append(error)
            heading_errors.append(abs(math.degrees(math.atan(got.c1) - math.atan(c1))))
        for tally in tallies:
            tally.frames += 1
            tally.both_visible += int(all(visible))
            tally.ego_found += int(found_both)
            tally.c0 += c0_errors
            tally.heading += heading_errors
        return found_both

    def result(self) -> MarkerScore:
        overall = self._all.summary()
        return MarkerScore(overall["frames"], overall["both_visible"], overall["ego_found"], overall["c0_error_m"],
                           overall["heading_error_deg"],
                           {tag: tally.summary() for tag, tally in sorted(self._by_tag.items())})
