"""The seam between the stages and the lane-model families (issue 33, items 1-5): lanes compared on common rows,
checks that compared nothing said so, near-ties told apart from FP16 losses, the frame size a family's lanes are
checked at, a family's own backbones, data sets and options, and another family's checkpoint named. Torch-free
except where a checkpoint is read."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.errors import ConvertError
from edge_deploy.lanedet.family import SourceSpec, family_options, get_family
from edge_deploy.lanedet.lane import Lane
from edge_deploy.lanedet.model_source import ModelSource
from edge_deploy.export.parity import LaneCheck, compare_to_reference, lane_dx
from edge_deploy.artifact.records import Comparison


def _line(x0: float, x1: float, ys: np.ndarray) -> Lane:
    """A straight lane from (x0, 0) to (x1, 100), sampled at `ys`."""
    return Lane(np.stack([x0 + (x1 - x0) * ys / 100.0, ys], axis=1).astype(np.float32), 0.9)


def test_lanes_sampled_on_different_rows_compare_on_their_common_range() -> None:
    """A decoder that samples between a lane's ends (CLRNet, PolyLaneNet) gives no two lanes the same rows: the
    same line sampled twice differs by 0, and a shift is measured, not inf."""
    same = lane_dx([_line(10, 50, np.linspace(0, 100, 11))], [_line(10, 50, np.linspace(3.7, 91.3, 17))])
    assert max(same) == pytest.approx(0.0, abs=1e-4)
    moved = lane_dx([_line(10, 50, np.linspace(0, 100, 11))], [_line(12, 52, np.linspace(20, 120, 9))])
    assert np.mean(moved) == pytest.approx(2.0, abs=1e-4)
    apart = lane_dx([_line(10, 50, np.linspace(0, 40, 5))], [_line(10, 50, np.linspace(60, 100, 5))])
    assert apart == [float("inf")]  # no common range: unmatched


def _laneatt_rows(scores: list[float]) -> np.ndarray:
    """LaneATT output rows [1, N, 77]: two logits per row giving `scores`, a short vertical lane each."""
    rows = np.zeros((1, len(scores), 77), np.float32)
    for i, score in enumerate(scores):
        rows[0, i, :2] = [0.0, np.log(score / (1 - score))]
        rows[0, i, 2:5] = [0.0, 100.0 + 150.0 * i, 60.0]  # start_y (fraction 0: bottom), start_x, length
        rows[0, i, 5:] = 100.0 + 150.0 * i
    return rows


def _laneatt_check() -> LaneCheck:
    family = get_family("laneatt")
    return LaneCheck(family, ("predict_lanes",), family.decode_defaults, (360, 640))


def test_zero_lanes_against_zero_lanes_is_reported_as_not_verified() -> None:
    none = [{"predict_lanes": _laneatt_rows([0.1, 0.2])}]
    report = compare_to_reference(none, none, _laneatt_check(), max_dx_px=1.0)
    assert report["lanes"]["verified"] is False and "no lanes to compare" in report["lanes"]["note"]
    some = [{"predict_lanes": _laneatt_rows([0.9, 0.2])}]
    report = compare_to_reference(some, some, _laneatt_check(), max_dx_px=1.0)
    assert report["lanes"]["verified"] is True and report["lanes"]["lanes_plan"] == 1 and "note" not in report["lanes"]


def test_lanes_the_reference_does_not_find_fail_the_check_as_verified() -> None:
    # issue 44, "tests that notice": the reference finds none, the candidate finds one: a verified failure, never
    # "not verified" (which a caller takes as nothing to hold against the candidate)
    none = [{"predict_lanes": _laneatt_rows([0.1, 0.2])}]
    some = [{"predict_lanes": _laneatt_rows([0.9, 0.2])}]
    report = compare_to_reference(none, some, _laneatt_check(), max_dx_px=1.0)
    assert report["lanes"]["verified"] is True and report["passed"] is False, report
    assert (report["lanes"]["lanes_onnxruntime"], report["lanes"]["lanes_plan"]) == (0, 1)
    assert report["problems"] == ["image 0: 1 lane(s) from the plan, 0 from the reference"]
    assert "note" not in report["lanes"]


def _failed_verdict(max_rel: float) -> Comparison:
    lanes = {"images": 4, "lanes_fp32": 8, "lanes_fp16": 8, "mean_dx_px": 1.8, "max_mean_dx_px": 1.0,
             "dx_width_px": 1640.0, "verified": True}
    return Comparison.from_dict({"outputs": {"loc_row": {"max_abs": max_rel * 10, "max_rel": max_rel}},
                                 "lanes": lanes, "passed": False,
                                 "problems": ["lanes moved by 1.80 px on average at 1640 wide (limit 1 px)"]})


@dataclass
class _Source:  # stands in for the Manifest: _refuse_or_note_lanes reads only manifest.source
    source: ModelSource = field(default_factory=ModelSource)


def test_a_failed_fp16_lane_check_says_whether_fp16_is_to_blame() -> None:
    from edge_deploy.export.fp16_onnx import _refuse_or_note_lanes
    from edge_deploy.core.progress import Reporter

    with pytest.raises(ConvertError) as near:
        _refuse_or_note_lanes(_failed_verdict(8e-4), _Source(ModelSource(trained=True)), Reporter())
    assert "raw outputs agree" in str(near.value) and "loses accuracy" not in str(near.value)
    with pytest.raises(ConvertError) as lost:
        _refuse_or_note_lanes(_failed_verdict(0.2), _Source(ModelSource(trained=True)), Reporter())
    assert "loses accuracy in FP16" in str(lost.value) and "--precision fp32" in str(lost.value)
    with pytest.raises(ConvertError):  # untrained weights whose outputs really differ: still refused
        _refuse_or_note_lanes(_failed_verdict(0.2), _Source(ModelSource(trained=False)), Reporter())
    untrained = _refuse_or_note_lanes(_failed_verdict(8e-4), _Source(ModelSource(trained=False)), Reporter())
    assert untrained.passed is True and untrained.lanes.verified is False
    assert untrained.lanes.note.startswith("not verified: untrained weights")


def test_each_family_says_at_which_frame_size_its_lanes_are_checked() -> None:
    ufldv2, laneatt = get_family("ufldv2"), get_family("laneatt")
    assert ufldv2.check_image_size("tusimple", ufldv2.decode_defaults) == (720, 1280)
    assert ufldv2.check_image_size(None, ufldv2.datasets["tusimple"].decode) == (720, 1280)  # found by its anchors
    assert ufldv2.check_image_size(None, ufldv2.decode_defaults) == (590, 1640)
    assert laneatt.check_image_size("culane", laneatt.decode_defaults) is None  # its input size, held at 640


def test_backbones_data_sets_and_options_belong_to_their_family() -> None:
    laneatt, ufldv2 = get_family("laneatt"), get_family("ufldv2")
    assert laneatt.backbone_from(SourceSpec("laneatt")) == "resnet34"
    assert ufldv2.backbone_from(SourceSpec("ufldv2")) == "resnet18"
    with pytest.raises(ConvertError, match=r"LaneATT has no --backbone resnet50; use resnet18 or resnet34\."):
        laneatt.backbone_from(SourceSpec("laneatt", backbone="resnet50"))
    with pytest.raises(ConvertError, match=r"UFLDv2 has no --dataset llamas preset; use culane or tusimple\."):
        ufldv2.dataset_from(SourceSpec("ufldv2", dataset="llamas"))
    options = laneatt.options_from(SourceSpec("laneatt", options={"topk_anchors": 500}))
    assert (options.topk_anchors, options.anchor_order, options.anchors_freq) == (500, "torch16", None)
    with pytest.raises(ConvertError, match=r"--anchor-order only applies to LaneATT; UFLDv2 takes --dataset, "
                                           r"--backbone, --checkpoint\."):
        ufldv2.options_from(SourceSpec("ufldv2", options={"anchor_order": "stable"}))
    with pytest.raises(ConvertError, match="LaneATT has no --anchor-order quick; use torch16 or stable"):
        laneatt.options_from(SourceSpec("laneatt", options={"anchor_order": "quick"}))
    assert SourceSpec("laneatt", dataset="culane", options={"topk_anchors": 9}).family_options_given == \
        ["--dataset", "--topk-anchors"]


def test_a_family_options_class_is_checked_when_its_flags_are_made() -> None:
    @dataclass(frozen=True)
    class Fine:
        cut_rows: int = field(default=0, metadata={"help": "rows to cut"})
        mode: str = field(default="a", metadata={"choices": ("a", "b")})

    assert [(o.flag, o.type, o.choices) for o in family_options(Fine)] == \
        [("--cut-rows", int, None), ("--mode", str, ("a", "b"))]

    @dataclass(frozen=True)
    class NoDefault:
        anchors: list

    with pytest.raises(TypeError, match="NoDefault.anchors"):
        family_options(NoDefault)


@pytest.mark.parametrize("given, keys, named", [
    ("laneatt", ("model.conv1.weight", "pool.weight", "cls.1.weight"), "UFLDv2"),
    ("ufldv2", ("module.attention_layer.weight", "module.cls_layer.weight", "module.reg_layer.weight"), "LaneATT"),
])
def test_another_familys_checkpoint_is_named_with_the_command_that_fits(tmp_path: Path, given, keys, named) -> None:
    torch = pytest.importorskip("torch", reason="reading a checkpoint needs torch (not on the Python 3.10 run)")
    from triton_helpers import run_cli

    path = tmp_path / "other.pt"
    torch.save({"model": {key: torch.zeros(2) for key in keys}}, path)
    done = run_cli(tmp_path, "convert", given, "--checkpoint", str(path), "-o", str(tmp_path / "art"), "--target",
                   "onnx", timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"this is a {named} checkpoint: edge-deploy convert {named.lower()} --checkpoint" in lines[0]
    assert not (tmp_path / "art").exists()


def test_a_directory_given_as_checkpoint_is_called_a_directory(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the family loaders need torch (not on the Python 3.10 run)")
    from triton_helpers import run_cli

    done = run_cli(tmp_path, "convert", "ufldv2", "--checkpoint", str(tmp_path), "-o", str(tmp_path / "art"),
                   "--target", "onnx", timeout=300)
    assert done.returncode == 2 and f"checkpoint {tmp_path} is a directory" in done.stderr, done.stderr


def test_a_family_option_of_the_wrong_type_is_refused_naming_what_it_takes() -> None:
    # issue 47 item 2: the family's options are typed once, where they are read (a library caller's SourceSpec too)
    laneatt = get_family("laneatt")
    options = laneatt.options_from(SourceSpec("laneatt", options={"topk_anchors": 500, "anchors_freq": "freq.pt"}))
    assert options.anchors_freq == Path("freq.pt") and options.topk_anchors == 500
    for given, words in (({"topk_anchors": "500"}, "LaneATT's --topk-anchors takes a whole number, not str '500'"),
                         ({"topk_anchors": True}, "--topk-anchors takes a whole number, not bool True"),
                         ({"anchors_freq": 3}, "LaneATT's --anchors-freq takes a path, not int 3")):
        with pytest.raises(ConvertError, match=words):
            laneatt.options_from(SourceSpec("laneatt", options=given))
