"""Real TensorRT: build, deserialize-and-check, run-and-compare (a Jetson or any CUDA machine).

These run unchanged where the `tensorrt` module imports (and pycuda for running
plans) and skip elsewhere. They build tests/support/lane_onnx.py's small model with
LaneATT's I/O ([B, 3, 360, 640] -> [B, 2784, 77]) on this machine's GPU.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from lane_onnx import lane_manifest, write_lane_onnx
from trt_double import Recording

from edge_deploy.export import parity
from edge_deploy.artifact.manifest import Manifest, PlanRecord, file_entry
from edge_deploy.engine import plan as engine
from edge_deploy.machine import tensorrt_api
from edge_deploy.machine import plan_io
from edge_deploy.errors import EngineError
from edge_deploy.export.fp16_onnx import make_fp16_onnx

pytestmark = [
    pytest.mark.tensorrt,
    pytest.mark.skipif(tensorrt_api.module_version() is None, reason="TensorRT is not installed (JetPack provides it; PyPI's tensorrt-cu*-libs download the libraries from NVIDIA at install time)"),
]
ROWS = 2784
# Only where TensorRT is installed can pycuda be the reason to skip.
needs_pycuda = pytest.mark.skipif(
    tensorrt_api.module_version() is not None and not tensorrt_api.has_pycuda(),
    reason="pycuda is not installed",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Manifest, PlanRecord]:
    """One FP16 plan of the lane model, built and verified by build_plan on this machine."""
    directory = tmp_path_factory.mktemp("plan")
    write_lane_onnx(directory / "model.onnx", rows=ROWS)
    manifest = lane_manifest(directory, ROWS)
    make_fp16_onnx(directory, manifest)  # as convert makes it: TensorRT 10+ builds it strongly typed
    section = engine.build_plan(directory, manifest, engine.EngineOptions(builder="python"), Recording())
    manifest.plan = section
    manifest.files["model.plan"] = file_entry(directory / "model.plan")
    return directory, manifest, section


def test_build_records_this_machine(built) -> None:
    directory, manifest, section = built
    assert (directory / "model.plan").stat().st_size > 0
    assert section.tensorrt == tensorrt_api.module_version()
    assert section.builder == "python" and section.precision == "fp16"
    strong = tensorrt_api.strongly_typed(tensorrt_api.module_version(), "fp16")
    assert section.typing == ("strong" if strong else "weak")
    assert section.fp32_layers == ([] if strong else ["head"])  # strongly typed: "head" is FP32 in the graph
    assert section.verify["io"] == "ok"
    assert not list(directory.glob(".model.plan.*tmp*"))


def test_deserialize_and_check_io(built) -> None:
    directory, manifest, _ = built
    trt = tensorrt_api.load()
    engine_ = trt.deserialize((directory / "model.plan").read_bytes())
    tensors = {t.name: t for t in trt.io_tensors(engine_)}
    assert tensors["input"].is_input and tensors["input"].datatype == "FP32"
    assert tensors["input"].profile is not None and tensors["input"].profile[2][0] == 4
    assert tensors["predict_lanes"].shape == [-1, ROWS, 77]
    plan_io.check_io(list(tensors.values()), manifest.io)
    engine.check_existing_plan(directory, manifest)


@needs_pycuda
def test_run_and_compare_with_onnxruntime(built) -> None:
    from edge_deploy.export.parity import ort_session

    directory, manifest, section = built
    assert section.verify["run"]["status"] == "passed"
    trt = tensorrt_api.load()
    plan = trt.deserialize((directory / "model.plan").read_bytes())
    feeds = parity.parity_feeds(manifest)
    session = ort_session(directory / "model.onnx")
    reference = [{"predict_lanes": session.run(None, feed)[0]} for feed in feeds]
    actual = [trt.run(plan, feed) for feed in feeds]
    report = parity.compare_to_reference(reference, actual, parity.LaneCheck.of(manifest))
    assert report["passed"], report["problems"]
    assert report["lanes"]["lanes_onnxruntime"] > 0
    assert report["outputs"]["predict_lanes"]["max_rel"] < 1e-2


def test_same_fingerprint_skips_the_build(built) -> None:
    directory, manifest, section = built
    reporter = Recording()
    again = engine.build_plan(directory, manifest, engine.EngineOptions(builder="python"), reporter)
    assert again == section and any("up to date" in m for m in reporter.infos)


def test_corrupt_plan_is_rejected_in_one_line() -> None:
    with pytest.raises(EngineError) as info:
        tensorrt_api.load().deserialize(b"definitely not a plan" * 10, where="broken.plan")
    assert "\n" not in str(info.value) and "broken.plan" in str(info.value)


def test_timing_cache_created_then_corrupt_one_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "a"
    directory.mkdir()
    write_lane_onnx(directory / "model.onnx", rows=64)
    manifest = lane_manifest(directory, 64)
    make_fp16_onnx(directory, manifest)
    cache = tmp_path / "timing.cache"
    options = engine.EngineOptions(builder="python", timing_cache=cache, verify=False)
    engine.build_plan(directory, manifest, options)
    assert cache.stat().st_size > 0
    cache.write_bytes(b"garbage, not a timing cache")
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(builder="python", timing_cache=cache,
                                                                verify=False, force=True), reporter)
    assert any("timing cache" in w for w in reporter.warnings)
    assert cache.read_bytes() != b"garbage, not a timing cache"


def test_dla_build_with_gpu_fallback(tmp_path: Path) -> None:
    cores = tensorrt_api.dla_core_count() or 0
    if cores == 0:
        pytest.skip("this device has no DLA")
    directory = tmp_path / "dla"
    directory.mkdir()
    write_lane_onnx(directory / "model.onnx", rows=64)
    manifest = lane_manifest(directory, 64, batch=(1, 1, 1))  # DLA: min = opt = max
    make_fp16_onnx(directory, manifest)
    section = engine.build_plan(directory, manifest, engine.EngineOptions(builder="python", dla_core=0))
    assert section.dla_core == 0 and (directory / "model.plan").stat().st_size > 0
