"""The TensorRT stage without TensorRT: option mapping, trtexec, fingerprints, rebuilds, bad input.

TensorRT cannot be installed here (no GPU; PyPI's tensorrt packages are stubs),
so two doubles stand in for it, each only at its boundary:
- tests/trt_double.py replaces the `tensorrt` module under edge_deploy.tensorrt_api
  and records the calls a build makes (the option -> builder-setting mapping);
- a `trtexec` script written below replaces NVIDIA's tool to check the subprocess
  plumbing (argv, exit codes, the one-line error, the atomic rename of the plan).
Everything else is real: the ONNX file, ONNX Runtime, the decoder, the files,
the fake Jetson roots of tests/fixtures/jetson_root. Real builds are in
tests/test_tensorrt.py and run on a Jetson.
"""
from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_deploy import engine, tensorrt_api
from edge_deploy.device import device_facts
from edge_deploy.errors import EngineError
from edge_deploy.manifest import file_entry, sha256_file
from edge_deploy.progress import Reporter

from lane_onnx import lane_manifest, write_lane_onnx
from trt_double import FakeEngineSpec, make_tensorrt

FIXTURES = Path(__file__).parent / "fixtures" / "jetson_root"
GiB, MiB = 1 << 30, 1 << 20
ROWS = 64
ENGINE_IO = FakeEngineSpec([
    ("input", True, "FLOAT", (-1, 3, 360, 640), ((1, 3, 360, 640), (1, 3, 360, 640), (4, 3, 360, 640))),
    ("predict_lanes", False, "FLOAT", (-1, ROWS, 77), None),
])


class Recording(Reporter):
    def __init__(self) -> None:
        super().__init__()
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


@pytest.fixture
def board(tmp_path: Path):
    def make(name: str) -> Path:
        root = tmp_path / "roots" / name
        if root.exists():
            return root
        shutil.copytree(FIXTURES / name, root)
        tool = root / "usr" / "sbin" / "nvpmodel"
        if tool.exists():
            tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
        return root

    return make


@pytest.fixture
def artifact(tmp_path: Path) -> tuple[Path, dict]:
    directory = tmp_path / "artifact"
    directory.mkdir()
    write_lane_onnx(directory / "model.onnx", rows=ROWS)
    return directory, lane_manifest(directory, ROWS)


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Neither the tensorrt module nor pycuda nor trtexec, whatever this machine has."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    monkeypatch.delenv("TRTEXEC", raising=False)
    monkeypatch.setattr(engine, "TRTEXEC_DEFAULT", Path("/nonexistent/trtexec"))
    monkeypatch.setenv("PATH", "/nonexistent")


@pytest.fixture
def fake_trt(monkeypatch, no_tensorrt):
    """Install the recording tensorrt double (see tests/trt_double.py for why it is a double)."""

    def install(version: str = "8.6.1", **kwargs):
        kwargs.setdefault("engine", ENGINE_IO)
        module = make_tensorrt(version, **kwargs)
        monkeypatch.setitem(sys.modules, "tensorrt", module)
        return module

    return install


def settings(**overrides) -> tensorrt_api.BuildSettings:
    base = dict(
        precision="fp16",
        workspace_bytes=1 * GiB,
        profile={"input": ([1, 3, 360, 640], [2, 3, 360, 640], [4, 3, 360, 640])},
        fp32_pins=[("head", "rows")],
        optimization_level=None,
        timing_cache=None,
    )
    base.update(overrides)
    return tensorrt_api.BuildSettings(**base)


LAYERS = [
    ("head", [("rows", "FLOAT")]),
    ("reshape", [("predict_lanes", "FLOAT")]),
    ("shape", [("shape_out", "INT32")]),
]


# --------------------------------------------------------------------------- option -> TensorRT calls


def test_fp16_on_86_maps_every_option(tmp_path: Path) -> None:
    trt = make_tensorrt("8.6.1", layers=LAYERS)
    result = tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(optimization_level=4, timing_cache=b""))
    calls = trt.calls
    assert calls[0] == ("builder.create_network", 1)  # 1 << EXPLICIT_BATCH
    assert ("config.set_memory_pool_limit", "WORKSPACE", 1 * GiB) in calls
    assert ("config.set_flag", "FP16") in calls and ("config.set_flag", "INT8") not in calls
    assert ("layer.precision", "head", "FLOAT") in calls
    assert ("layer.set_output_type", "head", 0, "FLOAT") in calls
    assert ("config.set_flag", "OBEY_PRECISION_CONSTRAINTS") in calls
    assert not any(c[0].startswith("layer.") and c[1] != "head" for c in calls)
    assert ("profile.set_shape", "input", (1, 3, 360, 640), (2, 3, 360, 640), (4, 3, 360, 640)) in calls
    assert ("config.builder_optimization_level", 4) in calls
    assert ("config.create_timing_cache", b"") in calls
    assert calls[-1] == ("builder.build_serialized_network",)
    assert not any(c[0] in ("config.default_device_type", "config.DLA_core") for c in calls)
    assert result.plan == b"PLAN8.6.1"
    assert result.timing_cache == b"TIMING-CACHE:8.6.1"
    assert result.pinned_layers == ["head"] and result.unmatched_nodes == [] and result.warnings == []


