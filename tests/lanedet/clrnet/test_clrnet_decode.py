"""decode_clrnet against a straightforward port of the official rules (tests/support/clrnet_reference.py:
get_lanes, the CUDA kernel's devIoU/nms_collect, predictions_to_pred), on model-like and crafted predictions:
near-duplicates the NMS must drop, lanes at the image edges, starts below the frame (the kernel's 8-bit index),
score ties at the threshold, top_k. NumPy only: runs without torch."""
from __future__ import annotations

import numpy as np
import pytest
from clrnet_reference import N_OFFSETS, crafted_predictions, official_decode

from edge_deploy.lanedet import decode_clrnet
from edge_deploy.lanedet.clrnet import FAMILY, CLRNetDecodeParams, preset_decode_params
from edge_deploy.lanedet.clrnet.presets import PRESETS
from edge_deploy.lanedet.clrnet.decode import OFFICIAL, cut_fraction, decode_outputs
from edge_deploy.lanedet.family import DecodeParamsError
from edge_deploy.lanedet.lane import DecodeError, Lane

CULANE = dict(conf_threshold=0.4, nms_threshold=50.0, top_k=4, image_size=(590, 1640), cut_fraction=270 / 590)


def ours(pred: np.ndarray, **params) -> list[Lane]:
    p = {**CULANE, **params}
    return decode_outputs([pred], image_size=p["image_size"], model_width=800, conf_threshold=p["conf_threshold"],
                          nms_threshold=p["nms_threshold"], top_k=p["top_k"], cut_fraction=p["cut_fraction"])


def assert_same(got: list[Lane], want: list[tuple[float, np.ndarray]]) -> None:
    assert len(got) == len(want)
    for lane, (score, points) in zip(got, want):
        assert lane.score == pytest.approx(score, abs=1e-6)
        np.testing.assert_allclose(lane.points, points, atol=2e-3)


def line(x_bottom: float, slope: float = 0.3, start_y: float = 0.0, length: float = 0.8, logit: float = 2.0,
         ) -> np.ndarray:
    """One prediction row: a straight lane from x_bottom (fraction of the width) at the bottom row."""
    row = np.zeros(6 + N_OFFSETS, np.float32)
    row[1] = logit
    row[2], row[3], row[4], row[5] = start_y, x_bottom, 0.5, length
    row[6:] = x_bottom + slope * np.linspace(0, 1, N_OFFSETS)
    return row


def predictions(*rows: np.ndarray, priors: int = 192) -> np.ndarray:
    pred = np.zeros((priors, 6 + N_OFFSETS), np.float32)
    pred[:, 0] = 5.0  # background: far below every threshold
    pred[: len(rows)] = rows
    return pred


@pytest.mark.parametrize("seed", range(25))
def test_model_like_predictions_decode_as_the_official_rules(seed: int) -> None:
    pred = crafted_predictions(seed)
    for params in (CULANE, {**CULANE, "conf_threshold": 0.45, "nms_threshold": 60.0},
                   {**CULANE, "top_k": 5, "image_size": (720, 1280), "cut_fraction": 160 / 720}):
        assert_same(ours(pred, **params), official_decode(pred, **params))
    assert ours(pred), "the crafted predictions should give lanes"


def test_near_duplicates_are_dropped_and_lanes_further_apart_kept() -> None:
    # 10 px apart (at 800 wide): one lane; 60 px apart: two; the better score is the one kept
    pred = predictions(line(0.30, logit=1.0), line(0.30 + 10 / 799, logit=2.0), line(0.30 + 70 / 799, logit=0.5))
    lanes = ours(pred)
    assert len(lanes) == 2 and lanes[0].score > lanes[1].score
    assert lanes[0].x_at(float(lanes[0].points[-1, 1])) == pytest.approx((0.30 + 10 / 799) * 1640, abs=0.01)
    assert_same(lanes, official_decode(pred, **CULANE))
    # the threshold is a mean |dx| over the common rows: 49.9 px apart is a duplicate, 50.1 px is not
    for dx, count in ((49.9, 1), (50.1, 2)):
        pred = predictions(line(0.3, logit=2.0), line(0.3 + dx / 799, logit=1.0))
        assert len(ours(pred)) == count and len(official_decode(pred, **CULANE)) == count


