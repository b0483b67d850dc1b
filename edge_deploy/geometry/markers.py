"""Lane markers in the vehicle frame: image lanes -> road points -> a weighted cubic y(x) = c0 + c1 x + c2 x^2 + c3 x^3,
and which marker bounds the ego lane on each side (the fields follow Apollo's LaneMarker and the Mobileye-style
cubic; x forward, y left, metres, origin on the road below the camera)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from .camera import Camera
from .figures import lane_figures

if TYPE_CHECKING:  # the annotation only: figures is imported where it is used
    from .figures import LaneFigures

__all__ = ["LaneMarker", "LaneMarkers", "assign", "fit_marker", "fit_markers", "to_markers"]

MAX_RANGE_M = 150.0  # road points farther than this (close under the horizon) carry no usable position
NEAR_M = 20.0  # a marker first seen beyond this is placed by where it is seen, not by extrapolating to x = 0
_X_SCALE = 50.0  # x is fitted in units of 50 m so that x^3 stays near 1 (a well-conditioned system)
_NOISE_FLOOR_M = 0.03  # the smallest residual a fit claims: a perfect fit is not a perfect measurement
_UNFITTED_COVARIANCE = np.diag([1.0, 1e-2, 1e-5, 1e-8])  # a coefficient left out of a low-degree fit
_POWERS = np.arange(4)
_EYE = np.eye(4)
_UNSCALE = _X_SCALE ** -_POWERS.astype(np.float64)
_UNSCALE_OUTER = np.outer(_UNSCALE, _UNSCALE)
_HANKEL = np.add.outer(_POWERS, _POWERS)  # the normal matrix's (i, j) entry is the sum of w x^(i + j)
_USED = _POWERS[None, :] <= np.arange(5)[:, None]  # by degree: the coefficients fitted
_MASK = _USED[:, :, None] & _USED[:, None, :]
_MASK[4] = False  # "degree" 4: a set without a fit
_PLUS_MINUS = np.array([[1.0], [-1.0]])


@dataclass(frozen=True)
class LaneMarker:
    """One lane marking as the cubic y(x) = c0 + c1 x + c2 x^2 + c3 x^3 (m, x forward, y left).

    c0: lateral position at the vehicle; c1: tan of its heading; 2 c2: curvature (1/m) at the vehicle;
    6 c3: the curvature's rate of change. longitude_start/end: the x span it was seen over (m);
    view_range: how far ahead it is seen (= longitude_end). quality in [0, 1]: the lane's score
    times how well the cubic fits and how far it reaches. covariance: of (c0, c1, c2, c3).
    id: stable across frames when tracked (None without tracking).
    """

    c0: float
    c1: float
    c2: float
    c3: float
    longitude_start: float
    longitude_end: float
    quality: float
    rms_m: float
    score: float
    model_degree: int
    covariance: np.ndarray = field(repr=False, compare=False)
    id: int | None = None
    missed: int = 0

    @property
    def coefficients(self) -> np.ndarray:
        return np.array([self.c0, self.c1, self.c2, self.c3])

    @property
    def view_range(self) -> float:
        return self.longitude_end

    def y_at(self, x: float | np.ndarray) -> float | np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = self.c0 + x * (self.c1 + x * (self.c2 + x * self.c3))
        return float(out) if out.ndim == 0 else out

    def slope_at(self, x: float | np.ndarray) -> float | np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = self.c1 + x * (2 * self.c2 + 3 * self.c3 * x)
        return float(out) if out.ndim == 0 else out

    def curvature_at(self, x: float | np.ndarray) -> float | np.ndarray:
        """Signed curvature (1/m, positive bending left) of the curve at x."""
        x = np.asarray(x, dtype=np.float64)
        slope = self.c1 + x * (2 * self.c2 + 3 * self.c3 * x)
        out = (2 * self.c2 + 6 * self.c3 * x) / (1 + slope**2) ** 1.5
        return float(out) if out.ndim == 0 else out

    @property
    def lateral_at_axis(self) -> float:
        """Where the marker crosses the vehicle's lateral axis: y at x = 0, or at its nearest visible x when it is
        first seen beyond NEAR_M (a long extrapolation would place it anywhere)."""
        return self.c0 if self.longitude_start <= NEAR_M else float(self.y_at(self.longitude_start))

    def with_coefficients(self, c: np.ndarray, covariance: np.ndarray, **changes: Any) -> "LaneMarker":
        return replace(self, c0=float(c[0]), c1=float(c[1]), c2=float(c[2]), c3=float(c[3]),
                       covariance=covariance, **changes)

    def to_dict(self) -> dict[str, Any]:
        std = np.sqrt(np.clip(np.diag(self.covariance), 0, None))
        return {"id": self.id, "c0": self.c0, "c1": self.c1, "c2": self.c2, "c3": self.c3,
                "view_range": self.view_range, "longitude_start": self.longitude_start,
                "longitude_end": self.longitude_end, "quality": self.quality, "rms_m": self.rms_m,
                "score": self.score, "model_degree": self.model_degree, "c_std": [float(s) for s in std],
                "missed": self.missed}


@dataclass(frozen=True)
class LaneMarkers:
    """The markers of one frame by position: the ego lane's left and right (None when not seen) and the ones
    further out on each side, nearest first."""

    ego_left: LaneMarker | None
    ego_right: LaneMarker | None
    next_left: tuple[LaneMarker, ...] = ()
    next_right: tuple[LaneMarker, ...] = ()

    def __iter__(self):  # noqa: ANN204 - every marker, left to right
        left = [m for m in (self.ego_left, *self.next_left) if m is not None][::-1]
        right = [m for m in (self.ego_right, *self.next_right) if m is not None]
        return iter([*left, *right])

    def __len__(self) -> int:
        return len(list(iter(self)))

    def figures(self, speed_mps: float | None = None, vehicle_width_m: float = 1.8) -> LaneFigures:
        return lane_figures(self, speed_mps, vehicle_width_m)

    def to_dict(self) -> dict[str, Any]:
        return {"ego_left": self.ego_left.to_dict() if self.ego_left else None,
                "ego_right": self.ego_right.to_dict() if self.ego_right else None,
                "next_left": [m.to_dict() for m in self.next_left],
                "next_right": [m.to_dict() for m in self.next_right]}


def assign(markers: Iterable[LaneMarker]) -> LaneMarkers:
    """Markers ordered by where each crosses the lateral axis: the nearest on the left (y > 0) and on the right
    bound the ego lane; the others follow outward."""
    ordered = sorted(markers, key=lambda m: m.lateral_at_axis)
    left = [m for m in ordered if m.lateral_at_axis > 0]
    right = [m for m in ordered if m.lateral_at_axis <= 0][::-1]
    return LaneMarkers(left[0] if left else None, right[0] if right else None, tuple(left[1:]), tuple(right[1:]))


def fit_marker(points: np.ndarray, score: float = 1.0) -> LaneMarker | None:
    """The weighted cubic through road points (N, 2) (x, y in m), or None with fewer than 2 usable points."""
    return fit_markers([points], [score])[0]


def fit_markers(point_sets: Sequence[np.ndarray], scores: Sequence[float]) -> list[LaneMarker | None]:
    """One weighted cubic per set of road points ((N, 2) x, y in m), all sets solved together (one frame's
    lanes cost about what one lane does). None for a set with fewer than 2 usable points.

    Points are weighted 1/x (a pixel covers more road further out). Short or sparse spans get a lower
    degree (quadratic under 15 m or 6 points, straight under 8 m or 4 points) rather than a wild cubic.
    """
    sets = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in point_sets]
    if not sets:
        return []
    pts = np.concatenate(sets)
    return _fit_concatenated(pts[:, 0], pts[:, 1], [len(p) for p in sets], scores)


def _fit_concatenated(x: np.ndarray, y: np.ndarray, counts: Sequence[int],
                      scores: Sequence[float]) -> list[LaneMarker | None]:
    """fit_markers on the sets' points laid end to end (x, y float64); `counts`: the points of each set."""
    out: list[LaneMarker | None] = [None] * len(counts)
    kept = [i for i, c in enumerate(counts) if c]  # reduceat needs non-empty segments
    if not kept:
        return out
    starts, total = [], 0
    for i in kept:
        starts.append(total)
        total += counts[i]
    usable = (x > 0) & (x <= MAX_RANGE_M) & (y == y)  # NaN (above the horizon) fails every comparison
    x_usable = np.where(usable, x, 1.0)
    y = np.where(usable, y, 0.0)
    weight = usable / x_usable
    powers = np.empty((7, len(x)))  # (x / _X_SCALE)^k, k = 0..6, a row each
    powers[0] = 1.0
    np.divide(x_usable, _X_SCALE, out=powers[1])
    np.multiply(powers[1], powers[1], out=powers[2])
    np.multiply(powers[1:3], powers[2], out=powers[3:5])  # x^3, x^4
    np.multiply(powers[1:3], powers[4], out=powers[5:7])  # x^5, x^6
    # one pass of sums: w x^k for k = 0..6 (the normal matrices' entries), w y x^k for k = 0..3, the count
    columns = np.empty((12, len(x)))
    np.multiply(powers, weight, out=columns[:7])
    np.multiply(columns[:4], y, out=columns[7:11])
    columns[11] = usable
    sums = np.add.reduceat(columns, starts, axis=1).T
    ends = np.maximum.reduceat(np.where(usable, x * _PLUS_MINUS, -np.inf), starts, axis=1)
    far, near = ends[0], -ends[1]  # -inf and inf for a set with no usable point
    n = sums[:, 11]
    degree, key = [], []  # key: the degree, 4 for a set without a fit
    for count, low, high in zip(n.tolist(), near.tolist(), far.tolist()):
        span = high - low
        degree.append(0 if span < 0.5 else 3 if count >= 6 and span >= 15 else 2 if count >= 4 and span >= 8 else 1)
        key.append(degree[-1] if count >= 2 else 4)
    key_array = np.array(key)
    used, mask = _USED[key_array], _MASK[key_array]  # (a set without a fit uses nothing of `used`)
    inverse = inverse_spd(np.where(mask, sums[:, _HANKEL], _EYE))  # a set without a fit: the identity
    coef = np.einsum("lij,lj->li", inverse, np.where(used, sums[:, 7:11], 0.0))
    residual = y - np.einsum("im,mi->m", powers[:4], np.repeat(coef, [counts[i] for i in kept], axis=0))
    weighted_square = np.add.reduceat(weight * residual * residual, starts).tolist()
    # a score that is not a number (a model's NaN) counts as no confidence: quality 0, never NaN
    scores = [s if math.isfinite(s := float(scores[i])) else 0.0 for i in kept]
    rms, sigma2, quality = [], [], []  # per set, in Python floats: a handful of numbers, cheaper than array calls
    for r2, sum_w, count, end, score in zip(weighted_square, sums[:, 0].tolist(), n.tolist(), far.tolist(), scores):
        rms.append(math.sqrt(r2 / max(sum_w, 1e-12)))
        floor = max(rms[-1], _NOISE_FLOOR_M)
        sigma2.append(floor * floor * sum_w / max(count, 1.0))  # unit-weight variance
        quality.append(score / (1.0 + (rms[-1] / 0.1) * (rms[-1] / 0.1)) * min(1.0, end / 30.0))
    cov = np.where(mask, inverse * np.array(sigma2)[:, None, None] * _UNSCALE_OUTER, _UNFITTED_COVARIANCE)
    for j, (i, k, c, start, end, q, r, sc, d) in enumerate(zip(
            kept, key, (coef * _UNSCALE).tolist(), near.tolist(), far.tolist(), quality, rms, scores, degree)):
        if k != 4:
            out[i] = LaneMarker(c[0], c[1], c[2], c[3], start, end, q, r, sc, d, cov[j])
    return out


