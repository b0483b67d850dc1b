"""The batched marker fit and the folded projection against the straightforward computation, lane by lane: the
same markers to ~1e-9 on random lanes (NaN points, points behind or past the range, short and sparse spans,
sets without a fit), and the same road points as K^-1 then R^T (cv2 for the distorted camera)."""
from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from edge_deploy.geometry import Camera, Mounting, to_markers
from edge_deploy.geometry.markers import MAX_RANGE_M, _NOISE_FLOOR_M, _UNFITTED_COVARIANCE, assign, fit_markers
from edge_deploy.lanedet.lane import Lane



def reference_fit(points: np.ndarray, score: float) -> dict | None:
    """One lane's weighted cubic the plain way: its usable points, np.linalg.lstsq on the sqrt(w)-scaled
    design in metres, the covariance from np.linalg.inv of the normal matrix."""
    x, y = np.asarray(points, dtype=np.float64).reshape(-1, 2).T
    usable = (x > 0) & (x <= MAX_RANGE_M) & ~np.isnan(y)
    x, y = x[usable], y[usable]
    if len(x) < 2:
        return None
    near, far = x.min(), x.max()
    span = far - near
    degree = 3 if len(x) >= 6 and span >= 15 else 2 if len(x) >= 4 and span >= 8 else 1
    degree = 0 if span < 0.5 else degree
    w = 1 / x
    xs = x / 50.0  # the fit's scale; the coefficients are unscaled after
    design = np.stack([xs**k for k in range(degree + 1)], 1)
    coef = np.linalg.lstsq(design * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)[0]
    rms = math.sqrt(np.sum(w * (y - design @ coef) ** 2) / np.sum(w))
    sigma2 = max(rms, _NOISE_FLOOR_M) ** 2 * np.sum(w) / len(x)
    unscale = 50.0 ** -np.arange(degree + 1)
    cov = _UNFITTED_COVARIANCE.copy()
    cov[: degree + 1, : degree + 1] = np.linalg.inv(design.T @ (design * w[:, None])) * sigma2 * np.outer(unscale,
                                                                                                           unscale)
    c = np.zeros(4)
    c[: degree + 1] = coef * unscale
    quality = score / (1 + (rms / 0.1) ** 2) * min(1.0, far / 30.0)
    return {"c0": c[0], "c1": c[1], "c2": c[2], "c3": c[3], "longitude_start": near, "longitude_end": far,
            "quality": quality, "rms_m": rms, "score": score, "model_degree": degree, "covariance": cov}


