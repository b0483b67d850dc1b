"""The rebuild decision, field by field: what a plan's fingerprint compares, and at which version digit.

`plan_is_current` decides whether `convert` rebuilds model.plan; `plan_mismatch` is
the repository's and doctor's "does this plan run here?". Each case changes one field
of a recorded fingerprint (read back from JSON, as the manifest stores it) and checks
the decision and the line that names the change. The build_plan cases check that the
options reach the fingerprint; TensorRT is the recording double of
tests/support/trt_double.py (it cannot be installed here, see that module).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.artifact.manifest import BatchRange
from trt_double import ENGINE_IO, FakeEngineSpec, Recording, settings

from edge_deploy.artifact.manifest import Manifest, PlanFingerprint, PlanRecord, file_entry
from edge_deploy.engine import plan as engine
from edge_deploy.machine.facts import device_facts
from edge_deploy.engine.fingerprint import plan_fingerprint, plan_is_current
from edge_deploy.machine.plan_fit import plan_mismatch

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt (shared fixtures)

MACHINE = {"tensorrt": "8.6.2.3", "cuda": "12.2.140", "gpu": "Orin", "compute_capability": "8.7", "l4t": "36.3.0"}
ONNX_SHA = "a" * 64


@pytest.fixture
def orin(board):
    """Device facts of an AGX Orin (JetPack 6.0) with the MACHINE values."""
    facts = device_facts(board("agx_orin_jp60"))
    for key, value in MACHINE.items():
        setattr(facts, key, value)
    return facts


def recorded_plan(tmp_path: Path, fingerprint: PlanFingerprint) -> tuple[Path, Manifest]:
    """A model.plan and the manifest that records it with `fingerprint` (through JSON, as stored)."""
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"a plan")
    stored = json.loads(json.dumps({"format": 1, "io": {}, "files": {"model.plan": file_entry(plan).to_dict()},
                                    "plan": fingerprint.to_dict()}))
    return plan, Manifest.from_dict(stored)


# (field, value on this machine, rebuild?, what the change line starts with)
MACHINE_CASES = [
    # TensorRT: a plan is bound to major.minor.patch; the build number does not matter
    ("tensorrt", "9.6.2.3", True, "TensorRT: 8.6.2.3 -> 9.6.2.3"),
    ("tensorrt", "8.5.2.3", True, "TensorRT: 8.6.2.3 -> 8.5.2.3"),
    ("tensorrt", "8.6.1.3", True, "TensorRT: 8.6.2.3 -> 8.6.1.3"),
    ("tensorrt", "8.6.2.6", False, None),
    ("tensorrt", "8.6.2", False, None),
    ("tensorrt", None, True, "TensorRT: the plan was built with 8.6.2.3, this machine has none"),
    # CUDA: major.minor
    ("cuda", "11.2.140", True, "CUDA: 12.2.140 -> 11.2.140"),
    ("cuda", "12.6.140", True, "CUDA: 12.2.140 -> 12.6.140"),
    ("cuda", "12.2.68", False, None),
    ("cuda", "12.2", False, None),
    ("cuda", None, True, "CUDA: the plan was built with 12.2.140, this machine has none"),
    # GPU: the name, whatever its case and surrounding blanks
    ("gpu", "Xavier", True, "GPU: Orin -> Xavier"),
    ("gpu", " ORIN ", False, None),
    ("gpu", None, True, "GPU: the plan was built with Orin, this machine has none"),
    # compute capability and L4T release: exactly
    ("compute_capability", "7.2", True, "compute capability: 8.7 -> 7.2"),
    ("compute_capability", "8.6", True, "compute capability: 8.7 -> 8.6"),
    ("compute_capability", None, True, "compute capability: the plan was built with 8.7, this machine has none"),
    ("l4t", "35.3.0", True, "L4T release: 36.3.0 -> 35.3.0"),
    ("l4t", "36.4.0", True, "L4T release: 36.3.0 -> 36.4.0"),
    ("l4t", "36.3.1", True, "L4T release: 36.3.0 -> 36.3.1"),
    ("l4t", None, True, "L4T release: the plan was built with 36.3.0, this machine has none"),
]


@pytest.mark.parametrize(("key", "value", "rebuild", "line"), MACHINE_CASES)
def test_machine_fields(tmp_path, orin, key, value, rebuild, line) -> None:
    built = settings()
    plan, manifest = recorded_plan(tmp_path, plan_fingerprint(orin, None, ONNX_SHA, built))
    assert plan_is_current(plan, manifest, plan_fingerprint(orin, None, ONNX_SHA, built)) == (True, [])
    setattr(orin, key, value)
    current, changes = plan_is_current(plan, manifest, plan_fingerprint(orin, None, ONNX_SHA, built))
    assert current is not rebuild
    assert changes == ([line] if rebuild else [])
    # the repository and doctor ask the same about the machine
    assert plan_mismatch(manifest.plan, orin) == changes


def test_the_tensorrt_a_builder_reports_counts_over_the_machines(tmp_path, orin) -> None:
    # trtexec (or the tensorrt module) says which TensorRT builds; facts.tensorrt is only the fallback
    plan, manifest = recorded_plan(tmp_path, plan_fingerprint(orin, "8.6.2", ONNX_SHA, settings()))
    assert manifest.plan.tensorrt == "8.6.2"
    orin.tensorrt = "10.3.0"
    current, changes = plan_is_current(plan, manifest, plan_fingerprint(orin, "8.6.1", ONNX_SHA, settings()))
    assert (current, changes) == (False, ["TensorRT: 8.6.2 -> 8.6.1"])


PROFILE_4 = {"input": ([1, 3, 360, 640], [2, 3, 360, 640], [4, 3, 360, 640])}

# (what changes, the build inputs after the change, rebuild?, the change line)
BUILD_CASES = [
    ("nothing", {}, False, None),
    ("onnx", {"sha": "b" * 64}, True, "ONNX model (sha256): aaaaaaaaaaaa… -> bbbbbbbbbbbb…"),
    ("precision", {"settings": {"precision": "fp32", "fp32_pins": [("head", "rows")]}}, True,
     "precision: fp16 -> fp32"),
    ("dla core from none", {"settings": {"dla_core": 0}}, True, "DLA core: none -> 0"),
    ("dla core", {"before": {"dla_core": 0}, "settings": {"dla_core": 1}}, True, "DLA core: 0 -> 1"),
    ("profile max", {"settings": {"profile": {"input": ([1, 3, 360, 640], [2, 3, 360, 640], [8, 3, 360, 640])}}},
     True, "optimisation profile: input: 1x3x360x640..4x3x360x640 opt 2x3x360x640 -> "
           "input: 1x3x360x640..8x3x360x640 opt 2x3x360x640"),
    ("profile opt", {"settings": {"profile": {"input": ([1, 3, 360, 640], [1, 3, 360, 640], [4, 3, 360, 640])}}},
     True, "optimisation profile: input: 1x3x360x640..4x3x360x640 opt 2x3x360x640 -> "
           "input: 1x3x360x640..4x3x360x640 opt 1x3x360x640"),
    ("profile min", {"settings": {"profile": {"input": ([2, 3, 360, 640], [2, 3, 360, 640], [4, 3, 360, 640])}}},
     True, "optimisation profile: input: 1x3x360x640..4x3x360x640 opt 2x3x360x640 -> "
           "input: 2x3x360x640..4x3x360x640 opt 2x3x360x640"),
    ("profile as tuples", {"settings": {"profile": {"input": ((1, 3, 360, 640), (2, 3, 360, 640), (4, 3, 360, 640))}}},
     False, None),
    ("optimisation level from none", {"settings": {"optimization_level": 3}}, True,
     "builder optimisation level: none -> 3"),
    ("optimisation level", {"before": {"optimization_level": 3}, "settings": {"optimization_level": 5}}, True,
     "builder optimisation level: 3 -> 5"),
    ("fp32 nodes", {"settings": {"fp32_pins": [("head", "rows"), ("attention", "att")]}}, True,
     "FP32-pinned nodes: 1 node(s) -> 2 node(s)"),
    ("fp32 node renamed", {"settings": {"fp32_pins": [("tail", "rows")]}}, True,
     "FP32-pinned nodes: 1 node(s) -> 1 node(s)"),
    ("calibration from none", {"digest": "c" * 64}, True, "INT8 calibration images: none -> cccccccccccc…"),
    ("calibration", {"before_digest": "c" * 64, "digest": "d" * 64}, True,
     "INT8 calibration images: cccccccccccc… -> dddddddddddd…"),
    ("typing", {"settings": {"strongly_typed": True}}, True, "network typing: weak -> strong"),
    ("onnx file", {"onnx": "model_fp16.onnx"}, True, "ONNX file built: model.onnx -> model_fp16.onnx"),
]


@pytest.mark.parametrize(("what", "change", "rebuild", "line"), BUILD_CASES, ids=[c[0] for c in BUILD_CASES])
def test_build_fields(tmp_path, orin, what, change, rebuild, line) -> None:
    before = settings(profile=PROFILE_4, **change.get("before", {}))
    recorded = plan_fingerprint(orin, None, ONNX_SHA, before, change.get("before_digest"))
    plan, manifest = recorded_plan(tmp_path, recorded)
    after = replace(before, **change.get("settings", {}))
    now = plan_fingerprint(orin, None, change.get("sha", ONNX_SHA), after, change.get("digest", change.get("before_digest")),
                           onnx_name=change.get("onnx", "model.onnx"))
    current, changes = plan_is_current(plan, manifest, now)
    assert current is not rebuild
    assert changes == ([line] if rebuild else [])
    assert plan_mismatch(manifest.plan, orin) == []  # the same machine: the plan still runs here


def test_no_decision_without_a_plan_a_record_or_the_recorded_bytes(tmp_path, orin) -> None:
    fingerprint = plan_fingerprint(orin, None, ONNX_SHA, settings())
    plan, manifest = recorded_plan(tmp_path, fingerprint)
    assert plan_is_current(plan, replace(manifest, plan=None), fingerprint) == (False, [])
    assert plan_mismatch(None, orin) == ["no plan fingerprint recorded (built by something other than edge-deploy)"]
    plan.write_bytes(b"another plan")
    assert plan_is_current(plan, manifest, fingerprint) == (
        False, ["the existing model.plan does not match its manifest entry (changed or corrupt)"])
    plan.unlink()
    assert plan_is_current(plan, manifest, fingerprint) == (False, [])


# --- build_plan: the options reach the fingerprint ---------------------------------------------


def build(directory: Path, manifest: Manifest, root: Path, **options) -> tuple[PlanRecord, Recording]:
    """build_plan, then record the section and the plan's file entry as convert does."""
    reporter = Recording()
    manifest.plan = engine.build_plan(directory, manifest, engine.EngineOptions(**options), reporter, root=root)
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    return manifest.plan, reporter


