"""Every ONNX file convert writes loads on the device's consumers: TensorRT 8.5's and 10.3's ONNX parsers and
onnxruntime 1.16 (IR version <= 8, ai.onnx opsets 9..17, each domain imported once; export/onnx_target.py
cites where those limits come from).

The artifact walk covers each variant (plain, FP16, and fused and fused FP16 where the family's preprocessing
can be fused) of every registered lane family (edge_deploy.lanedet.family.family_names(): a family added later
is walked without editing this file), and, without torch (the Python 3.10 CI run), all four variants of
tests/support/small_artifact.py's model. Those four also load and run in onnxruntime 1.16.3 itself, the oldest
Jetson onnxruntime builds' version, in the Python 3.10 run (scripts/test_py310.sh installs it apart and names it
in $EDGE_DEPLOY_OLDEST_ORT; the 3.11 run skips that test).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

from edge_deploy.errors import ConvertError
from edge_deploy.export import onnx_target
from edge_deploy.lanedet.family import family_names, get_family

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

FRAME = (590, 1640)
VARIANTS = {"plain": "model.onnx", "fp16": "model_fp16.onnx"}


def _identity(opset: int = 17, **kwargs) -> "onnx.ModelProto":
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)


def assert_for_the_device(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    assert onnx_target.problems(model) == [], (path, onnx_target.problems(model))
    assert model.ir_version <= onnx_target.IR_VERSION
    domains = [o.domain or "ai.onnx" for o in model.opset_import]
    assert domains == ["ai.onnx"], (path, list(model.opset_import))
    assert onnx_target.MIN_OPSET <= model.opset_import[0].version <= onnx_target.MAX_OPSET
    onnx.checker.check_model(model)


# --------------------------------------------------------------------------- the policy itself


def test_the_installed_onnx_stamps_a_newer_ir_than_the_consumers_read() -> None:
    # Why the policy exists: onnx.helper stamps its own IR version (onnx 1.23: 14; 1.15: 9), which
    # onnxruntime 1.16 refuses above 9 ("Unsupported model IR version: 10, max supported IR version: 9").
    assert _identity().ir_version > onnx_target.IR_VERSION or onnx.__version__.startswith(("1.12", "1.13"))
    assert onnx_target.make_model(_identity().graph).ir_version == onnx_target.IR_VERSION


def test_conform_lowers_the_ir_version_and_lists_each_domain_once() -> None:
    model = _identity(ir_version=14)
    model.opset_import.extend([helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx", 17)])
    onnx_target.conform(model)
    assert model.ir_version == onnx_target.IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert onnx_target.problems(model) == []


def test_a_file_another_tool_wrote_is_rewritten_only_when_it_does_not_fit(tmp_path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(_identity(ir_version=14), str(path))
    onnx_target.conform_file(path)
    assert onnx.load(str(path)).ir_version == onnx_target.IR_VERSION
    stamp = path.stat().st_mtime_ns
    onnx_target.conform_file(path)
    assert path.stat().st_mtime_ns == stamp  # already fits: not rewritten


def test_what_cannot_be_made_to_fit_is_refused_in_one_line() -> None:
    for opset, why in ((18, "outside 9 to 17"), (8, "outside 9 to 17")):
        with pytest.raises(ConvertError, match=why) as caught:
            onnx_target.conform(_identity(opset))
        assert "\n" not in str(caught.value)
    custom = _identity()
    custom.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(ConvertError, match="com.microsoft"):
        onnx_target.conform(custom)
    clash = _identity()
    clash.opset_import.append(helper.make_opsetid("ai.onnx", 15))
    with pytest.raises(ConvertError, match="opsets 17 and 15"):
        onnx_target.conform(clash)
    float8 = _identity()
    float8.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT8E4M3FN
    assert any("newer than IR 8" in p for p in onnx_target.problems(float8))


def test_the_opset_option_is_checked_against_the_consumers() -> None:
    from edge_deploy.export.settings import ExportSettings

    with pytest.raises(ConvertError, match="TensorRT 8.5 stops at 17"):
        ExportSettings(opset=18)
    assert ExportSettings().opset == onnx_target.DEFAULT_OPSET == onnx_target.MAX_OPSET


def test_the_preprocessing_graph_is_written_for_the_device() -> None:
    from edge_deploy.export.fused_preprocess import preprocess_graph

    lane = get_family(family_names()[0])
    graph = preprocess_graph(lane.preprocess, FRAME, "batch", "input", "FP32")
    assert graph.ir_version == onnx_target.IR_VERSION and onnx_target.problems(graph) == []


# --------------------------------------------------------------------------- every artifact variant, no torch


@pytest.fixture(scope="module")
def tiny_variants(tmp_path_factory, laneatt_data) -> dict[str, Path]:
    """tests/support/small_artifact.py's model: plain, FP16, and both fused, as the product writes them."""
    from small_artifact import make_artifact

    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.export.fp16_onnx import make_fp16_onnx
    from edge_deploy.export.fused_preprocess import fuse_artifact

    root = tmp_path_factory.mktemp("tiny_variants")
    plain = make_artifact(root / "plain", laneatt_data / "anchors_2784x77.npy", n=200)
    manifest = Manifest.read(plain)
    make_fp16_onnx(plain, manifest)
    manifest.write(plain)
    fused = Path(shutil.copytree(plain, root / "fused"))
    manifest = Manifest.read(fused)
    fuse_artifact(fused, manifest, FRAME, seed=1)
    manifest.write(fused)
    files = {f"{kind}": plain / name for kind, name in VARIANTS.items()}
    files.update({f"fused {kind}": fused / name for kind, name in VARIANTS.items()})
    return files


