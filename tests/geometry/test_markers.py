"""Lane markers: the cubic fit on the synthetic roads' true polylines (exact up to float32 pixels), the ego
assignment, the derived figures on a constructed case, the JSON contract."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edge_deploy.geometry import Camera, LaneMarkers, Mounting, to_markers
from edge_deploy.geometry.markers import assign, fit_marker
from edge_deploy.lanedet.lane import Lane
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene, scene_truth

# held-out scenes covering roll (tilt), S-bends, curves, many lanes: seeds picked from the evaluation range
SEEDS = [EVAL_SEED_BASE + s for s in (1, 5, 8, 9, 6)]


def marker(c: tuple[float, float, float, float], start: float = 5.0, end: float = 60.0, **kw):
    xs = np.linspace(start, end, 30)
    m = fit_marker(np.stack([xs, c[0] + c[1] * xs + c[2] * xs**2 + c[3] * xs**3], 1), **kw)
    assert m is not None
    return m


def test_the_chosen_scenes_cover_roll_and_bends():
    tags = {tag for seed in SEEDS for tag in scene(seed, 410, 148).conditions}
    assert {"tilt", "curve", "s_curve", "many_lanes"} <= tags
    assert any(scene_truth(seed).camera["mounting"]["roll_deg"] != 0 for seed in SEEDS)


@pytest.mark.parametrize("seed", SEEDS)
def test_true_polylines_give_the_true_cubics(seed):
    shown, truth = scene(seed), scene_truth(seed)
    camera = Camera.from_mapping(truth.camera)
    visible = [i for i, v in enumerate(truth.visible) if v]
    assert len(visible) == len(shown.lanes) >= 2
    for i, points in zip(visible, shown.lanes):
        got = fit_marker(camera.image_to_ground(points, strict=False))
        c0, c1, c2, c3 = truth.markings[i]
        assert got.c0 == pytest.approx(c0, abs=0.02)  # 2 cm at the vehicle
        assert math.degrees(abs(math.atan(got.c1) - math.atan(c1))) < 0.1  # heading within 0.1 deg
        xs = np.linspace(got.longitude_start, got.longitude_end, 20)
        true_curvature = 2 * c2 + 6 * c3 * xs  # y'': the cubic's curvature in the small-slope sense of c2
        curvature = 2 * got.c2 + 6 * got.c3 * xs
        assert np.abs(curvature - true_curvature).max() <= 0.05 * np.abs(true_curvature).max() + 1e-6
        assert got.rms_m < 0.01 and got.model_degree == 3


@pytest.mark.parametrize("seed", SEEDS)
def test_ego_markers_are_the_true_ego_markings(seed):
    shown, truth = scene(seed), scene_truth(seed)
    found = to_markers([Lane(p, 0.9) for p in shown.lanes], Camera.from_mapping(truth.camera))
    assert found.ego_left.c0 == pytest.approx(truth.markings[truth.ego_left][0], abs=0.02)
    assert found.ego_right.c0 == pytest.approx(truth.markings[truth.ego_right][0], abs=0.02)
    assert len(found) == len(shown.lanes)
    lefts = [m.c0 for m in found.next_left]
    assert lefts == sorted(lefts) and all(c > found.ego_left.c0 for c in lefts)  # outward, nearest first


def test_assignment_by_where_markers_cross_the_lateral_axis():
    near_left, far_left = marker((1.7, 0.0, 0.0, 0.0)), marker((5.2, 0.0, 0.0, 0.0))
    right = marker((-1.8, 0.01, 0.0, 0.0))
    # seen only far ahead: placed where it is first seen (y = -2.0 at x = 40), not extrapolated to x = 0 (y = 3)
    bend = marker((3.0, -0.125, 0.0, 0.0), start=40.0, end=70.0)
    assert bend.c0 > 0 and bend.lateral_at_axis == pytest.approx(-2.0, abs=1e-6)
    got = assign([bend, far_left, right, near_left])
    assert got.ego_left is near_left and got.next_left == (far_left,)
    assert got.ego_right is right and got.next_right == (bend,)
    assert assign([near_left]).ego_right is None


def test_figures_of_a_constructed_lane():
    # a 3.6 m lane, the vehicle 0.3 m left of its centre, heading 1 deg right of it, bending left at R = 500 m
    slope = math.tan(math.radians(1.0))
    left = marker((1.5, slope, 1 / 1000, 0.0))
    right = marker((-2.1, slope, 1 / 1000, 0.0))
    figures = LaneMarkers(left, right).figures(speed_mps=20.0, vehicle_width_m=2.0)
    assert figures.lateral_offset_m == pytest.approx(0.3, abs=1e-6)
    assert figures.lane_width_m == pytest.approx(3.6 / math.sqrt(1 + slope**2), abs=1e-6)
    assert figures.heading_deg == pytest.approx(-1.0, abs=1e-6)
    assert figures.curvature_1pm == pytest.approx(1 / 500 / (1 + slope**2) ** 1.5, rel=1e-6)
    # the left line comes to the vehicle's left side (y = 1.0): 1.5 + s x + x^2/1000 = 1.0 never holds ahead,
    # the right one (y = -1.0) does: -2.1 + s x + x^2/1000 = -1.0
    root = (-slope + math.sqrt(slope**2 + 4 * 1.1 / 1000)) / (2 / 1000)
    assert figures.time_to_left_s is None
    assert figures.time_to_right_s == pytest.approx(root / 20.0, rel=1e-3)
    one_side = LaneMarkers(left, None).figures()
    assert one_side.lane_width_m is None and one_side.heading_deg == pytest.approx(-1.0, abs=1e-6)


def test_short_and_sparse_spans_get_lower_degrees():
    assert marker((1.0, 0.01, 1e-3, 1e-5)).model_degree == 3
    assert marker((1.0, 0.01, 1e-3, 0.0), start=10, end=20).model_degree == 2
    assert marker((1.0, 0.01, 0.0, 0.0), start=10, end=15).model_degree == 1
    assert fit_marker(np.array([[10.0, 1.0]])) is None
    assert fit_marker(np.array([[np.nan, 1.0], [-3.0, 1.0], [10.0, 1.0]])) is None  # one usable point


def test_json_contract():
    camera = Camera(640, 360, np.array([[500.0, 0, 320], [0, 500.0, 180], [0, 0, 1]]), np.zeros(5),
                    Mounting(1.5, 2.0))
    xs = np.linspace(6, 40, 12)
    lanes = [Lane(camera.ground_to_image(np.stack([xs, np.full_like(xs, y)], 1)), 0.8) for y in (1.8, -1.7, 5.4)]
    data = to_markers(lanes, camera).to_dict()
    assert set(data) == {"ego_left", "ego_right", "next_left", "next_right"}
    for m in (data["ego_left"], data["ego_right"], *data["next_left"]):
        assert {"c0", "c1", "c2", "c3", "view_range", "quality", "id"} <= set(m)
        assert m["id"] is None and 0 < m["quality"] <= 1
    assert data["ego_left"]["c0"] == pytest.approx(1.8, abs=1e-4) and data["next_right"] == []
    assert to_markers(lanes[:1], camera).to_dict()["ego_right"] is None


def test_view_range_is_how_far_ahead_the_marker_is_seen():
    # issue 44, "tests that notice": its value, not only that it is there
    assert marker((1.8, 0.0, 0.0, 0.0), start=5.0, end=42.0).view_range == pytest.approx(42.0, abs=1e-6)
    assert marker((1.8, 0.0, 0.0, 0.0), start=12.0, end=60.0).view_range == pytest.approx(60.0, abs=1e-6)


def test_time_to_line_crossing_at_the_end_of_its_horizon():
    # issue 44, "tests that notice": a crossing in the horizon's last step (an off-by-one raised IndexError there)
    from edge_deploy.geometry.figures import HORIZON_S, time_to_crossing

    speed, side = 10.0, 0.9
    for at, expected in ((speed * HORIZON_S - 0.1, HORIZON_S - 0.01), (0.5, 0.05), (speed * HORIZON_S + 0.1, None)):
        line = marker((side + 0.01 * at, -0.01, 0.0, 0.0))  # y = side where x = at
        found = time_to_crossing(line, side, speed)
        assert (found is None) if expected is None else found == pytest.approx(expected, abs=1e-3), (at, found)
