"""Which builder path each TensorRT version gets, with which flags, and the audit's build defects.

Against the recording double of tests/support/trt_double.py (member lists and enum values from
NVIDIA/TensorRT's python bindings and include/NvInfer.h per release branch) and the stand-in trtexec
of tests/support/jetson_fixtures.py (options per samples/common/sampleOptions.cpp per release branch).

| TensorRT | --precision fp16 (default)                      | fp32            | int8               |
|----------|-------------------------------------------------|-----------------|--------------------|
| 8.5/8.6  | flags: FP16 + FP32 pins (OBEY) on model.onnx    | no flags        | FP16+INT8, calib   |
| 10.x     | STRONGLY_TYPED from model_fp16.onnx             | no flags        | FP16+INT8, calib   |
|          | (--weak-typing or DLA: the 8.x flag path)       |                 |                    |
| 11.x     | strongly typed (no flag) from model_fp16.onnx   | from model.onnx | refused            |
"""
from __future__ import annotations

from dataclasses import replace

import subprocess
from pathlib import Path

import pytest

from edge_deploy.artifact.manifest import BatchRange
from lane_onnx import lane_manifest
from trt_double import (
    ENGINE_IO,
    FakeEngineSpec,
    Recording,
    creation_flags,
    make_tensorrt,
    settings,
)

from edge_deploy.artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, file_entry
from edge_deploy.engine import plan as engine
from edge_deploy.engine import trtexec
from edge_deploy.machine import tensorrt_api
from edge_deploy.machine.facts import device_facts
from edge_deploy.errors import EngineError

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, fake_trtexec (shared fixtures)

LAYERS = [("head", [("rows", "FLOAT")]), ("reshape", [("predict_lanes", "FLOAT")])]
STRONG = dict(strongly_typed=True, fp32_pins=[])


# --------------------------------------------------------------------------- the double follows NVIDIA's sources


def test_network_creation_flags_have_nvinfer_values_per_version() -> None:
    # include/NvInfer.h: 8.x EXPLICIT_BATCH = 0; 10.x STRONGLY_TYPED = 1; 11.0/11.1 STRONGLY_TYPED = 0
    # ("deprecated: always enabled") and no EXPLICIT_BATCH.
    flags = {v: make_tensorrt(v).NetworkDefinitionCreationFlag for v in ("8.6.2", "10.3.0", "10.13.3", "11.4.1")}
    assert int(flags["8.6.2"].EXPLICIT_BATCH) == 0 and not hasattr(flags["8.6.2"], "STRONGLY_TYPED")
    assert int(flags["10.3.0"].STRONGLY_TYPED) == 1 and int(flags["10.13.3"].STRONGLY_TYPED) == 1
    assert int(flags["11.4.1"].STRONGLY_TYPED) == 0 and not hasattr(flags["11.4.1"], "EXPLICIT_BATCH")
    assert creation_flags((10, 13))[2:] == creation_flags((11, 0))[1:]  # the plugin flags move down by one


def test_the_11_double_has_none_of_the_removed_weak_typing_api() -> None:
    trt = make_tensorrt("11.4.1", layers=LAYERS)
    for name in ("FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"):
        assert not hasattr(trt.BuilderFlag, name)
    layer = trt.Builder(None).create_network(0).get_layer(0)
    assert not hasattr(layer, "precision") and not hasattr(layer, "set_output_type")
    config = trt.Builder(None).create_builder_config()
    assert not hasattr(config, "int8_calibrator") and not hasattr(trt, "IInt8EntropyCalibrator2")
    with pytest.raises(AttributeError):
        config.int8_calibrator = object()
    assert hasattr(config, "builder_optimization_level") and hasattr(trt.BuilderFlag, "GPU_FALLBACK")
    with pytest.raises(TypeError):  # a flag bit 11 does not have (10.x's STRONGLY_TYPED position would be 1<<3 here)
        trt.Builder(None).create_network(1 << 3)


# --------------------------------------------------------------------------- the path per version


@pytest.mark.parametrize(
    ("version", "precision", "options", "strong"),
    [
        ("8.5.2", "fp16", {}, False), ("8.6.2", "fp16", {}, False), ("8.6.2", "fp16", {"weak_typing": True}, False),
        ("10.3.0", "fp16", {}, True), ("10.3.0", "fp16", {"weak_typing": True}, False),
        ("10.3.0", "fp16", {"dla": True}, False), ("10.3.0", "fp32", {}, False), ("10.3.0", "int8", {}, False),
        ("11.0.0", "fp16", {}, True), ("11.4.1", "fp32", {}, True), ("11.4.1", "fp16", {"dla": True}, True),
        (None, "fp16", {}, False),
    ],
)
def test_strongly_typed_per_version(version, precision, options, strong) -> None:
    assert tensorrt_api.strongly_typed(version, precision, **options) is strong


