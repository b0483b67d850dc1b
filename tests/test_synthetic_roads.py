"""Synthetic road scenes / raw outputs, and the drawing helpers."""
from __future__ import annotations

import stat

import cv2
import numpy as np
import pytest

from edge_deploy.lanedet.laneatt.decode import Lane, decode_lanes, lane_scores
from edge_deploy.lanedet.draw import PALETTE, draw_lanes, save_png
from edge_deploy.synthetic.roads import (
    CONDITIONS,
    EVAL_SEED_BASE,
    Scene,
    drive,
    raw_output,
    road_scene,
    scene,
    scene_truth,
)


def test_road_scene_is_deterministic_per_seed():
    a, truth_a = road_scene(seed=3)
    b, truth_b = road_scene(seed=3)
    c, truth_c = road_scene(seed=4)
    assert a.shape == (590, 1640, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert all(np.array_equal(x, y) for x, y in zip(truth_a, truth_b))
    assert np.abs(a.astype(int) - c).mean() > 1.0
    assert not all(np.array_equal(x, y) for x, y in zip(truth_a, truth_c))


@pytest.mark.parametrize(("width", "height", "lanes"), [(1640, 590, 4), (640, 360, 1), (1280, 720, 6)])
def test_road_scene_ground_truth_matches_the_markings(width, height, lanes):
    frame, truth = road_scene(width, height, seed=width + lanes, lanes=lanes)
    assert frame.shape == (height, width, 3) and frame.dtype == np.uint8
    assert len(truth) == lanes
    grey = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY).astype(int)
    sky = grey[: height // 5].mean()
    for line in truth:
        assert line.dtype == np.float32 and line.ndim == 2 and line.shape[1] == 2 and len(line) >= 2
        assert np.all(np.diff(line[:, 1]) > 0)  # top to bottom
        assert line[:, 0].min() >= 0 and line[:, 0].max() <= width - 1
        assert line[:, 1].min() >= 0 and line[:, 1].max() <= height
        # markings are brighter than the asphalt beside them near the bottom of the frame
        x, y = line[-5]
        y = min(int(y), height - 1)
        on = grey[y, int(round(x)) - 1 : int(round(x)) + 2].max()
        off = grey[y, int(np.clip(x + width * 0.04, 0, width - 1))]
        assert on > off + 20, (on, off)
    assert sky > grey[-height // 5 :].mean()  # bright sky, dark road


def _check_lanes(lanes, width, height):
    for line in lanes:
        assert line.dtype == np.float32 and line.ndim == 2 and line.shape[1] == 2 and len(line) >= 2
        assert np.all(np.diff(line[:, 1]) > 0)  # top to bottom
        assert line[:, 0].min() >= 0 and line[:, 0].max() <= width - 1
        assert line[:, 1].min() >= 0 and line[:, 1].max() <= height - 1


def test_scene_is_deterministic_and_its_truth_stays_in_the_frame():
    a, b, c = scene(11), scene(11), scene(12)
    assert isinstance(a, Scene) and a.frame.shape == (590, 1640, 3) and a.frame.dtype == np.uint8
    np.testing.assert_array_equal(a.frame, b.frame)
    assert a.conditions == b.conditions and len(a.lanes) == len(b.lanes)
    assert all(np.array_equal(x, y) for x, y in zip(a.lanes, b.lanes))
    assert np.abs(a.frame.astype(int) - c.frame).mean() > 1.0
    for seed in range(EVAL_SEED_BASE, EVAL_SEED_BASE + 12):
        small = scene(seed, 320, 180)
        assert small.frame.shape == (180, 320, 3)
        _check_lanes(small.lanes, 320, 180)
        assert set(small.conditions) <= set(CONDITIONS) and list(small.conditions) == sorted(small.conditions)


def test_scene_sizes_share_one_geometry():
    big, small = scene(5, 1640, 590), scene(5, 640, 360)
    assert len(big.lanes) == len(small.lanes) and big.conditions == small.conditions
    for lb, ls in zip(big.lanes, small.lanes):
        # same marking: x at the small frame's middle row, scaled, agrees within a couple of pixels
        y = float(np.median(ls[:, 1]))
        xb = np.interp(y * 590 / 360, lb[:, 1], lb[:, 0]) * 640 / 1640
        assert abs(xb - np.interp(y, ls[:, 1], ls[:, 0])) < 3.0


def test_scenes_cover_every_condition_and_two_to_six_lanes():
    seen, counts, markings = set(), set(), set()
    for seed in range(120):
        s, truth = scene(seed, 160, 96), scene_truth(seed, 160, 96)
        seen.update(s.conditions)
        counts.add(len(s.lanes))
        markings.add(len(truth.markings))
        assert len(s.lanes) == sum(truth.visible)  # the markings in the frame whose paint shows there
    assert seen == set(CONDITIONS)
    assert markings == {2, 3, 4, 5, 6}
    assert {2, 3, 4, 5, 6} <= counts <= {1, 2, 3, 4, 5, 6}


def test_scene_conditions_show_in_the_pixels():
    night = next(s for s in (scene(i, 320, 180) for i in range(60)) if "night" in s.conditions)
    day = next(s for s in (scene(i, 320, 180) for i in range(60)) if not {"night", "dusk", "glare"} & set(s.conditions))
    assert night.frame.mean() < 0.5 * day.frame.mean()
    blurred = next(s for s in (scene(i, 320, 180) for i in range(60)) if "blur" in s.conditions)
    sharp = lambda f: cv2.Laplacian(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY), cv2.CV_64F)[90:].var()  # noqa: E731
    assert sharp(blurred.frame) < sharp(day.frame)


def test_drive_moves_along_one_road():
    frames = list(drive(7, 4, 320, 180))
    again = list(drive(7, 4, 320, 180))
    assert len(frames) == 4 and all(isinstance(f, Scene) for f in frames)
    for f, g in zip(frames, again):
        np.testing.assert_array_equal(f.frame, g.frame)
    for f, g in zip(frames, frames[1:]):
        assert np.abs(f.frame.astype(int) - g.frame).mean() > 0.5  # the camera moves
        assert len(f.lanes) == len(g.lanes)
        # the road is the same: lanes shift by a few pixels between frames, not jump
        for a, b in zip(f.lanes, g.lanes):
            y = float(np.median(b[:, 1]))
            assert abs(np.interp(y, a[:, 1], a[:, 0]) - np.interp(y, b[:, 1], b[:, 0])) < 8.0
    assert list(drive(7, 0)) == []


def test_road_scene_rejects_bad_arguments():
    for kwargs in ({"lanes": 0}, {"lanes": 2.5}, {"width": 10}, {"height": True}):
        with pytest.raises(ValueError):
            road_scene(**kwargs)


@pytest.mark.parametrize("candidates", [0, 1, 50, 2784])
def test_raw_output_has_exactly_the_requested_candidates(candidates):
    raw = raw_output(candidates=candidates, seed=candidates)
    assert raw.shape == (2784, 77) and raw.dtype == np.float32
    assert int((lane_scores(raw) > 0.5).sum()) == candidates
    np.testing.assert_array_equal(raw, raw_output(candidates=candidates, seed=candidates))
    probs = raw_output(candidates=candidates, seed=1, probabilities=True)
    assert np.allclose(probs[:, 0] + probs[:, 1], 1.0, atol=1e-6)
    assert int((lane_scores(probs) > 0.5).sum()) == candidates
    assert int((lane_scores(raw_output(candidates=candidates, conf_threshold=0.2)) > 0.2).sum()) == candidates


def test_raw_output_decodes_to_lanes():
    lanes = decode_lanes(raw_output(candidates=300, seed=2), image_size=(590, 1640))
    assert len(lanes) == 4
    assert all(len(lane.points) >= 2 for lane in lanes)


def test_draw_lanes_draws_on_a_copy():
    frame, truth = road_scene(seed=5)
    lanes = [Lane(line, 0.9 - 0.1 * i) for i, line in enumerate(truth)]
    drawn = draw_lanes(frame, lanes, thickness=5)
    assert drawn.shape == frame.shape and drawn.dtype == np.uint8
    assert not np.shares_memory(drawn, frame)
    np.testing.assert_array_equal(frame, road_scene(seed=5)[0])  # input untouched
    for i, line in enumerate(truth):
        x, y = line[len(line) // 2]
        assert drawn[int(round(y)), int(round(x))].tolist() == list(PALETTE[i])
    plain = draw_lanes(frame, truth, color=(0, 0, 255), labels=False)
    x, y = truth[0][len(truth[0]) // 2]
    assert plain[int(round(y)), int(round(x))].tolist() == [0, 0, 255]
    assert (draw_lanes(frame, []) == frame).all()
    captioned = draw_lanes(frame, [], caption="lanedet: 0 lanes")
    assert (captioned[80:] == frame[80:]).all() and (captioned[:20, :100] != frame[:20, :100]).any()
    with pytest.raises(ValueError):
        draw_lanes(frame[:, :, 0], lanes)


def test_save_png_round_trips(tmp_path):
    frame, truth = road_scene(320, 180, seed=1)
    path = save_png(tmp_path / "sub" / "lanes.png", draw_lanes(frame, truth))
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o644
    np.testing.assert_array_equal(cv2.imread(str(path)), draw_lanes(frame, truth))
    assert [p.name for p in path.parent.iterdir()] == ["lanes.png"]  # no temp file left
    with pytest.raises(ValueError):
        save_png(tmp_path / "x.png", frame.astype(np.float32))
