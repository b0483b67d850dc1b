"""Deterministic synthetic data: road-scene frames and LaneATT-shaped raw outputs.

No external data: the README demo, tests, benchmarks and the demo-weight training draw
their frames here. Everything is a pure function of its arguments (seeded numpy
Generator + cv2 drawing).

Scenes are rendered from a small world model: a flat road with lane markings at
lateral offsets X (metres), bending with a curvature that may change sign (S-bends),
seen by a pinhole camera of height h at focal length f. Geometry lives in a 1640x590
reference frame and is scaled to the requested size, so `scene(s, 640, 360)` is the
same scene as `scene(s, 1640, 590)` resized (up to anti-aliasing and noise).

Seeds >= EVAL_SEED_BASE are reserved for evaluation; training code must refuse them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, cast

import cv2
import numpy as np

__all__ = ["CONDITIONS", "EVAL_SEED_BASE", "Scene", "SceneTruth", "drive", "drive_truth", "raw_output", "road_scene",
           "scene", "scene_truth"]

EVAL_SEED_BASE = 1_000_000_000
CONDITIONS = (
    "curve", "s_curve", "occlusion", "worn", "night", "dusk", "glare", "wet", "blur", "tilt", "shadow", "many_lanes",
)

_REF_W, _REF_H = 1640.0, 590.0
_SKY_TOP = np.array([205, 150, 95], dtype=np.float32)  # BGR
_SKY_HORIZON = np.array([240, 225, 210], dtype=np.float32)
_ROAD = np.array([100, 98, 95], dtype=np.float32)
_GRASS = np.array([60, 120, 80], dtype=np.float32)
_WHITE = np.array([235, 235, 235], dtype=np.float32)
_YELLOW = np.array([40, 200, 230], dtype=np.float32)
_SUBPIXEL = 4  # cv2 shift bits for anti-aliased sub-pixel drawing
_VERGE_CELLS, _ROAD_CELLS = (24, 10), (40, 16)  # noise grids of the verge and the asphalt texture
_RISE = 0.01  # reference pixels: a marking's centreline rises at least this much in the frame per sample (`_painted`)
# Paint shows where its opacity is at least _SHOWN_OPACITY (white on asphalt: 30 or more grey levels, four times the
# sensor noise's 7). Heavy wear can take all of a marking's paint in the frame below that: the truth does not hold it.
_SHOWN_OPACITY = 0.25
_CAR_COLOURS = ((40, 40, 40), (200, 200, 200), (30, 30, 150), (140, 60, 20), (90, 90, 90), (230, 230, 230))


@dataclass(frozen=True)
class Scene:
    """One rendered frame: image (uint8 HxWx3 BGR), lanes (float32 (N, 2) (x, y) polylines, strictly top to
    bottom, inside the frame; one per marking whose paint shows in the frame, its dash gaps, occluded and worn parts
    included: a marking that wear took all the paint of is not held, nor drawn), and the condition tags drawn for it
    (a subset of CONDITIONS, sorted). Every marking the frame draws is in `lanes` (tests/test_synthetic_truth.py)."""

    frame: np.ndarray
    lanes: list[np.ndarray]
    conditions: tuple[str, ...]


@dataclass(frozen=True)
class _Params:
    f: float  # focal length, reference pixels
    horizon: float  # reference v of the horizon (pitch)
    cu: float  # reference u of the optical axis
    cam_h: float  # camera height, m
    cam_x: float  # camera lateral position, m
    yaw: float  # road heading relative to the camera, rad
    c0: float  # curvature at the camera, 1/m
    c1: float  # curvature change per metre (S-bends)
    z_far: float  # markings end here, m
    xs: tuple[float, ...]  # marking lateral offsets, m
    dashed: tuple[bool, ...]
    yellow: tuple[bool, ...]
    paint: tuple[float, ...]  # paint strength per marking, 0..1
    gaps: tuple[tuple[float, float], ...]  # (z0, z1) stretches with no paint, per marking (z0 = z1: none)
    mark_w: float  # marking width, m
    dash: tuple[float, float, float]  # dash length, period, phase (m)
    shoulder: float
    road_tint: tuple[float, float, float]
    cars: tuple[tuple[float, float, float, float, int], ...]  # (x m, z m, width m, height m, colour)
    shadows: tuple[tuple[float, float, float, float], ...]  # (x m, z m, half-width m, half-depth m)
    light: str  # day, dusk, night, glare
    sun_u: float
    wet: float  # 0: dry, else reflection strength
    wear: float  # 0: fresh paint, else fraction of paint lost in blotches
    roll: float  # degrees
    zoom: float
    shift: tuple[float, float]  # reference pixels
    blur: float  # motion blur length, reference pixels (0: none)
    blur_angle: float


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _sample(rng: np.random.Generator, lanes: int | None, hard: bool) -> _Params:
    """Draw a scene's parameters. hard=False keeps the old easy look (daylight, no clutter)."""
    u = rng.uniform
    n = int(rng.integers(2, 7)) if lanes is None else lanes
    widths = u(2.9, 4.0, size=max(n - 1, 1))
    if hard:
        widths = widths * u(0.9, 1.1, size=widths.shape)
    xs = np.concatenate([[0.0], np.cumsum(widths)])[:n] if n > 1 else np.array([0.0])
    ego = int(rng.integers(0, max(n - 1, 1)))  # the camera drives in lane [ego, ego + 1]
    lane_w = widths[min(ego, len(widths) - 1)]
    cam_x = xs[ego] + lane_w * u(0.3, 0.7) if n > 1 else u(-1.8, 1.8)
    if lanes is not None and n > 1 and not hard:
        # the old API promises every marking visible over a good stretch: keep them near the camera
        cam_x = 0.5 * (xs[0] + xs[-1]) + u(-0.5, 0.5)
        xs = (xs - 0.5 * (xs[0] + xs[-1])) * min(1.0, 11.0 / max(xs[-1] - xs[0], 1e-6)) + 0.5 * (xs[0] + xs[-1])
    curvy = hard and u() < 0.5
    c0 = u(-1 / 250, 1 / 250) if curvy else u(-1 / 2500, 1 / 2500)
    if curvy and u() < 0.2:
        c0 = np.sign(c0) * u(1 / 250, 1 / 140)
    c1 = -c0 / u(25, 60) if curvy and u() < 0.4 else 0.0
    dashed = tuple(0 < i < n - 1 for i in range(n))
    yellow = tuple(i == 0 and n > 1 and (not hard or u() < 0.5) for i in range(n))
    if hard and u() < 0.2:  # some roads dash the outer markings too
        dashed = tuple(d or u() < 0.5 for d in dashed)
    wear = u(0.3, 0.75) if hard and u() < 0.35 else 0.0
    paint = tuple(float(u(0.35, 1.0)) if wear else float(u(0.85, 1.0)) for _ in range(n))
    gaps = []
    for _ in range(n):
        if wear and u() < 0.5:
            z0 = u(5, 40)
            gaps.append((z0, z0 + u(8, 30)))
        else:
            gaps.append((0.0, 0.0))
    cars = _sample_cars(rng, xs, widths, hard)
    shadows = _sample_shadows(rng, xs, hard)
    light = "day"
    if hard:
        r = u()
        light = "night" if r < 0.2 else "dusk" if r < 0.35 else "glare" if r < 0.47 else "day"
    params = _Params(
        f=float(u(950, 1250)),
        horizon=float(u(200, 290) if hard else u(215, 260)),
        cu=float(_REF_W / 2 + u(-60, 60)),
        cam_h=float(u(1.2, 1.9) if hard else u(1.4, 1.6)),
        cam_x=float(cam_x),
        yaw=float(u(-0.04, 0.04) if hard else u(-0.02, 0.02)),
        c0=float(c0),
        c1=float(c1),
        z_far=float(u(50, 120) if hard else u(80, 120)),
        xs=tuple(float(x) for x in xs),
        dashed=dashed,
        yellow=yellow,
        paint=paint,
        gaps=tuple(gaps),
        mark_w=float(u(0.12, 0.2)),
        dash=(float(u(2.5, 4.5)), float(u(9, 14)), float(u(0, 20))),
        shoulder=float(u(0.3, 2.5)),
        road_tint=cast("tuple[float, float, float]", tuple(float(t) for t in u(0.75, 1.25, size=3) * u(0.7, 1.3)))
        if hard else (1.0, 1.0, 1.0),
        cars=tuple(cars),
        shadows=tuple(shadows),
        light=light,
        sun_u=float(u(200, 1440)),
        wet=float(u(0.15, 0.35)) if hard and u() < 0.2 else 0.0,
        wear=float(wear),
        roll=float(u(-4, 4)) if hard and u() < 0.4 else 0.0,
        zoom=float(u(1.0, 1.2)) if hard else 1.0,
        shift=(float(u(-60, 60)), float(u(-25, 25))) if hard else (0.0, 0.0),
        blur=float(u(6, 22)) if hard and u() < 0.25 else 0.0,
        blur_angle=float(u(60, 120)),
    )
    if not hard:  # plain scenes start every dashed marking with paint at the frame bottom
        dash_len, period, _ = params.dash
        z_bottom = params.f * params.cam_h / (_REF_H - params.horizon)
        params = replace(params, dash=(dash_len, period, (0.05 * dash_len - z_bottom) % period))
    return params