def test_tensorrt11_refuses_int8_and_weak_typing_in_one_line() -> None:
    with pytest.raises(EngineError) as int8:
        tensorrt_api.strongly_typed("11.4.1", "int8")
    message = str(int8.value)
    assert "\n" not in message and "explicit quantization" in message and "ModelOpt" in message
    with pytest.raises(EngineError, match="strongly typed networks only"):
        tensorrt_api.strongly_typed("11.4.1", "fp16", weak_typing=True)


def test_tensorrt10_strongly_typed_build_sets_no_precision(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", layers=LAYERS)
    result = tensorrt_api.TensorRT(trt).build(tmp_path / FP16_ONNX_NAME, settings(**STRONG, optimization_level=3))
    assert trt.calls[0] == ("builder.create_network", 1 << 1)  # 1 << STRONGLY_TYPED
    assert not any(c[0] == "config.set_flag" for c in trt.calls)
    assert not any(c[0].startswith("layer.") for c in trt.calls)
    assert ("config.builder_optimization_level", 3) in trt.calls
    assert result.pinned_layers == [] and result.plan == b"PLAN10.3.0"


def test_tensorrt10_weak_typing_keeps_the_flag_path(tmp_path: Path) -> None:
    trt = make_tensorrt("10.3.0", layers=LAYERS)
    tensorrt_api.TensorRT(trt).build(tmp_path / ONNX_NAME, settings())
    assert trt.calls[0] == ("builder.create_network", 0)
    assert ("config.set_flag", "FP16") in trt.calls and ("layer.precision", "head", "FLOAT") in trt.calls


@pytest.mark.parametrize("version", ["11.0.0", "11.4.1"])
def test_tensorrt11_builds_with_only_its_own_api(tmp_path: Path, version: str) -> None:
    # The 11 double raises on every removed name: a build that touched one would fail here.
    trt = make_tensorrt(version, layers=LAYERS)
    result = tensorrt_api.TensorRT(trt).build(
        tmp_path / FP16_ONNX_NAME, settings(**STRONG, dla_core=0, optimization_level=2, timing_cache=b""))
    assert trt.calls[0] == ("builder.create_network", 0)  # strongly typed always; the flag is ignored
    assert [c[1] for c in trt.calls if c[0] == "config.set_flag"] == ["GPU_FALLBACK"]
    assert result.plan == f"PLAN{version}".encode()
    with pytest.raises(EngineError, match="strongly typed networks only"):
        tensorrt_api.TensorRT(make_tensorrt(version, layers=LAYERS)).build(tmp_path / ONNX_NAME, settings())


def test_build_plan_on_tensorrt10_builds_model_fp16_strongly_typed(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    trt = fake_trt("10.3.0", layers=LAYERS)
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("orin_nano_jp62"))
    assert ("parser.parse_from_file", str(directory / FP16_ONNX_NAME)) in trt.calls
    assert section.onnx == FP16_ONNX_NAME and section.typing == "strong" and section.fp32_layers == []
    assert section.onnx_sha256 == file_entry(directory / FP16_ONNX_NAME).sha256
    assert ("builder.create_network", 2) in trt.calls  # 1 << STRONGLY_TYPED

    trt.calls.clear()
    weak = engine.build_plan(directory, manifest, engine.EngineOptions(weak_typing=True, force=True),
                             root=board("orin_nano_jp62"))
    assert ("parser.parse_from_file", str(directory / ONNX_NAME)) in trt.calls
    assert weak.typing == "weak" and weak.fp32_layers == ["head"] and weak.onnx == ONNX_NAME
    assert ("config.set_flag", "OBEY_PRECISION_CONSTRAINTS") in trt.calls


def test_a_plan_from_model_fp16_with_fp16_io_is_checked_against_its_io(fake_trt, board, artifact) -> None:
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    directory, manifest = artifact
    make_fp16_onnx(directory, manifest, fp16_io=True)
    io = [(n, i, "HALF", s, p) for n, i, _, s, p in ENGINE_IO.tensors]
    fake_trt("10.3.0", layers=LAYERS, engine=FakeEngineSpec(io))
    section = engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("orin_nano_jp62"))
    assert section.verify["io"] == "ok"  # FP16 plan I/O matches model_fp16.onnx's io, not model.onnx's
    manifest.plan, manifest.files["model.plan"] = section, file_entry(directory / "model.plan")
    engine.check_existing_plan(directory, manifest, device_facts(board("orin_nano_jp62")))