def test_tensorrt10_creates_explicit_batch_networks_without_the_flag(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", layers=LAYERS)
    tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(optimization_level=2))
    assert trt.calls[0] == ("builder.create_network", 0)
    assert ("config.builder_optimization_level", 2) in trt.calls


def test_tensorrt85_has_no_builder_optimization_level(tmp_path: Path) -> None:
    trt = make_tensorrt("8.5.2", layers=LAYERS)
    result = tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(optimization_level=5))
    assert not any(c[0] == "config.builder_optimization_level" for c in trt.calls)
    assert any("no builder optimization level" in w for w in result.warnings)


def test_dla_core_with_gpu_fallback(tmp_path: Path) -> None:
    trt = make_tensorrt("8.6.1", layers=LAYERS)
    tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(dla_core=1))
    assert ("config.default_device_type", "DLA") in trt.calls
    assert ("config.DLA_core", 1) in trt.calls
    assert ("config.set_flag", "GPU_FALLBACK") in trt.calls


def test_fp32_sets_no_reduced_precision_and_pins_nothing(tmp_path: Path, artifact) -> None:
    _, manifest = artifact
    built = engine.build_settings(manifest, engine.EngineOptions(precision="fp32"), 256 * MiB)
    assert built.fp32_pins == []
    trt = make_tensorrt("8.6.1", layers=LAYERS)
    tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", built)
    assert not any(c[0] == "config.set_flag" for c in trt.calls)
    assert ("config.set_memory_pool_limit", "WORKSPACE", 256 * MiB) in trt.calls


def test_int8_sets_int8_fp16_calibrator_and_calibration_profile(tmp_path: Path) -> None:
    trt = make_tensorrt("8.6.1", layers=LAYERS)
    cache = tmp_path / "calib.cache"
    cache.write_bytes(b"TRT-8601-EntropyCalibration2\ninput: 3c010a14\n")
    calibration = tensorrt_api.Calibration("input", 2, lambda: iter(()), cache)
    tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(precision="int8", calibration=calibration))
    assert ("config.set_flag", "INT8") in trt.calls and ("config.set_flag", "FP16") in trt.calls
    assert ("config.set_calibration_profile",) in trt.calls
    calibrator = next(c[1] for c in trt.calls if c[0] == "config.int8_calibrator")
    assert isinstance(calibrator, trt.IInt8EntropyCalibrator2)
    assert calibrator.get_batch_size() == 2
    assert calibrator.read_calibration_cache() == cache.read_bytes()
    assert calibrator.get_batch(["input"]) is None  # no batches: calibration ends


def test_pins_match_by_output_tensor_and_skip_integer_layers(tmp_path: Path) -> None:
    # The ONNX parser may give a node's layer another name; its output tensor still matches.
    trt = make_tensorrt("8.6.1", layers=[("head_1", [("rows", "FLOAT")]), ("shape", [("shape_out", "INT32")])])
    pins = [("head", "rows"), ("shape", "shape_out"), ("gone", "nothing")]
    result = tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(fp32_pins=pins))
    assert result.pinned_layers == ["head_1"]
    assert ("layer.precision", "head_1", "FLOAT") in trt.calls
    assert not any(c[0].startswith("layer.") and c[1] == "shape" for c in trt.calls)
    assert result.unmatched_nodes == ["shape", "gone"]


@pytest.mark.parametrize(("cache", "problem"), [(b"CORRUPT\x00\x01", "corrupt"), (b"OTHER-VERSION...", "another")])
def test_unusable_timing_cache_is_replaced_with_a_warning(tmp_path: Path, cache: bytes, problem: str) -> None:
    trt = make_tensorrt("8.6.1", layers=LAYERS)
    result = tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(timing_cache=cache))
    assert len(result.warnings) == 1 and "timing cache is not usable" in result.warnings[0]
    assert problem in result.warnings[0]
    assert ("config.create_timing_cache", b"") in trt.calls  # a fresh cache instead
    assert result.plan == b"PLAN8.6.1" and result.timing_cache == b"TIMING-CACHE:8.6.1"


def test_failed_build_is_one_line_with_tensorrts_reason(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", layers=LAYERS, build_fails=True)
    with pytest.raises(EngineError) as info:
        tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings())
    message = str(info.value)
    assert "\n" not in message and "Could not find any implementation for node conv1" in message