def _sample_cars(rng: np.random.Generator, xs: np.ndarray, widths: np.ndarray,
                 hard: bool) -> list[tuple[float, float, float, float, int]]:
    """Vehicles ahead (hard scenes only): (lateral x, distance z, width, height, colour index) each."""
    u, n = rng.uniform, len(xs)
    cars: list[tuple[float, float, float, float, int]] = []
    if hard and u() < 0.55:
        for _ in range(int(rng.integers(1, 4))):
            k = int(rng.integers(0, max(n - 1, 1)))
            x = xs[k] + (widths[min(k, len(widths) - 1)] * u(0.2, 0.8) if n > 1 else u(-2, 2))
            if u() < 0.3:  # changing lanes: straddles a marking
                x = xs[int(rng.integers(0, n))] + u(-0.6, 0.6)
            big = u() < 0.2
            cars.append((float(x), float(u(7, 45)), float(u(2.3, 2.6) if big else u(1.7, 1.95)),
                         float(u(2.8, 3.8) if big else u(1.3, 1.6)), int(rng.integers(0, len(_CAR_COLOURS)))))
    return cars


def _sample_shadows(rng: np.random.Generator, xs: np.ndarray, hard: bool) -> list[tuple[float, float, float, float]]:
    """Shadows on the road: (lateral x, distance z, half width, half depth) each."""
    u = rng.uniform
    shadows = []
    if u() < (0.5 if hard else 1.0):
        for _ in range(int(rng.integers(1, 4 if not hard else 6))):
            shadows.append((float(u(xs[0] - 4, xs[-1] + 4)), float(u(6, 40)), float(u(0.8, 4)), float(u(0.5, 3))))
    return shadows


def _lateral(p: _Params, z: np.ndarray) -> np.ndarray:
    """Road centreline offset (m) at distance z: heading plus a clothoid-like bend."""
    return p.yaw * z + p.c0 * z**2 / 2.0 + p.c1 * z**3 / 6.0


