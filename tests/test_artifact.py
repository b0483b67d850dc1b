"""The typed manifest: reading, validation, format 2, and the migration from format 1."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edge_deploy.artifact.manifest import FORMAT, Manifest, PlanRecord, TensorSpec
from edge_deploy.errors import ManifestError
from edge_deploy.lanedet.family import ScoreNmsDecodeParams
from edge_deploy.artifact.precision import Precision

FORMAT1 = Path(__file__).parent / "data" / "format1"


def _format1(**sections) -> dict:
    return {"format": 1,
            "io": {"inputs": [{"name": "input", "datatype": "FP16", "shape": ["-1", 3, 288, 800]}],
                   "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [-1, 1000, 77]}],
                   "batch": {"min": 1, "max": 4}},
            "preprocess": {"height": 288, "width": 800},
            **sections}


def test_format1_migrates_family_precision_and_complete_settings() -> None:
    manifest = Manifest.from_dict(_format1(plan={"tensorrt": "10.3.0", "precision": "int8"}))
    assert manifest.io.inputs == (TensorSpec("input", "FP16", (-1, 3, 288, 800)),)
    assert manifest.io.batch.max == 4 and manifest.input_size == (288, 800)
    assert manifest.family == "laneatt"  # N x 77 rows: what format 1 served as LaneATT
    assert manifest.precision is Precision.INT8  # from the plan
    assert manifest.decode == ScoreNmsDecodeParams(0.5, 50.0, 4)  # the family's defaults fill what format 1 left out
    assert manifest.preprocess.interpolation == "bicubic" and manifest.preprocess.height == 288
    assert manifest.plan.tensorrt == "10.3.0" and manifest.plan.to_dict() == {"tensorrt": "10.3.0", "precision": "int8"}
    assert Manifest.from_dict(_format1(fp16={"onnx": {"file": "model_fp16.onnx"}})).precision is Precision.FP16
    assert Manifest.from_dict(_format1()).precision is Precision.FP32


def test_a_model_of_no_family_migrates_to_family_null() -> None:
    data = _format1()
    data["io"]["outputs"] = [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    assert Manifest.from_dict(data).family is None


def test_round_trip_writes_format_2(tmp_path) -> None:
    manifest = Manifest.from_dict(_format1(decode={"conf_threshold": 0.4, "nms_threshold": 50.0, "top_k": 3}))
    manifest.write(tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["format"] == FORMAT == 2 and data["family"] == "laneatt" and data["precision"] == "fp32"
    again = Manifest.read(tmp_path)
    assert again.to_dict() == manifest.to_dict() and again.decode.top_k == 3


def test_unknown_formats_and_damaged_manifests_are_one_line_errors(tmp_path) -> None:
    for data, words in (({"format": 3}, "newer edge-deploy"), ({"format": "x"}, "re-run `edge-deploy convert`"),
                        ([], "known format")):
        with pytest.raises(ManifestError, match=words) as info:
            Manifest.from_dict(data)
        assert "\n" not in str(info.value)
    with pytest.raises(ManifestError, match="damaged"):
        Manifest.from_dict(_format1(decode={"conf_threshold": "high", "nms_threshold": 50, "top_k": 4}))
    with pytest.raises(ManifestError, match="not an edge-deploy artifact"):
        Manifest.read(tmp_path)


@pytest.mark.parametrize("section, value, words", [
    ("family", 5, "family is int 5, not a string"),
    ("files", ["model.onnx"], "files is list ['model.onnx'], not an object"),
    ("plan", "yes", "plan is str 'yes', not an object"),
    ("plan", [1, 2], "plan is list [1, 2], not an object"),
])
def test_a_section_of_the_wrong_kind_is_a_damaged_manifest(section, value, words) -> None:
    """Issue 34 item 7: each was an internal error (exit 70) or stored as it was."""
    data = {**Manifest.from_dict(_format1()).to_dict(), section: value}
    with pytest.raises(ManifestError) as info:
        Manifest.from_dict(data)
    assert "manifest.json is damaged (" in str(info.value) and words in str(info.value), info.value
    assert str(info.value).endswith("re-run `edge-deploy convert`.") and "\n" not in str(info.value)


def test_a_family_this_installation_lacks_names_the_package_to_install() -> None:
    """Issue 44 item 12: the manifest is fine (was "damaged ... re-run convert"); the package is what is missing."""
    data = {**Manifest.from_dict(_format1()).to_dict(), "family": "stripes"}
    data["source"] = {**data["source"], "family_package": "edge-deploy-stripes"}
    with pytest.raises(ManifestError) as info:
        Manifest.from_dict(data, where="ART/manifest.json")
    assert str(info.value).startswith("ART/manifest.json is of the lane-model family 'stripes', which this "
                                      "installation does not have (no lane-model family 'stripes' (known: laneatt, ")
    assert "install edge-deploy-stripes (the package convert took it from) beside edge-deploy" in str(info.value)
    assert "damaged" not in str(info.value) and "\n" not in str(info.value)
    del data["source"]["family_package"]
    with pytest.raises(ManifestError, match="install the package that provides it"):
        Manifest.from_dict(data)


# The "plan" section as build_plan records it (edge_deploy.engine.plan), every key in its order.
BUILT_PLAN = {
    "tensorrt": "8.6.2.3", "cuda": "12.2.140", "gpu": "Orin", "compute_capability": "8.7", "l4t": "36.3.0",
    "onnx": "model_fp16.onnx", "onnx_sha256": "a" * 64, "typing": "strong", "precision": "fp16", "dla_core": None,
    "profile": {"input": {"min": [1, 3, 360, 640], "opt": [1, 3, 360, 640], "max": [4, 3, 360, 640]}},
    "optimization_level": 3, "fp32_layers": ["head"], "calibration": None, "jetpack": "6.0",
    "device": "NVIDIA Jetson AGX Orin Developer Kit", "nvpmodel": "MAXN", "workspace_bytes": 2147483648,
    "builder": "python", "build_time": "2026-11-22T07:00:00Z", "build_seconds": 412.5, "timing_cache": None,
    "verify": {"status": "passed", "io": "ok", "run": {"status": "passed", "max_abs": 0.0012}},
}


@pytest.mark.parametrize("plan", [
    BUILT_PLAN,
    {"onnx": "model.onnx", "tensorrt": "10.3.0", "precision": "int8", "by": {"tool": "other"}},  # another order/tool
    {},
])
def test_a_plan_section_reads_and_writes_byte_for_byte(tmp_path, plan) -> None:
    data = Manifest.from_dict(_format1()).to_dict()
    data["plan"] = plan
    text = json.dumps(data, indent=2) + "\n"
    (tmp_path / "manifest.json").write_text(text)
    manifest = Manifest.read(tmp_path)
    manifest.write(tmp_path)
    assert (tmp_path / "manifest.json").read_text() == text
    if plan:
        assert manifest.plan.tensorrt == plan["tensorrt"] and manifest.plan.onnx == plan["onnx"]


@pytest.mark.parametrize(("key", "value"), [("tensorrt", 10), ("compute_capability", [8, 7]), ("dla_core", "0"),
                                            ("dla_core", True), ("fp32_layers", "head"), ("verify", "passed"),
                                            ("precision", "fp8"), ("precision", "FP16"), ("precision", 16)])
def test_a_malformed_plan_section_is_refused_naming_the_field(key, value) -> None:
    with pytest.raises(ManifestError, match=f"plan.{key} is ") as info:
        Manifest.from_dict(_format1(plan=dict(BUILT_PLAN, **{key: value})))
    assert "\n" not in str(info.value) and "re-run `edge-deploy convert`" in str(info.value)


@pytest.mark.parametrize(("profile", "field"), [({"input": {"min": [1, 3], "opt": "1x3", "max": [4, 3]}}, "input.opt"),
                                              ({"input": {"min": [1, 3], "max": [4, 3]}}, "input.opt"),
                                              ({"input": [[1, 3], [1, 3], [4, 3]]}, "input"), ([1], "")])
def test_a_malformed_profile_is_refused_naming_the_input_and_range(profile, field) -> None:
    with pytest.raises(ManifestError, match=f"plan.profile{'.' if field else ''}{field} is ") as info:
        Manifest.from_dict(_format1(plan=dict(BUILT_PLAN, profile=profile)))
    assert "\n" not in str(info.value)


def test_the_profile_is_typed_and_a_built_one_writes_min_opt_max() -> None:
    from edge_deploy.artifact.manifest import PlanFingerprint, ShapeRange

    plan = Manifest.from_dict(_format1(plan=BUILT_PLAN)).plan
    assert plan.profile["input"].max == (4, 3, 360, 640) and plan.profile["input"].opt == (1, 3, 360, 640)
    built = PlanFingerprint(profile={"input": ShapeRange.of([1, 3, 360, 640], [1, 3, 360, 640], [4, 3, 360, 640])})
    assert json.dumps(built.to_dict()["profile"]) == json.dumps(BUILT_PLAN["profile"])


def test_the_plan_records_its_precision_as_a_precision() -> None:
    """The manifest stores the string; the record holds the enum, and writes the string back."""
    from edge_deploy.artifact.records import PlanVerify

    plan = Manifest.from_dict(_format1(plan=BUILT_PLAN)).plan
    assert plan.precision is Precision.FP16 and isinstance(plan.verify, PlanVerify)
    assert plan.verify.run.status == "passed" and plan.verify.run.extra == {"max_abs": 0.0012}  # kept, unknown here
    written = plan.to_dict()
    assert type(written["precision"]) is str and written["precision"] == "fp16"
    assert json.loads(json.dumps(written)) == BUILT_PLAN
    assert PlanRecord.from_dict(written) == plan
    int8 = Manifest.from_dict(_format1(plan={"precision": "int8"})).plan
    assert int8.precision is Precision.INT8 and int8.precision != "fp16"


def test_the_released_format1_artifacts_read_as_written(tmp_path) -> None:
    """tests/data/format1 holds artifacts written by the released code (c76a49f)."""
    plain = Manifest.read(FORMAT1 / "tiny_fp16")
    assert (plain.family, plain.precision) == ("laneatt", Precision.FP16)
    assert plain.decode == ScoreNmsDecodeParams(0.4, 50.0, 3)  # convert --conf 0.4 --top-k 3, as recorded
    plain.verify_files(FORMAT1 / "tiny_fp16")
    fused = Manifest.read(FORMAT1 / "tiny_fused")
    assert fused.fused_frame is not None and (fused.fused_frame.height, fused.fused_frame.width) == (295, 820)
    assert fused.io.inputs[0].datatype == "UINT8"
    copy = tmp_path / "copy"
    shutil.copytree(FORMAT1 / "tiny_fp16", copy)
    plain.write(copy)  # rewritten as format 2, the same manifest
    assert Manifest.read(copy).to_dict() == plain.to_dict()


@pytest.mark.parametrize("right_sha", [True, False], ids=["right sha256", "wrong sha256"])
def test_a_listed_file_that_links_out_of_the_artifact_is_refused_unread(tmp_path, right_sha) -> None:
    """Issue 34 item 8: a listed link to a file outside was read and accepted, or its hash printed."""
    from edge_deploy.artifact.manifest import FileEntry, file_entry

    outside = tmp_path / "outside.txt"
    outside.write_text("a secret of the machine\n")
    art = tmp_path / "art"
    art.mkdir()
    (art / "notes.txt").symlink_to(outside)
    entry = file_entry(outside) if right_sha else FileEntry("0" * 64, 1)
    manifest = Manifest.from_dict({**Manifest.from_dict(_format1()).to_dict(), "files": {"notes.txt": entry.to_dict()}})
    with pytest.raises(ManifestError, match="notes.txt is a symbolic link, but every file a manifest lists") as info:
        manifest.verify_files(art)
    assert file_entry(outside).sha256[:12] not in str(info.value)
    # The artifact directory itself may be a link (what the operator named): its files are checked as usual.
    (art / "notes.txt").unlink()
    (art / "notes.txt").write_text("notes\n")
    manifest.files["notes.txt"] = file_entry(art / "notes.txt")
    (tmp_path / "current").symlink_to(art)
    manifest.verify_files(tmp_path / "current")
