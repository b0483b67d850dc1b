"""The typed stage reports (edge_deploy.artifact.records): read once and checked, written back as the same JSON,
unknown keys kept, and the manifests the released code wrote still read."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_deploy.artifact.manifest import Manifest, migrate
from edge_deploy.errors import ManifestError
from edge_deploy.artifact.records import (Comparison, EvaluationRecord, ExportReport, F1Retention, Fp16Node, Fp16OnnxRecord,
                                 Fp16Report, FrameRecord, FusedParity, FusedPreprocessRecord, LaneComparison,
                                 OutputError, ParityReport, PixelDiff, PixelParity, PlanVerify, RecordError, Scores,
                                 SimplifyReport, Tolerance)

FORMAT1 = Path(__file__).parent / "data" / "format1"
MANIFESTS = sorted(FORMAT1.glob("*/manifest.json"))

LANES = LaneComparison(images=5, lanes_fp32=6, lanes_fp16=6, mean_dx_px=0.1, max_mean_dx_px=1.0, dx_width_px=640.0,
                       verified=True)
VERIFY = Comparison(reference="ONNX Runtime (CPU): model.onnx (FP32) vs model_fp16.onnx", batches=(1, 2, 2),
                    outputs={"predict_lanes": OutputError(max_abs=0.49, max_rel=8e-4)}, lanes=LANES, passed=True)
# One of each report as its stage builds it.
BUILT = [
    ExportReport(exporter="torch 2.13.0", onnx="1.23.2", opset=17, ir_version=8, trace_batch=2,
                 simplify=SimplifyReport(tool="onnxslim 0.1.98", nodes_before=4, applied=True, nodes_after=3,
                                         max_abs_change={"predict_lanes": 0.0})),
    ExportReport(simplify=SimplifyReport(applied=False, reason="disabled (--no-simplify)")),
    ParityReport(reference="torch vs ONNX Runtime", tolerance=Tolerance(atol=1e-3, rtol=1e-3), batches=(1, 4), seed=0,
                 outputs={"predict_lanes": OutputError(max_abs=6e-5, max_rel=2e-4)}),
    Fp16Report(rule="overflow", tensors_checked=2, samples=3, max_abs=7e4,
               nodes=(Fp16Node(node="head", op="Gemm", output="rows", max_abs=7e4, reason="overflow"),
                      Fp16Node(node="tiny", op="Mul", output="t", max_abs=1e-9, reason="underflow", flushed_mass=0.5,
                               subnormal_mass=0.9)),
               fp32_nodes=("head", "tiny"),
               onnx=Fp16OnnxRecord(file="model_fp16.onnx", converter="onnxconverter-common", io_precision="fp32",
                                   kept_fp32=("head",), verify=VERIFY,
                                   f1=F1Retention(iou=0.5, fp32=0.9, fp16=0.89, retention=0.9889))),
    PlanVerify(status="passed", io="ok", run=Comparison.skipped("pycuda is not installed")),
    PlanVerify(status="skipped", reason="--no-verify"),
    EvaluationRecord(data="synthetic:4", frames=4,
                     files={"model.onnx": {"0.5": Scores(f1=0.9, precision=0.95, recall=0.85)}}),
    FusedPreprocessRecord(
        input="FRAME", frame=FrameRecord(height=590, width=1640, datatype="UINT8", layout="NHWC", color="bgr"),
        graph="Cast -> ...",
        parity=FusedParity(reference="client vs fused", seed=0,
                           pixels=PixelParity(frames=5, rounded=PixelDiff(max_abs=0.004, max_levels=1.0,
                                                                          fraction_differing=3e-4),
                                              unrounded=PixelDiff(max_abs=0.3, max_levels=71.0,
                                                                  fraction_differing=0.99),
                                              max_abs=0.004, max_levels=1.0),
                           lanes={"model.onnx": Comparison(outputs={}, lanes=None, passed=True, problems=())},
                           max_mean_dx_px={"model.onnx": 0.5, "model_fp16.onnx": 0.5})),
]


@pytest.mark.parametrize("record", BUILT, ids=lambda r: type(r).__name__)
def test_a_built_report_round_trips(record) -> None:
    data = record.to_dict()
    again = type(record).from_dict(json.loads(json.dumps(data)))
    assert again == record and again.to_dict() == data
    assert type(record).from_dict(again.to_dict()).to_dict() == data  # and stays so when read back again


def test_a_built_report_writes_the_keys_its_stage_always_wrote() -> None:
    fp16 = BUILT[3].to_dict()
    assert list(fp16) == ["rule", "tensors_checked", "samples", "max_abs", "nodes", "fp32_nodes", "onnx"]
    assert fp16["nodes"][0] == {"node": "head", "op": "Gemm", "output": "rows", "max_abs": 7e4, "reason": "overflow"}
    onnx = fp16["onnx"]
    assert list(onnx) == ["file", "converter", "io_precision", "kept_fp32", "verify", "f1"]
    assert Fp16OnnxRecord(file="model_fp16.onnx").to_dict() == {"file": "model_fp16.onnx", "f1": None}
    assert list(onnx["verify"]) == ["reference", "batches", "outputs", "lanes", "passed"]
    assert onnx["verify"]["batches"] == [1, 2, 2] and onnx["kept_fp32"] == ["head"]  # lists, as JSON has them
    assert Comparison(outputs={}, passed=True).to_dict() == {"outputs": {}, "lanes": None, "passed": True}
    assert BUILT[4].to_dict() == {"status": "passed", "io": "ok",
                                  "run": {"status": "skipped", "reason": "pycuda is not installed"}}
    assert BUILT[5].to_dict() == {"status": "skipped", "reason": "--no-verify"}
    assert F1Retention(iou=0.5, fp32=0.0, fp16=0.0).to_dict() == {"iou": 0.5, "fp32": 0.0, "fp16": 0.0,
                                                                  "retention": None}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.parent.name)
def test_the_released_manifests_sections_read_and_write_back_byte_for_byte(path) -> None:
    data = json.loads(path.read_text())
    manifest = Manifest.from_dict(data, where=str(path))
    assert isinstance(manifest.fp16, Fp16Report) and isinstance(manifest.parity, ParityReport)
    assert isinstance(manifest.export, ExportReport) and manifest.export.simplify.applied is True
    assert manifest.fp16_onnx.verify.lanes.lanes_fp16 == manifest.fp16_onnx.verify.lanes.lanes_fp32 > 0
    assert manifest.parity.tolerance.atol == 1e-3 and manifest.parity.batches == (1, 2)
    written, expected = manifest.to_dict(), migrate(data)
    for key in ("export", "parity", "fp16", "plan", "evaluation", "fused_preprocess"):
        assert json.dumps(written.get(key)) == json.dumps(expected.get(key)), key  # same keys, same order


def test_a_released_fused_manifest_keeps_its_single_lane_limit() -> None:
    fused = Manifest.read(FORMAT1 / "tiny_fused").fused_preprocess
    assert fused.parity.max_mean_dx_px == 0.5  # one number then; one per ONNX file now
    assert fused.parity.lanes["model_fp16.onnx"].lanes.lanes_fused == 2 and fused.parity.pixels.rounded.max_levels < 2


def test_unknown_keys_are_kept_at_every_level(tmp_path) -> None:
    """A manifest written by a newer edge-deploy keeps what this one does not know when it is rewritten."""
    data = json.loads((FORMAT1 / "tiny_fused" / "manifest.json").read_text())
    data["parity"]["tolerance"]["future"] = {"a": 1}
    data["parity"]["future"] = [1, 2]
    data["fp16"]["onnx"]["verify"]["lanes"]["future"] = "x"
    data["fused_preprocess"]["parity"]["lanes"]["model.onnx"]["future"] = None
    data["export"]["simplify"]["future"] = 3
    data["evaluation"] = {"data": "synthetic:2", "frames": 2, "future": True,
                          "files": {"model.onnx": {"0.5": {"f1": 1.0, "precision": 1.0, "recall": 1.0, "tp": 4}}}}
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    manifest = Manifest.read(tmp_path)
    assert manifest.parity.tolerance.extra == {"future": {"a": 1}} and manifest.parity.extra == {"future": [1, 2]}
    assert manifest.evaluation.files["model.onnx"]["0.5"].extra == {"tp": 4}
    manifest.write(tmp_path)
    again = json.loads((tmp_path / "manifest.json").read_text())
    for key in ("export", "parity", "fp16", "evaluation", "fused_preprocess"):
        assert again[key] == data[key], key


def test_a_field_set_since_reading_is_written_after_the_keys_read() -> None:
    record = ParityReport.from_dict({"seed": 1, "future": 2})
    from dataclasses import replace

    assert list(replace(record, reference="r").to_dict().items()) == [("seed", 1), ("future", 2), ("reference", "r")]


@pytest.mark.parametrize(("section", "path", "value", "field"), [
    ("parity", ("tolerance", "atol"), "0.001", "parity.tolerance.atol is str"),
    ("parity", ("batches",), [1, "2"], "parity.batches is list"),
    ("fp16", ("nodes",), [{"node": 3}], r"fp16.nodes\[0\].node is int"),
    ("fp16", ("onnx", "verify", "lanes", "images"), True, "fp16.onnx.verify.lanes.images is bool"),
    ("fp16", ("onnx", "io"), {"inputs": [{"name": "x"}]}, "fp16.onnx.io is not an I/O signature"),
    ("export", ("simplify",), "yes", "export.simplify is str"),
    ("fused_preprocess", ("parity", "pixels", "rounded", "max_levels"), None, None),  # null: allowed
    ("fused_preprocess", ("frame", "height"), 295.5, "fused_preprocess.frame.height is float"),
])
def test_a_malformed_report_is_a_one_line_error_naming_the_field_and_the_file(tmp_path, section, path, value,
                                                                               field) -> None:
    data = json.loads((FORMAT1 / "tiny_fused" / "manifest.json").read_text())
    node = data[section]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    if field is None:
        Manifest.read(tmp_path)
        return
    with pytest.raises(ManifestError, match=field) as info:
        Manifest.read(tmp_path)
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "manifest.json") in message and "re-run" in message


def test_plan_verify_errors_name_the_plan_field() -> None:
    data = Manifest.read(FORMAT1 / "tiny_fp16").to_dict()
    data["plan"] = {"precision": "fp16", "verify": {"status": "passed", "run": {"passed": "yes"}}}
    with pytest.raises(ManifestError, match="plan.verify.run.passed is str"):
        Manifest.from_dict(data)


def test_records_are_also_the_read_only_mappings_they_were() -> None:
    """The sections were dicts: `manifest.parity["outputs"]` and friends keep reading the same values."""
    manifest = Manifest.read(FORMAT1 / "tiny_fp16")
    assert manifest.parity["tolerance"]["atol"] == 1e-3 and manifest.parity["batches"] == [1, 2]
    assert manifest.fp16_onnx["verify"]["lanes"]["lanes_fp16"] == 1
    assert manifest.fp16.get("missing") is None and "rule" in manifest.fp16 and len(manifest.fp16) == 7
    assert manifest.parity == json.loads((FORMAT1 / "tiny_fp16" / "manifest.json").read_text())["parity"]
    with pytest.raises(TypeError):
        manifest.parity["seed"] = 1  # type: ignore[index]


def test_a_non_object_report_is_refused() -> None:
    with pytest.raises(RecordError, match="parity is list"):
        ParityReport.from_dict([1])


def test_the_parity_helpers_read_a_typed_report() -> None:
    from edge_deploy.export.parity import lanes_line, lanes_moved_reason, worst_output

    assert worst_output(VERIFY) == OutputError(max_abs=0.49, max_rel=8e-4)
    assert "raw outputs agree" in lanes_moved_reason(VERIFY, "FP16")
    assert lanes_line(LANES, "n") == "n, mean |dx| 0.10 px (limit 1 px)"
