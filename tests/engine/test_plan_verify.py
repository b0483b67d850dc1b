"""Verifying a plan: ONNX Runtime vs the plan's outputs, raw and as decoded lanes, and the verify run.

The comparison runs on real ONNX Runtime outputs of tests/support/lane_onnx.py's model
(perturbed to stand for a plan). The verify run needs TensorRT and a GPU, so the
doubles of tests/support/trt_double.py stand in: an engine that computes with ONNX Runtime,
behind a pycuda whose device memory is host bytes.
"""
from __future__ import annotations

from dataclasses import replace

from pathlib import Path

import numpy as np
import pytest
from lane_onnx import lane_manifest, write_lane_onnx
from trt_double import (
    ENGINE_IO,
    ROWS,
    FakeEngineSpec,
    FakePycuda,
    file_names,
    install_pycuda,
)

from edge_deploy.engine import plan as engine
from edge_deploy.artifact.manifest import BatchRange, TensorSpec
from edge_deploy.lanedet.family import ScoreNmsDecodeParams
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
from edge_deploy.export.parity import LaneCheck, compare_to_reference, parity_feeds, road_feed
from edge_deploy.errors import EngineError

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, ... (shared fixtures)


# --------------------------------------------------------------------------- ONNX Runtime vs plan comparison


@pytest.fixture(scope="module")
def ort_reference(tmp_path_factory) -> list[dict[str, np.ndarray]]:
    from edge_deploy.export.parity import ort_session

    directory = tmp_path_factory.mktemp("ort")
    write_lane_onnx(directory / "model.onnx", rows=ROWS)
    manifest = lane_manifest(directory, ROWS)
    session = ort_session(directory / "model.onnx")
    return [{"predict_lanes": session.run(None, feed)[0]} for feed in parity_feeds(manifest)]


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


LANES = LaneCheck(LANEATT, ("predict_lanes",), ScoreNmsDecodeParams(0.5, 50.0, 4), (360, 640))


def test_compare_to_reference_passes_fp16_sized_noise(ort_reference) -> None:
    report = compare_to_reference(ort_reference, _shifted(ort_reference, noise=0.01), LANES)
    assert report["passed"], report["problems"]
    entry = report["outputs"]["predict_lanes"]
    assert 0 < entry["max_abs"] < 0.1 and 0 < entry["max_rel"] < 1e-3
    assert report["lanes"]["lanes_plan"] == report["lanes"]["lanes_onnxruntime"] > 0
    assert report["lanes"]["mean_dx_px"] < 0.1


def test_compare_to_reference_fails_on_moved_lanes_missing_lanes_and_nan(ort_reference) -> None:
    moved = compare_to_reference(ort_reference, _shifted(ort_reference, dx=3.0), LANES)
    assert not moved["passed"] and abs(moved["lanes"]["mean_dx_px"] - 3.0) < 1e-3
    assert any("moved by 3.00 px" in p for p in moved["problems"])
    missing = compare_to_reference(ort_reference, _shifted(ort_reference, flip_first=True), LANES)
    assert not missing["passed"] and any("lane(s) from the plan" in p for p in missing["problems"])
    broken = compare_to_reference(ort_reference, _shifted(ort_reference, nan=True), None)
    assert not broken["passed"] and broken["worst_output"] == "predict_lanes" and broken["lanes"] is None


def test_parity_feeds_follow_the_manifest(artifact) -> None:
    _, manifest = artifact
    feeds = parity_feeds(manifest)
    # the parity batches of convert, then one batch of road frames (a lane model must see lanes)
    assert [f["input"].shape for f in feeds] == [(1, 3, 360, 640), (4, 3, 360, 640), (4, 3, 360, 640)]
    assert all(f["input"].dtype == np.float32 and 0 <= f["input"].min() and f["input"].max() <= 1 for f in feeds)
    again = parity_feeds(manifest)
    assert all(np.array_equal(a["input"], b["input"]) for a, b in zip(feeds, again))


def test_the_road_feed_is_the_clients_preprocessing_of_held_out_roads(artifact) -> None:
    from edge_deploy.lanedet.preprocess import Preprocessor
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene

    _, manifest = artifact
    (feed,) = road_feed(manifest)
    pre = Preprocessor(manifest.preprocess)
    for i in range(4):
        np.testing.assert_array_equal(feed["input"][i], pre(scene(EVAL_SEED_BASE + i, 1640, 590).frame)[0])
    one = replace(manifest, io=replace(manifest.io, batch=BatchRange(1, 1, 1, False)))
    assert road_feed(one)[0]["input"].shape == (1, 3, 360, 640)  # within the batch range
    extra = TensorSpec("extra", "FP32", (-1, 4))
    two_inputs = replace(manifest, io=replace(manifest.io, inputs=(*manifest.io.inputs, extra)))
    assert road_feed(two_inputs) == []


# --------------------------------------------------------------------------- verification run (pycuda double)


@pytest.fixture
def fake_gpu(monkeypatch, fake_trt):
    """The trt double plus a pycuda double whose 'engine' computes with ONNX Runtime (optionally perturbed).

    No GPU here: this exercises verify_plan's run path (buffers, shapes, copies, the
    comparison and its verdict), not TensorRT's numerics (tests/engine/test_tensorrt.py does that).
    """
    def install(directory: Path, shift_px: float = 0.0) -> FakePycuda:
        from edge_deploy.export.parity import ort_session

        session = ort_session(directory / "model.onnx")

        def compute(inputs: dict) -> dict:
            out = session.run(None, {"input": inputs["input"]})[0].copy()
            out[..., 5:] += shift_px
            return {"predict_lanes": out}

        gpu = install_pycuda(monkeypatch)
        fake_trt("8.6.1", engine=FakeEngineSpec(ENGINE_IO.tensors, compute=compute, memory=gpu))
        return gpu

    return install


def test_verify_runs_the_plan_on_the_parity_inputs(fake_gpu, board, artifact) -> None:
    directory, manifest = artifact
    gpu = fake_gpu(directory)
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("agx_orin_jp60"))
    run = section.verify["run"]
    assert run["status"] == "passed" and run["batches"] == [1, 4, 4]  # parity batches, then the road frames
    assert run["outputs"]["predict_lanes"]["max_abs"] == 0.0
    assert run["lanes"]["images"] == 9 and run["lanes"]["lanes_plan"] == run["lanes"]["lanes_onnxruntime"] > 0
    assert list(run) == ["status", "batches", "outputs", "worst_output", "lanes"]  # the keys it always had
    typed = section.verify.run  # the same, read as attributes
    assert typed.worst_output == "predict_lanes" and typed.lanes.lanes_plan == run["lanes"]["lanes_plan"]
    assert typed.passed is None and typed.problems is None  # said by the build (it passed), not recorded
    assert gpu.pushes == gpu.pops == 3  # one context push per feed
    assert sorted(gpu.freed) == sorted(gpu.buffers)  # every device buffer was freed
    # an execution context's device memory, as TensorRT 8.6 reports it (serve adds up the stack's: memory_fit.py)
    assert section.verify.device_memory_bytes == FakeEngineSpec(ENGINE_IO.tensors).device_memory_bytes > 0


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
    assert file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan"}
    section = engine.build_plan(directory, manifest, engine.EngineOptions(verify=False), root=board("agx_orin_jp60"))
    assert section.verify == {"status": "skipped", "reason": "--no-verify"}