@pytest.mark.parametrize("variant", ["plain", "fp16", "fused plain", "fused fp16"])
def test_every_variant_of_a_lane_model_is_written_for_the_device(tiny_variants, variant) -> None:
    assert_for_the_device(tiny_variants[variant])


def test_the_fused_model_runs_in_onnx_runtime_after_conforming(tiny_variants) -> None:
    from edge_deploy.export.parity import ort_session

    session = ort_session(tiny_variants["fused fp16"])
    frame = np.zeros((1, *FRAME, 3), np.uint8)
    (out,) = session.run(None, {"FRAME": frame})
    assert out.shape[0] == 1


OLDEST_ORT_ENV = "EDGE_DEPLOY_OLDEST_ORT"  # set by scripts/test_py310.sh: a directory holding onnxruntime 1.16.3
OLDEST_ORT_VERSION = "1.16.3"
_RUN_IN_OLDEST_ORT = """
import json, sys
import numpy as np
import onnxruntime as ort

assert ort.__version__ == sys.argv[1], (ort.__version__, ort.__file__)
dtypes = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(uint8)": np.uint8,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32}
ran = {}
for name, path in json.loads(sys.argv[2]).items():
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], dtypes[i.type])
             for i in session.get_inputs()}
    ran[name] = [list(out.shape) for out in session.run(None, feeds)]
print(json.dumps({"version": ort.__version__, "file": ort.__file__, "ran": ran}))
"""


