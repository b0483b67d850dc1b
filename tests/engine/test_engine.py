"""The TensorRT stage without TensorRT: option checks, build_plan, rebuild decisions, bad input.

TensorRT cannot be installed here: there is no NVIDIA GPU, and while PyPI's x86_64
tensorrt bindings wheels are real, the libraries (tensorrt-cu*-libs) are source packages
that download from NVIDIA at install time, which this environment cannot reach. So
tests/support/trt_double.py replaces the `tensorrt` module under
edge_deploy.machine.tensorrt_api (see tests/support/jetson_fixtures.py). Everything else is real: the ONNX file, ONNX Runtime, the
files, the fake Jetson roots of tests/data/jetson_root. The builders, verification,
fingerprints and calibration have their own test modules; real builds are in
tests/engine/test_tensorrt.py and run on a Jetson.
"""
from __future__ import annotations

from dataclasses import replace

import json
from pathlib import Path

import pytest

from edge_deploy.artifact.manifest import BatchRange
from lane_onnx import write_lane_onnx
from trt_double import ENGINE_IO, ROWS, FakeEngineSpec, Recording, file_names

from edge_deploy.artifact.manifest import file_entry, sha256_file
from edge_deploy.engine import plan as engine
from edge_deploy.machine.facts import device_facts
from edge_deploy.core.sizes import GiB, MiB, parse_size
from edge_deploy.errors import EngineError
from edge_deploy.artifact.records import Fp16Node

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, ... (shared fixtures)


# --------------------------------------------------------------------------- option checks


def test_workspace_is_derived_from_available_memory(board) -> None:
    orin = device_facts(board("agx_orin_jp60"))
    assert engine.workspace_size(None, orin, 10 * MiB) == engine.DEFAULT_WORKSPACE_CAP
    nano = device_facts(board("orin_nano_jp62"))
    size = engine.workspace_size(None, nano, 10 * MiB)
    expected = (nano.mem_available - engine.BUILD_RESERVE - 30 * MiB) // 2
    assert size % MiB == 0 and expected - MiB < size <= expected
    assert size < nano.mem_available - engine.BUILD_RESERVE


def test_workspace_bad_values_are_one_line_errors(board) -> None:
    nano = device_facts(board("orin_nano_jp62"))
    with pytest.raises(EngineError, match="too small"):
        engine.workspace_size(1 * MiB, nano, 0)
    with pytest.raises(EngineError, match="more than this device's memory"):
        engine.workspace_size(64 * GiB, nano, 0)
    assert engine.workspace_size(512 * MiB, nano, 0) == 512 * MiB
    nano.mem_available = 1100 * MiB
    with pytest.raises(EngineError, match="too little to build"):
        engine.workspace_size(None, nano, 10 * MiB)


def test_parse_size() -> None:
    assert parse_size("2G") == 2 * GiB
    assert parse_size("512MiB") == 512 * MiB
    assert parse_size("1.5g") == 3 * GiB // 2
    assert parse_size("4096") == 4096
    with pytest.raises(EngineError):
        parse_size("lots")


def test_dla_needs_a_board_with_dla(board) -> None:
    with pytest.raises(EngineError, match="has no DLA"):
        engine.check_dla(0, device_facts(board("orin_nano_jp62")))
    orin = device_facts(board("agx_orin_jp60"))
    assert orin.dla_cores == 2
    for core in (2, -1):
        with pytest.raises(EngineError, match="DLA cores 0..1"):
            engine.check_dla(core, orin)
    # accepted: both cores of the Orin, and no DLA asked where there is none
    assert [engine.check_dla(core, orin) for core in (0, 1)] == [None, None]
    assert engine.check_dla(None, device_facts(board("x86_desktop"))) is None


def test_profile_from_the_batch_range(artifact) -> None:
    _, manifest = artifact
    assert engine.optimisation_profile(manifest) == {
        "input": ([1, 3, 360, 640], [1, 3, 360, 640], [4, 3, 360, 640])}
    manifest.io = replace(manifest.io, inputs=(replace(manifest.io.inputs[0], shape=(2, 3, 360, 640)),))
    assert engine.optimisation_profile(manifest) == {}
    manifest.io = replace(manifest.io, inputs=(replace(manifest.io.inputs[0], shape=(-1, 3, -1, 640)),))
    with pytest.raises(EngineError, match="dynamic axes other than the batch"):
        engine.optimisation_profile(manifest)


def test_fp16_report_nodes_become_pins(artifact) -> None:
    _, manifest = artifact
    big = Fp16Node(node="big.weight", op="initializer", output="big.weight")
    manifest.fp16 = replace(manifest.fp16, nodes=(*manifest.fp16.nodes, big))
    assert engine.fp32_pins(manifest) == [("head", "rows")]  # an initializer is no layer to pin
    with pytest.raises(EngineError, match="--precision"):
        engine.build_settings(manifest, engine.EngineOptions(precision="fp8"), GiB)
    with pytest.raises(EngineError, match="0..5"):
        engine.build_settings(manifest, engine.EngineOptions(optimization_level=9), GiB)