def inverse_spd(a: np.ndarray) -> np.ndarray:
    """Inverses of symmetric positive definite matrices (L, n, n) by Gauss-Jordan without pivoting (stable for
    SPD). Not np.linalg.inv: inside a client process (grpc threads on a busy CPU) each LAPACK call was measured
    at 0.5-5 ms against 10 us standalone, 20x the whole fit."""
    size = a.shape[1]
    augmented = np.empty((len(a), size, 2 * size))  # [a | I] -> [I | a^-1]
    augmented[:, :, :size] = a
    augmented[:, :, size:] = _EYE[:size, :size]
    for k in range(size):
        row = augmented[:, k] / augmented[:, k, k, None]
        augmented -= augmented[:, :, k, None] * row[:, None]
        augmented[:, k] = row
    return augmented[:, :, size:]


def to_markers(lanes: Sequence[Any], camera: Camera) -> LaneMarkers:
    """The markers of one frame's lanes (`Lane`s of any family, image pixels) seen by `camera`.

    Points on or above the horizon are left out (a lane's far end may reach it); lanes with fewer
    than 2 points on the road give no marker.
    """
    if not lanes:
        return LaneMarkers(None, None)
    counts = [len(lane.points) for lane in lanes]
    pixels = np.concatenate([lane.points for lane in lanes]) if len(lanes) > 1 else lanes[0].points
    ground = camera.image_to_ground(pixels, strict=False)
    fitted = _fit_concatenated(ground[:, 0], ground[:, 1], counts, [lane.score for lane in lanes])
    return assign(m for m in fitted if m is not None)