def rebuilt(reporter: Recording) -> list[str]:
    return [m for m in reporter.infos if m.startswith("rebuilding model.plan")]


@pytest.mark.parametrize(
    ("first", "second", "line"),
    [
        ({"dla_core": 0}, {"dla_core": 1}, "DLA core: 0 -> 1"),
        ({}, {"dla_core": 0}, "DLA core: none -> 0"),
        ({"optimization_level": 3}, {"optimization_level": 4}, "builder optimisation level: 3 -> 4"),
        ({"precision": "fp16"}, {"precision": "fp32"}, "precision: fp16 -> fp32"),
    ],
)
def test_build_plan_records_each_option_and_rebuilds_when_it_changes(fake_trt, board, artifact, first, second,
                                                                     line) -> None:
    directory, manifest = artifact
    engine_io = ENGINE_IO
    if "dla_core" in first or "dla_core" in second:  # the DLA takes one input shape only (check_dla)
        manifest.io = replace(manifest.io, batch=BatchRange(1, 1, 1, True))
        one = (1, 3, 360, 640)
        engine_io = FakeEngineSpec([("input", True, "FLOAT", (-1, 3, 360, 640), (one, one, one)),
                                    *ENGINE_IO.tensors[1:]])
    orin = board("agx_orin_jp60")
    trt = fake_trt("8.6.2", engine=engine_io)
    section, _ = build(directory, manifest, orin, **first)
    for key, value in first.items():
        assert getattr(section, key) == value
    _, reporter = build(directory, manifest, orin, **first)
    assert trt.calls.count(("builder.build_serialized_network",)) == 1 and rebuilt(reporter) == []
    section, reporter = build(directory, manifest, orin, **second)
    assert trt.calls.count(("builder.build_serialized_network",)) == 2
    (message,) = rebuilt(reporter)
    assert line in message.split(": ", 1)[1].split("; ")
    for key, value in second.items():
        assert getattr(section, key) == value


