"""`convert --fuse-preprocess`: the ONNX preprocessing graph, run by the real ONNX Runtime, against the
client's own preprocessing (edge_deploy/lanedet/preprocess.py, OpenCV), per pixel and in lanes.

Models: the tiny lane model of tests/support/small_artifact.py (fused by the product's
`fuse_artifact`), and LaneATT-R18 converted by the real `edge-deploy convert` CLI.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_process import run_cli
from manifest_files import manifest_json

from edge_deploy.artifact.manifest import FP16_ONNX_NAME, IOSignature, Manifest
from edge_deploy.errors import ConvertError
from edge_deploy.export import fused_preprocess as fp
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
from edge_deploy.lanedet.preprocess import Preprocessor, PreprocessSpec
from edge_deploy.synthetic.roads import road_scene
from edge_deploy.export.parity import ort_session
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

FRAME = (590, 1640)
LEVEL = 1.0 / 255.0


def _frames() -> list[np.ndarray]:
    noise = np.random.default_rng(7).integers(0, 256, (*FRAME, 3), dtype=np.uint8)
    return [road_scene(FRAME[1], FRAME[0], seed=s)[0] for s in (11, 12)] + [noise]


def _worst(spec: dict, dtype: str = "FP32", **graph_options) -> float:
    session = ort_session(fp.preprocess_graph(PreprocessSpec.from_dict(spec), FRAME, 1, "image", dtype, **graph_options))
    client = Preprocessor(PreprocessSpec.from_dict(spec), dtype=np.float16 if dtype == "FP16" else np.float32)
    worst = 0.0
    for frame in _frames():
        got = session.run(None, {"FRAME": frame[None]})[0]
        assert got.dtype == client.dtype and got.shape == (1, 3, spec["height"], spec["width"])
        worst = max(worst, float(np.abs(got.astype(np.float64) - client(frame)).max()))
    return worst


def test_fused_graph_is_the_clients_preprocessing_within_one_uint8_level():
    # OpenCV's INTER_CUBIC on uint8 uses 11-bit fixed-point weights and rounds to uint8; the graph
    # computes in float32 and rounds once: at most one level apart, and only on a few pixels.
    assert _worst(LANEATT_PREPROCESS) <= LEVEL + 1e-6
    # FP16 model input: the same values in half precision (one level is 0.0039, far above FP16's step).
    assert _worst(LANEATT_PREPROCESS, "FP16") <= LEVEL + 1e-3


def test_without_the_uint8_rounding_cubic_overshoot_is_kept():
    # Why Round+Clip are in the graph: a float Resize keeps the cubic kernel's overshoot past 0..255,
    # which OpenCV saturates away (tens of levels on a noisy frame).
    assert _worst(LANEATT_PREPROCESS, round_uint8=False) > 10 * LEVEL


def test_crop_colour_order_and_normalisation_follow_the_spec():
    spec = dict(LANEATT_PREPROCESS, crop={"top": 230, "left": 40, "right": 24}, color="rgb",
                mean=[0.4, 0.5, 0.6], std=[0.2, 0.25, 0.3], height=288, width=512)
    levels = _worst(spec) / (LEVEL / 0.2)  # largest change of one uint8 level in these units: 1 / (255 * 0.2)
    assert levels <= 1.0 + 1e-4, levels
    # convert's own check counts uint8 levels per channel (scale / std), so normalised models pass it too.
    assert fp.pixel_parity(PreprocessSpec.from_dict(spec), FRAME, [], seed=0)["max_levels"] <= 1.0 + 1e-4


def test_frame_size_option():
    assert fp.parse_frame_size("1640x590") == (590, 1640)
    for bad in ("1640", "0x590", "axb", "1640x590x3"):
        with pytest.raises(ConvertError, match="--frame-size"):
            fp.parse_frame_size(bad)


@pytest.fixture(scope="module")
def tiny_fused(tmp_path_factory, laneatt_data):
    """The tiny model with model_fp16.onnx (FP16 I/O), fused by `fuse_artifact`: (dir, manifest, unfused copy)."""
    import shutil

    from small_artifact import make_artifact

    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    root = tmp_path_factory.mktemp("fused")
    out = make_artifact(root / "artifact", laneatt_data / "anchors_2784x77.npy")
    manifest = Manifest.read(out)
    make_fp16_onnx(out, manifest, fp16_io=True)
    manifest.write(out)
    unfused = Path(shutil.copytree(out, root / "unfused"))
    fp.fuse_artifact(out, manifest, FRAME, seed=3)
    manifest.write(out)
    return out, manifest.to_dict(), unfused


def test_fused_artifact_takes_uint8_frames_in_both_onnx_files(tiny_fused):
    from edge_deploy.repository.signature import check_onnx_signature

    out, manifest, _ = tiny_fused
    Manifest.read(out).verify_files(out)  # the manifest's sha256 are those of the fused files
    frame_io = [{"name": "FRAME", "datatype": "UINT8", "shape": [-1, *FRAME, 3]}]
    assert manifest["io"]["inputs"] == frame_io
    assert manifest["fp16"]["onnx"]["io"]["inputs"] == frame_io
    assert manifest["fp16"]["onnx"]["io"]["outputs"][0]["datatype"] == "FP16"  # --fp16-io outputs unchanged
    check_onnx_signature(out / "model.onnx", IOSignature.from_dict(manifest["io"]))
    check_onnx_signature(out / FP16_ONNX_NAME, IOSignature.from_dict(manifest["fp16"]["onnx"]["io"]))
    model = onnx.load(str(out / FP16_ONNX_NAME))
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert [a.i for a in casts[-1].attribute] == [onnx.TensorProto.FLOAT16]  # FP32 preprocessing, FP16 into the model
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8


def test_fused_parity_is_recorded_and_holds_on_other_frames(tiny_fused):
    out, manifest, unfused = tiny_fused
    record = manifest["fused_preprocess"]
    assert record["frame"] == {"height": 590, "width": 1640, "datatype": "UINT8", "layout": "NHWC", "color": "bgr"}
    assert record["parity"]["pixels"]["max_levels"] <= 1.0 + 1e-4
    for name in ("model.onnx", FP16_ONNX_NAME):
        lanes = record["parity"]["lanes"][name]["lanes"]
        assert lanes["lanes_fused"] == lanes["lanes_client"] > 0 and lanes["mean_dx_px"] <= 0.5
    # And on frames the stage did not see: the fused model on frames = the unfused one on the client's tensors.
    frames = [road_scene(FRAME[1], FRAME[0], seed=s)[0] for s in (40, 41)]
    report = fp.lane_parity(unfused / "model.onnx", out / "model.onnx", Manifest.from_dict(manifest), frames)
    assert report["passed"] and report["lanes"]["lanes_fused"] > 0, report
    assert json.loads(json.dumps(record)) == record  # the manifest can hold it


def test_a_model_without_an_image_input_is_refused(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ConvertError, match="float \\[batch, 3, H, W\\]"):
        fp.fuse(model, LANEATT.preprocess, FRAME)


def test_convert_cli_refuses_int8_with_fused_preprocessing(tmp_path):
    result = run_cli(["convert", "laneatt", "--fuse-preprocess", "--precision", "int8", "-o", str(tmp_path / "a")],
                     timeout=120)
    assert result.returncode != 0 and "--fuse-preprocess does not support --precision int8" in result.stderr
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
@pytest.mark.once(reason="LaneATT converted with --fuse-preprocess (three quarters of a minute)")
def test_convert_cli_fuses_laneatt(laneatt_fused_artifact):
    manifest = manifest_json(laneatt_fused_artifact)
    Manifest.read(laneatt_fused_artifact).verify_files(laneatt_fused_artifact)
    assert manifest["io"]["inputs"][0] == {"name": "FRAME", "datatype": "UINT8", "shape": [-1, 590, 1640, 3]}
    parity = manifest["fused_preprocess"]["parity"]
    assert parity["pixels"]["max_levels"] <= 1.0 + 1e-4
    for name in ("model.onnx", FP16_ONNX_NAME):
        lanes = parity["lanes"][name]["lanes"]
        assert lanes["lanes_fused"] == lanes["lanes_client"] > 0 and lanes["mean_dx_px"] <= 0.5, (name, lanes)


def test_evaluate_runs_a_fused_artifact_like_the_unfused_one(tiny_fused):
    from edge_deploy.evaluate.runners import OnnxRunner
    from edge_deploy.export.parity import lane_dx

    out, _, unfused = tiny_fused
    fused_runner, plain_runner = OnnxRunner(out), OnnxRunner(unfused)
    assert fused_runner.frame_size == FRAME
    for frame, tolerance in ((_frames()[0], 0.01), (road_scene(1280, 720, seed=5)[0], 3.0)):
        want, got = plain_runner.detect(frame), fused_runner.detect(frame)
        assert len(want) == len(got) > 0
        assert float(np.mean(lane_dx(want, got))) <= tolerance
    # a frame of another size is resized as the client resizes it (client/frames.py fit_frame), then mapped back
    from edge_deploy.client.frames import fit_frame

    frame = road_scene(1280, 720, seed=5)[0]
    fitted = fit_frame(frame, FRAME, fused_runner.pre.spec.interpolation, strict=False)
    scale = np.float32([1280 / FRAME[1], 720 / FRAME[0]])
    expected = [lane.points * scale for lane in fused_runner.detect(fitted)]
    assert [lane.points.tolist() for lane in fused_runner.detect(frame)] == [p.tolist() for p in expected]


def test_crop_and_resize_of_the_kept_rows_is_the_clients_within_one_level():
    """A spec that resizes to a taller image and keeps the bottom rows (UFLDv2's crop_ratio): the graph slices the
    source rows that reach them, resizes and keeps the bottom rows; with bilinear interpolation, exactly what the
    client does (OpenCV's fixed point against float32: one level)."""
    from dataclasses import replace

    from edge_deploy.lanedet.ufldv2 import preset_preprocess
    from edge_deploy.lanedet.ufldv2.presets import PRESETS

    spec = replace(preset_preprocess(PRESETS["culane"]), interpolation="bilinear").to_dict()
    levels = _worst(spec) / (LEVEL / min(spec["std"]))
    assert levels <= 1.0 + 1e-4, levels


@pytest.mark.parametrize("interpolation", ["antialiased_bilinear", "area"])
def test_antialiased_resizes_are_fused_as_bilinear_and_their_difference_recorded(interpolation):
    """Pillow's antialiased bilinear (UFLDv2's spec) and OpenCV's area resize (older UFLDv2 manifests) antialias,
    which ONNX Resize cannot before opset 18: the graph resizes bilinearly and convert's pixel check measures the
    difference instead of refusing it (CULane, two road scenes and uniform noise: at most 37 levels from Pillow's
    resize, under 32 from area)."""
    from dataclasses import replace

    from edge_deploy.lanedet.ufldv2 import preset_preprocess
    from edge_deploy.lanedet.ufldv2.presets import PRESETS

    assert preset_preprocess(PRESETS["culane"]).interpolation == "antialiased_bilinear"
    spec = replace(preset_preprocess(PRESETS["culane"]), interpolation=interpolation)
    assert interpolation in fp.SUBSTITUTED and "opset 18" in fp.SUBSTITUTED[interpolation]
    assert "mode=linear" in fp.resize_description(spec) and "346" not in fp.resize_description(spec)
    pixels = fp.pixel_parity(spec, FRAME, _frames()[:2], seed=0)
    assert fp.MAX_PIXEL_LEVELS < pixels["max_levels"] < (48 if interpolation == "antialiased_bilinear" else 32), pixels
