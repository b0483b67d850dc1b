"""The synthetic frames' truth against their paint (issue 56 item 3): every marking a frame draws is in its truth
(`Scene.lanes`), and every lane of the truth has paint along it, for the frames `evaluate --synthetic 200` scores.

Frame 1000000196 drew two dashed markings while its truth held none: a bend seen through the rolled camera turns
back down in the frame near the horizon, and the truth, which keeps a top-to-bottom run, kept none of it. Frames such
as 1000000103 held a marking that wear had taken away (no paint of it shows in the frame).

The paint comes from the generator (`synthetic_roads._frame_paint`: the opacity it blends the markings with, through
the camera, as the frame shows it); `test_the_audited_paint_is_the_frames` ties it to the frames' pixels.
"""
from __future__ import annotations


import cv2
import numpy as np
import pytest

from edge_deploy.synthetic import roads as synthetic_roads
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene

WIDTH, HEIGHT = 1640, 590  # evaluate's synthetic frames (evaluate.datasets.synthetic_frames)
EVALUATED = range(EVAL_SEED_BASE, EVAL_SEED_BASE + 200)  # `edge-deploy evaluate ... --synthetic 200`
# Paint shows at a quarter opacity: white on asphalt 30 grey levels or more above the road, four times the
# sensor noise's amplitude (7).
SHOWS = 0.25
# The frames that went wrong, and their neighbours in kind: 196 (the turned-back bend; two lanes), 103 and 178 (a
# marking worn away entirely), 114 and 98 (markings worn to a few specks: still in the truth), 126 (a wide marking
# leaving the frame's bottom edge at a shallow angle, the frame shifted up).
KNOWN = {1000000196: 2, 1000000103: 3, 1000000178: 3, 1000000114: 5, 1000000098: 6, 1000000126: 3}


def _tolerance(seed: int, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """How far (frame pixels) paint at (xs, ys) may lie from its marking's centreline.

    A marking is at most 0.2 m wide: its paint lies within 0.1 m of the centreline across the road; at distance z
    that is 0.1 f / z pixels, and f / z = (rows below the horizon) / camera height, the camera 1.2 m high or more:
    0.083 a row below the horizon. 0.1 a row, plus 3 pixels (anti-aliased edges, the warp's interpolation, the
    centreline's samples). Where the camera's roll, zoom and shift bring in what the drawn scene did not have, the
    frame repeats the scene's edge (BORDER_REPLICATE): paint there is the edge's, moved as far as the pixel lies
    outside the scene, so that distance is added."""
    p = synthetic_roads._sample(np.random.default_rng(seed), None, True)  # the scene's camera: horizon, roll, zoom
    to_scene = cv2.invertAffineTransform(synthetic_roads._camera_matrix(p, WIDTH, HEIGHT))
    sx = to_scene[0, 0] * xs + to_scene[0, 1] * ys + to_scene[0, 2]
    sy = to_scene[1, 0] * xs + to_scene[1, 1] * ys + to_scene[1, 2]
    below = (sy - p.horizon * HEIGHT / 590.0) * p.zoom
    outside = np.hypot(np.maximum(0.0, np.maximum(-sx, sx - (WIDTH - 1))),
                       np.maximum(0.0, np.maximum(-sy, sy - (HEIGHT - 1))))
    return 0.1 * np.maximum(below, 0.0) + 3.0 + outside


def _reach(line: np.ndarray) -> np.ndarray:
    """The lane as drawn for the distances: where it leaves the frame it goes on 200 pixels the way it went (its
    paint reaches past where its centreline leaves, the wider the shallower it runs)."""
    pts = line.astype(np.float64)
    for end, before in ((0, 1), (-1, -2)):
        x, y = pts[end]
        if min(x, y, WIDTH - 1 - x, HEIGHT - 1 - y) < 1.5:
            way = pts[end] - pts[before]
            way = way / max(float(np.hypot(*way)), 1e-9)
            pts = np.insert(pts, 0 if end == 0 else len(pts), pts[end] + 200.0 * way, axis=0)
    return np.round(pts).astype(np.int32)


def _audit(seed: int) -> list[str]:
    """What is wrong with frame `seed`'s truth against its paint (nothing: [])."""
    lanes, opacity = synthetic_roads._frame_paint(seed, WIDTH, HEIGHT)
    problems = [f"{seed}: lane {k} does not run top to bottom" for k, line in enumerate(lanes)
                if not np.all(np.diff(line[:, 1]) > 0)]
    ys, xs = np.nonzero(opacity >= SHOWS)
    tol = _tolerance(seed, xs.astype(np.float64), ys.astype(np.float64))
    near_any = np.zeros(len(xs), bool)
    reach = int(np.ceil(tol.max())) + 1 if len(tol) else 0
    for k, line in enumerate(lanes):
        drawn = _reach(line)
        # the distances within the lane's box widened by the largest tolerance (the rest is farther)
        x0, y0 = np.maximum(drawn.min(0) - reach, 0)
        x1, y1 = np.minimum(drawn.max(0) + reach + 1, (WIDTH, HEIGHT))
        canvas = np.full((y1 - y0, x1 - x0), 255, np.uint8)
        cv2.polylines(canvas, [drawn - (x0, y0)], False, 0, 1)
        box = (xs >= x0) & (xs < x1) & (ys >= y0) & (ys < y1)
        near = np.zeros(len(xs), bool)
        near[box] = cv2.distanceTransform(canvas, cv2.DIST_L2, 5)[ys[box] - y0, xs[box] - x0] <= tol[box]
        near_any |= near
        if not near.any():
            problems.append(f"{seed}: lane {k} (y {line[0, 1]:.0f}-{line[-1, 1]:.0f}) has no paint along it")
    if not near_any.all():
        far = np.flatnonzero(~near_any)
        problems.append(f"{seed}: {len(far)} paint pixels lie off every lane of the truth ({len(lanes)} lanes), "
                        f"e.g. at (x, y) {xs[far[0]]}, {ys[far[0]]}")
    return problems


@pytest.mark.parametrize("seed", sorted(KNOWN))
def test_the_frames_that_went_wrong_hold_their_markings(seed):
    lanes, _ = synthetic_roads._frame_paint(seed, WIDTH, HEIGHT)
    assert len(lanes) == KNOWN[seed]
    assert _audit(seed) == []


@pytest.mark.slow
@pytest.mark.once(reason="30-60 s for all 200 frames (the frames that went wrong run in the suite)")
def test_every_evaluated_frame_holds_what_it_draws_and_draws_what_it_holds():
    problems = [problem for seed in EVALUATED for problem in _audit(seed)]
    assert problems == []


@pytest.mark.parametrize("seed", [1000000196, 1000000103, 1000000126])
def test_the_audited_paint_is_the_frames(seed):
    """`_frame_paint` is the scene's: the same lanes as `scene`, and the frame is bright where its paint is, worn
    blotches included (196 and 103 are worn: paint drawn with another wear map than the frame's correlates at about
    0.35; the frame's own at 0.8 and more)."""
    drawn = scene(seed, WIDTH, HEIGHT)
    lanes, opacity = synthetic_roads._frame_paint(seed, WIDTH, HEIGHT)
    assert len(lanes) == len(drawn.lanes) and all(np.array_equal(a, b) for a, b in zip(lanes, drawn.lanes))
    grey = cv2.cvtColor(drawn.frame, cv2.COLOR_BGR2GRAY).astype(np.float64)
    near = cv2.dilate((opacity > 0).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0  # the paint and the road beside
    assert (opacity >= SHOWS).sum() > 200
    assert np.corrcoef(opacity[near], grey[near])[0, 1] > 0.6