def test_every_variant_loads_and_runs_in_the_oldest_jetson_onnxruntime(request) -> None:
    """onnxruntime 1.16 refuses an IR version above 9 ("Unsupported model IR version"): each variant is loaded
    and run with zeros by onnxruntime 1.16.3 itself, in a subprocess with its directory first on PYTHONPATH."""
    oldest = os.environ.get(OLDEST_ORT_ENV)
    if not oldest:
        pytest.skip(f"${OLDEST_ORT_ENV} is unset: onnxruntime {OLDEST_ORT_VERSION} is installed and named only by "
                    "the Python 3.10 CI run (scripts/test_py310.sh)")
    tiny_variants = request.getfixturevalue("tiny_variants")  # built only where the test runs
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [oldest, os.environ.get("PYTHONPATH")]))}
    paths = {name: str(path) for name, path in tiny_variants.items()}
    done = subprocess.run([sys.executable, "-c", _RUN_IN_OLDEST_ORT, OLDEST_ORT_VERSION, json.dumps(paths)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["version"] == OLDEST_ORT_VERSION and report["file"].startswith(oldest), report
    assert sorted(report["ran"]) == sorted(["plain", "fp16", "fused plain", "fused fp16"])
    assert all(shapes and all(shape[0] == 1 for shape in shapes) for shapes in report["ran"].values()), report


# --------------------------------------------------------------------------- every family's real convert


def fusable(name: str) -> bool:
    """Whether --fuse-preprocess does the family's preprocessing exactly (fused_preprocess.preprocess_graph: a bicubic
    resize, of the crop box or of the rows that reach the kept bottom rows; an area resize is substituted)."""
    return get_family(name).preprocess.interpolation == "bicubic"


@pytest.fixture(scope="module")
def family_artifacts(request, tmp_path_factory):
    """Factory: (plain, fused or None) artifact directories of a family, converted by the product (random weights).

    LaneATT reuses the suite's session artifacts (conftest.py: `laneatt_artifact`, `laneatt_fused_artifact`,
    converted through the real CLI), so walking it costs no extra convert. Another family is converted once,
    for its data-set preset with the smallest input and at a fixed batch of 1 (the IR/opset policy depends on
    neither; parity and the FP16 report then run one batch instead of two ends of 1..4), and fused by the product's `fuse_artifact` on a copy when
    its preprocessing can be fused.
    """
    made: dict[str, tuple[Path, Path | None]] = {}

    def make(name: str) -> tuple[Path, Path | None]:
        if name in made:
            return made[name]
        if name == "laneatt":
            made[name] = (request.getfixturevalue("laneatt_artifact"),
                          request.getfixturevalue("laneatt_fused_artifact"))
            return made[name]
        from edge_deploy.artifact.manifest import Manifest
        from edge_deploy.engine.convert import convert
        from edge_deploy.export.fused_preprocess import fuse_artifact
        from edge_deploy.export.settings import ExportSettings, batch_range
        from edge_deploy.export.source import SourceSpec

        work = tmp_path_factory.mktemp(f"family_{name}")
        if name in ("ufldv2", "clrnet"):  # the suite's converted ones (conftest.py: `*_artifact`)
            plain = request.getfixturevalue(f"{name}_artifact")[1]
        else:
            family = get_family(name)
            presets = list(getattr(family, "datasets", {}).values())

            def pixels(preset) -> int:
                spec = preset.preprocess or family.preprocess
                return spec.height * spec.width

            dataset = min(presets, key=pixels).name if presets else None  # the smallest input: the cheapest convert
            plain = convert(SourceSpec(model=name, dataset=dataset), work / "plain",
                            ExportSettings(batch=batch_range(batch=1)), target="onnx").artifact_dir
        fused = None
        if fusable(name):
            fused = Path(shutil.copytree(plain, work / "fused"))
            manifest = Manifest.read(fused)
            fuse_artifact(fused, manifest, FRAME, seed=1)
            manifest.write(fused)
        made[name] = (plain, fused)
        return made[name]

    return make


@pytest.mark.slow
@pytest.mark.once(reason="a minute or more of converts per family")
@pytest.mark.parametrize("family", family_names())
def test_every_artifact_variant_of_every_family_is_written_for_the_device(family, family_artifacts) -> None:
    torch_or_skip()  # converting a family from PyTorch
    plain, fused = family_artifacts(family)
    assert (fused is not None) == fusable(family)
    for directory in (plain, fused) if fused is not None else (plain,):
        for name in VARIANTS.values():
            assert (directory / name).is_file(), (family, directory, name)
            assert_for_the_device(directory / name)
    if fused is not None:
        model = onnx.load(str(fused / "model.onnx"), load_external_data=False)
        assert model.graph.input[0].name == "FRAME"  # the fused variant really is fused
