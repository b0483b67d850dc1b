"""The trtexec builder: argv from BuildSettings, its banner and errors, and a build through a stand-in trtexec.

NVIDIA's trtexec cannot be installed here; jetson_fixtures.fake_trtexec puts a
script on $TRTEXEC that behaves like it at the process boundary (banner, [E]
lines, exit codes, the files it writes), so the subprocess plumbing is real:
argv, exit codes, the one-line error, trtexec.log, the atomic rename of the plan.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from trt_double import Recording, file_names, settings

from edge_deploy.engine import plan as engine
from edge_deploy.engine import trtexec
from edge_deploy.core.sizes import MiB
from edge_deploy.errors import EngineError

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, ... (shared fixtures)


# --------------------------------------------------------------------------- argv, banner, error line


def test_trtexec_argv_for_fp16_dla_and_pins(tmp_path: Path) -> None:
    argv = trtexec.trtexec_argv(
        Path("/usr/src/tensorrt/bin/trtexec"), Path("/a/model.onnx"), Path("/a/.model.plan.tmp"),
        settings(dla_core=0, optimization_level=3, fp32_pins=[("head", "rows"), ("split", "a")]),
        timing_cache=Path("/c/timing.cache"), float_nodes={"head"}, tensorrt_version="8.6.2",
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
        "--layerOutputTypes=head:fp32",  # one type for all outputs; "split" has a non-float output
        "--useDLACore=0",
        "--allowGPUFallback",
        "--builderOptimizationLevel=3",
        "--timingCacheFile=/c/timing.cache",
    ]


def test_trtexec_argv_version_and_precision_rules() -> None:
    tool, onnx, out = Path("trtexec"), Path("m.onnx"), Path("p")
    fp32 = trtexec.trtexec_argv(tool, onnx, out, settings(precision="fp32", fp32_pins=[], profile={},
                                                          optimization_level=2), tensorrt_version="8.5.2")
    assert not any(a.startswith(("--fp16", "--int8", "--builderOptimizationLevel", "--minShapes")) for a in fp32)
    with pytest.raises(EngineError, match="calibration cache"):
        trtexec.trtexec_argv(tool, onnx, out, settings(precision="int8"))
    int8 = trtexec.trtexec_argv(tool, onnx, out, settings(precision="int8"), calibration_cache=Path("c.cache"))
    assert {"--fp16", "--int8", "--calib=c.cache"} <= set(int8)
    with pytest.raises(EngineError, match="cannot be passed to trtexec"):
        trtexec.trtexec_argv(tool, onnx, out, settings(fp32_pins=[("Conv:0,1", "x")]))


@pytest.mark.parametrize(("version", "build_only"), [("8.5.2", "--buildOnly"), ("8.6.2", "--skipInference"),
                                                      ("10.3.0", "--skipInference"), ("11.4.1", "--skipInference"),
                                                      (None, None)])
def test_trtexec_argv_build_only_flag_per_version(version: str | None, build_only: str | None) -> None:
    # An unknown version gets neither: 8.5 rejects --skipInference, 10.0+ rejects --buildOnly.
    argv = trtexec.trtexec_argv(Path("trtexec"), Path("m.onnx"), Path("p"), settings(), tensorrt_version=version)
    assert {"--buildOnly", "--skipInference"} & set(argv) == ({build_only} if build_only else set())


def test_trtexec_version_banner_and_error_line() -> None:
    assert trtexec.parse_trtexec_version("&&&& RUNNING TensorRT.trtexec [TensorRT v8602] # trtexec") == "8.6.2"
    assert trtexec.parse_trtexec_version("&&&& RUNNING TensorRT.trtexec [TensorRT v100300] [b26] # x") == "10.3.0"
    assert trtexec.parse_trtexec_version("no banner") is None
    out = ("[11/22/2026-07:00:01] [I] Start parsing network model.\n"
           "[11/22/2026-07:00:02] [E] Error[4]: [network.cpp::validate::3100] Error Code 4: bad profile\n"
           "[11/22/2026-07:00:02] [E] Engine could not be created from network\n")
    assert trtexec.trtexec_error_line(out, "", 1) == "Error[4]: [network.cpp::validate::3100] Error Code 4: bad profile"
    assert trtexec.trtexec_error_line("", "Segmentation fault\n", 139) == "Segmentation fault"
    assert trtexec.trtexec_error_line("", "", 3) == "exit code 3, no output"


# --------------------------------------------------------------------------- builds through the stand-in trtexec


def test_trtexec_build_renames_the_plan_and_records_trtexecs_version(fake_trtexec, board, artifact) -> None:
    directory, manifest = artifact
    assert engine.available_builder("auto") == "trtexec"
    assert engine.available_builder("python") is None
    reporter = Recording()
    section = engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec"), reporter,
                                root=board("agx_orin_jp60"))
    assert (directory / "model.plan").read_bytes() == b"PLAN-from-trtexec"
    assert section.builder == "trtexec" and section.tensorrt == "8.6.2"
    assert section.verify["status"] == "skipped"
    assert any("not verified" in w for w in reporter.warnings)
    (argv,) = fake_trtexec()
    assert f"--onnx={directory / 'model.onnx'}" in argv and "--fp16" in argv
    save = next(a for a in argv if a.startswith("--saveEngine="))
    temporary = Path(save.split("=", 1)[1])  # fsutil's: .model.plan.<pid>.<random>.tmp beside model.plan
    assert temporary.parent == directory and temporary.name.startswith(".model.plan.") and temporary.suffix == ".tmp"
    assert f"--memPoolSize=workspace:{engine.DEFAULT_WORKSPACE_CAP // MiB}" in argv
    assert "--layerPrecisions=head:fp32" in argv and "--layerOutputTypes=head:fp32" in argv
    assert file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan", "trtexec.log"}


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
    assert file_names(directory) == {"model.onnx", "model_fp16.onnx", "model.plan", "trtexec.log"}
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
    assert not list(tmp_path.glob(".timing.cache.*tmp*"))


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


def test_trtexec_85_gets_only_options_it_knows(fake_trtexec, board, artifact, monkeypatch) -> None:
    # TensorRT 8.5's trtexec (JetPack 5.1) fails on --skipInference and --builderOptimizationLevel.
    directory, manifest = artifact
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", "8502")
    section = engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec", optimization_level=3),
                                Recording(), root=board("agx_orin_jp60"))
    assert section.tensorrt == "8.5.2" and (directory / "model.plan").read_bytes() == b"PLAN-from-trtexec"
    (argv,) = fake_trtexec()
    assert "--buildOnly" in argv and not any(a.startswith("--builderOptimizationLevel") for a in argv)


def test_trtexec_of_tensorrt12_is_refused_before_running(fake_trtexec, board, artifact, monkeypatch) -> None:
    directory, manifest = artifact
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", "120000")
    with pytest.raises(EngineError, match="TensorRT 12.0.0 is not supported") as info:
        engine.build_plan(directory, manifest, engine.EngineOptions(builder="trtexec"), root=board("agx_orin_jp60"))
    assert "\n" not in str(info.value)
    assert fake_trtexec() == [] and file_names(directory) == {"model.onnx", "model_fp16.onnx"}