def random_lanes(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    lanes = []
    for _ in range(count):
        kind = rng.integers(8)
        n = [0, 1, 3, 5, 12, 45, 45, 80][kind]
        start = rng.uniform(2, 40)  # a camera sees no road nearer than a few metres
        x = np.sort(rng.uniform(start, start + [0.3, 5, 10, 20, 60, 120, 160, 200][rng.integers(8)], n))
        x[rng.random(n) < 0.05] *= -1  # behind
        c = rng.normal(0, [2.0, 0.05, 1e-3, 1e-5])
        y = c[0] + c[1] * x + c[2] * x**2 + c[3] * x**3 + rng.normal(0, rng.choice([0.0, 0.01, 0.2]), n)
        y[rng.random(n) < 0.1] = np.nan  # above the horizon
        if n and rng.random() < 0.2:
            x[:] = 42.0 + rng.uniform(0, 0.4)  # all points at one distance
        lanes.append(np.stack([x, y], 1))
    return lanes


def assert_same(got, want):
    """Equal up to the rounding of the least squares: coefficients and covariance compared as what they add to
    y over the marker's range (c_k x^k at its far end), relative to the curve's size; 1e-9 is the typical
    difference, cond(normal matrix) x 1e-16 the largest, so 2e-8 allowed."""
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got.model_degree == want["model_degree"]
    for key in ("longitude_start", "longitude_end", "score"):
        assert getattr(got, key) == pytest.approx(want[key], rel=1e-12), key
    c = np.array([want[k] for k in ("c0", "c1", "c2", "c3")])
    reach = max(want["longitude_end"], 1.0) ** np.arange(4)
    size = 1.0 + np.abs(c * reach).sum()
    assert np.abs((got.coefficients - c) * reach).max() <= 2e-8 * size
    assert abs(got.rms_m - want["rms_m"]) <= 2e-8 * size
    assert got.quality == pytest.approx(want["quality"], rel=2e-8, abs=1e-12)
    cov = want["covariance"] * np.outer(reach, reach)
    assert np.abs(got.covariance * np.outer(reach, reach) - cov).max() <= 2e-8 * np.abs(cov).max()


@pytest.mark.parametrize("seed", range(40))
def test_batched_fit_equals_the_lane_by_lane_least_squares(seed):
    rng = np.random.default_rng(seed)
    lanes = random_lanes(rng, int(rng.integers(1, 9)))
    scores = rng.uniform(0.3, 1.0, len(lanes)).tolist()
    got = fit_markers(lanes, scores)
    assert len(got) == len(lanes)
    for marker, points, score in zip(got, lanes, scores):
        assert_same(marker, reference_fit(points, score))


def reference_ground(camera: Camera, pixels: np.ndarray) -> np.ndarray:
    """K^-1 (cv2.undistortPoints to convergence when distorted, which leaves out K's skew; by hand when not),
    R^T, the ray met with the road; NaN for a ray that does not point down."""
    pts = np.asarray(pixels, dtype=np.float64).reshape(-1, 1, 2)
    if camera.distortion.any():
        normal = cv2.undistortPointsIter(pts, camera.camera_matrix, camera.distortion, None, None,
                                         (3, 50, 1e-12)).reshape(-1, 2)
    else:
        k = camera.camera_matrix
        y = (pts[:, 0, 1] - k[1, 2]) / k[1, 1]
        normal = np.stack([(pts[:, 0, 0] - k[0, 2] - k[0, 1] * y) / k[0, 0], y], 1)
    d = np.concatenate([normal, np.ones((len(normal), 1))], 1) @ camera.mounting.rotation()
    below = d[:, 2] / np.linalg.norm(d, axis=1) < -1e-6
    t = np.where(below, -camera.mounting.height_m / np.where(below, d[:, 2], -1.0), np.nan)
    return np.stack([t * d[:, 0], t * d[:, 1]], 1)


@pytest.mark.parametrize("distortion", [[0.0] * 5, [-0.2, 0.05, 0.001, -0.001, 0.0]])
@pytest.mark.parametrize("seed", range(10))
def test_to_markers_equals_projection_then_lane_by_lane_fit(seed, distortion):
    rng = np.random.default_rng(100 + seed)
    k = np.array([[rng.uniform(800, 1400), rng.uniform(-2, 2), rng.uniform(700, 900)],
                  [0.0, rng.uniform(800, 1400), rng.uniform(250, 350)], [0.0, 0.0, 1.0]])
    camera = Camera(1640, 590, k, np.array(distortion), Mounting(rng.uniform(1.2, 2.0), rng.uniform(-1, 4),
                                                                  rng.uniform(-4, 4), rng.uniform(-3, 3)))
    lanes = []
    for _ in range(int(rng.integers(1, 7))):
        n = int(rng.choice([1, 3, 10, 45, 72]))
        v = np.sort(rng.uniform(150, 590, n))  # some rows above the horizon
        u = rng.uniform(200, 1400) + (v - 300) * rng.uniform(-2, 2)
        lanes.append(Lane(np.stack([u, v], 1).astype(np.float32), float(rng.uniform(0.3, 1))))
    want = [reference_fit(reference_ground(camera, lane.points), lane.score) for lane in lanes]
    np.testing.assert_allclose(camera.image_to_ground(np.concatenate([lane.points for lane in lanes]), strict=False),
                               np.concatenate([reference_ground(camera, lane.points) for lane in lanes]),
                               rtol=1e-9, atol=1e-9)
    got = list(to_markers(lanes, camera))
    fitted = [m for m in fit_markers([reference_ground(camera, lane.points) for lane in lanes],
                                     [lane.score for lane in lanes]) if m is not None]
    assert [m.c0 for m in got] == pytest.approx([m.c0 for m in assign(fitted)], rel=1e-9, abs=1e-9)
    by_c0 = sorted((w for w in want if w is not None), key=lambda w: w["c0"])
    assert len(got) == len(by_c0)
    for marker in got:
        assert_same(marker, min(by_c0, key=lambda w: abs(w["c0"] - marker.c0)))


def test_degree_boundaries_equal_the_lane_by_lane_fit():
    rng = np.random.default_rng(7)
    lanes = [np.stack([x, 1.5 + 0.02 * x + rng.normal(0, 0.05, len(x))], 1)
             for x in (np.linspace(10, 25, 6), np.linspace(10, 24.9, 6), np.linspace(10, 25, 5), np.linspace(10, 18, 4),
                       np.linspace(10, 17.9, 4), np.linspace(10, 18, 3), np.linspace(10, 10.5, 2),
                       np.linspace(10, 10.4, 3), np.linspace(10, 12, 2), np.array([[149.0], [150.0], [150.5]]).ravel())]
    got = fit_markers(lanes, [0.8] * len(lanes))
    assert [m.model_degree for m in got] == [3, 2, 2, 2, 1, 1, 1, 0, 1, 1]
    for marker, points in zip(got, lanes):
        assert_same(marker, reference_fit(points, 0.8))
