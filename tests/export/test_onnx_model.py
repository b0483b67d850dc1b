"""`edge-deploy convert MODEL.onnx`: an exported model (an object detector) checked and brought to the device's
targets, or refused in one line with nothing written. The models are written here with onnx.helper (torch-free,
so the Python 3.10 run has these too); the torch-exported detectors are tests/client/test_stack_triton.py's."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from triton_helpers import run_cli

from edge_deploy.export.onnx_import import lowest_tensorrt


def yolo_like(path: Path, *, opset: int = 17, dims: tuple = ("batch", 3, 32, 32), ir_version: int = 8,
              external: bool = False) -> Path:
    """A graph with a YOLO-layout output [B, 6, 8]: the input's per-channel mean through a fixed linear map."""
    weight = np.random.default_rng(0).normal(size=(3, 48)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["images"], ["pooled"], axes=[2, 3], keepdims=0)
             if opset < 18 else helper.make_node("ReduceMean", ["images", "axes"], ["pooled"], keepdims=0),
             helper.make_node("MatMul", ["pooled", "W"], ["flat"]),
             helper.make_node("Reshape", ["flat", "shape"], ["output0"])]
    inits = [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(np.array([-1, 6, 8], np.int64), "shape")]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
    graph = helper.make_graph(nodes, "yolo_like", [helper.make_tensor_value_info("images", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [dims[0], 6, 8])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    import onnx

    if external:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=f"{path.name}.data", size_threshold=0)
    else:
        onnx.save(model, str(path))
    return path


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_an_onnx_file_converts_with_its_source_recorded(tmp_path):
    model = yolo_like(tmp_path / "det.onnx")
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"))
    assert done.returncode == 0, done.stderr
    data = manifest(tmp_path / "art")
    import hashlib

    assert data["source"]["kind"] == "onnx"
    assert data["source"]["file"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert data["family"] is None and data["detection"] == {"layout": "yolo", "resize": "letterbox", "pad_value": 114}
    assert data["io"]["inputs"][0] == {"name": "images", "datatype": "FP32", "shape": [-1, 3, 32, 32]}
    assert data["io"]["batch"]["dynamic"] is True
    assert (tmp_path / "art" / "model_fp16.onnx").is_file() and data["fp16"]["onnx"]["file"] == "model_fp16.onnx"
    assert data["preprocess"]["color"] == "rgb" and data["preprocess"]["height"] == 32
    assert data["parity"]["outputs"]["output0"]["max_abs"] <= 1e-6


def newer_opset_model(path: Path, *, mish: bool = False) -> Path:
    """An opset-19 model (IR 9) of ops onnx's version converter takes to opset 17 from onnx 1.15 on (pooling,
    Flatten, MatMul); with `mish`, Mish (new in opset 18), which no adapter takes below its first opset."""
    import onnx

    if mish:
        nodes = [helper.make_node("Mish", ["images"], ["output0"])]
        inits, out_shape = [], ["batch", 3, 8, 8]
    else:
        nodes = [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
                 helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
                 helper.make_node("MatMul", ["flat", "W"], ["output0"])]
        inits = [numpy_helper.from_array(np.random.default_rng(0).normal(size=(3, 48)).astype(np.float32), "W")]
        out_shape = ["batch", 48]
    graph = helper.make_graph(nodes, "newer", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                             ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, out_shape)],
                              initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), str(path))
    return path


def test_a_newer_opset_is_converted_down_and_checked_against_the_file_as_given(tmp_path):
    model = newer_opset_model(tmp_path / "det19.onnx")
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"))
    assert done.returncode == 0, done.stderr
    data = manifest(tmp_path / "art")
    assert data["export"]["opset"] == 17 and data["export"]["ir_version"] == 8
    assert "opset 19, converted" in data["export"]["exporter"]
    assert "as given" in data["parity"]["reference"]


def test_an_opset_the_converter_cannot_take_down_names_the_tensorrt_that_parses_it(tmp_path):
    model = newer_opset_model(tmp_path / "mish19.onnx", mish=True)
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "opset 19" in lines[0] and "TensorRT parses from 9.2" in lines[0]
    assert not (tmp_path / "art").exists()


def test_lowest_tensorrt_per_opset():
    assert lowest_tensorrt(17).startswith("8.5") and lowest_tensorrt(19) == "9.2"
    assert lowest_tensorrt(20).startswith("10.0") and lowest_tensorrt(21) is None


