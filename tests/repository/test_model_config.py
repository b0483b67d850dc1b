"""config.pbtxt generation: ModelConfig from a manifest, printed with text_format."""
from __future__ import annotations

import copy
import json

import pytest

from edge_deploy.errors import RepositoryError
from edge_deploy.lanedet import contract
from dataclasses import replace

from edge_deploy.artifact.manifest import Manifest, TensorSpec
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
from edge_deploy.artifact.precision import Precision
from edge_deploy.repository import model_config as mc
from edge_deploy.core.triton_layout import config_pb2, parse_config, policy_versions
LANEATT_DECODE = LANEATT.decode_defaults.to_dict()
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()


def manifest(dynamic: bool = True, n: int = 1000, dtype: str = "FP32", **sections) -> Manifest:
    """A manifest of the released format 1 (migrated: family laneatt from the N x 77 output)."""
    lead = -1 if dynamic else 1
    return Manifest.from_dict({
        "format": 1,
        "io": {
            "inputs": [{"name": "input", "datatype": dtype, "shape": [lead, 3, 360, 640]}],
            "outputs": [{"name": "predict_lanes", "datatype": dtype, "shape": [lead, n, 77]}],
            "batch": {"min": 1, "opt": 2, "max": 8 if dynamic else 1, "dynamic": dynamic},
        },
        "preprocess": copy.deepcopy(LANEATT_PREPROCESS),
        "decode": {**LANEATT_DECODE, "top_k": 5},
        **sections,
    })


def test_dynamic_batch_model_config_round_trips_through_text() -> None:
    config = mc.model_config(manifest(), name="lane", runtime="python", manifest_sha256="ab" * 32,
                             options=mc.ConfigOptions(max_queue_delay_us=250, instances=2))
    text = mc.config_text(config)
    parsed = parse_config(text)
    assert parsed == config
    assert parsed.backend == "python" and parsed.platform == ""
    assert parsed.max_batch_size == 8
    assert [(t.name, list(t.dims)) for t in parsed.input] == [("input", [3, 360, 640])]
    assert [(t.name, list(t.dims)) for t in parsed.output] == [("predict_lanes", [1000, 77])]
    assert parsed.input[0].data_type == mc.data_type("FP32")
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 250
    assert parsed.instance_group[0].count == 2
    assert parsed.instance_group[0].kind == config_pb2().ModelInstanceGroup.KIND_CPU
    assert parsed.version_policy.latest.num_versions == 1
    assert json.loads(parsed.parameters[contract.PARAM_PREPROCESS].string_value) == LANEATT_PREPROCESS
    assert json.loads(parsed.parameters[contract.PARAM_DECODE].string_value)["top_k"] == 5
    assert parsed.parameters[contract.PARAM_MANIFEST_SHA256].string_value == "ab" * 32
    assert parsed.parameters[contract.PARAM_ROLE].string_value == "model"


def test_fixed_batch_writes_max_batch_size_zero_and_full_dims() -> None:
    config = mc.model_config(manifest(dynamic=False), name="lane", runtime="tensorrt")
    text = mc.config_text(config)
    assert "max_batch_size: 0\n" in text.splitlines(keepends=True)
    parsed = parse_config(text)
    assert list(parsed.input[0].dims) == [1, 3, 360, 640]
    assert list(parsed.output[0].dims) == [1, 1000, 77]
    assert not parsed.HasField("dynamic_batching")
    assert parsed.platform == "tensorrt_plan" and parsed.default_model_filename == "model.plan"
    assert parsed.instance_group[0].kind == config_pb2().ModelInstanceGroup.KIND_GPU


def test_queue_delay_on_a_fixed_batch_model_is_an_error_not_ignored() -> None:
    with pytest.raises(RepositoryError, match="--max-queue-delay-us"):
        mc.model_config(manifest(dynamic=False), name="lane", runtime="tensorrt",
                        options=mc.ConfigOptions(max_queue_delay_us=100))


def test_onnxruntime_runtime_and_fp16_dtypes() -> None:
    parsed = parse_config(mc.config_text(mc.model_config(manifest(dtype="FP16"), name="m", runtime="onnxruntime")))
    assert parsed.platform == "onnxruntime_onnx" and parsed.default_model_filename == "model.onnx"
    # KIND_AUTO: Triton's ONNX Runtime backend puts it on the GPU where there is one, else the CPU
    assert [(g.kind, g.count) for g in parsed.instance_group] == [(config_pb2().ModelInstanceGroup.KIND_AUTO, 1)]
    assert parsed.input[0].data_type == config_pb2().TYPE_FP16
    assert parsed.output[0].data_type == config_pb2().TYPE_FP16


def test_warmup_uses_zero_data_with_concrete_dims() -> None:
    config = mc.model_config(manifest(), name="lane", runtime="python", options=mc.ConfigOptions(warmup=True))
    (warm,) = config.model_warmup
    assert warm.batch_size == 1
    assert list(warm.inputs["input"].dims) == [3, 360, 640] and warm.inputs["input"].zero_data
    dynamic_hw = manifest()
    dynamic_hw.io = replace(dynamic_hw.io, inputs=(TensorSpec("input", "FP32", (-1, 3, -1, -1)),))
    with pytest.raises(RepositoryError, match="--warmup"):
        mc.model_config(dynamic_hw, name="lane", runtime="python", options=mc.ConfigOptions(warmup=True))