def test_lanes_at_the_image_edges_keep_the_official_points() -> None:
    # leaving the frame on the left (x < 0 dropped) and on the right (x > 1 kept, as predictions_to_pred does);
    # a start above the bottom row extends down while x stays in [0, 1], stopping at the first row outside
    rows = [line(-0.2, slope=0.5, logit=3.0), line(0.9, slope=0.4, logit=2.5),
            line(0.5, slope=0.2, start_y=0.3, logit=2.0), line(0.02, slope=-0.1, start_y=0.2, logit=1.5)]
    rows[2][6 + 5] = 1.2  # below the start: outside [0, 1], so rows 0..5 are not drawn
    rows.append(line(0.7, slope=-0.2, length=-0.1, logit=1.0))  # length -7 rows: xs[-7:] = -2 (Python's index)
    pred = predictions(*rows)
    lanes = ours(pred, top_k=5)
    assert_same(lanes, official_decode(pred, **{**CULANE, "top_k": 5}))
    assert len(lanes) == 5 and len(lanes[4]) == 72 - 7  # the negative length kept all but the top 7 rows
    assert (lanes[0].points[:, 0] >= 0).all() and lanes[1].points[:, 0].max() > 1640
    assert lanes[2].points[:, 1].max() < 590 - 5 * 320 / 71 + 1e-3  # rows 0..5 dropped


def test_starts_below_the_frame_follow_the_8bit_decision() -> None:
    """Both lanes starting below the frame: the kernel's `unsigned char i = 5 + start` reads the score columns
    (first common row -5..-1) or wraps past 255 and sums nothing, so the lanes always overlap (row < -5).
    The decoder compares them from row 0 instead (docs/design.md, "CLRNet")."""
    far_apart = predictions(line(0.2, start_y=-0.1, logit=2.0), line(0.6, start_y=-0.1, logit=1.0))
    assert len(official_decode(far_apart, **CULANE)) == 1  # wrapped: dist 0, the second lane "overlaps"
    assert len(ours(far_apart)) == 2
    # 52 px apart over rows 0..55: compared from row 0 they are two lanes (a mean of 52 px); counting the 6 rows
    # below the frame too (as an unclamped first row would) they would be one
    close = predictions(line(0.2, start_y=-0.1, logit=2.0), line(0.2 + 52 / 799, start_y=-0.1, logit=1.0))
    assert len(ours(close)) == 2 and len(official_decode(close, **CULANE)) == 1
    assert_same(ours(far_apart), official_decode(far_apart, **CULANE, clamp_start=True))
    # one start below the frame, the other inside: no difference from the kernel
    mixed = predictions(line(0.2, start_y=-0.1, logit=2.0), line(0.6, start_y=0.1, logit=1.0),
                        line(0.21, start_y=0.05, logit=0.5))
    assert_same(ours(mixed), official_decode(mixed, **CULANE))
    assert len(ours(mixed)) == 2
    # first common row -3: the kernel sums the start_y, start_x and length columns as if they were x values
    near = predictions(line(0.2, start_y=-0.05, logit=2.0), line(0.6, start_y=-0.05, logit=1.0))
    assert_same(ours(near), official_decode(near, **CULANE, clamp_start=True))


def test_a_score_equal_to_the_threshold_is_kept() -> None:
    tie = predictions(line(0.3, logit=0.0))
    tie[0, 0] = 0.0  # softmax of equal logits: exactly 0.5
    assert len(ours(tie, conf_threshold=0.5)) == 1 and ours(tie, conf_threshold=0.5)[0].score == 0.5
    assert_same(ours(tie, conf_threshold=0.5), official_decode(tie, **{**CULANE, "conf_threshold": 0.5}))
    # compared in float32, as torch compares a float32 tensor with a Python float
    assert len(ours(tie, conf_threshold=np.nextafter(0.5, 1.0))) == 1
    assert ours(tie, conf_threshold=float(np.nextafter(np.float32(0.5), np.float32(1.0)))) == []
    # equal scores keep the prior order in the NMS (a stable sort): of 40 near-duplicates with the best score
    # (every third of 120 priors), the first is kept
    crowd = predictions(*(line(0.3 + i * 1e-4, logit=(1.0, 1.5, 2.0)[i % 3]) for i in range(120)))
    (kept,) = ours(crowd)
    assert kept.points[-1, 0] == pytest.approx((0.3 + 2e-4) * 1640, abs=1e-3)
    assert_same([kept], official_decode(crowd, **CULANE))
    # a mean |dx| exactly at the threshold is not an overlap (the kernel's strict <)
    exact = predictions(line(0.0, slope=0.0, logit=2.0), line(float(np.float32(50 / 799)), slope=0.0, logit=1.0))
    assert len(ours(exact)) == 2 and len(official_decode(exact, **CULANE)) == 2


def test_top_k_keeps_the_best_lanes_in_score_order() -> None:
    pred = predictions(*(line(0.1 + 0.15 * i, logit=float(i)) for i in range(6)))
    lanes = ours(pred, top_k=3)
    assert [round(lane.points[-1, 0] / 1640, 3) for lane in lanes] == [0.85, 0.7, 0.55]
    assert_same(lanes, official_decode(pred, **{**CULANE, "top_k": 3}))