def test_deserialize_tells_corrupt_from_other_version() -> None:
    facade = tensorrt_api.TensorRT(make_tensorrt("10.3.0", engine=ENGINE_IO))
    with pytest.raises(EngineError, match="corrupt") as corrupt:
        facade.deserialize(b"\x00garbage", where="x.plan")
    with pytest.raises(EngineError, match="another TensorRT version") as other:
        facade.deserialize(b"PLAN8.6.1", where="x.plan")
    assert "\n" not in str(corrupt.value) + str(other.value)
    tensors = facade.io_tensors(facade.deserialize(b"PLAN10.3.0"))
    assert [(t.name, t.is_input, t.datatype, t.shape) for t in tensors] == [
        ("input", True, "FP32", [-1, 3, 360, 640]), ("predict_lanes", False, "FP32", [-1, ROWS, 77])]
    assert tensors[0].profile == ([1, 3, 360, 640], [1, 3, 360, 640], [4, 3, 360, 640])


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
    assert engine.parse_size("2G") == 2 * GiB
    assert engine.parse_size("512MiB") == 512 * MiB
    assert engine.parse_size("1.5g") == 3 * GiB // 2
    assert engine.parse_size("4096") == 4096
    with pytest.raises(EngineError):
        engine.parse_size("lots")


def test_dla_needs_a_board_with_dla(board) -> None:
    with pytest.raises(EngineError, match="has no DLA"):
        engine.check_dla(0, device_facts(board("orin_nano_jp62")))
    orin = device_facts(board("agx_orin_jp60"))
    with pytest.raises(EngineError, match="DLA cores 0..1"):
        engine.check_dla(2, orin)
    engine.check_dla(1, orin)
    engine.check_dla(None, device_facts(board("x86_desktop")))


def test_calibration_images_errors(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="needs --calibration-images"):
        engine.calibration_images(None)
    with pytest.raises(EngineError, match="not a directory"):
        engine.calibration_images(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(EngineError, match="holds no images"):
        engine.calibration_images(empty)


def test_calibration_batches_use_the_models_preprocessing(tmp_path: Path, artifact) -> None:
    import cv2

    directory, manifest = artifact
    images = tmp_path / "frames"
    images.mkdir()
    rng = np.random.default_rng(1)
    for i in range(5):
        cv2.imwrite(str(images / f"f{i}.png"), rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8))
    found = engine.calibration_images(images)
    assert len(found) == 5
    profile = engine.optimisation_profile(manifest)
    calibration = engine.make_calibration(directory, manifest, found, "ab" * 32, profile)
    batches = list(calibration.batches())
    assert calibration.batch_size == 1 and len(batches) == 5
    raw = cv2.imread(str(found[0]))
    expected = cv2.resize(raw, (640, 360), interpolation=cv2.INTER_CUBIC).astype(np.float32) / 255.0
    np.testing.assert_allclose(batches[0][0], expected.transpose(2, 0, 1), rtol=0, atol=1e-6)
    assert calibration.cache_path.parent == directory


def test_profile_from_the_batch_range(artifact) -> None:
    _, manifest = artifact
    assert engine.optimisation_profile(manifest) == {
        "input": ([1, 3, 360, 640], [1, 3, 360, 640], [4, 3, 360, 640])}
    manifest["io"]["inputs"][0]["shape"] = [2, 3, 360, 640]
    assert engine.optimisation_profile(manifest) == {}
    manifest["io"]["inputs"][0]["shape"] = [-1, 3, -1, 640]
    with pytest.raises(EngineError, match="dynamic axes other than the batch"):
        engine.optimisation_profile(manifest)


def test_fp16_report_nodes_become_pins(artifact) -> None:
    _, manifest = artifact
    manifest["fp16"]["nodes"].append({"node": "big.weight", "op": "initializer", "output": "big.weight"})
    assert engine.fp32_pins(manifest) == [("head", "rows")]
    with pytest.raises(EngineError, match="--precision"):
        engine.build_settings(manifest, engine.EngineOptions(precision="fp8"), GiB)
    with pytest.raises(EngineError, match="0..5"):
        engine.build_settings(manifest, engine.EngineOptions(optimization_level=9), GiB)


# --------------------------------------------------------------------------- trtexec argv


