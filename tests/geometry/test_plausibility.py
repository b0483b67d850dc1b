"""Plausibility verdicts on a frame's markers and figures (issue 45, item 11): the synthetic roads' true lines pass,
the same lines with the ego lane's left line missed fail, on one frame (lane_width) and in a drive (offset_jump
too), and so do the demo model's own misses on the demo's drive; a lane change is not a jump; crossing markers;
the JSON contract and the bird's-eye panel."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.errors import GeometryError
from edge_deploy.geometry import (Camera, FrameMarkers, LaneGeometry, LaneMarkers, PlausibilityLimits,
                                  StreamPlausibility, frame_plausibility, to_markers)
from edge_deploy.geometry.birdseye import draw_birdseye
from edge_deploy.geometry.markers import fit_marker
from edge_deploy.lanedet.lane import Lane
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, drive, drive_truth, scene, scene_truth

DEMO_DRIVE = Path(__file__).resolve().parents[1] / "data" / "demo_drive" / "lanes_70_89.json"
SIZE = (820, 295)  # half the CULane size: the same roads, a quarter of the drawing


def marker(c: tuple[float, float, float, float], start: float = 5.0, end: float = 60.0):
    xs = np.linspace(start, end, 30)
    found = fit_marker(np.stack([xs, c[0] + c[1] * xs + c[2] * xs**2 + c[3] * xs**3], 1))
    assert found is not None
    return found


def verdict_of(markers: LaneMarkers, **kw):
    return frame_plausibility(markers, markers.figures(), **kw)


def true_offset(truth) -> float:
    return -(truth.markings[truth.ego_left][0] + truth.markings[truth.ego_right][0]) / 2


# --- one frame: the truth passes, a missed line fails -------------------------------------------------------------

@pytest.fixture(scope="module")
def scenes():
    """Held-out scenes whose ego lane has both lines in view and a visible line left of it."""
    kept = []
    for seed in range(EVAL_SEED_BASE, EVAL_SEED_BASE + 40):
        truth = scene_truth(seed, *SIZE)
        left, right = truth.ego_left, truth.ego_right
        if left is not None and right is not None and left > 0 and all(truth.visible[i] for i in (left - 1, left,
                                                                                                   right)):
            kept.append((scene(seed, *SIZE), truth))
        if len(kept) == 6:
            break
    assert len(kept) == 6
    return kept


def test_the_true_lines_are_plausible(scenes):
    for shown, truth in scenes:
        camera = Camera.from_mapping(truth.camera)
        markers = to_markers([Lane(p, 0.9) for p in shown.lanes], camera)
        verdict = verdict_of(markers)
        assert verdict.ok and verdict.reasons == (), verdict
        assert verdict.checked == ("lane_width", "markers_crossing")  # no earlier frame: no offset_jump


def test_a_missed_ego_line_makes_the_lane_too_wide(scenes):
    for shown, truth in scenes:
        camera = Camera.from_mapping(truth.camera)
        visible = [i for i, v in enumerate(truth.visible) if v]
        lanes = [Lane(p, 0.9) for i, p in zip(visible, shown.lanes) if i != truth.ego_left]
        markers = to_markers(lanes, camera)
        # the lane seen: from the next line on the left to the right line, two lanes (the truth says how wide)
        two_lanes = truth.markings[truth.ego_left - 1][0] - truth.markings[truth.ego_right][0]
        assert markers.figures().lane_width_m == pytest.approx(two_lanes / math.hypot(1, truth.markings[0][1]),
                                                               abs=0.05)
        verdict = verdict_of(markers)
        assert not verdict.ok and [r.check for r in verdict.reasons] == ["lane_width"]
        assert f"{markers.figures().lane_width_m:.2f} m wide" in verdict.reasons[0].message


# --- a drive: the frames whose figures are wrong, and only those, are flagged ----------------------------------------

DRIVE_SEED, DRIVE_FRAMES, MISSED = EVAL_SEED_BASE + 3, 24, range(10, 14)


@pytest.fixture(scope="module")
def drive_lanes():
    """A drive's true polylines, frame by frame, with the ego lane's left line missed in frames 10-13."""
    frames = []
    for i, (shown, truth) in enumerate(zip(drive(DRIVE_SEED, DRIVE_FRAMES, *SIZE),
                                           drive_truth(DRIVE_SEED, DRIVE_FRAMES, *SIZE))):
        visible = [k for k, v in enumerate(truth.visible) if v]
        lanes = [Lane(p, 0.9) for k, p in zip(visible, shown.lanes) if not (i in MISSED and k == truth.ego_left)]
        frames.append((shown.frame, lanes, truth))
    assert frames[0][2].ego_left is not None and frames[0][2].ego_left > 0  # a line left of the ego lane to see
    return frames


@pytest.mark.parametrize("track", [False, True], ids=["raw", "tracked"])
def test_a_drive_flags_exactly_the_frames_whose_figures_are_wrong(drive_lanes, track):
    geometry = LaneGeometry(Camera.from_mapping(drive_lanes[0][2].camera), track=track, speed_mps=20.0, fps=30.0)
    wrong, flagged = [], []
    for i, (frame, lanes, truth) in enumerate(drive_lanes):
        found = geometry.frame_markers(lanes, frame)
        if abs(found.figures.lateral_offset_m - true_offset(truth)) > 0.25:
            wrong.append(i)
        if not found.plausibility.ok:
            flagged.append(i)
        assert ("offset_jump" in found.plausibility.checked) == (i > 0)
    # raw: every missed frame is wrong; tracked: the tracker coasts the missed line through two frames
    assert wrong == (list(MISSED) if not track else list(MISSED)[2:])
    assert flagged == wrong


def test_the_jump_is_judged_from_the_last_plausible_frame(drive_lanes):
    geometry = LaneGeometry(Camera.from_mapping(drive_lanes[0][2].camera), speed_mps=20.0, fps=30.0)
    found = [geometry.frame_markers(lanes, frame) for frame, lanes, _ in drive_lanes[:12]]
    first, second = (f.plausibility for f in found[10:12])
    assert {r.check for r in first.reasons} == {"lane_width", "offset_jump"}
    # frame 11 jumps little from frame 10, but frame 10 was no measurement: it is judged against frame 9
    assert abs(found[11].figures.lateral_offset_m - found[10].figures.lateral_offset_m) < 0.3
    assert "offset_jump" in {r.check for r in second.reasons} and "in 0.0667 s" in str(second.reasons)
    geometry.reset()  # a new stream: nothing to judge a jump from
    assert "offset_jump" not in geometry.frame_markers(drive_lanes[12][1], drive_lanes[12][0]).plausibility.checked
    # without fps the calls are not known to be a stream's frames: no jump is judged, however far they are apart
    unknown = LaneGeometry(Camera.from_mapping(drive_lanes[0][2].camera), speed_mps=20.0)
    verdicts = [unknown.frame_markers(lanes, frame).plausibility for frame, lanes, _ in drive_lanes[8:12]]
    assert all("offset_jump" not in v.checked for v in verdicts) and not verdicts[-1].ok  # 11: still too wide


# --- the demo's own drive: the demo model misses the centre line -------------------------------------------------

@pytest.mark.parametrize("track", [False, True], ids=["raw", "tracked"])
def test_the_demo_models_missed_centre_line_is_flagged(track):
    recorded = json.loads(DEMO_DRIVE.read_text())
    camera = Camera.from_mapping(recorded["calibration"])
    truths = list(drive_truth(EVAL_SEED_BASE, 90))  # the drive `edge-deploy sample --video` writes
    geometry = LaneGeometry(camera, track=track, speed_mps=20.0, fps=30.0)
    frame = np.zeros((camera.height, camera.width, 3), np.uint8)
    wrong, flagged, seen = [], [], {}
    for index, lanes in recorded["frames"].items():
        found = geometry.frame_markers([Lane(np.array(lane["points"], np.float32), lane["score"]) for lane in lanes],
                                       frame)
        offset = found.figures.lateral_offset_m
        if offset is not None and abs(offset - true_offset(truths[int(index)])) > 0.25:
            wrong.append(int(index))
        if not found.plausibility.ok:
            flagged.append(int(index))
        seen[int(index)] = found
    # raw: it misses the left line in 83 and 85-88 and more in 81 and 84; tracked: the tracker coasts 83's miss and
    # holds 84's lines, then coasts two frames and gives up
    assert wrong == ([81, 83, 84, 85, 86, 87, 88] if not track else [85, 86, 87, 88])
    assert flagged == wrong
    if not track:  # the figures issue 45 quotes: an ego lane 5.56 m wide, the offset jumping to -1.06 m
        figures, verdict = seen[85].figures, seen[85].plausibility
        assert (round(figures.lane_width_m, 2), round(figures.lateral_offset_m, 2)) == (5.56, -1.06)
        assert {r.check for r in verdict.reasons} == {"lane_width", "offset_jump"}
        assert seen[82].plausibility.ok and seen[82].plausibility.checked == ("lane_width", "offset_jump",
                                                                              "markers_crossing")


# --- constructed cases: a lane change, the speed, the frame interval, crossings ------------------------------------

def lane_at(left_c0: float, right_c0: float) -> LaneMarkers:
    return LaneMarkers(marker((left_c0, 0.0, 0.0, 0.0)), marker((right_c0, 0.0, 0.0, 0.0)))


def test_a_lane_change_is_not_a_jump():
    stream = StreamPlausibility()
    # the vehicle drifts left 0.15 m a frame towards its left line at +0.2 m, crosses it, and goes on
    positions = [0.2 - 0.15 * i for i in range(6)]
    for y in positions:
        markers = lane_at(y, y - 3.5) if y > 0 else lane_at(y + 3.5, y)
        verdict = stream.check(markers, markers.figures(), dt_s=1 / 30)
        assert verdict.ok, (y, verdict)
    assert "offset_jump" in verdict.checked
    # the same offsets without the line being crossed: the markers themselves jump by a lane
    stream.reset()
    stream.check(lane_at(0.2, -3.3), lane_at(0.2, -3.3).figures(), dt_s=1 / 30)
    jumped = lane_at(3.5 + 0.05, 0.05 - 0.6)
    assert not stream.check(jumped, jumped.figures(), dt_s=1 / 30).ok


def test_the_jump_allowed_grows_with_the_interval_and_is_bounded_by_the_speed():
    still, moved = lane_at(1.75, -1.75), lane_at(1.35, -2.15)  # 0.4 m to the left
    stream = StreamPlausibility()
    stream.check(still, still.figures(), dt_s=1 / 30)
    assert stream.check(moved, moved.figures(), dt_s=1 / 30).ok  # 6 m/s / 30 + 0.3 m = 0.5 m
    stream.reset()
    stream.check(still, still.figures(), dt_s=1 / 30)
    stopped = stream.check(moved, moved.figures(), dt_s=1 / 30, speed_mps=0.0)  # a standing car: 0.3 m
    assert [r.check for r in stopped.reasons] == ["offset_jump"] and "at most 0.30 m" in stopped.reasons[0].message
    stream.check(still, still.figures(), dt_s=1 / 30)
    unknown = stream.check(moved, moved.figures(), dt_s=None)  # no interval: nothing to bound the jump by
    assert unknown.ok and "offset_jump" not in unknown.checked
    tight = StreamPlausibility(PlausibilityLimits(max_lateral_speed_mps=1.0, jump_allowance_m=0.1))
    tight.check(still, still.figures(), dt_s=0.1)
    assert not tight.check(moved, moved.figures(), dt_s=0.1).ok  # 1 m/s * 0.1 s + 0.1 m < 0.4 m


def test_an_ego_marker_crossing_another_where_both_are_seen():
    left, right = marker((1.8, -0.05, 0.0, 0.0)), marker((-1.8, 0.05, 0.0, 0.0))  # meet at x = 36 m
    crossed = verdict_of(LaneMarkers(left, right))
    assert [r.check for r in crossed.reasons] == ["markers_crossing"]
    assert "+1.80 m and -1.80 m cross 36 m ahead" in crossed.reasons[0].message
    # a right marker bending over the left one and back: apart at both ends of the stretch, crossed in between
    bulge = verdict_of(LaneMarkers(marker((1.8, 0.0, 0.0, 0.0)), marker((-1.8, 0.4, -0.01, 0.0))))
    assert [r.check for r in bulge.reasons] == ["markers_crossing"] and "cross 14 m ahead" in bulge.reasons[0].message
    # the same curves seen only up to 30 m do not cross where they were seen
    short = verdict_of(LaneMarkers(marker((1.8, -0.05, 0.0, 0.0), end=30.0), marker((-1.8, 0.05, 0.0, 0.0), end=30.0)))
    assert short.ok and "markers_crossing" in short.checked
    # an outer marker crossing the ego left one, and two outer ones crossing each other
    ego = (marker((1.8, 0.0, 0.0, 0.0)), marker((-1.8, 0.0, 0.0, 0.0)))
    cuts_in = verdict_of(LaneMarkers(*ego, next_left=(marker((5.0, -0.1, 0.0, 0.0)),)))
    assert [r.check for r in cuts_in.reasons] == ["markers_crossing"]
    outer = verdict_of(LaneMarkers(*ego, next_left=(marker((5.0, 0.0, 0.0, 0.0)), marker((8.0, -0.1, 0.0, 0.0)))))
    assert outer.ok  # the ego lane's figures do not depend on them
    # one marker: nothing to cross
    assert verdict_of(LaneMarkers(ego[0], None)).checked == ()


@pytest.mark.parametrize("kwargs, words", [
    ({"lane_width_m": (4.0, 3.0)}, "lane_width_m must be"),
    ({"lane_width_m": (0.0, 3.0)}, "lane_width_m must be"),
    ({"lane_width_m": (2.5, 3.0, 4.0)}, "lane_width_m must be"),
    ({"lane_width_m": "wide"}, "lane_width_m must be"),
    ({"max_lateral_speed_mps": -1.0}, "max_lateral_speed_mps must be 0 or more"),
    ({"jump_allowance_m": float("nan")}, "jump_allowance_m must be 0 or more"),
])
def test_bad_limits_are_one_line(kwargs, words):
    with pytest.raises(GeometryError, match=words) as info:
        PlausibilityLimits(**kwargs)
    assert "\n" not in str(info.value)


def test_a_lane_width_outside_the_given_limits():
    markers = lane_at(2.6, -2.6)  # 5.2 m
    assert not verdict_of(markers).ok
    assert verdict_of(markers, limits=PlausibilityLimits(lane_width_m=(2.5, 5.5))).ok  # a wide ramp, say


# --- what a consumer reads: JSON, the typed objects, the panel ---------------------------------------------------

def test_the_json_contract():
    markers = lane_at(2.6, -2.6)
    found = FrameMarkers(markers, markers.figures(), verdict_of(markers))
    data = json.loads(json.dumps(found.to_dict()))
    assert set(data) == {"markers", "figures", "plausibility"}
    assert data["plausibility"] == {"ok": False, "checked": ["lane_width", "markers_crossing"],
                                    "reasons": [{"check": "lane_width", "message": data["plausibility"]["reasons"][0]
                                                 ["message"]}]}
    assert data["plausibility"]["reasons"][0]["message"].startswith("ego lane 5.20 m wide: lanes are 2.5-4.6 m")


def red_text_pixels(panel: np.ndarray) -> int:
    b, g, r = (panel[..., k].astype(int) for k in range(3))
    return int(((r > 200) & (g < 100) & (b < 100)).sum())


def test_the_panel_says_when_the_figures_are_implausible():
    wide, fine = lane_at(2.6, -2.6), lane_at(1.75, -1.75)
    flagged = draw_birdseye(wide, 400, wide.figures(), verdict_of(wide))
    passed = draw_birdseye(fine, 400, fine.figures(), verdict_of(fine))
    unjudged = draw_birdseye(wide, 400, wide.figures())
    assert red_text_pixels(passed) == red_text_pixels(unjudged) == 0
    # the last line ("IMPLAUSIBLE: width", baseline 8 px above the bottom) and the figures above it, in red
    assert red_text_pixels(flagged[-20:]) > 50 and red_text_pixels(flagged[-80:-20]) > 100
    green = (passed[..., 1].astype(int) > 200) & (passed[..., 0] < 150) & (passed[..., 2] < 150)
    assert green[-40:].sum() > 20  # "plausible", in green under the figures
