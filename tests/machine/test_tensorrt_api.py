"""BuildSettings -> TensorRT Python API calls, per TensorRT version, against the recording double.

TensorRT cannot be installed here: there is no NVIDIA GPU, and while PyPI's x86_64
tensorrt bindings wheels are real, the libraries (tensorrt-cu*-libs) are source packages
that download from NVIDIA at install time, which this environment cannot reach. So
tests/support/trt_double.py replaces the `tensorrt` module under
edge_deploy.machine.tensorrt_api and records the calls a build makes. Real builds are in
tests/engine/test_tensorrt.py (a Jetson).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from trt_double import ENGINE_IO, ROWS, make_tensorrt, settings

from edge_deploy.engine import plan as engine
from edge_deploy.machine import tensorrt_api
from edge_deploy.core.sizes import GiB, MiB
from edge_deploy.errors import EngineError

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, ... (shared fixtures)


LAYERS = [
    ("head", [("rows", "FLOAT")]),
    ("reshape", [("predict_lanes", "FLOAT")]),
    ("shape", [("shape_out", "INT32")]),
]


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


@pytest.mark.parametrize("version", ["8.5.2", "8.6.1", "10.3.0"])
def test_int8_sets_int8_fp16_calibrator_and_calibration_profile(tmp_path: Path, version: str) -> None:
    trt = make_tensorrt(version, layers=LAYERS)
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


@pytest.mark.parametrize("version", ["8.5.2", "10.0.1", "10.13.3"])
def test_every_supported_version_builds_with_only_its_own_api(tmp_path: Path, version: str) -> None:
    # The double raises on names the version lacks (e.g. STRICT_TYPES and max_workspace_size are gone in 10.0).
    trt = make_tensorrt(version, layers=LAYERS)
    result = tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(dla_core=0, timing_cache=b""))
    assert ("config.set_flag", "OBEY_PRECISION_CONSTRAINTS") in trt.calls
    assert result.plan == f"PLAN{version}".encode()


def test_the_double_lacks_what_each_version_lacks() -> None:
    old, new, eleven = make_tensorrt("8.6.1"), make_tensorrt("10.0.1"), make_tensorrt("11.0.0")
    old.Builder(None).create_builder_config().max_workspace_size = 1
    with pytest.raises(AttributeError):
        new.Builder(None).create_builder_config().max_workspace_size = 1
    assert hasattr(old.BuilderFlag, "STRICT_TYPES") and not hasattr(new.BuilderFlag, "STRICT_TYPES")
    assert not hasattr(make_tensorrt("8.5.2").Builder(None).create_builder_config(), "builder_optimization_level")
    assert not hasattr(eleven.BuilderFlag, "FP16") and not hasattr(eleven, "IInt8EntropyCalibrator2")


def test_unsupported_tensorrt_versions_are_refused_in_one_line(tmp_path: Path) -> None:
    trt = make_tensorrt("12.0.0", layers=LAYERS)
    with pytest.raises(EngineError, match="TensorRT 12.0.0 is not supported") as info:
        tensorrt_api.TensorRT(trt).build(tmp_path / "m.onnx", settings(strongly_typed=True, fp32_pins=[]))
    assert "\n" not in str(info.value)
    assert trt.calls == []
    with pytest.raises(EngineError, match="8.4.3 is not supported"):
        tensorrt_api.check_supported("8.4.3")
    for version in ("8.5.2.2", "8.6.2", "10.13.3.9", "11.0.0", "11.4.1", None):
        tensorrt_api.check_supported(version)