# --------------------------------------------------------------------------- build_plan with the double


def test_build_plan_writes_verifies_and_records(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    fake_trt("8.6.1")
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"PLAN8.6.1"
    assert file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan"}
    assert section.tensorrt == "8.6.1" and section.builder == "python"
    assert (section.l4t, section.jetpack, section.gpu, section.compute_capability) == ("36.3.0", "6.0", "Orin", "8.7")
    assert section.device == "NVIDIA Jetson AGX Orin Developer Kit" and section.nvpmodel == "MAXN"
    assert section.cuda == "12.2.140" and section.precision == "fp16" and section.dla_core is None
    assert section.onnx_sha256 == sha256_file(directory / "model.onnx")
    assert section.profile == {"input": {"min": [1, 3, 360, 640], "opt": [1, 3, 360, 640], "max": [4, 3, 360, 640]}}
    assert section.workspace_bytes == engine.DEFAULT_WORKSPACE_CAP and section.fp32_layers == ["head"]
    assert section.build_time.endswith("Z")
    assert section.verify["io"] == "ok" and section.verify["run"]["status"] == "skipped"
    assert any("not run" in w and "pycuda" in w for w in reporter.warnings)
    json.dumps(section.to_dict())  # the manifest must be able to store it


def test_dla_plan_is_verified_and_checked_on_its_dla_core(fake_trt, board, artifact) -> None:
    # IRuntime's DLA core defaults to -1: a DLA plan must be deserialized with the core it was built for.
    directory, manifest = artifact
    manifest.io = replace(manifest.io, batch=BatchRange(1, 1, 1, True))  # DLA: min = opt = max
    frame = (1, 3, 360, 640)
    trt = fake_trt("8.6.2", engine=FakeEngineSpec([ENGINE_IO.tensors[0][:4] + ((frame, frame, frame),),
                                                   ENGINE_IO.tensors[1]]))  # the board's libnvinfer
    manifest.plan = engine.build_plan(directory, manifest, engine.EngineOptions(dla_core=1),
                                         root=board("agx_orin_jp60"))
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    assert ("config.DLA_core", 1) in trt.calls and ("runtime.DLA_core", 1) in trt.calls
    trt.calls.clear()
    engine.check_existing_plan(directory, manifest, device_facts(board("agx_orin_jp60")))
    assert trt.calls == [("runtime.DLA_core", 1)]
    trt.calls.clear()
    engine.build_plan(directory, manifest, engine.EngineOptions(force=True), root=board("agx_orin_jp60"))
    assert not any(c[0] == "runtime.DLA_core" for c in trt.calls)


def test_same_fingerprint_skips_force_and_changes_rebuild(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    orin = board("agx_orin_jp60")
    trt = fake_trt("8.6.1")
    manifest.plan = engine.build_plan(directory, manifest, engine.EngineOptions(), root=orin)
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    builds = lambda: trt.calls.count(("builder.build_serialized_network",))  # noqa: E731

    reporter = Recording()
    again = engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=orin)
    assert again == manifest.plan and builds() == 1
    assert any("up to date" in m and "--force" in m for m in reporter.infos)

    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(force=True), reporter, root=orin)
    assert builds() == 2 and any("--force" in m for m in reporter.infos)

    write_lane_onnx(directory / "model.onnx", rows=ROWS, seed=7)  # the model changed
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=orin)
    assert builds() == 3 and any(m.startswith("rebuilding model.plan: ONNX model") for m in reporter.infos)


def test_new_tensorrt_and_device_rebuild_saying_what_changed(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    fake_trt("8.6.1")
    manifest.plan = engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    fake_trt("10.3.0")
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=board("orin_nano_jp62"))
    message = next(m for m in reporter.infos if m.startswith("rebuilding"))
    assert "TensorRT: 8.6.1 -> 10.3.0" in message and "L4T release: 36.3.0 -> 36.4.3" in message
    assert section.tensorrt == "10.3.0" and (directory / "model.plan").read_bytes() == b"PLAN10.3.0"
    # The Orin Nano is a small device in a poor state: the build says so.
    warnings = " | ".join(reporter.warnings)
    assert "nvpmodel" in warnings and "jetson_clocks" in warnings and "tritonserver" in warnings and "swap" in warnings


def test_changed_plan_file_is_rebuilt_not_trusted(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    orin = board("agx_orin_jp60")
    fake_trt("8.6.1")
    manifest.plan = engine.build_plan(directory, manifest, engine.EngineOptions(), root=orin)
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    (directory / "model.plan").write_bytes(b"truncated")
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=orin)
    assert any("does not match its manifest entry" in m for m in reporter.infos)
    assert (directory / "model.plan").read_bytes() == b"PLAN8.6.1"


