"""UFLDv2's decoder against the official rules (demo.py `pred2coords` of cfzd/Ultra-Fast-Lane-Detection-v2),
ported here as a plain loop over anchors (written for this test from the rules, not copied), on random outputs
and on outputs crafted at the rules' edges; and the family's decode parameters and output matching."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edge_deploy.lanedet import decode_ufldv2
from edge_deploy.lanedet.family import DecodeParamsError, TensorSpec, get_family
from edge_deploy.lanedet.lane import DecodeError
from edge_deploy.lanedet.ufldv2 import UFLDv2DecodeParams
from edge_deploy.lanedet.ufldv2.decode import decode_outputs
from edge_deploy.lanedet.ufldv2.presets import PRESETS

CULANE = PRESETS["culane"]


def official_rules(loc_row, loc_col, exist_row, exist_col, row_anchor, col_anchor, local_width, width, height):
    """The official decoding, one anchor at a time: lanes 1, 2 on the rows (drawn when they exist at more than
    half of them), 0, 3 on the columns (more than a quarter); positions are the softmax-weighted mean cell in
    argmax +- local_width (clipped to the grid) + 0.5, over (cells - 1), times the image width / height.
    Coordinates are kept as floats (the official code truncates them with int())."""
    cells_row, rows, _ = loc_row.shape
    cells_col, cols, _ = loc_col.shape
    anchors_y = np.linspace(row_anchor[0], row_anchor[1], rows)
    anchors_x = np.linspace(col_anchor[0], col_anchor[1], cols)
    lanes = []
    for loc, exist, count, cells, lane_ids, needed, on_rows in (
            (loc_row, exist_row, rows, cells_row, (1, 2), rows / 2, True),
            (loc_col, exist_col, cols, cells_col, (0, 3), cols / 4, False)):
        for i in lane_ids:
            valid = [int(np.argmax(exist[:, k, i])) for k in range(count)]
            if not sum(valid) > needed:
                continue
            points = []
            for k in range(count):
                if not valid[k]:
                    continue
                peak = int(np.argmax(loc[:, k, i]))
                window = list(range(max(0, peak - local_width), min(cells - 1, peak + local_width) + 1))
                logits = [float(loc[c, k, i]) for c in window]
                top = max(logits)
                weights = [math.exp(v - top) for v in logits]
                total = sum(weights)
                position = sum(w / total * c for w, c in zip(weights, window)) + 0.5
                if on_rows:
                    points.append((position / (cells - 1) * width, anchors_y[k] * height))
                else:
                    points.append((anchors_x[k] * width, position / (cells - 1) * height))
            lanes.append(np.array(points))
    return lanes


def _outputs(rng, rows=72, cols=81, cells_row=200, cells_col=100, exist_bias=0.0):
    return [rng.normal(0, 2, (cells_row, rows, 4)).astype(np.float32),
            rng.normal(0, 2, (cells_col, cols, 4)).astype(np.float32),
            (rng.normal(0, 1, (2, rows, 4)) + np.array([0.0, exist_bias]).reshape(2, 1, 1)).astype(np.float32),
            (rng.normal(0, 1, (2, cols, 4)) + np.array([0.0, exist_bias]).reshape(2, 1, 1)).astype(np.float32)]


def _assert_same(lanes, expected):
    assert len(lanes) == len(expected)
    for lane, want in zip(lanes, expected):
        want = want[np.argsort(want[:, 1], kind="stable")]  # ours run top to bottom, as every Lane does
        np.testing.assert_allclose(lane.points, want, rtol=0, atol=2e-3)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("local_width", [0, 1, 3])
def test_random_outputs_decode_as_the_official_rules(seed, local_width) -> None:
    rng = np.random.default_rng(seed)
    outputs = _outputs(rng, exist_bias=rng.uniform(-0.3, 0.8))
    lanes = decode_outputs(outputs, row_anchor=CULANE.row_anchor, col_anchor=CULANE.col_anchor,
                           local_width=local_width, image_size=(590, 1640))
    _assert_same(lanes, official_rules(*outputs, CULANE.row_anchor, CULANE.col_anchor, local_width, 1640, 590))


def test_tusimple_geometry_and_the_public_decoder_defaults() -> None:
    rng = np.random.default_rng(7)
    outputs = _outputs(rng, rows=56, cols=41, cells_row=100, cells_col=100, exist_bias=1.0)
    preset = PRESETS["tusimple"]
    lanes = decode_ufldv2(dict(zip(("loc_row", "loc_col", "exist_row", "exist_col"), outputs)), dataset="tusimple")
    assert len(lanes) == 4  # exist_bias 1: every lane exists on most anchors
    _assert_same(lanes, official_rules(*outputs, preset.row_anchor, preset.col_anchor, 1, 1280, 720))
    assert lanes[0].points[0, 1] >= 160 - 1e-3 and lanes[0].points[-1, 1] <= 710 + 1e-3  # tusimple's row anchors


def _crafted(rows_existing: int, cols_existing: int, rows=72, cols=81):
    """Lane 1 exists at the first `rows_existing` row anchors, lane 0 at the first `cols_existing` columns;
    lanes 2 and 3 nowhere."""
    loc_row, loc_col = np.zeros((200, rows, 4), np.float32), np.zeros((100, cols, 4), np.float32)
    loc_row[50], loc_col[30] = 5.0, 5.0
    exist_row, exist_col = np.zeros((2, rows, 4), np.float32), np.zeros((2, cols, 4), np.float32)
    exist_row[0], exist_col[0] = 1.0, 1.0
    exist_row[:, :rows_existing, 1] = [[0.0], [1.0]]
    exist_col[:, :cols_existing, 0] = [[0.0], [1.0]]
    return [loc_row, loc_col, exist_row, exist_col]


def test_a_lane_needs_more_than_half_of_the_rows_and_more_than_a_quarter_of_the_columns() -> None:
    def drawn(rows_existing, cols_existing):
        return [len(lane) for lane in decode_ufldv2(_crafted(rows_existing, cols_existing))]

    assert drawn(36, 20) == []  # exactly half of 72 rows, 20 of 81 columns (<= 20.25): neither is drawn
    assert drawn(37, 20) == [37]  # one more row: the row lane is drawn, with one point per row where it exists
    assert drawn(36, 21) == [21]
    assert drawn(37, 21) == [37, 21]  # the official order: row lanes (1, 2), then column lanes (0, 3)


def test_a_tie_between_the_exist_logits_means_absent_as_argmax_says() -> None:
    outputs = _crafted(72, 0)
    outputs[2][:, :40, 1] = 0.5  # equal logits at 40 rows: argmax picks class 0
    assert [len(lane) for lane in decode_ufldv2(outputs)] == []
    assert official_rules(*outputs, CULANE.row_anchor, CULANE.col_anchor, 1, 1640, 590) == []


@pytest.mark.parametrize("peak", [0, 1, 198, 199])
def test_the_local_window_is_clipped_at_the_grid_edges(peak) -> None:
    outputs = _crafted(72, 0)
    loc = outputs[0]
    loc[:] = 0.0
    loc[peak, :, 1] = 4.0
    neighbours = [c for c in (peak - 1, peak + 1) if 0 <= c < 200]
    for c in neighbours:
        loc[c, :, 1] = 2.0
    weights = np.exp([4.0] + [2.0] * len(neighbours))
    expected_cell = (weights @ np.array([peak, *neighbours], float)) / weights.sum() + 0.5
    (lane,) = decode_ufldv2(outputs)
    np.testing.assert_allclose(lane.points[:, 0], expected_cell / 199 * 1640, rtol=1e-6)
    _assert_same([lane], official_rules(*outputs, CULANE.row_anchor, CULANE.col_anchor, 1, 1640, 590))


def test_column_lanes_run_top_to_bottom_and_scores_are_existence_probabilities() -> None:
    rng = np.random.default_rng(11)
    outputs = _outputs(rng, exist_bias=2.0)
    for lane in decode_ufldv2(outputs):
        assert np.all(np.diff(lane.points[:, 1]) >= 0)
        assert 0.5 < lane.score <= 1.0


def test_top_k_keeps_the_highest_scores_in_the_official_order() -> None:
    outputs = _crafted(72, 81)
    outputs[2][:, :, 2] = [[0.0], [0.2]]  # lane 2 exists everywhere, less surely than lanes 1 and 0
    everything = decode_ufldv2(outputs)
    assert len(everything) == 3
    two = decode_ufldv2(outputs, top_k=2)
    assert [lane.score for lane in two] == [everything[0].score, everything[2].score]


def test_fp16_outputs_decode_like_their_fp32_values() -> None:
    outputs = _outputs(np.random.default_rng(5), exist_bias=1.0)
    half = [o.astype(np.float16) for o in outputs]
    lanes = decode_ufldv2(half)
    _assert_same(lanes, official_rules(*[h.astype(np.float32) for h in half], CULANE.row_anchor, CULANE.col_anchor,
                                       1, 1640, 590))


@pytest.mark.parametrize("change, words", [
    (lambda o: o[:3], "takes 4 outputs"),
    (lambda o: [o[0][None], *o[1:]], "without the batch axis"),
    (lambda o: [o[0], o[1], o[2][:, :10], o[3]], "do not fit together"),
    (lambda o: [o[0].astype(np.int32), *o[1:]], "dtype int32"),
    (lambda o: [np.where(o[0] > 3, np.nan, o[0]), *o[1:]], "NaN"),
])
def test_unusable_outputs_are_one_line_errors(change, words) -> None:
    outputs = _outputs(np.random.default_rng(0))
    with pytest.raises(DecodeError, match=words) as raised:
        decode_ufldv2(change(outputs))
    assert "\n" not in str(raised.value)


def test_decode_parameters_are_typed_checked_and_travel_as_a_mapping() -> None:
    family = get_family("ufldv2")
    culane = family.decode_params_for("culane")
    assert culane == UFLDv2DecodeParams(row_anchor=(0.42, 1.0))
    assert family.decode_params_for("tusimple").row_anchor == pytest.approx((160 / 720, 710 / 720))
    assert UFLDv2DecodeParams.from_dict(culane.to_dict()) == culane  # the manifest / config.pbtxt form
    assert culane.overridden(top_k=2).top_k == 2
    with pytest.raises(DecodeParamsError, match="UFLDv2 decoding has no conf_threshold"):
        culane.overridden(conf_threshold=0.3)
    for bad in ({"row_anchor": (0.9, 0.1)}, {"row_anchor": (0.2, 1.5)}, {"local_width": -1}, {"top_k": 0}):
        with pytest.raises(DecodeParamsError):
            UFLDv2DecodeParams(**{"row_anchor": (0.42, 1.0), **bad})
    assert culane.narrows(culane.overridden(top_k=4)) and not culane.overridden(local_width=2).narrows(culane)


def test_the_family_reads_the_official_outputs_and_nothing_else() -> None:
    family = get_family("ufldv2")
    outputs = [TensorSpec("loc_row", "FP32", (-1, 200, 72, 4)), TensorSpec("loc_col", "FP32", (-1, 100, 81, 4)),
               TensorSpec("exist_row", "FP32", (-1, 2, 72, 4)), TensorSpec("exist_col", "FP16", (-1, 2, 81, 4))]
    assert [t.name for t in family.lane_outputs(list(reversed(outputs)), True)] == [t.name for t in outputs]
    assert family.max_points(outputs) == 81
    with pytest.raises(ValueError, match="official output names"):
        family.lane_outputs(outputs[:3], True)
    bad = [*outputs[:2], TensorSpec("exist_row", "FP32", (-1, 2, 70, 4)), outputs[3]]
    with pytest.raises(ValueError, match=r"exist_\* \[2, anchors, 4\]"):
        family.lane_outputs(bad, True)
    assert not get_family("laneatt").matches(outputs, True)


def test_the_decoder_copied_beside_the_postprocess_model_is_self_contained(tmp_path, monkeypatch) -> None:
    """install copies decode.py and lane.py beside NAME_postprocess (Triton's Python on a Jetson may not have
    edge_deploy): they import only numpy, the standard library and each other, and the copy decodes alike."""
    import importlib.util
    import sys

    from module_imports import imported_packages

    sources = get_family("ufldv2").decoder_sources()
    for name, data in sources.items():
        (tmp_path / name).write_bytes(data)
        imported = imported_packages(tmp_path / name, relative_ok=frozenset({"lane"}))
        assert imported <= {"numpy", "__future__", "lane"} | set(sys.stdlib_module_names)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("copied_ufldv2_decode", tmp_path / "decode.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["copied_ufldv2_decode"] = module
    try:
        spec.loader.exec_module(module)
        outputs = _outputs(np.random.default_rng(2), exist_bias=1.0)
        params = get_family("ufldv2").decode_defaults.to_dict()
        copied = module.decode_outputs(outputs, image_size=(590, 1640), model_width=1600, **params)
        assert [(lane.points.tolist(), lane.score) for lane in copied] == [
            (lane.points.tolist(), lane.score) for lane in decode_ufldv2(outputs)]
    finally:
        del sys.modules["copied_ufldv2_decode"]
        sys.modules.pop("lane", None)
