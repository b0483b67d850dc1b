"""Markers followed across frames: a stable id each, c0..c3 smoothed by a Kalman filter, a marker kept through
a missed frame or two and dropped when it is gone."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .markers import NEAR_M, LaneMarker, LaneMarkers, inverse_spd, assign

__all__ = ["MarkerTracker"]

# How much each coefficient may wander per frame (standard deviations): the vehicle weaves a few cm,
# turns a little, and the road's bend changes slowly.
_PROCESS_STD = np.array([0.01, 0.001, 1e-5, 1e-7])


@dataclass
class _Track:
    id: int
    marker: LaneMarker  # the last state (coefficients and covariance) and the last measurement's other fields
    state: np.ndarray
    covariance: np.ndarray
    missed: int = 0


class MarkerTracker:
    """Follows the markers of a video's frames: `update(markers)` once per frame, in order.

    Each new marker is matched to the track whose predicted position where it crosses the lateral
    axis is nearest (within `gate_m`); a track missed for more than `max_missed` frames is dropped.
    With `speed_mps` and `dt_s` the prediction moves the curves towards the vehicle as it drives.
    """

    def __init__(self, *, gate_m: float = 0.8, max_missed: int = 2, process_std: np.ndarray | None = None) -> None:
        self.gate_m = float(gate_m)
        self.max_missed = int(max_missed)
        self._q = np.diag((_PROCESS_STD if process_std is None else np.asarray(process_std, dtype=np.float64)) ** 2)
        self._tracks: list[_Track] = []
        self._ids = itertools.count(1)

    def reset(self) -> None:
        self._tracks = []

    def predict(self, *, speed_mps: float = 0.0, dt_s: float = 0.0) -> None:
        """Advance every track by one frame without a measurement (a frame that was dropped unseen): the curves move
        by the distance driven and their uncertainty grows by one frame's process noise; no track counts a miss."""
        motion = _shift(speed_mps * dt_s)
        for track in self._tracks:
            track.state = motion @ track.state
            track.covariance = motion @ track.covariance @ motion.T + self._q

    def update(self, markers: LaneMarkers, *, speed_mps: float = 0.0, dt_s: float = 0.0) -> LaneMarkers:
        """The frame's markers with ids and smoothed coefficients, plus tracks coasting through a miss (an empty
        `markers`, as for a frame whose detection failed, makes every track coast: `missed` counts up)."""
        self.predict(speed_mps=speed_mps, dt_s=dt_s)
        seen = list(markers)
        pairs = sorted(
            (abs(_lateral(track.state, m) - m.lateral_at_axis), ti, mi)
            for ti, track in enumerate(self._tracks) for mi, m in enumerate(seen)
        )
        matched_tracks: set[int] = set()
        matched_markers: set[int] = set()
        for distance, ti, mi in pairs:
            if distance > self.gate_m or ti in matched_tracks or mi in matched_markers:
                continue
            matched_tracks.add(ti)
            matched_markers.add(mi)
            self._correct(self._tracks[ti], seen[mi])
        for ti, track in enumerate(self._tracks):
            if ti not in matched_tracks:
                track.missed += 1
        self._tracks = [t for t in self._tracks if t.missed <= self.max_missed]
        for mi, marker in enumerate(seen):
            if mi not in matched_markers:
                self._tracks.append(_Track(next(self._ids), marker, marker.coefficients, marker.covariance.copy()))
        return assign(t.marker.with_coefficients(t.state, t.covariance, id=t.id, missed=t.missed)
                      for t in self._tracks)

    @staticmethod
    def _correct(track: _Track, marker: LaneMarker) -> None:
        gain = track.covariance @ inverse_spd((track.covariance + marker.covariance)[None])[0]
        track.state = track.state + gain @ (marker.coefficients - track.state)
        track.covariance = (np.eye(4) - gain) @ track.covariance
        track.marker = marker
        track.missed = 0


def _shift(s: float) -> np.ndarray:
    """The linear map of (c0..c3) when the vehicle moves s metres forward: y_new(x) = y(x + s)."""
    return np.array([[1.0, s, s * s, s**3], [0.0, 1.0, 2 * s, 3 * s * s], [0.0, 0.0, 1.0, 3 * s], [0.0, 0.0, 0.0, 1.0]])


def _lateral(state: np.ndarray, marker: LaneMarker) -> float:
    """The track's y where the new marker is placed (x = 0, or its nearest visible x)."""
    x = 0.0 if marker.longitude_start <= NEAR_M else marker.longitude_start
    return float(state[0] + x * (state[1] + x * (state[2] + x * state[3])))