def test_trtexec_argv_for_fp16_dla_and_pins(tmp_path: Path) -> None:
    argv = engine.trtexec_argv(
        Path("/usr/src/tensorrt/bin/trtexec"), Path("/a/model.onnx"), Path("/a/.model.plan.tmp"),
        settings(dla_core=0, optimization_level=3, fp32_pins=[("head", "rows"), ("split", "a")]),
        timing_cache=Path("/c/timing.cache"), layer_outputs={"split": 2}, tensorrt_version="8.6.2",
    )
    assert argv == [
        "/usr/src/tensorrt/bin/trtexec",
        "--onnx=/a/model.onnx",
        "--saveEngine=/a/.model.plan.tmp",
        "--skipInference",
        "--memPoolSize=workspace:1024",
        "--fp16",
        "--minShapes=input:1x3x360x640",
        "--optShapes=input:2x3x360x640",
        "--maxShapes=input:4x3x360x640",
        "--precisionConstraints=obey",
        "--layerPrecisions=head:fp32,split:fp32",
        "--layerOutputTypes=head:fp32,split:fp32+fp32",
        "--useDLACore=0",
        "--allowGPUFallback",
        "--builderOptimizationLevel=3",
        "--timingCacheFile=/c/timing.cache",
    ]


def test_trtexec_argv_version_and_precision_rules() -> None:
    trtexec, onnx, out = Path("trtexec"), Path("m.onnx"), Path("p")
    fp32 = engine.trtexec_argv(trtexec, onnx, out, settings(precision="fp32", fp32_pins=[], profile={},
                                                            optimization_level=2), tensorrt_version="8.5.2")
    assert not any(a.startswith(("--fp16", "--int8", "--builderOptimizationLevel", "--minShapes")) for a in fp32)
    with pytest.raises(EngineError, match="calibration cache"):
        engine.trtexec_argv(trtexec, onnx, out, settings(precision="int8"))
    int8 = engine.trtexec_argv(trtexec, onnx, out, settings(precision="int8"), calibration_cache=Path("c.cache"))
    assert {"--fp16", "--int8", "--calib=c.cache"} <= set(int8)
    with pytest.raises(EngineError, match="cannot be passed to trtexec"):
        engine.trtexec_argv(trtexec, onnx, out, settings(fp32_pins=[("Conv:0,1", "x")]))


def test_trtexec_version_banner_and_error_line() -> None:
    assert engine.parse_trtexec_version("&&&& RUNNING TensorRT.trtexec [TensorRT v8602] # trtexec") == "8.6.2"
    assert engine.parse_trtexec_version("&&&& RUNNING TensorRT.trtexec [TensorRT v100300] [b26] # x") == "10.3.0"
    assert engine.parse_trtexec_version("no banner") is None
    out = ("[11/22/2026-07:00:01] [I] Start parsing network model.\n"
           "[11/22/2026-07:00:02] [E] Error[4]: [network.cpp::validate::3100] Error Code 4: bad profile\n"
           "[11/22/2026-07:00:02] [E] Engine could not be created from network\n")
    assert engine.trtexec_error_line(out, "", 1) == "Error[4]: [network.cpp::validate::3100] Error Code 4: bad profile"
    assert engine.trtexec_error_line("", "Segmentation fault\n", 139) == "Segmentation fault"
    assert engine.trtexec_error_line("", "", 3) == "exit code 3, no output"


# --------------------------------------------------------------------------- fingerprints


def test_fingerprint_diff_names_what_changed(board, artifact) -> None:
    _, manifest = artifact
    built = engine.build_settings(manifest, engine.EngineOptions(), GiB)
    orin = device_facts(board("agx_orin_jp60"))
    recorded = engine.plan_fingerprint(orin, "8.6.2.3", "a" * 64, built)
    assert engine.fingerprint_diff(recorded, engine.plan_fingerprint(orin, "8.6.2", "a" * 64, built)) == []
    nano = device_facts(board("orin_nano_jp62"))
    changes = engine.fingerprint_diff(recorded, engine.plan_fingerprint(nano, "10.3.0", "b" * 64, built))
    text = " | ".join(changes)
    assert "TensorRT: 8.6.2.3 -> 10.3.0" in text
    assert "CUDA: 12.2.140 -> 12.6.68" in text
    assert "L4T release: 36.3.0 -> 36.4.3" in text
    assert "ONNX model (sha256): aaaaaaaaaaaa… -> bbbbbbbbbbbb…" in text
    assert not any(c.startswith(("GPU", "compute capability", "precision")) for c in changes)
    orin.cuda = "12.2.999"  # a CUDA patch release does not invalidate plans
    assert engine.fingerprint_diff(recorded, engine.plan_fingerprint(orin, "8.6.2", "a" * 64, built)) == []
    fp32 = engine.build_settings(manifest, engine.EngineOptions(precision="fp32"), GiB)
    changes = engine.fingerprint_diff(recorded, engine.plan_fingerprint(orin, "8.6.2", "a" * 64, fp32))
    assert changes == ["precision: fp16 -> fp32", "FP32-pinned nodes: 1 node(s) -> 0 node(s)"]