def _project(p: _Params, x: float | np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World (lateral x on the road, distance z) -> reference-frame (u, v)."""
    u = p.cu + p.f * (x + _lateral(p, z) - p.cam_x) / z
    v = p.horizon + p.f * p.cam_h / z
    return u, v


def _z_range(p: _Params) -> tuple[float, float]:
    z_near = p.f * p.cam_h / (_REF_H * 1.25 - p.horizon)  # below the frame, so the crop never shows the end
    return z_near, p.z_far


def _camera_matrix(p: _Params, width: int, height: int) -> np.ndarray:
    """Affine map from scene pixels to frame pixels (roll about the centre, zoom, shift).

    Built in the reference frame and scaled, so every output size sees the same camera."""
    m: np.ndarray = cv2.getRotationMatrix2D((_REF_W / 2.0, _REF_H / 2.0), p.roll, p.zoom)
    m[:, 2] += p.shift
    scale = np.array([width / _REF_W, height / _REF_H])
    m[:, :2] = m[:, :2] * scale[:, None] / scale[None, :]
    m[:, 2] *= scale
    return m


def _distances(p: _Params) -> np.ndarray:
    """The distances (m, near to far) at which the markings are drawn and their truth sampled."""
    return np.geomspace(*_z_range(p), 400)


def _painted(p: _Params, i: int, zf: np.ndarray) -> int:
    """How many of the distances zf (near to far) marking i is painted over: all, or up to where its centreline
    stops rising in the frame. A bend seen through a rolled camera can turn back down near the horizon; a lane is
    one x per row, top to bottom, and cannot hold that turn, so neither the paint nor the truth goes past it. A
    property of the road and the camera, the same at every output size."""
    u_c, v_c = _project(p, p.xs[i], zf)
    m = _camera_matrix(p, int(_REF_W), int(_REF_H))
    rows = m[1, 0] * u_c + m[1, 1] * v_c + m[1, 2]
    stops = np.flatnonzero(np.diff(rows) > -_RISE)
    return len(zf) if not len(stops) else int(stops[0]) + 1


def _visible_markings(p: _Params, width: int, height: int) -> list[tuple[int, np.ndarray]]:
    """(marking index, float32 (N, 2) polyline in frame pixels, top to bottom) of each marking in the frame: its
    centreline over the distances it is painted (`_painted`), dash gaps, wear and vehicles in front included."""
    zf = _distances(p)
    m = _camera_matrix(p, width, height)
    out = []
    for i, x in enumerate(p.xs):
        z = zf[:_painted(p, i, zf)]
        u_c, v_c = _project(p, x, z)
        pts = np.stack([u_c * width / _REF_W, v_c * height / _REF_H], 1)
        pts = pts @ m[:, :2].T + m[:, 2]
        pts = pts[::-1]  # top to bottom: strictly, as `_painted` ends the marking where it stops rising
        inside = (pts[:, 0] >= 0) & (pts[:, 0] <= width - 1) & (pts[:, 1] >= 0) & (pts[:, 1] <= height - 1)
        pts = pts[inside]
        if len(pts) >= 2:
            out.append((i, pts.astype(np.float32)))
    return out


def _lanes(p: _Params, width: int, height: int, shown: tuple[bool, ...]) -> list[tuple[int, np.ndarray]]:
    """The truth: (marking index, polyline) of each marking in the frame whose paint shows there (`_paint_alpha`)."""
    return [(i, pts) for i, pts in _visible_markings(p, width, height) if shown[i]]


def _noise_grid(rng: np.random.Generator, cells: tuple[int, int]) -> np.ndarray:
    return rng.random((cells[1], cells[0]), dtype=np.float32)


def _noise_field(rng: np.random.Generator, width: int, height: int, cells: tuple[int, int]) -> np.ndarray:
    """Smooth noise in [0, 1], float32 HxW: a coarse random grid upscaled bicubically."""
    grid = _noise_grid(rng, cells)
    return np.clip(cv2.resize(grid, (width, height), interpolation=cv2.INTER_CUBIC), 0.0, 1.0)


def _scale(img: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """img (float32 HxWx3) * gain (HxW) per pixel; cv2, as NumPy broadcasting over 3 channels is slow."""
    g = np.ascontiguousarray(gain, dtype=np.float32)
    return cv2.multiply(img, cv2.merge([g, g, g]))


def _blend(img: np.ndarray, top: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """img * (1 - alpha) + top * alpha, alpha float32 HxW in [0, 1]."""
    a = np.ascontiguousarray(alpha, dtype=np.float32)
    return cv2.blendLinear(top, img, a, 1.0 - a)


def _poly(pts_u: np.ndarray, pts_v: np.ndarray, sx: float, sy: float) -> np.ndarray:
    return np.round(np.stack([pts_u * sx, pts_v * sy], 1) * (1 << _SUBPIXEL)).astype(np.int32)


@dataclass(frozen=True)
class _View:
    """The frame `_render` draws: its size, the scale from the reference frame, the horizon row (frame pixels)
    and the distances (m) drawn."""

    width: int
    height: int
    sx: float
    sy: float
    horizon: float
    z_near: float
    z_far: float


def _view(p: _Params, width: int, height: int) -> _View:
    sx, sy = width / _REF_W, height / _REF_H
    return _View(width, height, sx, sy, p.horizon * sy, *_z_range(p))


def _render(p: _Params, width: int, height: int, rng: np.random.Generator) -> Scene:
    """The scene of `p` drawn at width x height: the steps below in order (each draws on the canvas; the rng is
    drawn from in this order, so a seed keeps its frame)."""
    v = _view(p, width, height)
    tags: set[str] = set()
    canvas, ground_t = _draw_sky_and_verge(v, rng)
    canvas, road_a = _draw_road(p, v, canvas, ground_t, rng)
    canvas, masks, truth_ref, shown = _draw_paint(p, v, canvas, rng, tags)
    canvas = _draw_shadows(p, v, canvas, tags)
    _draw_vehicles(p, v, canvas, truth_ref, tags)
    canvas = _light(p, v, canvas, masks, tags)
    canvas = _wet_road(p, v, canvas, road_a, tags)
    canvas = cv2.convertScaleAbs(canvas)  # values are >= 0: saturate to uint8
    canvas = _camera_effects(p, v, canvas, tags)
    canvas = _sensor_noise(canvas, rng)
    lanes = [pts for _, pts in _lanes(p, width, height, shown)]
    if p.c0 and abs(p.c0) > 1 / 1000:
        tags.add("curve")
    if p.c1:
        tags.add("s_curve")
    if len(lanes) >= 5:
        tags.add("many_lanes")
    return Scene(canvas, lanes, tuple(sorted(tags)))


def _draw_sky_and_verge(v: _View, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sky and verge as per-row colours: (float32 HxWx3 canvas, the ground's 0..1 depth per row, Hx1)."""
    width, height, horizon = v.width, v.height, v.horizon
    ys = np.arange(height, dtype=np.float32)
    sky_t = np.clip(ys / max(horizon, 1.0), 0, 1)[:, None]
    ground_t = np.clip((ys - horizon) / max(height - horizon, 1.0), 0, 1)[:, None]
    sky = _SKY_TOP * (1 - sky_t) + _SKY_HORIZON * sky_t
    rows = np.where((ys < horizon)[:, None], sky, _GRASS * (0.8 + 0.4 * ground_t))
    canvas = np.repeat(rows[:, None, :], width, axis=1)  # float32 HxWx3
    verge = _noise_field(rng, width, height, _VERGE_CELLS)
    canvas = _scale(canvas, 0.85 + 0.3 * verge)
    canvas[: int(horizon)] = np.repeat(sky[: int(horizon), None, :], width, axis=1)
    return canvas, ground_t


def _draw_road(p: _Params, v: _View, canvas: np.ndarray, ground_t: np.ndarray,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Asphalt between the outer markings plus a shoulder: (canvas, the road's coverage, float32 HxW)."""
    width, height = v.width, v.height
    z = np.geomspace(v.z_near, v.z_far * 1.3, 96)
    lu, lv = _project(p, p.xs[0] - p.shoulder, z)
    ru, _ = _project(p, p.xs[-1] + p.shoulder, z)
    road_mask = np.zeros((height, width), dtype=np.uint8)
    poly = _poly(np.concatenate([lu, ru[::-1]]), np.concatenate([lv, lv[::-1]]), v.sx, v.sy)
    # cv2's stubs take a color only as a sequence, cv2 a scalar too (the ignores here and below)
    cv2.fillPoly(road_mask, [poly], 255, cv2.LINE_AA, _SUBPIXEL)  # type: ignore[call-overload]
    road_a = road_mask.astype(np.float32) / 255.0
    shade = 0.75 + 0.35 * ground_t  # far asphalt looks lighter (haze)
    road_rgb = _ROAD * np.asarray(p.road_tint, dtype=np.float32) * (1.25 - 0.35 * shade)
    texture = 0.9 + 0.2 * _noise_field(rng, width, height, _ROAD_CELLS)
    road_img = _scale(np.ascontiguousarray(np.repeat(road_rgb[:, None, :], width, axis=1)), texture)
    return _blend(canvas, road_img, road_a), road_a


def _marking_polys(p: _Params, v: _View, i: int, zf: np.ndarray, v_c: np.ndarray) -> list[np.ndarray]:
    """The painted runs of marking i (dashes, minus its worn gap) as sub-pixel polygons."""
    x = p.xs[i]
    dash_len, period, phase = p.dash
    on = np.ones_like(zf, dtype=bool)
    if p.dashed[i]:
        on &= np.mod(zf + phase, period) < dash_len
    g0, g1 = p.gaps[i]
    on &= ~((zf >= g0) & (zf < g1))
    ul, _ = _project(p, x - p.mark_w / 2, zf)
    ur, _ = _project(p, x + p.mark_w / 2, zf)
    polys = []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
    for a, b in zip(edges[::2], edges[1::2]):
        if b - a < 1:
            continue
        b = min(b + 1, len(zf))  # close the run up to the next sample
        polys.append(_poly(np.concatenate([ul[a:b], ur[a:b][::-1]]), np.concatenate([v_c[a:b], v_c[a:b][::-1]]),
                           v.sx, v.sy))
    return polys


def _paint_alpha(p: _Params, v: _View, rng: np.random.Generator, tags: set[str], *, colours: bool = True) -> tuple[
        dict[bool, np.ndarray], dict[bool, np.ndarray], list[tuple[np.ndarray, np.ndarray]], tuple[bool, ...]]:
    """Paint: one mask per colour, value = paint strength, then wear. Returns (the masks by is-yellow, uint8; the
    paint's opacity by is-yellow, float32 0..1, wear included; each marking's painted centreline (u, v) in the
    reference frame; whether any of each marking's paint shows in the frame, `_shows`). colours=False: only the
    last two (the masks and opacities empty), the rng drawn from all the same."""
    width, height = v.width, v.height
    masks = {False: np.zeros((height, width), np.uint8), True: np.zeros((height, width), np.uint8)}
    zf = _distances(p)
    truth_ref, polys_of = [], []
    for i, x in enumerate(p.xs):
        n = _painted(p, i, zf)
        u_c, v_c = _project(p, x, zf[:n])
        truth_ref.append((u_c, v_c))
        polys = _marking_polys(p, v, i, zf[:n], v_c)
        polys_of.append(polys)
        if polys and colours:
            value = int(round(255 * p.paint[i]))
            cv2.fillPoly(masks[p.yellow[i]], polys, value, cv2.LINE_AA, _SUBPIXEL)  # type: ignore[call-overload]
    wear_map = None
    if p.wear:
        tags.add("worn")
        blotch = _noise_field(rng, width, height, (60, 30)) * 0.6 + 0.4 * rng.random((height, width), dtype=np.float32)
        wear_map = np.clip((blotch - p.wear * 0.8) * 4.0, 0.0, 1.0)
    alphas = {}
    for is_yellow, mask in masks.items() if colours else ():
        if is_yellow and not any(p.yellow):
            continue
        a = mask.astype(np.float32) * np.float32(1 / 255)
        if wear_map is not None:
            a *= wear_map
        alphas[is_yellow] = a
    return masks, alphas, truth_ref, tuple(_shows(p, v, i, polys, wear_map) for i, polys in enumerate(polys_of))


def _shows(p: _Params, v: _View, i: int, polys: list[np.ndarray], wear_map: np.ndarray | None) -> bool:
    """Whether marking i's paint (its polygons, its strength, the wear) shows in the frame: a pixel of opacity
    _SHOWN_OPACITY or more once the camera (roll, zoom, shift) has moved it as `_camera_effects` moves the frame."""
    corners = np.concatenate(polys).reshape(-1, 2) >> _SUBPIXEL
    x0, y0 = np.maximum(corners.min(0) - 2, 0)  # the box of the marking's pixels in the drawn scene
    x1, y1 = np.minimum(corners.max(0) + 3, (v.width, v.height))
    if x0 >= x1 or y0 >= y1:
        return False
    own = np.zeros((y1 - y0, x1 - x0), np.uint8)
    at = [q - (x0 << _SUBPIXEL, y0 << _SUBPIXEL) for q in polys]
    cv2.fillPoly(own, at, 255, cv2.LINE_AA, _SUBPIXEL)  # type: ignore[call-overload]
    opacity = own.astype(np.float32) * np.float32(p.paint[i] / 255)
    if wear_map is not None:
        opacity *= wear_map[y0:y1, x0:x1]
    shows = (opacity >= _SHOWN_OPACITY).astype(np.uint8)
    if not (p.roll or p.zoom != 1.0 or p.shift != (0.0, 0.0)):
        return bool(shows.any())
    m = _camera_matrix(p, v.width, v.height)
    # Quick: a pixel whose 3x3 neighbourhood all shows, moved 2 pixels or more inside the frame, shows there too (the
    # warp's bilinear samples of it come from that neighbourhood; zoom >= 1 leaves no source point unsampled).
    ys, xs = np.nonzero(cv2.erode(shows, np.ones((3, 3), np.uint8)))
    xs, ys = xs + x0, ys + y0
    fx, fy = m[0, 0] * xs + m[0, 1] * ys + m[0, 2], m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    if np.any((fx >= 2) & (fx <= v.width - 3) & (fy >= 2) & (fy <= v.height - 3)):
        return True
    ys, xs = np.nonzero(shows)
    if not len(xs):
        return False
    # Else warp as the frame does, over the frame's part where those pixels land (2 pixels around them; the edge's
    # pixels that BORDER_REPLICATE repeats outwards land there too).
    xs, ys = xs + x0, ys + y0
    fx, fy = m[0, 0] * xs + m[0, 1] * ys + m[0, 2], m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    bx0, by0 = max(int(fx.min()) - 2, 0), max(int(fy.min()) - 2, 0)
    bx1, by1 = min(int(fx.max()) + 3, v.width), min(int(fy.max()) + 3, v.height)
    if bx0 >= bx1 or by0 >= by1:
        return False
    whole = np.zeros((v.height, v.width), np.float32)
    whole[y0:y1, x0:x1] = opacity
    to_box = m.copy()
    to_box[:, 2] -= (bx0, by0)
    moved = cv2.warpAffine(whole, to_box, (bx1 - bx0, by1 - by0), flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
    return bool((moved >= _SHOWN_OPACITY).any())


def _draw_paint(p: _Params, v: _View, canvas: np.ndarray, rng: np.random.Generator, tags: set[str]) -> tuple[
        np.ndarray, dict[bool, np.ndarray], list[tuple[np.ndarray, np.ndarray]], tuple[bool, ...]]:
    """Paint the markings (`_paint_alpha`). Returns (canvas, the masks by is-yellow, each marking's painted
    centreline (u, v) in the reference frame, whether each marking's paint shows)."""
    masks, alphas, truth_ref, shown = _paint_alpha(p, v, rng, tags)
    for is_yellow, a in alphas.items():
        colour = _YELLOW if is_yellow else _WHITE
        canvas = _blend(canvas, np.full_like(canvas, colour), a)
    return canvas, masks, truth_ref, shown


def _draw_shadows(p: _Params, v: _View, canvas: np.ndarray, tags: set[str]) -> np.ndarray:
    """Soft shadows (trees, bridges) across road and paint."""
    if not p.shadows:
        return canvas
    sx, sy = v.sx, v.sy
    shadow = np.zeros((v.height, v.width), np.uint8)
    for x, zc, hw, hd in p.shadows:
        zc = max(zc, v.z_near + hd)
        u0, v0 = _project(p, x - hw, np.array([zc - hd]))
        u1, v1 = _project(p, x + hw, np.array([zc + hd]))
        ucen, vcen = (u0[0] + u1[0]) / 2 * sx, (v0[0] + v1[0]) / 2 * sy
        axes = (max(int(abs(u1[0] - u0[0]) / 2 * sx), 1), max(int(abs(v0[0] - v1[0]) / 2 * sy), 1))
        cv2.ellipse(shadow, (int(ucen), int(vcen)), axes, 0, 0, 360, 255, -1, cv2.LINE_AA)  # type: ignore[call-overload]
    soft = cv2.GaussianBlur(shadow, (0, 0), max(2.0, 6 * sx)).astype(np.float32) / 255.0
    strength = 0.35 if len(p.shadows) < 3 else 0.55
    canvas = _scale(canvas, 1.0 - strength * soft)
    if len(p.shadows) >= 3:
        tags.add("shadow")
    return canvas


def _draw_vehicles(p: _Params, v: _View, canvas: np.ndarray, truth_ref: list[tuple[np.ndarray, np.ndarray]],
                   tags: set[str]) -> None:
    """Vehicles, far to near, drawn into the canvas; the ground truth keeps the markings they hide."""
    sx, sy = v.sx, v.sy
    hidden = False
    for x, zc, cw, ch, colour in sorted(p.cars, key=lambda c: -c[1]):
        if zc < v.z_near * 1.3:
            continue
        (ul,), (vb,) = _project(p, x - cw / 2, np.array([zc]))
        (ur,), _ = _project(p, x + cw / 2, np.array([zc]))
        top = vb - p.f * ch / zc
        x0, x1, y0, y1 = ul * sx, ur * sx, top * sy, vb * sy
        if x1 < 0 or x0 > v.width:
            continue
        _draw_vehicle(canvas, np.asarray(_CAR_COLOURS[colour], dtype=np.float32), (x0, x1, y0, y1), p.light)
        for u_c, v_c in truth_ref:
            behind = (v_c * sy >= y0) & (v_c * sy <= y1) & (u_c * sx >= x0) & (u_c * sx <= x1)
            hidden |= bool(behind.any())
    if hidden:
        tags.add("occlusion")


def _draw_vehicle(canvas: np.ndarray, body: np.ndarray, box: tuple[float, float, float, float], light: str) -> None:
    """One vehicle seen from behind in the box (x0, x1, y0, y1): body, roof, rear window, lamps, bumper shadow."""
    x0, x1, y0, y1 = box
    pt = lambda a, b: (int(round(a)), int(round(b)))  # noqa: E731
    cv2.rectangle(canvas, pt(x0, y0 + 0.35 * (y1 - y0)), pt(x1, y1), body.tolist(), -1, cv2.LINE_AA)
    cv2.rectangle(canvas, pt(x0 + 0.12 * (x1 - x0), y0), pt(x1 - 0.12 * (x1 - x0), y0 + 0.4 * (y1 - y0)),
                  (body * 0.8).tolist(), -1, cv2.LINE_AA)
    cv2.rectangle(canvas, pt(x0 + 0.18 * (x1 - x0), y0 + 0.06 * (y1 - y0)),
                  pt(x1 - 0.18 * (x1 - x0), y0 + 0.33 * (y1 - y0)), (50, 40, 30), -1, cv2.LINE_AA)
    lamp = (30, 30, 230) if light in ("day", "glare") else (90, 90, 255)
    for lx in (x0 + 0.05 * (x1 - x0), x1 - 0.2 * (x1 - x0)):
        cv2.rectangle(canvas, pt(lx, y0 + 0.5 * (y1 - y0)), pt(lx + 0.15 * (x1 - x0), y0 + 0.62 * (y1 - y0)),
                      lamp, -1, cv2.LINE_AA)
    cv2.rectangle(canvas, pt(x0, y1 - 0.08 * (y1 - y0)), pt(x1, y1), (15, 15, 15), -1)


def _light(p: _Params, v: _View, canvas: np.ndarray, masks: dict[bool, np.ndarray], tags: set[str]) -> np.ndarray:
    """Lighting: night (headlight beams, retro-reflective paint, tail lights), dusk, or glare (sun and veil)."""
    width, height, horizon, sx, sy = v.width, v.height, v.horizon, v.sx, v.sy
    if p.light == "night":
        tags.add("night")
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        beam = np.exp(-(((xx - width / 2) / (0.45 * width)) ** 2) - ((yy - height) / (0.45 * height)) ** 2)
        gain = 0.12 + 0.75 * beam * (yy > horizon)
        # retro-reflective paint stays visible in the beams
        paint = np.maximum(masks[False], masks[True]).astype(np.float32) * np.float32(1 / 255)
        canvas = _scale(canvas, gain + paint * 0.35 * (0.3 + beam))
        for x, zc, cw, ch, _ in p.cars:  # tail-light glow
            (uc,), (vc,) = _project(p, x, np.array([max(zc, v.z_near)]))
            cv2.circle(canvas, (int(uc * sx), int((vc - p.f * ch * 0.45 / zc) * sy)), max(2, int(8 * sx)), (60, 60, 255), -1)
    elif p.light == "dusk":
        tags.add("dusk")
        canvas = cv2.multiply(canvas, (0.45, 0.5, 0.7, 0.0))  # type: ignore[call-overload]  # cv2 stubs: no Scalar
    elif p.light == "glare":
        tags.add("glare")
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        sun = np.exp(-(((xx - p.sun_u * sx) ** 2 + (yy - horizon * 0.8) ** 2) / (2 * (0.25 * width) ** 2)))
        veil = 255.0 * (0.06 + 0.45 * sun)
        canvas = _scale(canvas, 1 - 0.4 * sun) + cv2.merge([veil, veil, veil])
    return canvas


def _wet_road(p: _Params, v: _View, canvas: np.ndarray, road_a: np.ndarray, tags: set[str]) -> np.ndarray:
    """A wet road mirrors what is above the horizon, blurred, where there is road."""
    if not p.wet:
        return canvas
    tags.add("wet")
    width, height = v.width, v.height
    h0 = int(v.horizon)
    above = canvas[max(0, 2 * h0 - height): h0][::-1]
    if len(above) > 2 and h0 < height:
        refl = cv2.resize(np.ascontiguousarray(above), (width, height - h0))
        refl = cv2.GaussianBlur(refl, (0, 0), sigmaX=max(1.0, 3 * v.sx), sigmaY=max(2.0, 14 * v.sy))
        a = np.ascontiguousarray(road_a[h0:] * p.wet)
        canvas[h0:] = _scale(np.ascontiguousarray(canvas[h0:]), 1 - a * 0.6) + _scale(refl, a)
    return canvas


def _camera_effects(p: _Params, v: _View, canvas: np.ndarray, tags: set[str]) -> np.ndarray:
    """Camera roll / zoom / shift, then motion blur, on the uint8 frame."""
    width, height = v.width, v.height
    m = _camera_matrix(p, width, height)
    if p.roll or p.zoom != 1.0 or p.shift != (0.0, 0.0):
        canvas = cv2.warpAffine(canvas, m, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        if abs(p.roll) > 1.5:
            tags.add("tilt")
    if p.blur:
        tags.add("blur")
        k = max(3, int(p.blur * v.sx) | 1)
        kernel: np.ndarray = np.zeros((k, k), np.float32)
        kernel[k // 2] = 1.0
        rot = cv2.getRotationMatrix2D((k / 2 - 0.5, k / 2 - 0.5), p.blur_angle, 1.0)
        kernel = cv2.warpAffine(kernel, rot, (k, k))
        canvas = cv2.filter2D(canvas, -1, kernel / max(kernel.sum(), 1e-6))
    return canvas


def _sensor_noise(canvas: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sensor noise: triangular in [-7, 7] from random bytes (much cheaper than Gaussian draws)."""
    size = canvas.size
    raw = np.frombuffer(rng.bytes(2 * size), dtype=np.uint8)
    noise = (raw[:size] & 7).astype(np.int16) + (raw[size:] & 7) - 7
    return cv2.add(canvas, noise.reshape(canvas.shape), dtype=cv2.CV_8U)


def _paint_shown(p: _Params, width: int, height: int, rng: np.random.Generator, *, colours: bool = True
                 ) -> tuple[dict[bool, np.ndarray], tuple[bool, ...]]:
    """`_paint_alpha` of the scene `_render(p, width, height, rng)` draws (the rng drawn from as there), without the
    rest of the frame: (the paint's opacity by is-yellow, empty with colours=False; whether each marking's paint
    shows)."""
    v = _view(p, width, height)
    for cells in _VERGE_CELLS, _ROAD_CELLS:  # the rng's draws before the paint's (_render's order), not their pixels
        _noise_grid(rng, cells)
    _, alphas, _, shown = _paint_alpha(p, v, rng, set(), colours=colours)
    return alphas, shown


def _frame_paint(seed: int, width: int = 1640, height: int = 590, *, lanes: int | None = None,
                 hard: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """The truth and the paint of `scene(seed, width, height, lanes=lanes, hard=hard)`, without drawing the rest:
    (its lanes, as Scene.lanes; the paint's opacity as the frame shows it, float32 HxW 0..1: both colours, wear
    included, through the camera's roll, zoom and shift, before the vehicles in front of it, the light, blur and
    noise). For audits of the truth against the frame (tests/test_synthetic_truth.py)."""
    rng = np.random.default_rng(seed)
    p = _sample(rng, lanes, hard)
    alphas, shown = _paint_shown(p, width, height, rng)
    alpha = np.maximum.reduce(list(alphas.values()))
    if p.roll or p.zoom != 1.0 or p.shift != (0.0, 0.0):  # as _camera_effects
        alpha = cv2.warpAffine(alpha, _camera_matrix(p, width, height), (width, height), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
    return [pts for _, pts in _lanes(p, width, height, shown)], alpha


def scene(seed: int, width: int = 1640, height: int = 590, *, lanes: int | None = None, hard: bool = True) -> Scene:
    """A road scene drawn from `seed`: varied roads, lanes (2-6 markings), traffic, paint and weather.

    Same arguments -> same Scene. lanes fixes the number of markings; hard=False gives the
    plain daylight scenes of `road_scene`.
    """
    width = _check_int("width", width, 64, 8192)
    height = _check_int("height", height, 64, 8192)
    if lanes is not None:
        lanes = _check_int("lanes", lanes, 1, 8)
    rng = np.random.default_rng(seed)
    params = _sample(rng, lanes, hard)
    return _render(params, width, height, rng)


def road_scene(
    width: int = 1640, height: int = 590, *, seed: int = 0, lanes: int = 4
) -> tuple[np.ndarray, list[np.ndarray]]:
    """A plain daylight road seen from a car: (frame uint8 HxWx3 BGR, ground truth).

    The ground truth holds one float32 (N, 2) polyline (x, y) per lane marking, in
    frame pixels, top to bottom, restricted to the frame. Same seed -> same scene.
    The outermost markings are solid (the left one yellow), inner ones dashed.
    See `scene` for the harder scenes used to train and evaluate.
    """
    s = scene(seed, width, height, lanes=_check_int("lanes", lanes, 1, 8), hard=False)
    return s.frame, s.lanes


def drive(
    seed: int, n_frames: int, width: int = 1640, height: int = 590, *, speed: float = 20.0, fps: float = 30.0,
    hard: bool = True,
) -> Iterator[Scene]:
    """`n_frames` consecutive frames of one road (seeded), the camera driving forward at `speed` m/s:
    dashes and shadows slide towards the camera, other cars keep their own speed, the bend drifts."""
    n_frames = _check_int("n_frames", n_frames, 0, 1 << 20)
    for i, q in enumerate(_drive_params(seed, n_frames, speed, fps, hard)):
        yield _render(q, width, height, np.random.default_rng([seed, i]))


def _drive_params(seed: int, n_frames: int, speed: float, fps: float, hard: bool) -> Iterator[_Params]:
    """The world of each frame of `drive`."""
    rng = np.random.default_rng(seed)
    p = _sample(rng, None, hard)
    step = speed / fps
    car_speed = [float(rng.uniform(0.8, 1.1)) * speed for _ in p.cars]
    drift = float(rng.uniform(-1, 1)) / 250.0 / max(n_frames, 1) * 2.0
    for i in range(n_frames):
        travelled = step * i
        dash_len, period, phase = p.dash
        cars = tuple(
            (x, z + (v - speed) / fps * i, w, h, c) for (x, z, w, h, c), v in zip(p.cars, car_speed)
        )
        q = replace(
            p,
            dash=(dash_len, period, (phase + travelled) % period),
            cars=tuple(c for c in cars if c[1] > 3.0),
            shadows=tuple((x, z - travelled % 60.0 + (60.0 if z - travelled % 60.0 < 3 else 0.0), hw, hd)
                          for x, z, hw, hd in p.shadows),
            gaps=tuple((g0 - travelled, g1 - travelled) if g1 > g0 else (g0, g1) for g0, g1 in p.gaps),
            c0=float(np.clip(p.c0 + drift * i, -1 / 140, 1 / 140)),
            cam_x=p.cam_x + 0.25 * np.sin(i / max(fps, 1.0) * 0.7),
        )
        yield q


# --- the truth behind a scene: its camera and its markings as cubics in the vehicle frame ---------


@dataclass(frozen=True)
class SceneTruth:
    """What a scene's world model knows, in the conventions of edge_deploy.geometry.

    camera: the camera_info mapping (with `mounting`) that Camera.from_mapping reads: exact for
    the frame, roll, zoom and shift included. markings: (c0, c1, c2, c3) of every marking, left to
    right, as y(x) = c0 + c1 x + c2 x^2 + c3 x^3 (x forward, y left, m, origin below the camera; exact:
    the world model's road is such a cubic). visible: the markings in the frame whose paint shows there
    (Scene.lanes holds those, in order). ego_left, ego_right: the indices of the ego lane's markings (None: no such
    marking).
    """

    camera: dict
    markings: tuple[tuple[float, float, float, float], ...]
    visible: tuple[bool, ...]
    ego_left: int | None
    ego_right: int | None


def _truth(p: _Params, width: int, height: int, rng: np.random.Generator) -> SceneTruth:
    """The truth of `_render(p, width, height, rng)`."""
    m = _camera_matrix(p, width, height)
    # the image's roll about its centre, zoom and shift = the camera rolled about its optical axis, the
    # focal length zoomed and the principal point moved to where the affine map takes it
    cx, cy = m @ np.array([p.cu * width / _REF_W, p.horizon * height / _REF_H, 1.0])
    zoom = p.zoom
    camera = {
        "image_width": int(width), "image_height": int(height), "camera_name": "edge_deploy_synthetic",
        "camera_matrix": {"rows": 3, "cols": 3, "data": [p.f * zoom * width / _REF_W, 0.0, float(cx),
                                                         0.0, p.f * zoom * height / _REF_H, float(cy),
                                                         0.0, 0.0, 1.0]},
        "distortion_model": "plumb_bob",
        "distortion_coefficients": {"rows": 1, "cols": 5, "data": [0.0] * 5},
        "mounting": {"height_m": p.cam_h, "pitch_deg": 0.0, "roll_deg": p.roll, "yaw_deg": 0.0},
    }
    # the world's lateral offset grows to the right: y (left) is its negative, relative to the camera
    markings = tuple((p.cam_x - x, -p.yaw, -p.c0 / 2.0, -p.c1 / 6.0) for x in p.xs)
    shown = {i for i, _ in _lanes(p, width, height, _paint_shown(p, width, height, rng, colours=False)[1])}
    left = [i for i, x in enumerate(p.xs) if x < p.cam_x]
    right = [i for i, x in enumerate(p.xs) if x > p.cam_x]
    return SceneTruth(camera, markings, tuple(i in shown for i in range(len(p.xs))),
                      max(left) if left else None, min(right) if right else None)


def scene_truth(seed: int, width: int = 1640, height: int = 590, *, lanes: int | None = None,
                hard: bool = True) -> SceneTruth:
    """The camera and the true markings of `scene(seed, width, height, lanes=lanes, hard=hard)`."""
    width = _check_int("width", width, 64, 8192)
    height = _check_int("height", height, 64, 8192)
    rng = np.random.default_rng(seed)
    return _truth(_sample(rng, lanes, hard), width, height, rng)


def drive_truth(
    seed: int, n_frames: int, width: int = 1640, height: int = 590, *, speed: float = 20.0, fps: float = 30.0,
    hard: bool = True,
) -> Iterator[SceneTruth]:
    """The truth of each frame of `drive` with the same arguments."""
    n_frames = _check_int("n_frames", n_frames, 0, 1 << 20)
    for i, q in enumerate(_drive_params(seed, n_frames, speed, fps, hard)):
        yield _truth(q, width, height, np.random.default_rng([seed, i]))


def raw_output(
    rows: int = 2784,
    *,
    candidates: int = 50,
    seed: int = 0,
    lanes: int = 4,
    probabilities: bool = False,
    conf_threshold: float = 0.5,
) -> np.ndarray:
    """A LaneATT-shaped raw output (rows x 77, float32) with exactly `candidates` rows scoring > conf_threshold.

    Rows scatter around `lanes` straight lanes that converge towards a vanishing point
    (in 640x360 model pixels), so NMS has real work: clusters to merge, lanes that
    leave the image, short and zero-length rows. probabilities=True writes softmax
    probabilities into columns 0-1 instead of logits.
    """
    rows = _check_int("rows", rows, 0, 1 << 20)
    candidates = _check_int("candidates", candidates, 0, rows)
    lanes = _check_int("lanes", lanes, 1, 16)
    if not 0.0 < conf_threshold < 1.0:
        raise ValueError(f"conf_threshold must be in (0, 1), got {conf_threshold!r}")
    rng = np.random.default_rng(seed)
    ys = np.linspace(1.0, 0.0, 72)
    horizon = rng.uniform(0.35, 0.45)  # normalised y from the top
    vp = 320 + rng.uniform(-40, 40)
    bottoms = 320 + (np.arange(lanes) - (lanes - 1) / 2) * rng.uniform(180, 260)

    lane_of = rng.integers(0, lanes, size=rows)
    bottom_x = bottoms[lane_of] + rng.normal(0, 25, size=rows)
    top_x = vp + rng.normal(0, 15, size=rows)
    # x(y) along a line from (bottom_x, y=1) to (top_x, y=horizon); keeps going above the horizon.
    slope = (bottom_x - top_x) / (1.0 - horizon)
    xs = top_x[:, None] + slope[:, None] * (ys[None, :] - horizon)
    xs += rng.normal(0, 2.0, size=xs.shape)

    out = np.zeros((rows, 77), dtype=np.float64)
    out[:, 5:] = xs
    # start_y = 1 - y0: 0 for anchors from the bottom edge, up to 0.5 for side anchors.
    out[:, 2] = np.where(rng.random(rows) < 0.6, 0.0, rng.uniform(0, 0.5, size=rows))
    out[:, 3] = np.clip(bottom_x / 640.0, 0, 1)
    start = np.rint(out[:, 2] * 71)
    out[:, 4] = np.maximum((1.0 - horizon) * 71 - start + rng.normal(0, 6, size=rows), 0)
    out[rng.random(rows) < 0.03, 4] = 0.0

    margin = np.where(np.arange(rows) < candidates, 1.0, -1.0) * rng.uniform(0.05, 6.0, size=rows)
    margin = margin[rng.permutation(rows)]
    if conf_threshold != 0.5:
        margin += np.log(conf_threshold / (1 - conf_threshold))
    neg = rng.normal(0, 1, size=rows)
    out[:, 0] = neg
    out[:, 1] = neg + margin
    if probabilities:
        p = 1.0 / (1.0 + np.exp(-margin))
        out[:, 0] = 1.0 - p
        out[:, 1] = p
    return out.astype(np.float32)