def test_build_plan_on_tensorrt11_and_fp32(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    trt = fake_trt("11.4.1", layers=LAYERS)
    section = engine.build_plan(directory, manifest, engine.EngineOptions(precision="fp32"), root=board("agx_orin_jp60"))
    assert ("parser.parse_from_file", str(directory / ONNX_NAME)) in trt.calls
    assert section.typing == "strong" and section.precision == "fp32"
    with pytest.raises(EngineError, match="explicit quantization"):
        engine.build_plan(directory, manifest, engine.EngineOptions(precision="int8", force=True),
                          root=board("agx_orin_jp60"))


def test_strongly_typed_build_without_model_fp16_says_how_to_make_it(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    (directory / FP16_ONNX_NAME).unlink()
    fake_trt("10.3.0", layers=LAYERS)
    with pytest.raises(EngineError, match=f"no {FP16_ONNX_NAME}.*edge-deploy convert") as info:
        engine.build_plan(directory, manifest, engine.EngineOptions(), root=board("orin_nano_jp62"))
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- DLA (defect 4 and TensorRT 11)


def test_dla_refuses_fp32_and_dynamic_shapes_in_one_line(board) -> None:
    # With GPU fallback these would quietly run on the GPU while the manifest says dla_core.
    orin = device_facts(board("agx_orin_jp60"))
    fixed = {"input": ([1, 3, 360, 640], [1, 3, 360, 640], [1, 3, 360, 640])}
    dynamic = {"input": ([1, 3, 360, 640], [1, 3, 360, 640], [4, 3, 360, 640])}
    with pytest.raises(EngineError, match="--precision fp16 or int8") as fp32:
        engine.check_dla(0, orin, "8.6.2", "fp32", fixed)
    with pytest.raises(EngineError, match="min = opt = max") as batch:
        engine.check_dla(0, orin, "8.6.2", "fp16", dynamic)
    assert "\n" not in str(fp32.value) + str(batch.value)
    engine.check_dla(0, orin, "8.6.2", "fp16", fixed)
    engine.check_dla(1, orin, "10.3.0", "int8", {})  # a fixed-batch model has no profile


def test_dla_on_tensorrt11_needs_11_4_and_an_agx_orin(board) -> None:
    fixed = {"input": ([1, 3, 360, 640], [1, 3, 360, 640], [1, 3, 360, 640])}
    agx = device_facts(board("agx_orin_jp60"))
    engine.check_dla(0, agx, "11.4.1", "fp16", fixed)
    with pytest.raises(EngineError, match="11.0-11.3"):
        engine.check_dla(0, agx, "11.3.0", "fp16", fixed)
    nx = board("orin_nano_jp62")
    tree = nx / "proc" / "device-tree"
    (tree / "compatible").write_bytes(b"nvidia,p3768-0000+p3767-0000\0nvidia,p3767-0000\0nvidia,tegra234\0")
    (tree / "model").write_bytes(b"NVIDIA Jetson Orin NX Engineering Reference Developer Kit\0")
    orin_nx = device_facts(nx)
    assert orin_nx.dla_cores == 2
    engine.check_dla(0, orin_nx, "10.3.0", "fp16", fixed)
    with pytest.raises(EngineError, match="only on Jetson AGX Orin"):
        engine.check_dla(0, orin_nx, "11.4.1", "fp16", fixed)


def test_dla_build_on_tensorrt10_keeps_the_flag_path(fake_trt, board, artifact) -> None:
    directory, manifest = artifact
    manifest.io = replace(manifest.io, batch=BatchRange(1, 1, 1, True))
    frame = (1, 3, 360, 640)
    trt = fake_trt("10.3.0", layers=LAYERS, engine=FakeEngineSpec(
        [ENGINE_IO.tensors[0][:4] + ((frame, frame, frame),), ENGINE_IO.tensors[1]]))
    section = engine.build_plan(directory, manifest, engine.EngineOptions(dla_core=0), root=board("agx_orin_jp60"))
    assert section.typing == "weak" and section.dla_core == 0
    assert ("config.set_flag", "FP16") in trt.calls and ("config.set_flag", "GPU_FALLBACK") in trt.calls


# --------------------------------------------------------------------------- another TensorRT's plan (defect 8)


def test_plan_of_another_tensorrt_library_says_which_and_how_to_rebuild(tmp_path: Path) -> None:
    facade = tensorrt_api.TensorRT(make_tensorrt("8.5.2", engine=ENGINE_IO))
    plan = tmp_path / "lanedet" / "model.plan"
    with pytest.raises(EngineError) as info:
        facade.deserialize(b"PLANLIB8.5.3.1", where=str(plan))
    message = str(info.value)
    assert "\n" not in message and "corrupt" not in message
    assert "built with TensorRT 8.5.3.1, but this machine has TensorRT 8.5.2" in message
    assert f"edge-deploy convert {plan.parent} --force" in message


# --------------------------------------------------------------------------- trtexec per version


def test_trtexec_argv_strongly_typed_on_10_and_11() -> None:
    tool, onnx, out = Path("trtexec"), Path(FP16_ONNX_NAME), Path("p")
    ten = trtexec.trtexec_argv(tool, onnx, out, settings(**STRONG), tensorrt_version="10.3.0")
    eleven = trtexec.trtexec_argv(tool, onnx, out, settings(**STRONG), tensorrt_version="11.4.1")
    removed = ("--fp16", "--int8", "--calib", "--precisionConstraints", "--layerPrecisions", "--layerOutputTypes")
    assert "--stronglyTyped" in ten and "--stronglyTyped" not in eleven
    assert not any(a.startswith(removed) for a in ten + eleven)
    with pytest.raises(EngineError, match="strongly typed"):
        trtexec.trtexec_argv(tool, onnx, out, settings(**STRONG), tensorrt_version="8.6.2")


@pytest.mark.parametrize("removed", ["--fp16", "--int8", "--calib=c", "--precisionConstraints=obey",
                                     "--layerPrecisions=a:fp32", "--layerOutputTypes=a:fp32"])
def test_the_fake_trtexec_of_11_rejects_removed_flags(fake_trtexec, monkeypatch, removed: str) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", "110401")
    tool = trtexec.find_trtexec()
    done = subprocess.run([str(tool), "--onnx=m.onnx", "--saveEngine=p", removed], capture_output=True, text=True)
    assert done.returncode == 1 and "[TensorRT v110401]" in done.stdout
    assert trtexec.trtexec_error_line(done.stdout, done.stderr, 1).startswith("Unknown option: " + removed.split("=")[0])
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", "100300")
    ok = subprocess.run([str(tool), "--onnx=m.onnx", "--saveEngine=/dev/null", removed, "--stronglyTyped"],
                        capture_output=True, text=True)
    assert ok.returncode == 0


@pytest.mark.parametrize(("banner", "strongly"), [("100300", ["--stronglyTyped"]), ("110401", [])])
def test_trtexec_builds_model_fp16_on_10_and_11(fake_trtexec, board, artifact, monkeypatch, banner, strongly) -> None:
    directory, manifest = artifact
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", banner)
    section = engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec"), Recording(),
                                root=board("agx_orin_jp60"))
    (argv,) = fake_trtexec()
    assert f"--onnx={directory / FP16_ONNX_NAME}" in argv and "--fp16" not in argv
    assert [a for a in argv if a == "--stronglyTyped"] == strongly
    assert section.typing == "strong" and section.builder == "trtexec"


def test_trtexec_pins_never_give_a_layer_a_type_count(fake_trtexec, board, tmp_path) -> None:
    # Defect 2: a pinned ONNX node with two outputs (Dropout: output + bool mask) used to get
    # --layerOutputTypes=drop:fp32+fp32; TensorRT makes one layer "drop" with one output, and trtexec
    # throws "Layer drop has 1 outputs but 2 output types are given". The bool mask must not be FP32 either.
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    directory = tmp_path / "art"
    directory.mkdir()
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["input"], ["pooled"], name="pool"),
         helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
         helper.make_node("Gemm", ["flat", "w", "b"], ["rows"], name="head"),
         helper.make_node("Dropout", ["rows"], ["dropped", "mask"], name="drop"),
         helper.make_node("Reshape", ["dropped", "shape"], ["predict_lanes"], name="reshape")],
        "lanes", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 360, 640])],
        [helper.make_tensor_value_info("predict_lanes", TensorProto.FLOAT, ["batch", 64, 77])],
        initializer=[numpy_helper.from_array(np.zeros((3, 64 * 77), np.float32), "w"),
                     numpy_helper.from_array(np.zeros(64 * 77, np.float32), "b"),
                     numpy_helper.from_array(np.array([-1, 64, 77], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(directory / "model.onnx"))
    manifest = lane_manifest(directory, 64, fp32_nodes=("head", "drop"))
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec"), reporter,
                      root=board("agx_orin_jp60"))  # trtexec 8.6.2: the flag path
    (argv,) = fake_trtexec()
    assert "--layerPrecisions=head:fp32,drop:fp32" in argv and "--layerOutputTypes=head:fp32" in argv
    assert any("exact name" in w for w in reporter.warnings)


def test_trtexec_85_says_the_optimisation_level_is_ignored(fake_trtexec, board, artifact, monkeypatch) -> None:
    # Defect 9: the Python path warns; trtexec used to drop it silently.
    directory, manifest = artifact
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", "8502")
    reporter = Recording()
    engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec", optimization_level=3), reporter,
                      root=board("agx_orin_jp60"))
    assert any("8.5.2 has no builder optimization level" in w for w in reporter.warnings)
    assert trtexec.ignored_options(settings(optimization_level=3), None)  # unknown version: not passed, said so
    assert trtexec.ignored_options(settings(optimization_level=3), "8.6.2") == []