def test_plan_mismatch_for_the_repository(board) -> None:
    desktop = device_facts(board("x86_desktop"))
    recorded = {"tensorrt": "8.6.2", "cuda": "12.2.140", "gpu": "Orin", "compute_capability": "8.7", "l4t": "36.3.0"}
    changes = engine.plan_mismatch(recorded, desktop)
    assert "TensorRT: the plan was built with 8.6.2, this machine has none" in changes
    assert len(changes) == 5
    assert engine.plan_mismatch(recorded, device_facts(board("agx_orin_jp60"))) == []
    assert engine.plan_mismatch(None, desktop) == ["no plan fingerprint recorded (built by something other than edge-deploy)"]


# --------------------------------------------------------------------------- build_plan with the double


def _files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_build_plan_writes_verifies_and_records(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    fake_trt("8.6.1")
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"PLAN8.6.1"
    assert _files(directory) == {"model.onnx", "model.plan"}
    assert section["tensorrt"] == "8.6.1" and section["builder"] == "python"
    assert (section["l4t"], section["jetpack"], section["gpu"], section["compute_capability"]) == ("36.3.0", "6.0", "Orin", "8.7")
    assert section["device"] == "NVIDIA Jetson AGX Orin Developer Kit" and section["nvpmodel"] == "MAXN"
    assert section["cuda"] == "12.2.140" and section["precision"] == "fp16" and section["dla_core"] is None
    assert section["onnx_sha256"] == sha256_file(directory / "model.onnx")
    assert section["profile"] == {"input": {"min": [1, 3, 360, 640], "opt": [1, 3, 360, 640], "max": [4, 3, 360, 640]}}
    assert section["workspace_bytes"] == engine.DEFAULT_WORKSPACE_CAP and section["fp32_layers"] == ["head"]
    assert section["build_time"].endswith("Z")
    assert section["verify"]["io"] == "ok" and section["verify"]["run"]["status"] == "skipped"
    assert any("not run" in w and "pycuda" in w for w in reporter.warnings)
    json.dumps(section)  # the manifest must be able to store it


def test_same_fingerprint_skips_force_and_changes_rebuild(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    orin = board("agx_orin_jp60")
    trt = fake_trt("8.6.1")
    manifest["plan"] = engine.build_plan(directory, manifest, engine.EngineOptions(), root=orin)
    manifest["files"]["model.plan"] = file_entry(directory / "model.plan")
    builds = lambda: trt.calls.count(("builder.build_serialized_network",))  # noqa: E731

    reporter = Recording()
    again = engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=orin)
    assert again == manifest["plan"] and builds() == 1
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
    manifest["plan"] = engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    manifest["files"]["model.plan"] = file_entry(directory / "model.plan")
    fake_trt("10.3.0")
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), reporter, root=board("orin_nano_jp62"))
    message = next(m for m in reporter.infos if m.startswith("rebuilding"))
    assert "TensorRT: 8.6.1 -> 10.3.0" in message and "L4T release: 36.3.0 -> 36.4.3" in message
    assert section["tensorrt"] == "10.3.0" and (directory / "model.plan").read_bytes() == b"PLAN10.3.0"
    # The Orin Nano is a small device in a poor state: the build says so.
    warnings = " | ".join(reporter.warnings)
    assert "nvpmodel" in warnings and "jetson_clocks" in warnings and "tritonserver" in warnings and "swap" in warnings


