"""decode_lanes against a plain-Python, per-pair/per-point implementation of docs/design.md "Decoding".

The reference below is deliberately naive (lists, loops, math): it is the rules
written out one step at a time. benchmarks/bench_decode.py times it against the
vectorised decoder.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from module_imports import imported_packages

from edge_deploy.lanedet.laneatt import decode as dec
from edge_deploy.lanedet.laneatt.decode import (
    DecodeError,
    Lane,
    decode_batch,
    decode_lanes,
    select_rows,
)
from edge_deploy.synthetic.roads import raw_output

N_STRIPS = 71
PROB_SUM_TOL = 1e-3

# --- the reference ------------------------------------------------------------------------


def ref_scores(rows: list[list[float]]) -> list[float]:
    is_prob = all(
        0.0 <= r[0] <= 1.0 and 0.0 <= r[1] <= 1.0 and abs(r[0] + r[1] - 1.0) <= PROB_SUM_TOL for r in rows
    )
    if is_prob:
        return [r[1] for r in rows]
    scores = []
    for r in rows:
        try:
            scores.append(1.0 / (1.0 + math.exp(r[0] - r[1])))
        except OverflowError:
            scores.append(0.0)
    return scores


def ref_nms_range(r: list[float]) -> tuple[int, int]:
    s = math.floor(r[2] * N_STRIPS + 0.5)  # round half up
    e = math.trunc(s + r[4] - 1 + 0.5 - (1 if r[4] < 1 else 0))
    return s, e


def ref_suppresses(a: list[float], b: list[float], nms_threshold: float) -> bool:
    s_a, e_a = ref_nms_range(a)
    s_b, e_b = ref_nms_range(b)
    start = max(s_a, s_b, 0)  # x_k exists for k >= 0 only (matters only for col2 < 0)
    end = min(e_a, e_b, N_STRIPS)
    if end < start:
        return False
    dist = 0.0
    for k in range(start, end + 1):
        dist += abs(a[5 + k] - b[5 + k])
    return dist < nms_threshold * (end - start + 1)


def ref_select(raw: np.ndarray, conf: float, nms: float, top_k: int) -> tuple[list[int], list[float]]:
    rows = raw.astype(np.float64).tolist()
    scores = ref_scores(rows)
    cands = [i for i in range(len(rows)) if scores[i] > conf]
    cands.sort(key=lambda i: -scores[i])  # stable: ties stay in row order
    kept: list[int] = []
    suppressed: set[int] = set()
    for pos, i in enumerate(cands):
        if i in suppressed:
            continue
        kept.append(i)
        if len(kept) == top_k:
            break
        for j in cands[pos + 1 :]:
            if j not in suppressed and ref_suppresses(rows[i], rows[j], nms):
                suppressed.add(j)
    return kept, [scores[i] for i in kept]


def ref_points(r: list[float], height: float, width: float) -> list[tuple[float, float]]:
    xs = [r[5 + k] / 640 for k in range(72)]
    start = round(r[2] * N_STRIPS)  # Python's round: half to even
    end = min(start + round(r[4]) - 1, N_STRIPS)
    keep = [False] * 72
    for k in range(72):
        if start <= k <= end and xs[k] >= 0:
            keep[k] = True
    k = min(start - 1, N_STRIPS)
    while k >= 0 and 0 <= xs[k] <= 1:  # the unbroken run below start
        if k <= end:
            keep[k] = True
        k -= 1
    return [(xs[k] * width, (1 - k / N_STRIPS) * height) for k in range(N_STRIPS, -1, -1) if keep[k]]


def ref_decode(raw, conf=0.5, nms=50.0, top_k=4, size=(360, 640)):
    kept, scores = ref_select(raw, conf, nms, top_k)
    rows = raw.astype(np.float64).tolist()
    lanes = []
    for i, score in zip(kept, scores):
        pts = ref_points(rows[i], *size)
        if len(pts) >= 2:
            lanes.append((i, score, pts))
    return kept, scores, lanes


# --- random inputs ------------------------------------------------------------------------


def random_raw(rng: np.random.Generator, n: int) -> np.ndarray:
    raw = np.zeros((n, 77), dtype=np.float64)
    kind = rng.integers(0, 3)
    if kind == 0:  # continuous logits
        raw[:, 0] = rng.normal(0, 2, n)
        raw[:, 1] = rng.normal(0, 2, n)
    elif kind == 1:  # few distinct values: many exact score ties
        raw[:, 0] = rng.integers(-2, 3, n)
        raw[:, 1] = rng.integers(-2, 3, n)
    else:  # already probabilities
        p = rng.choice([0.1, 0.5, 0.6, 0.75, 0.9], n) if rng.random() < 0.5 else rng.random(n)
        raw[:, 0], raw[:, 1] = 1 - p, p
    raw[:, 2] = np.select(
        [rng.random(n) < 0.4, rng.random(n) < 0.3, rng.random(n) < 0.3],
        [0.0, rng.integers(0, 72, n) / 71, rng.choice([0.5, 1.0], n)],
        rng.random(n),
    )
    raw[:, 3] = rng.random(n)
    raw[:, 4] = np.select(
        [rng.random(n) < 0.1, rng.random(n) < 0.15, rng.random(n) < 0.15, rng.random(n) < 0.05],
        [0.0, rng.random(n), rng.integers(0, 80, n) + 0.5, -rng.random(n) * 5],
        rng.uniform(0, 80, n),
    )
    # lanes: lines around a few shared directions so NMS has clusters to merge
    centres = rng.uniform(-100, 740, 4)
    slopes = rng.uniform(-8, 8, 4)
    which = rng.integers(0, 4, n)
    k = np.arange(72)
    raw[:, 5:] = (centres[which] + rng.normal(0, 30, n))[:, None] + (slopes[which] + rng.normal(0, 1, n))[:, None] * k
    raw[:, 5:] += rng.normal(0, 3, (n, 72))
    edge = rng.random((n, 72)) < 0.03
    raw[:, 5:][edge] = rng.choice([0.0, 640.0], int(edge.sum()))
    return raw.astype(np.float32)


def assert_same(raw, conf=0.5, nms=50.0, top_k=4, size=(360, 640)):
    kept, scores, ref_lanes = ref_decode(raw, conf, nms, top_k, size)
    got_kept, got_scores = select_rows(raw, conf_threshold=conf, nms_threshold=nms, top_k=top_k)
    assert got_kept.tolist() == kept
    np.testing.assert_allclose(got_scores, scores, rtol=1e-12, atol=0)
    lanes = decode_lanes(raw, conf_threshold=conf, nms_threshold=nms, top_k=top_k, image_size=size)
    assert len(lanes) == len(ref_lanes)
    for lane, (_, score, pts) in zip(lanes, ref_lanes):
        assert lane.points.dtype == np.float32 and lane.points.shape == (len(pts), 2)
        np.testing.assert_array_equal(lane.points[:, 0], np.float32([p[0] for p in pts]))
        np.testing.assert_allclose(lane.points[:, 1], np.float32([p[1] for p in pts]), rtol=1e-6, atol=1e-5)
        assert lane.score == pytest.approx(score, rel=1e-12)
    return kept, lanes


@pytest.mark.parametrize("seed", range(200))
def test_matches_reference_on_random_inputs(seed):
    rng = np.random.default_rng(seed)
    top_k = int(rng.choice([1, 2, 4, 5, 10, 1000]))
    n = int(rng.choice([1, 2, 5, 20, 60])) if top_k == 1000 else int(rng.choice([0, 1, 3, 30, 150, 400]))
    raw = random_raw(rng, n)
    conf = float(rng.choice([-1.0, 0.0, 0.2, 0.5, 0.6, 0.9]))
    nms = float(rng.choice([0.0, 10.0, 45.0, 50.0, 200.0]))
    size = [(360, 640), (590, 1640), (720, 1280)][seed % 3]
    assert_same(raw, conf, nms, top_k, size)


@pytest.mark.parametrize("seed", range(60))
def test_matches_reference_with_starts_and_lengths_out_of_range(seed):
    # starts below 0 and past 71, lengths far out of range: the NMS ranges' clamping and the partial overlaps
    rng = np.random.default_rng(1000 + seed)
    raw = random_raw(rng, int(rng.choice([30, 150, 400])))
    n = len(raw)
    raw[:, 2] = np.select([rng.random(n) < 0.2, rng.random(n) < 0.2, rng.random(n) < 0.1],
                          [rng.uniform(-1.5, 0, n), rng.uniform(1, 3, n), rng.choice([-1e6, 1e6], n)], raw[:, 2])
    raw[:, 4] = np.select([rng.random(n) < 0.1, rng.random(n) < 0.1],
                          [rng.choice([-1e7, 1e7, 3e5], n), rng.uniform(-200, -1, n)], raw[:, 4])
    nms, top_k = float(rng.choice([10.0, 50.0, 200.0])), int(rng.choice([4, 10, 1000]))
    kept, scores, _ = ref_decode(raw, 0.5, nms, top_k, (360, 640))
    got_kept, got_scores = select_rows(raw, conf_threshold=0.5, nms_threshold=nms, top_k=top_k)
    assert got_kept.tolist() == kept
    np.testing.assert_allclose(got_scores, scores, rtol=1e-12, atol=0)


@pytest.mark.parametrize("candidates", [0, 50, 500, 2784])
def test_matches_reference_on_synthetic_outputs(candidates):
    raw = raw_output(candidates=candidates, seed=candidates)
    kept, lanes = assert_same(raw, size=(590, 1640))
    assert len(kept) == min(4, candidates)
    assert_same(raw_output(candidates=candidates, seed=3, probabilities=True))


@pytest.mark.parametrize("seed", range(4))
def test_matches_reference_on_real_anchor_geometry(laneatt_data, seed):
    """The official anchor table (side anchors start high and leave the image) plus model-like noise."""
    anchors = np.load(laneatt_data / "anchors_2784x77.npy")
    rng = np.random.default_rng(seed)
    raw = anchors.astype(np.float32).copy()
    raw[:, 0] = rng.normal(0, 1, len(raw))
    raw[:, 1] = raw[:, 0] + rng.normal(-2.5, 2, len(raw))
    raw[:, 4] = np.clip(rng.normal(40, 25, len(raw)), -2, 90)
    raw[:, 5:] += rng.normal(0, 8, (len(raw), 72)).astype(np.float32)
    kept, lanes = assert_same(raw, conf=0.5, top_k=[4, 5, 10, 50][seed], size=(590, 1640))
    assert len(kept) == [4, 5, 10, 50][seed]


# --- edge cases -----------------------------------------------------------------------------


def lane_row(x_bottom=320.0, slope=-2.0, start_y=0.0, length=60.0, logit=3.0) -> np.ndarray:
    row = np.zeros(77, dtype=np.float32)
    row[1] = logit
    row[2] = start_y
    row[4] = length
    row[5:] = x_bottom + slope * np.arange(72)
    return row


def test_no_candidates():
    raw = np.stack([lane_row(logit=-1.0), lane_row(x_bottom=100, logit=0.0)])  # score 0.5 is not > 0.5
    assert decode_lanes(raw) == []
    assert select_rows(raw)[0].size == 0
    assert decode_lanes(np.zeros((0, 77), np.float32)) == []


def test_all_candidates_kept_when_far_apart():
    raw = np.stack([lane_row(x_bottom=40 + 80 * i, slope=0.0, logit=1 + i % 3) for i in range(8)])
    kept, lanes = assert_same(raw, conf=-1.0, top_k=8)
    assert sorted(kept) == list(range(8))
    # stable order: ties (same logit) stay in row order
    assert kept == [2, 5, 1, 4, 7, 0, 3, 6]


def test_nms_threshold_is_strict_and_ranges_matter():
    a = lane_row(x_bottom=300, slope=0.0, logit=3.0)
    exactly = lane_row(x_bottom=350, slope=0.0, logit=2.0)  # mean distance exactly 50: kept
    closer = lane_row(x_bottom=249.5, slope=0.0, logit=1.0)  # 50.5 from a, 100.5 from exactly: kept
    assert_same(np.stack([a, exactly, closer]))
    assert select_rows(np.stack([a, exactly]))[0].tolist() == [0, 1]
    near = lane_row(x_bottom=349, slope=0.0, logit=2.0)
    assert select_rows(np.stack([a, near]))[0].tolist() == [0]
    # identical x but no common range (a ends before b starts): never suppressed
    short = lane_row(x_bottom=300, slope=0.0, length=10.0, logit=3.0)
    high = lane_row(x_bottom=300, slope=0.0, start_y=30 / 71, length=20.0, logit=2.0)
    assert select_rows(np.stack([short, high]))[0].tolist() == [0, 1]
    assert_same(np.stack([short, high]))


def test_nms_start_rounds_half_up():
    """col2 * 71 is an exact half only at col2 = k + 0.5; at -0.5, half up (-35) and half to even (-36)
    give different ends e, hence different common ranges."""
    a = lane_row(x_bottom=300, slope=0.0, start_y=-0.5, length=40.0, logit=3.0)
    b = lane_row(x_bottom=300, slope=0.0, start_y=-0.5, length=40.0, logit=2.0)
    b[5 + 4] = 600.0  # differs from a only at k = 4
    # half up: s = -35, e = trunc(4.5) = 4, range 0..4: 300 px >= 50 * 5, b kept
    # (half to even would give e = 3, range 0..3, distance 0: b suppressed)
    assert select_rows(np.stack([a, b]))[0].tolist() == [0, 1]
    assert_same(np.stack([a, b]))


def test_lanes_leaving_the_image():
    # goes out on the left below start, comes back: only the unbroken run below start survives
    row = lane_row(x_bottom=0.0, slope=0.0, start_y=30 / 71, length=20.0)
    row[5 + np.arange(30)] = np.linspace(100, 200, 30)
    row[5 + 10] = -5.0  # a gap at k = 10 cuts k <= 10 off
    row[5 + 40 : 5 + 50] = 700.0  # beyond the right edge between start and end: kept (xs > 1 stays)
    row[5 + 45] = -1.0  # negative between start and end: dropped
    _, lanes = assert_same(row[None], size=(590, 1640))
    ys = lanes[0].points[:, 1]
    ks = np.rint((1 - ys / 590) * 71).astype(int)
    assert ks.min() == 11 and 45 not in ks and 40 in ks and ks.max() == 49
    assert np.all(np.diff(ys) > 0)  # top to bottom


def test_length_zero_and_below_one():
    for length in (0.0, 0.4, 0.5, 0.6, 1.0, 1.5, 2.5, -3.0):
        for start_y in (0.0, 10 / 71, 0.5, 1.0):
            row = lane_row(x_bottom=100, slope=3.0, start_y=start_y, length=length)
            other = lane_row(x_bottom=110, slope=3.0, start_y=start_y, length=length, logit=2.0)
            assert_same(np.stack([row, other]))
    # length 0 from the bottom: no points at or above start, nothing below -> no lane
    assert decode_lanes(lane_row(length=0.0)[None]) == []
    # length 0 higher up: the run below start still makes a lane
    lanes = decode_lanes(lane_row(start_y=20 / 71, length=0.0)[None])
    assert len(lanes) == 1 and len(lanes[0].points) == 20


def test_start_at_71_and_x_on_the_edges():
    row = lane_row(x_bottom=0.0, slope=0.0, start_y=1.0, length=5.0)
    row[5:] = np.where(np.arange(72) % 2 == 0, 0.0, 640.0)  # xs exactly 0 and 1 are inside
    _, lanes = assert_same(row[None])
    assert len(lanes[0].points) == 72
    assert set(lanes[0].points[:, 0].tolist()) == {0.0, 640.0}


def test_already_softmaxed_outputs_give_the_same_lanes():
    raw = raw_output(candidates=40, seed=7)
    logits = raw[:, :2].astype(np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    soft = raw.copy()
    soft[:, :2] = probs
    from_logits = decode_lanes(raw)
    from_probs = decode_lanes(soft)
    assert [lane.points.tolist() for lane in from_probs] == [lane.points.tolist() for lane in from_logits]
    for a, b in zip(from_probs, from_logits):
        assert a.score == pytest.approx(b.score, rel=1e-6)
    assert select_rows(soft)[1].tolist() == soft[select_rows(soft)[0], 1].astype(np.float64).tolist()


def test_float16_and_image_size_none():
    raw = raw_output(candidates=30, seed=2).astype(np.float16)
    assert_same(raw)
    normalised = decode_lanes(raw, image_size=None)
    scaled = decode_lanes(raw, image_size=(720, 1280))
    assert len(normalised) == len(scaled) > 0
    for n, s in zip(normalised, scaled):
        np.testing.assert_allclose(n.points * np.float32([1280, 720]), s.points, rtol=1e-6)


def test_huge_logits_do_not_warn():
    raw = np.stack([lane_row(logit=1000.0), lane_row(x_bottom=100, logit=-1000.0)])
    with np.errstate(all="raise"):
        assert_same(raw)


def test_decode_batch_matches_per_image():
    batch = np.stack([raw_output(candidates=c, seed=c) for c in (0, 10, 100)])
    sizes = [(590, 1640), (360, 640), (720, 1280)]
    got = decode_batch(batch, image_size=sizes, top_k=3)
    assert got == [decode_lanes(b, image_size=s, top_k=3) for b, s in zip(batch, sizes)]
    assert decode_batch(batch) == [decode_lanes(b) for b in batch]
    with pytest.raises(DecodeError, match="image sizes"):
        decode_batch(batch, image_size=sizes[:2])


# --- Lane ------------------------------------------------------------------------------------


def test_lane_x_at_and_value_semantics():
    lane = Lane(np.array([[10.0, 100.0], [20.0, 200.0], [40.0, 300.0]]), 0.9)
    assert lane.points.dtype == np.float32 and not lane.points.flags.writeable
    assert lane.x_at(150) == pytest.approx(15.0)
    assert lane.x_at(300) == pytest.approx(40.0)
    assert math.isnan(lane.x_at(99.0)) and math.isnan(lane.x_at(301.0))
    got = lane.x_at(np.array([100.0, 250.0, 400.0]))
    assert got[:2].tolist() == [10.0, 30.0] and math.isnan(got[2])
    assert lane == Lane(lane.points.copy(), 0.9) and lane != Lane(lane.points, 0.8)
    assert lane.to_dict() == {"score": 0.9, "points": [[10.0, 100.0], [20.0, 200.0], [40.0, 300.0]]}
    with pytest.raises(AttributeError):
        lane.score = 1.0  # type: ignore[misc]


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (np.zeros((10, 76), np.float32), "shape"),
        (np.zeros((2, 10, 77), np.float32), "shape"),
        (np.zeros(77, np.float32), "shape"),
        (np.array([["a"] * 77]), "dtype"),
        (np.full((3, 77), np.nan, np.float32), "NaN"),
        (np.full((3, 77), np.inf, np.float16), "infinite"),
    ],
)
def test_bad_raw_raises_one_line_value_error(raw, match):
    with pytest.raises(DecodeError, match=match) as info:
        decode_lanes(raw)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"top_k": 0},
        {"top_k": 2.5},
        {"top_k": True},
        {"conf_threshold": float("nan")},
        {"conf_threshold": "high"},
        {"nms_threshold": -1.0},
        {"image_size": (0, 640)},
        {"image_size": (360,)},
        {"image_size": "big"},
    ],
)
def test_bad_parameters_raise(kwargs):
    with pytest.raises(DecodeError) as info:
        decode_lanes(raw_output(candidates=5), **kwargs)
    assert "\n" not in str(info.value)


# --- self-contained module (Triton Python-backend models copy it) ----------------------------


def test_decode_module_is_self_contained(tmp_path, monkeypatch):
    """The files install copies beside NAME_postprocess (the family's decoder_sources) import nothing but numpy,
    the standard library and each other, and the copy decodes as the package does."""
    from edge_deploy.lanedet.laneatt import FAMILY

    sources = FAMILY.decoder_sources()
    assert set(sources) == {"decode.py", "lane.py"}
    for name, data in sources.items():
        (tmp_path / name).write_bytes(data)
        imported = imported_packages(tmp_path / name, relative_ok=frozenset({"lane"}))
        assert imported <= {"numpy", "__future__", "lane"} | set(sys.stdlib_module_names)
    assert sources["decode.py"] == Path(dec.__file__).read_bytes()
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("copied_decode", tmp_path / "decode.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["copied_decode"] = module  # dataclasses look the module up while decorating
    try:
        spec.loader.exec_module(module)
        raw = raw_output(candidates=20, seed=5)
        copied = module.decode_outputs([raw], conf_threshold=0.5, nms_threshold=50.0, top_k=4, image_size=(360, 640),
                                       model_width=640)
        assert [(lane.points.tolist(), lane.score) for lane in copied] == [
            (lane.points.tolist(), lane.score) for lane in decode_lanes(raw)
        ]
    finally:
        del sys.modules["copied_decode"]
        sys.modules.pop("lane", None)


# --- ScoreNmsDecodeParams: the one place the decode parameters' rules live ------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({"conf_threshold": 1.5}, "conf_threshold is a score threshold from 0 to 1 \\(got 1.5\\)"),
    ({"conf_threshold": -3}, "conf_threshold is a score threshold from 0 to 1 \\(got -3\\)"),
    ({"conf_threshold": float("nan")}, "conf_threshold is a score threshold from 0 to 1"),
    ({"conf_threshold": "high"}, "conf_threshold must be a number"),
    ({"nms_threshold": -1}, "nms_threshold must be 0 or more pixels \\(got -1\\)"),
    ({"nms_threshold": float("inf")}, "nms_threshold must be 0 or more pixels"),
    ({"top_k": 0}, "top_k must be at least 1 lane \\(got 0\\)"),
    ({"top_k": 2.5}, "top_k must be a whole number of lanes"),
    ({"top_k": True}, "top_k must be a whole number of lanes"),
])
def test_decode_defaults_refuse_values_out_of_range_when_made_or_overridden(kwargs, match):
    from edge_deploy.lanedet.family import DecodeParamsError, ScoreNmsDecodeParams

    base = ScoreNmsDecodeParams(0.5, 50.0, 4)
    with pytest.raises(DecodeParamsError, match=match):
        ScoreNmsDecodeParams(**{"conf_threshold": 0.5, "nms_threshold": 50.0, "top_k": 4, **kwargs})
    with pytest.raises(DecodeParamsError, match=match):
        base.overridden(**kwargs)
    with pytest.raises(DecodeParamsError, match=match) as refused:
        ScoreNmsDecodeParams.check_given(**kwargs)
    assert "\n" not in str(refused.value)
    # the same rule, named as the command-line option (convert, infer)
    option = {"conf_threshold": "--conf", "nms_threshold": "--nms", "top_k": "--top-k"}[next(iter(kwargs))]
    assert refused.value.for_options().startswith(f"{option} ")
    assert ScoreNmsDecodeParams(0.0, 0.0, 1) == base.overridden(conf_threshold=0, nms_threshold=0, top_k=1)
    assert base.overridden(conf_threshold=1) == ScoreNmsDecodeParams(1.0, 50.0, 4)
    ScoreNmsDecodeParams.check_given()  # nothing given: nothing to refuse


def test_export_settings_take_the_decode_rules_from_decode_defaults():
    from edge_deploy.errors import ConvertError
    from edge_deploy.export.settings import ExportSettings

    for kwargs, message in (({"conf_threshold": -3}, "--conf is a score threshold from 0 to 1 (got -3)."),
                            ({"nms_threshold": -1}, "--nms must be 0 or more pixels (got -1)."),
                            ({"top_k": 0}, "--top-k must be at least 1 lane (got 0)."),
                            ({"top_k": 2.5}, "--top-k must be a whole number of lanes, at least 1 (got 2.5).")):
        with pytest.raises(ConvertError) as refused:
            ExportSettings(**kwargs)
        assert str(refused.value) == message
    assert ExportSettings(conf_threshold=0.4, nms_threshold=0, top_k=6).top_k == 6


@pytest.mark.parametrize("kwargs, match", [
    ({"conf_threshold": 7}, "conf_threshold is a score threshold from 0 to 1 \\(got 7\\)\\.$"),
    ({"nms_threshold": -2.0}, "nms_threshold must be 0 or more pixels \\(got -2\\)\\.$"),
    ({"top_k": 0}, "top_k must be at least 1 lane \\(got 0\\)\\.$"),
])
def test_lane_clients_refuse_bad_decode_values_when_made(kwargs, match):
    pytest.importorskip("tritonclient.grpc")
    from edge_deploy import AsyncLaneDetClient, LaneDetClient
    from edge_deploy.errors import ClientError

    with pytest.raises(ClientError, match=match):  # not at the first detect(); no server is asked
        LaneDetClient("127.0.0.1:1", connect=False, **kwargs)
    with pytest.raises(ClientError, match=match):
        AsyncLaneDetClient("127.0.0.1:1", **kwargs)


def test_nms_keep_with_a_negative_threshold_suppresses_nothing():
    # sum |dx| < negative never holds, and rows without a common range never suppress each other (nms_keep itself
    # takes any threshold; decode refuses a negative one)
    rows = random_raw(np.random.default_rng(3), 200)
    rows[::3, 4] = -50.0  # empty ranges
    assert dec.nms_keep(rows, nms_threshold=-1.0, top_k=1000).tolist() == list(range(200))