def test_specific_version_policy_and_policy_versions() -> None:
    pinned = mc.model_config(manifest(), name="lane", runtime="python", version_policy=2)
    assert list(pinned.version_policy.specific.versions) == [2]
    assert policy_versions(pinned, [1, 2, 3]) == [2]
    assert policy_versions(pinned, [1, 3]) == []
    latest = mc.model_config(manifest(), name="lane", runtime="python")
    assert policy_versions(latest, [3, 1, 2]) == [3]
    assert policy_versions(latest, []) == []


def test_unknown_runtime_and_datatype_are_one_line_errors() -> None:
    with pytest.raises(RepositoryError, match="unknown runtime"):
        mc.model_config(manifest(), name="lane", runtime="tflite")
    bad = manifest()
    bad.io = replace(bad.io, inputs=(TensorSpec("input", "FLOAT", (-1, 3, 360, 640)),))
    with pytest.raises(RepositoryError, match="unknown tensor datatype"):
        mc.model_config(bad, name="lane", runtime="python")


def test_pipeline_configs_wire_the_ensemble() -> None:
    m = manifest()
    pre = mc.preprocess_config(m, name="lane_preprocess")
    post = mc.postprocess_config(m, name="lane_postprocess")
    model = mc.model_config(m, name="lane", runtime="python")
    ens = mc.pipeline_config(m, name="lane_pipeline", model="lane", preprocess="lane_preprocess",
                             postprocess="lane_postprocess")
    assert parse_config(mc.config_text(ens)) == ens
    assert ens.platform == "ensemble" and ens.max_batch_size == 0
    assert "max_batch_size: 0\n" in mc.config_text(pre)
    configs = {c.name: c for c in (pre, post, model)}
    available = {t.name for t in ens.input}
    for step in ens.ensemble_scheduling.step:
        target = configs[step.model_name]
        assert set(step.input_map) == {t.name for t in target.input}
        assert set(step.input_map.values()) <= available
        assert set(step.output_map) <= {t.name for t in target.output}
        available |= set(step.output_map.values())
    assert {t.name for t in ens.output} <= available
    top_k = 5
    assert [list(t.dims) for t in post.output] == [[top_k, 72, 2], [top_k], [top_k], [1]]
    assert [list(t.dims) for t in ens.output] == [[top_k, 72, 2], [top_k], [top_k], [1]]
    # The preprocess output carries the batch axis the lane model expects (batch 1).
    assert list(pre.output[0].dims) == [1, 3, 360, 640]
    assert list(post.input[0].dims) == [1, 1000, 77]


def test_a_dla_plan_names_its_dla_core_as_a_secondary_device() -> None:
    # Without secondary_devices Triton's TensorRT backend deserializes a DLA plan with DLA core -1.
    pb = config_pb2()
    dla = manifest(plan={"dla_core": 1, "precision": "fp16"})
    parsed = parse_config(mc.config_text(mc.model_config(dla, name="lane", runtime="tensorrt")))
    (group,) = parsed.instance_group
    assert group.kind == pb.ModelInstanceGroup.KIND_GPU
    assert [(d.kind, d.device_id) for d in group.secondary_devices] == [
        (pb.ModelInstanceGroup.SecondaryDevice.KIND_NVDLA, 1)]
    gpu = manifest(plan={"dla_core": None, "precision": "fp16"})
    assert not mc.model_config(gpu, name="lane", runtime="tensorrt").instance_group[0].secondary_devices
    onnx_served = mc.model_config(dla, name="lane", runtime="python")  # the ONNX of a DLA artifact
    assert not onnx_served.instance_group[0].secondary_devices


def test_served_io_follows_the_file_served() -> None:
    # model_fp16.onnx with FP16 I/O (--fp16-io), and a plan built from it, are served with FP16 tensors.
    fp16_io = manifest(dtype="FP16").io.to_dict()
    data = manifest(fp16={"onnx": {"file": "model_fp16.onnx", "io": fp16_io}},
                    plan={"onnx": "model_fp16.onnx", "dla_core": None})
    types = lambda config: [t.data_type for t in [*config.input, *config.output]]  # noqa: E731
    fp16, fp32 = [mc.data_type("FP16")] * 2, [mc.data_type("FP32")] * 2
    assert types(mc.model_config(data, name="m", runtime="python")) == fp32
    assert types(mc.model_config(data, name="m", runtime="python", options=mc.ConfigOptions(precision=Precision.FP16))) == fp16
    assert types(mc.model_config(data, name="m", runtime="tensorrt")) == fp16
    data.plan = replace(data.plan, onnx="model.onnx")
    assert types(mc.model_config(data, name="m", runtime="tensorrt")) == fp32
    assert mc.ConfigOptions.from_dict(mc.ConfigOptions(precision=Precision.FP16).to_dict()).precision is Precision.FP16


def test_install_options_written_before_precision_still_read() -> None:
    """install.json of an earlier edge-deploy keeps the served file as a bool "fp16"."""
    old = {"max_queue_delay_us": None, "instances": 1, "warmup": False, "fp16": True}
    assert mc.ConfigOptions.from_dict(old).precision is Precision.FP16
    assert mc.ConfigOptions.from_dict({**old, "fp16": False}).precision is Precision.FP32
    assert mc.ConfigOptions.from_dict({}).precision is Precision.FP32
    written = mc.ConfigOptions(precision=Precision.FP16).to_dict()
    assert written["precision"] == "fp16" and written["fp16"] is True  # an older edge-deploy rolls back to it right
    with pytest.raises(RepositoryError):
        mc.ConfigOptions(precision=Precision.INT8)