def test_changed_plan_file_is_rebuilt_not_trusted(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    orin = board("agx_orin_jp60")
    fake_trt("8.6.1")
    manifest["plan"] = engine.build_plan(directory, manifest, engine.EngineOptions(), root=orin)
    manifest["files"]["model.plan"] = file_entry(directory / "model.plan")
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
    assert _files(directory) == {"model.onnx", "model.plan"}

    wrong_io = FakeEngineSpec([ENGINE_IO.tensors[0], ("predict_lanes", False, "FLOAT", (-1, 1000, 77), None)])
    fake_trt("8.6.1", engine=wrong_io)
    with pytest.raises(EngineError, match=r"has shape \[-1, 1000, 77\], the manifest says \[-1, 64, 77\]"):
        engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"the previous good plan"
    assert _files(directory) == {"model.onnx", "model.plan"}


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
    assert (directory / "model.plan").read_bytes() == b"old" and _files(directory) == {"model.onnx", "model.plan"}


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
    assert cache.read_bytes() == b"TIMING-CACHE:8.6.1" and section["timing_cache"] == str(cache)
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
    manifest["plan"] = engine.build_plan(directory, manifest, engine.EngineOptions(), root=Path(orin.root))
    manifest["files"]["model.plan"] = file_entry(directory / "model.plan")
    orin.tensorrt = "8.6.2"
    engine.check_existing_plan(directory, manifest, orin)
    other = dict(manifest, plan=dict(manifest["plan"], tensorrt="8.5.2"))
    with pytest.raises(EngineError, match="TensorRT: 8.5.2 -> 8.6.2") as info:
        engine.check_existing_plan(directory, other, orin)
    assert "--force" in str(info.value)
    (directory / "model.plan").write_bytes(b"\x00garbage")
    with pytest.raises(EngineError, match="corrupt or was changed"):
        engine.check_existing_plan(directory, manifest, orin)
    manifest["files"]["model.plan"] = file_entry(directory / "model.plan")
    with pytest.raises(EngineError, match="not a TensorRT plan this machine can load"):
        engine.check_existing_plan(directory, manifest, orin)


# --------------------------------------------------------------------------- trtexec subprocess plumbing

FAKE_TRTEXEC = r'''#!{python}
# Stand-in for NVIDIA's trtexec (TensorRT cannot be installed here): it checks nothing about the
# model; it only behaves like trtexec at the process boundary (banner, [E] lines, exit codes,
# --saveEngine and --timingCacheFile files) so the subprocess plumbing can be tested.
import json, os, sys
args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in sys.argv[1:])
print("&&&& RUNNING TensorRT.trtexec [TensorRT v{banner}] # trtexec " + " ".join(sys.argv[1:]))
if "help" in args:
    sys.exit(0)
with open(os.environ["FAKE_TRTEXEC_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
cache = args.get("timingCacheFile")
if cache and os.path.exists(cache) and open(cache, "rb").read().startswith(b"CORRUPT"):
    print("[11/22/2026-07:00:00] [E] Error[1]: [timingCache.cpp::load::512] Error Code 1: corrupt timing cache")
    print("&&&& FAILED TensorRT.trtexec")
    sys.exit(1)
mode = os.environ.get("FAKE_TRTEXEC_MODE", "ok")
if mode == "fail":
    print("[11/22/2026-07:00:00] [I] Start parsing network model.")
    print("[11/22/2026-07:00:01] [E] Error[4]: [network.cpp::validate::3100] Error Code 4: Internal Error (bad profile)")
    print("[11/22/2026-07:00:01] [E] Engine could not be created from network")
    sys.stderr.write("some library noise\n")
    sys.exit(1)
if mode == "crash":
    sys.stderr.write("Segmentation fault (core dumped)\n")
    sys.exit(139)
if mode != "noengine":
    open(args["saveEngine"], "wb").write(b"PLAN-from-trtexec")
if cache:
    open(cache, "wb").write(b"CACHE-from-trtexec")
print("&&&& PASSED TensorRT.trtexec")
'''


@pytest.fixture
def fake_trtexec(tmp_path: Path, monkeypatch, no_tensorrt):
    tool = tmp_path / "bin" / "trtexec"
    tool.parent.mkdir()
    tool.write_text(FAKE_TRTEXEC.format(python=sys.executable, banner="8602"))
    tool.chmod(0o755)
    log = tmp_path / "trtexec-calls.jsonl"
    monkeypatch.setenv("TRTEXEC", str(tool))
    monkeypatch.setenv("FAKE_TRTEXEC_LOG", str(log))

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def test_trtexec_build_renames_the_plan_and_records_trtexecs_version(fake_trtexec, board, artifact) -> None:
    directory, manifest = artifact
    assert engine.available_builder("auto") == "trtexec"
    assert engine.available_builder("python") is None
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec"), reporter,
                                root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"PLAN-from-trtexec"
    assert section["builder"] == "trtexec" and section["tensorrt"] == "8.6.2"
    assert section["verify"]["status"] == "skipped"
    assert any("not verified" in w for w in reporter.warnings)
    (argv,) = fake_trtexec()
    assert f"--onnx={directory / 'model.onnx'}" in argv and "--fp16" in argv
    save = next(a for a in argv if a.startswith("--saveEngine="))
    assert Path(save.split("=", 1)[1]).parent == directory and save.endswith(".tmp-" + save.rsplit("-", 1)[1])
    assert f"--memPoolSize=workspace:{engine.DEFAULT_WORKSPACE_CAP // MiB}" in argv
    assert "--layerPrecisions=head:fp32" in argv and "--layerOutputTypes=head:fp32" in argv
    assert _files(directory) == {"model.onnx", "model.plan", "trtexec.log"}


@pytest.mark.parametrize(
    ("mode", "line"),
    [
        ("fail", "Error[4]: [network.cpp::validate::3100] Error Code 4: Internal Error (bad profile)"),
        ("crash", "Segmentation fault (core dumped)"),
        ("noengine", "it exited 0 but wrote no engine"),
    ],
)
def test_trtexec_failure_is_one_line_and_keeps_the_old_plan(fake_trtexec, board, artifact, monkeypatch, mode, line) -> None:
    directory, manifest = artifact
    (directory / "model.plan").write_bytes(b"the previous good plan")
    monkeypatch.setenv("FAKE_TRTEXEC_MODE", mode)
    with pytest.raises(EngineError) as info:
        engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec"), root=board("agx_orin_jp60"))
    message = str(info.value)
    assert "\n" not in message and line in message and str(directory / "trtexec.log") in message
    assert (directory / "model.plan").read_bytes() == b"the previous good plan"
    assert _files(directory) == {"model.onnx", "model.plan", "trtexec.log"}
    assert "[E]" in (directory / "trtexec.log").read_text() or mode != "fail"


def test_trtexec_corrupt_timing_cache_is_replaced_not_fatal(fake_trtexec, board, artifact, tmp_path) -> None:
    directory, manifest = artifact
    cache = tmp_path / "timing.cache"
    cache.write_bytes(b"CORRUPT bytes")
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec", timing_cache=cache), reporter,
                      root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"PLAN-from-trtexec"
    assert cache.read_bytes() == b"CACHE-from-trtexec"
    assert any("was not usable" in w and "corrupt timing cache" in w for w in reporter.warnings)
    first, second = fake_trtexec()
    assert any(a.startswith("--timingCacheFile=") for a in first + second)
    assert not list(tmp_path.glob(".timing.cache.tmp*"))


def test_trtexec_int8_needs_a_calibration_cache(fake_trtexec, board, artifact, tmp_path) -> None:
    import cv2

    directory, manifest = artifact
    frames = tmp_path / "frames"
    frames.mkdir()
    cv2.imwrite(str(frames / "a.jpg"), np.zeros((360, 640, 3), dtype=np.uint8))
    with pytest.raises(EngineError, match="only the Python builder can make"):
        engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec", precision="int8",
                                                                    calibration_images=frames),
                          root=board("agx_orin_jp60"))
    assert not (directory / "model.plan").exists()