def test_points_lie_on_the_fixed_rows_through_the_cut_scaled_to_the_frame() -> None:
    pred = predictions(line(0.3, start_y=0.0, length=1.0))
    (lane,) = ours(pred)
    rows = 270 + (1 - np.arange(72) / 71) * 320
    np.testing.assert_allclose(lane.points[:, 1], rows[::-1][-len(lane):], atol=1e-3)
    (half,) = ours(pred, image_size=(295, 820))  # a frame half the size: the cut is half as high
    np.testing.assert_allclose(half.points, lane.points / 2, atol=1e-3)


def test_decode_clrnet_takes_each_data_sets_official_parameters() -> None:
    pred = predictions(*(line(0.05 + 0.15 * i, logit=float(i)) for i in range(6)))
    assert len(decode_clrnet(pred)) == 4 and len(decode_clrnet(pred, dataset="tusimple")) == 5
    (size, cut, conf, nms, top_k) = OFFICIAL["llamas"]
    assert (size, cut, conf, nms, top_k) == ((717, 1276), 300, 0.45, 60.0, 4)
    lanes = decode_clrnet(pred, dataset="llamas")
    assert_same(lanes, official_decode(pred, conf_threshold=0.45, nms_threshold=60.0, top_k=4, image_size=size,
                                       cut_fraction=cut_fraction(717, 300)))
    assert lanes[0].points[:, 1].max() == pytest.approx(717, abs=1e-3)
    assert len(decode_clrnet(pred, top_k=2, conf_threshold=0.98)) == 2  # logits 4, 5: scores 0.982, 0.993
    with pytest.raises(DecodeError, match="unknown dataset 'bdd'; use culane, tusimple, llamas"):
        decode_clrnet(pred, dataset="bdd")


def test_the_family_decodes_with_its_presets_parameters() -> None:
    pred = crafted_predictions(3)
    for name, preset in FAMILY.datasets.items():
        got = FAMILY.decode([pred], preset.decode, OFFICIAL[name][0], 800)
        assert_same(got, [(lane.score, lane.points) for lane in decode_clrnet(pred, dataset=name)])
    assert FAMILY.decode_params_for("llamas") == CLRNetDecodeParams(0.45, 60.0, 4, cut_fraction=1 - 320 / 550)
    # clr_dla34_llamas.py has nms_thres 50 where clr_resnet18_llamas.py has 60: load() records the backbone's
    assert preset_decode_params(PRESETS["llamas"], "dla34").nms_threshold == 50.0
    assert preset_decode_params(PRESETS["llamas"], "resnet18").nms_threshold == 60.0
    assert [(p.name, p.cut_height, p.image_size, p.resized_height) for p in PRESETS.values()] == [
        ("culane", 270, (590, 1640), 590), ("tusimple", 160, (720, 1280), 411), ("llamas", 300, (717, 1276), 550)]


def test_bad_predictions_and_parameters_are_refused_in_one_line() -> None:
    pred = crafted_predictions(0)
    for bad, match in ((pred[None], "without the batch axis"), (pred[:, :5], "expected \\[priors, 6 \\+ points\\]"),
                       (pred.astype(np.int32), "dtype int32"), (None, "got None")):
        with pytest.raises(DecodeError, match=match):
            decode_clrnet(bad)
    nan = pred.copy()
    nan[3, 9] = np.nan
    with pytest.raises(DecodeError, match="NaN or infinite"):
        decode_clrnet(nan)
    with pytest.raises(DecodeError, match="top_k must be an integer >= 1"):
        decode_clrnet(pred, top_k=0)
    with pytest.raises(DecodeError, match="one output"):
        decode_outputs(pred, image_size=(590, 1640), conf_threshold=0.4, nms_threshold=50, top_k=4, cut_fraction=0.4)


def test_decode_parameters_check_and_narrow_like_the_official_threshold() -> None:
    server = CLRNetDecodeParams(0.4, 50.0, 4, cut_fraction=0.45)
    assert CLRNetDecodeParams(0.5, 50.0, 2, cut_fraction=0.45).narrows(server)
    assert not CLRNetDecodeParams(0.5, 50.0, 2, cut_fraction=0.2).narrows(server)
    assert not CLRNetDecodeParams(0.3, 50.0, 4, cut_fraction=0.45).narrows(server)
    lanes = [Lane([[0, 0], [1, 1]], 0.5), Lane([[0, 0], [1, 1]], 0.45)]
    assert CLRNetDecodeParams(0.5, 50.0, 4, cut_fraction=0.45).narrow(lanes, server) == lanes[:1]  # 0.5 >= 0.5: kept
    with pytest.raises(DecodeParamsError, match="cut_fraction is the part of the frame above"):
        CLRNetDecodeParams(0.4, 50.0, 4, cut_fraction=1.0)
    assert CLRNetDecodeParams.from_dict(server.to_dict()) == server