def test_a_symbolic_dimension_is_fixed_by_input_shape(tmp_path):
    model = yolo_like(tmp_path / "sym.onnx", dims=("batch", 3, "height", "width"))
    refused = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"))
    assert refused.returncode != 0 and "symbolic dimension 2 (height" in refused.stderr
    assert "--input-shape" in refused.stderr and not (tmp_path / "art").exists()
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"), "--input-shape", "1,3,48,64")
    assert done.returncode == 0, done.stderr
    assert manifest(tmp_path / "art")["io"]["inputs"][0]["shape"] == [-1, 3, 48, 64]


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    not_onnx = tmp_path / "text.onnx"
    not_onnx.write_text("this is not a model\n" * 20)
    good = yolo_like(tmp_path / "good.onnx")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    escaping = yolo_like(outside_dir / "ext.onnx", external=True)
    import onnx

    model = onnx.load(str(escaping), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../secret.data"
    (tmp_path / "secret.data").write_bytes(b"\0" * 1024)
    onnx.save(model, str(escaping))
    opset21 = yolo_like(tmp_path / "op21.onnx", opset=21, ir_version=10)
    fifo = tmp_path / "fifo.onnx"
    os.mkfifo(fifo)
    return {"not ONNX": (not_onnx, "is not an ONNX model"), "truncated": (truncated, "is not an ONNX model"),
            "external data outside": (escaping, "outside its own directory"),
            "opset 21": (opset21, "opset 21"), "FIFO": (fifo, "not a regular file")}


def test_bad_onnx_files_are_one_line_and_write_nothing(tmp_path):
    for what, (path, words) in _bad_inputs(tmp_path).items():
        out = tmp_path / f"out_{path.stem}"
        done = run_cli(tmp_path, "convert", str(path), "-o", str(out), timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1 and words in lines[0], (what, done.stderr)
        assert "Traceback" not in done.stderr and not out.exists(), what
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}")], what


def test_options_of_a_torch_export_are_refused_for_an_onnx_file(tmp_path):
    model = yolo_like(tmp_path / "det.onnx")
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"), "--input-name", "x")
    assert done.returncode != 0 and "--input-name" in done.stderr and "ONNX file" in done.stderr
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"), "--layout", "ssd")
    assert done.returncode != 0 and "--layout 'ssd'" in done.stderr and not (tmp_path / "art").exists()


@pytest.mark.parametrize("flag, bad", [("--dla", "2"), ("--dla-core", "2"), ("--dla", "-1")])
def test_a_dla_core_the_orin_does_not_have_is_refused(tmp_path, flag, bad):
    model = yolo_like(tmp_path / "det.onnx")
    done = run_cli(tmp_path, "convert", str(model), "-o", str(tmp_path / "art"), flag, bad)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1 and "DLA" in done.stderr
    assert not (tmp_path / "art").exists()


def test_sample_stack_writes_a_stand_in_detector_that_converts_and_finds_its_bright_quadrant(tmp_path):
    """The docs' flow on a fresh machine (docs/stack.md): `sample --stack`, `convert samples/detector.onnx`; then the
    converted model in ONNX Runtime finds the bright quadrant of a letterboxed frame, decoded as DetectorClient does."""
    import onnxruntime as ort

    from edge_deploy.detect import Letterbox, decode_detections
    from edge_deploy.export.stand_in_detector import stand_in_anchors

    done = run_cli(tmp_path, "sample", "--stack", "-o", str(tmp_path / "samples"), "-n", "1")
    assert done.returncode == 0, done.stderr
    done = run_cli(tmp_path, "convert", str(tmp_path / "samples" / "detector.onnx"), "-o", str(tmp_path / "det"))
    assert done.returncode == 0, done.stderr
    assert manifest(tmp_path / "det")["detection"]["layout"] == "yolo"
    frame = np.zeros((480, 640, 3), np.uint8)
    frame[:, 320:] = 255  # the right half: quadrants 1 and 3 after the letterbox
    fit = Letterbox.of(frame.shape[:2], (64, 64))
    tensor = (fit.apply(frame)[:, :, ::-1].astype(np.float32) / 255).transpose(2, 0, 1)[None].copy()
    session = ort.InferenceSession(str(tmp_path / "det" / "model.onnx"), providers=["CPUExecutionProvider"])
    found = decode_detections({"output0": session.run(None, {"images": tensor})[0]}, letterbox=fit)[0]
    anchors = stand_in_anchors()
    assert sorted(found.classes.tolist()) == [0, 0, 1, 1]
    np.testing.assert_allclose(np.sort(found.boxes, axis=0), np.sort(fit.undo(anchors[[1, 3, 5, 7]]), axis=0),
                               atol=1e-3)


# --------------------------------------------------------------------------- the reader against any bytes

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from edge_deploy.errors import ConvertError  # noqa: E402
from edge_deploy.export.onnx_import import read_onnx  # noqa: E402


@pytest.fixture(scope="module")
def good_onnx(tmp_path_factory) -> bytes:
    return yolo_like(tmp_path_factory.mktemp("good") / "det.onnx").read_bytes()


@settings(derandomize=True, max_examples=150, deadline=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10**6), flips=st.lists(st.tuples(st.integers(0, 10**6),
                                                                               st.integers(1, 255)), max_size=8),
       junk=st.binary(max_size=64))
def test_damaged_onnx_bytes_are_read_or_refused_in_one_line(tmp_path, good_onnx, cut, flips, junk):
    """A model file cut short, with bytes flipped or junk appended: read_onnx returns a model or raises one
    ConvertError line, never another exception (the checks after it get a ModelProto or nothing)."""
    data = bytearray(good_onnx[: cut % (len(good_onnx) + 1)])
    for where, value in flips:
        if data:
            data[where % len(data)] ^= value
    path = tmp_path / "damaged.onnx"
    path.write_bytes(bytes(data) + junk)
    try:
        model = read_onnx(path)
    except ConvertError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert len(model.graph.node) > 0