# --------------------------------------------------------------------------- ONNX Runtime vs plan comparison


@pytest.fixture(scope="module")
def ort_reference(tmp_path_factory) -> list[dict[str, np.ndarray]]:
    from edge_deploy.export import ort_session

    directory = tmp_path_factory.mktemp("ort")
    write_lane_onnx(directory / "model.onnx", rows=ROWS)
    manifest = lane_manifest(directory, ROWS)
    session = ort_session(directory / "model.onnx")
    return [{"predict_lanes": session.run(None, feed)[0]} for feed in engine.parity_inputs(manifest)]


def _shifted(reference, dx: float = 0.0, noise: float = 0.0, flip_first: bool = False, nan: bool = False):
    rng = np.random.default_rng(3)
    out = []
    for feed in reference:
        raw = feed["predict_lanes"].copy()
        raw[..., 5:] += dx
        raw += rng.normal(0, noise, raw.shape).astype(np.float32) if noise else 0
        if flip_first:
            raw[:, 0, 1] = -10.0
        if nan:
            raw[0, 0, 0] = np.nan
        out.append({"predict_lanes": raw})
    return out


def test_compare_outputs_passes_fp16_sized_noise(ort_reference) -> None:
    report = engine.compare_outputs(ort_reference, _shifted(ort_reference, noise=0.01),
                                    {"conf_threshold": 0.5, "nms_threshold": 50.0, "top_k": 4}, "predict_lanes")
    assert report["passed"], report["problems"]
    entry = report["outputs"]["predict_lanes"]
    assert 0 < entry["max_abs"] < 0.1 and 0 < entry["max_rel"] < 1e-3
    assert report["lanes"]["lanes_plan"] == report["lanes"]["lanes_onnxruntime"] > 0
    assert report["lanes"]["mean_dx_px"] < 0.1


def test_compare_outputs_fails_on_moved_lanes_missing_lanes_and_nan(ort_reference) -> None:
    decode = {"conf_threshold": 0.5, "nms_threshold": 50.0, "top_k": 4}
    moved = engine.compare_outputs(ort_reference, _shifted(ort_reference, dx=3.0), decode, "predict_lanes")
    assert not moved["passed"] and abs(moved["lanes"]["mean_dx_px"] - 3.0) < 1e-3
    assert any("moved by 3.00 px" in p for p in moved["problems"])
    missing = engine.compare_outputs(ort_reference, _shifted(ort_reference, flip_first=True), decode, "predict_lanes")
    assert not missing["passed"] and any("lane(s) from the plan" in p for p in missing["problems"])
    broken = engine.compare_outputs(ort_reference, _shifted(ort_reference, nan=True), decode, None)
    assert not broken["passed"] and broken["worst_output"] == "predict_lanes" and broken["lanes"] is None


