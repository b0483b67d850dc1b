"""config.pbtxt of a fused model (`convert --fuse-preprocess`) and of its pipeline, from the manifest."""
from __future__ import annotations

import json

import pytest

from edge_deploy.lanedet.contract import PARAM_FUSED
from edge_deploy.artifact.manifest import Manifest
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
from edge_deploy.repository import model_config as mc
LANEATT_DECODE = LANEATT.decode_defaults.to_dict()
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()

pytest.importorskip("tritonclient.grpc")

FRAME_IO = {"name": "FRAME", "datatype": "UINT8", "shape": [-1, 590, 1640, 3]}


def manifest(fused: bool) -> Manifest:
    image = {"name": "input", "datatype": "FP32", "shape": [-1, 3, 360, 640]}
    data = {
        "format": 1,
        "io": {"inputs": [FRAME_IO if fused else image],
               "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [-1, 1000, 77]}],
               "batch": {"min": 1, "opt": 1, "max": 4, "dynamic": True}},
        "preprocess": dict(LANEATT_PREPROCESS), "decode": dict(LANEATT_DECODE), "plan": None,
    }
    if fused:
        data["fused_preprocess"] = {"input": "FRAME", "frame": {"height": 590, "width": 1640, "datatype": "UINT8",
                                                                "layout": "NHWC", "color": "bgr"}}
    return Manifest.from_dict(data)


def test_fused_model_config_tells_the_client_the_frame():
    config = mc.model_config(manifest(True), name="lanedet", runtime="python")
    assert json.loads(config.parameters[PARAM_FUSED].string_value) == {
        "input": "FRAME", "height": 590, "width": 1640, "color": "bgr"}
    assert list(config.input[0].dims) == [590, 1640, 3] and config.input[0].data_type == mc.data_type("UINT8")
    assert PARAM_FUSED not in mc.model_config(manifest(False), name="lanedet", runtime="python").parameters


def test_fused_pipeline_is_model_then_postprocess():
    ens = mc.pipeline_config(manifest(True), name="l_pipeline", model="l", preprocess="l_preprocess",
                             postprocess="l_postprocess")
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["l", "l_postprocess"]
    assert list(ens.input[0].dims) == [1, 590, 1640, 3] and ens.input[0].name == "FRAME"
    assert dict(ens.ensemble_scheduling.step[0].input_map) == {"FRAME": "FRAME"}
    post = mc.postprocess_config(manifest(True), name="l_postprocess")
    assert [t.name for t in post.input] == ["predict_lanes"]  # no ORIGINAL_SIZE: the frame size is fixed
    today = mc.pipeline_config(manifest(False), name="l_pipeline", model="l", preprocess="l_preprocess",
                               postprocess="l_postprocess")
    assert [s.model_name for s in today.ensemble_scheduling.step] == ["l_preprocess", "l", "l_postprocess"]
    assert [t.name for t in mc.postprocess_config(manifest(False), name="p").input] == ["predict_lanes",
                                                                                        "ORIGINAL_SIZE"]


def test_plan_verification_feeds_frames_to_a_fused_model():
    from edge_deploy.export.parity import parity_feeds

    feeds = parity_feeds(manifest(True))
    # the parity batches (random frames), then held-out road frames as the camera gives them
    assert [f["FRAME"].shape for f in feeds] == [(1, 590, 1640, 3), (4, 590, 1640, 3), (4, 590, 1640, 3)]
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene

    assert (feeds[2]["FRAME"][1] == scene(EVAL_SEED_BASE + 1, 1640, 590).frame).all()
    assert all(f["FRAME"].dtype == "uint8" and f["FRAME"].max() > 200 for f in feeds)
    assert parity_feeds(manifest(False))[0]["input"].dtype == "float32"