def test_failed_build_or_verification_keeps_the_existing_plan(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    (directory / "model.plan").write_bytes(b"the previous good plan")
    fake_trt("8.6.1", build_fails=True)
    with pytest.raises(EngineError, match="Could not find any implementation"):
        engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"the previous good plan"
    assert file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan"}

    wrong_io = FakeEngineSpec([ENGINE_IO.tensors[0], ("predict_lanes", False, "FLOAT", (-1, 1000, 77), None)])
    fake_trt("8.6.1", engine=wrong_io)
    with pytest.raises(EngineError, match=r"has shape \[-1, 1000, 77\], the manifest says \[-1, 64, 77\]"):
        engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"the previous good plan"
    assert file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan"}


@pytest.mark.parametrize(
    ("options", "root", "match"),
    [
        (dict(dla_core=0), "orin_nano_jp62", "has no DLA"),
        (dict(workspace=8 * MiB), "agx_orin_jp60", "too small"),
        (dict(precision="int8", calibration_images="EMPTY"), "agx_orin_jp60", "holds no images"),
        (dict(precision="int8"), "agx_orin_jp60", "needs --calibration-images"),
    ],
)
def test_bad_options_fail_before_anything_is_written(fake_trt, board, artifact, tmp_path, options, root, match) -> None:
    directory, manifest = artifact
    (directory / "model.plan").write_bytes(b"old")
    if options.get("calibration_images") == "EMPTY":
        options["calibration_images"] = tmp_path / "empty"
        options["calibration_images"].mkdir()
    trt = fake_trt("8.6.1")
    with pytest.raises(EngineError, match=match) as info:
        engine.build_plan(directory, manifest, engine.EngineOptions(**options), root=board(root))
    assert "\n" not in str(info.value)
    assert ("builder.build_serialized_network",) not in trt.calls
    assert (directory / "model.plan").read_bytes() == b"old" and file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan"}


def test_no_tensorrt_at_all(no_tensorrt, board, artifact) -> None:
    directory, manifest = artifact
    assert engine.available_builder("auto") is None
    with pytest.raises(EngineError) as info:
        engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    message = str(info.value)
    assert message == engine.tensorrt_missing_message()
    assert "JetPack" in message and "python3-libnvinfer" in message and "--system-site-packages" in message
    with pytest.raises(EngineError, match="--builder must be"):
        engine.available_builder("magic")


def test_timing_cache_created_then_corrupt_one_replaced(fake_trt, board, artifact, tmp_path) -> None:
    directory, manifest = artifact
    cache = tmp_path / "caches" / "orin.cache"
    fake_trt("8.6.1")
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(timing_cache=cache), reporter,
                                root=board("agx_orin_jp60"))
    assert cache.read_bytes() == b"TIMING-CACHE:8.6.1" and section.timing_cache == str(cache)
    assert any("will be created" in m for m in reporter.infos)
    cache.write_bytes(b"CORRUPT garbage")
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(timing_cache=cache, force=True), reporter,
                      root=board("agx_orin_jp60"))
    assert any("timing cache is not usable" in w and str(cache) in w for w in reporter.warnings)
    assert cache.read_bytes() == b"TIMING-CACHE:8.6.1"


def test_check_existing_plan(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    orin = device_facts(board("agx_orin_jp60"))
    fake_trt("8.6.2")
    manifest.plan = engine.build_plan(directory, manifest, engine.EngineOptions(), root=Path(orin.root))
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    orin.tensorrt = "8.6.2"
    engine.check_existing_plan(directory, manifest, orin)
    # that pass deserialized the plan and compared its I/O: a plan with other I/O is refused
    fake_trt("8.6.2", engine=FakeEngineSpec([ENGINE_IO.tensors[0], ("predict_lanes", False, "FLOAT", (-1, 9, 77), None)]))
    with pytest.raises(EngineError, match=r"has shape \[-1, 9, 77\], the manifest says \[-1, 64, 77\]"):
        engine.check_existing_plan(directory, manifest, orin)
    assert engine.check_existing_plan(directory, manifest, orin, deserialize=False) is None
    other = replace(manifest, plan=replace(manifest.plan, tensorrt="8.5.2"))
    with pytest.raises(EngineError, match="TensorRT: 8.5.2 -> 8.6.2") as info:
        engine.check_existing_plan(directory, other, orin)
    assert "--force" in str(info.value)
    (directory / "model.plan").write_bytes(b"\x00garbage")
    with pytest.raises(EngineError, match="corrupt or was changed"):
        engine.check_existing_plan(directory, manifest, orin)
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    with pytest.raises(EngineError, match="not a TensorRT plan this machine can load"):
        engine.check_existing_plan(directory, manifest, orin)