def test_parity_inputs_follow_the_manifest(artifact) -> None:
    _, manifest = artifact
    feeds = engine.parity_inputs(manifest)
    assert [f["input"].shape for f in feeds] == [(1, 3, 360, 640), (4, 3, 360, 640)]
    assert all(f["input"].dtype == np.float32 and 0 <= f["input"].min() and f["input"].max() < 1 for f in feeds)
    again = engine.parity_inputs(manifest)
    assert all(np.array_equal(a["input"], b["input"]) for a, b in zip(feeds, again))


# --------------------------------------------------------------------------- verification run (pycuda double)


@pytest.fixture
def fake_gpu(monkeypatch, fake_trt):
    """The trt double plus a pycuda double whose 'engine' computes with ONNX Runtime (optionally perturbed).

    No GPU here: this exercises verify_plan's run path (buffers, shapes, copies, the
    comparison and its verdict), not TensorRT's numerics (tests/test_tensorrt.py does that).
    """
    import types

    from trt_double import FakePycuda

    def install(directory: Path, shift_px: float = 0.0) -> FakePycuda:
        from edge_deploy.export import ort_session

        session = ort_session(directory / "model.onnx")

        def compute(inputs: dict) -> dict:
            out = session.run(None, {"input": inputs["input"]})[0].copy()
            out[..., 5:] += shift_px
            return {"predict_lanes": out}

        gpu = FakePycuda()
        package = types.ModuleType("pycuda")
        package.driver = gpu.module()
        monkeypatch.setitem(sys.modules, "pycuda", package)
        monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
        fake_trt("8.6.1", engine=FakeEngineSpec(ENGINE_IO.tensors, compute=compute, memory=gpu))
        return gpu

    return install


def test_verify_runs_the_plan_on_the_parity_inputs(fake_gpu, board, artifact) -> None:
    directory, manifest = artifact
    gpu = fake_gpu(directory)
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    run = section["verify"]["run"]
    assert run["status"] == "passed" and run["batches"] == [1, 4]
    assert run["outputs"]["predict_lanes"]["max_abs"] == 0.0
    assert run["lanes"]["images"] == 5 and run["lanes"]["lanes_plan"] == run["lanes"]["lanes_onnxruntime"] > 0
    assert gpu.pushes == gpu.pops == 2
    assert sorted(gpu.freed) == sorted(gpu.buffers)  # every device buffer was freed


def test_verify_failure_names_the_worst_output_and_keeps_the_old_plan(fake_gpu, board, artifact) -> None:
    directory, manifest = artifact
    (directory / "model.plan").write_bytes(b"the previous good plan")
    fake_gpu(directory, shift_px=4.0)
    with pytest.raises(EngineError) as info:
        engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    message = str(info.value)
    assert "\n" not in message and "worst output 'predict_lanes'" in message and "moved by 4.00 px" in message
    assert "--no-verify" in message
    assert (directory / "model.plan").read_bytes() == b"the previous good plan"
    assert _files(directory) == {"model.onnx", "model.plan"}
    section = engine.build_plan(directory, manifest, engine.EngineOptions(verify=False), root=board("agx_orin_jp60"))
    assert section["verify"] == {"status": "skipped", "reason": "--no-verify"}


def test_int8_calibrator_feeds_preprocessed_batches_and_keeps_its_cache(monkeypatch, tmp_path, artifact) -> None:
    import types

    import cv2

    from trt_double import FakePycuda

    directory, manifest = artifact
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        cv2.imwrite(str(frames / f"{i}.png"), np.full((720, 1280, 3), 40 * i, dtype=np.uint8))
    manifest["io"]["batch"]["opt"] = 2
    profile = engine.optimisation_profile(manifest)
    images = engine.calibration_images(frames)
    calibration = engine.make_calibration(directory, manifest, images, "cd" * 32, profile)
    gpu = FakePycuda()  # no GPU here: device memory is host bytes
    package = types.ModuleType("pycuda")
    package.driver = gpu.module()
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
    calibrator = tensorrt_api.make_calibrator(make_tensorrt("10.3.0"), calibration)
    assert calibrator.get_batch_size() == 2 and calibrator.read_calibration_cache() is None
    (address,) = calibrator.get_batch(["input"])
    fed = np.frombuffer(gpu.buffers[address], dtype=np.float32).reshape(2, 3, 360, 640)
    assert fed[0].max() == 0.0 and abs(float(fed[1].mean()) - 40 / 255) < 1e-6
    assert calibrator.get_batch(["input"]) is None  # 3 images, batches of 2: the short tail is dropped
    assert gpu.pushes == gpu.pops == 1
    calibrator.write_calibration_cache(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")
    assert calibration.cache_path.read_bytes().startswith(b"TRT-100300")
    assert calibrator.read_calibration_cache() == calibration.cache_path.read_bytes()
    with pytest.raises(EngineError, match="only 1 image"):
        engine.make_calibration(directory, manifest, images[:1], "cd" * 32, profile)