def test_int8_plan_is_rebuilt_when_a_calibration_image_changes(fake_trt, board, artifact, tmp_path) -> None:
    import cv2

    directory, manifest = artifact
    orin = board("agx_orin_jp60")
    trt = fake_trt("8.6.2")
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        cv2.imwrite(str(frames / f"{i}.png"), np.full((360, 640, 3), 60 * i, np.uint8))
    section, _ = build(directory, manifest, orin, precision="int8", calibration_images=frames)
    first_digest = section.calibration
    assert first_digest is not None and len(first_digest) == 64
    _, reporter = build(directory, manifest, orin, precision="int8", calibration_images=frames)
    assert rebuilt(reporter) == [] and trt.calls.count(("builder.build_serialized_network",)) == 1
    cv2.imwrite(str(frames / "2.png"), np.full((360, 640, 3), 7, np.uint8))  # the last image only
    section, reporter = build(directory, manifest, orin, precision="int8", calibration_images=frames)
    (message,) = rebuilt(reporter)
    assert f"INT8 calibration images: {first_digest[:12]}… -> {section.calibration[:12]}…" in message
    assert trt.calls.count(("builder.build_serialized_network",)) == 2


def test_version_numbers_are_read_up_to_the_first_part_without_digits() -> None:
    from edge_deploy.machine.tensorrt_api import version_tuple

    assert version_tuple("10.3.0.26") == (10, 3, 0, 26)
    assert version_tuple("8.6.1.post1")[:3] == (8, 6, 1)
    assert version_tuple("12.x.1") == (12,) and version_tuple("") == ()
