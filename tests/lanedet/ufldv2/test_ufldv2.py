"""UFLDv2 from an official-format checkpoint to served lanes: strict checkpoint loading (DDP prefixes, the
wrong data set refused with the --dataset that fits), `convert ufldv2` per data set with ONNX equal to the
in-project PyTorch model, and the served model (raw + client decoding, and the --pipeline) giving the lanes
of the local decode, through the real bundled tritonserver and LaneDetClient.

The checkpoints are random-weight ones written in the official format ({'model': state_dict}, keys
prefixed `module.` as DDP training saves them); their key names are checked against the official
parsingNet's layout written out below (torchvision's ResNet names, `pool`, `cls.{0,1,3}`), so the
checkpoint format is not merely our own model's. The CULane model is the real size (206 M parameters,
825 MB FP32): its test is marked slow and exports without the FP16 copy and the simplifier.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from triton_helpers import run_cli, serving
from needs import torch_or_skip
from ufldv2_checkpoints import write_official_checkpoint

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.errors import CheckpointError
from edge_deploy.lanedet.ufldv2.decode import OUTPUT_NAMES
from edge_deploy.lanedet.ufldv2.presets import PRESETS

torch = torch_or_skip()  # UFLDv2 checkpoints and export need torch (the [torch] extra)


def official_keys(backbone: str, fc_norm: bool) -> set[str]:
    """The state_dict keys of the official parsingNet (use_aux=False): torchvision ResNet-18/34 under `model.`,
    the 1x1 conv `pool`, and `cls` = [LayerNorm | Identity, Linear, ReLU, Linear]."""
    keys = {"model.conv1.weight", *(f"model.bn1.{p}" for p in ("weight", "bias", "running_mean", "running_var",
                                                                "num_batches_tracked"))}
    blocks = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}[backbone]
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    for stage, count in enumerate(blocks, start=1):
        for b in range(count):
            prefix = f"model.layer{stage}.{b}"
            keys |= {f"{prefix}.conv1.weight", f"{prefix}.conv2.weight"}
            keys |= {f"{prefix}.bn{i}.{p}" for i in (1, 2) for p in bn}
            if b == 0 and stage > 1:
                keys |= {f"{prefix}.downsample.0.weight", *(f"{prefix}.downsample.1.{p}" for p in bn)}
    keys |= {"pool.weight", "pool.bias", "cls.1.weight", "cls.1.bias", "cls.3.weight", "cls.3.bias"}
    if fc_norm:
        keys |= {"cls.0.weight", "cls.0.bias"}
    return keys


def _frames(size: tuple[int, int]) -> list[np.ndarray]:
    from edge_deploy.synthetic.roads import scene

    return [scene(9_000_000 + i, size[1], size[0]).frame for i in range(3)]


def _max_relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def _check_onnx_equals_torch(artifact: Path, checkpoint: Path, dataset: str) -> None:
    from edge_deploy.lanedet.ufldv2.model import build_ufldv2
    from edge_deploy.export.parity import ort_session

    model = build_ufldv2(dataset, "resnet18", checkpoint)
    preset = PRESETS[dataset]
    x = np.random.default_rng(1).normal(0, 1, (2, 3, preset.input_height, preset.input_width)).astype(np.float32)
    with torch.no_grad():
        expected = [t.numpy() for t in model(torch.from_numpy(x))]
    session = ort_session(artifact / "model.onnx")
    assert [i.name for i in session.get_inputs()] == ["input"]
    assert [o.name for o in session.get_outputs()] == list(OUTPUT_NAMES)  # existing TensorRT code keeps working
    got = session.run(list(OUTPUT_NAMES), {"input": x})
    for name, a, b in zip(OUTPUT_NAMES, got, expected):
        assert a.shape == b.shape
        assert _max_relative(a, b) <= 1e-3, name


# Every test of the official TuSimple checkpoint's convert (the fixture below: a minute and more of torch work) runs
# once per CI, in .ci/run's demo step (tests/conftest.py); the Python 3.10 run has no torch and skips them anyway.
TUSIMPLE_ONCE = pytest.mark.once(reason="the official UFLDv2-TuSimple checkpoint converted (a minute and more)")


@pytest.fixture(scope="module")
def tusimple(ufldv2_artifact):
    """(work directory, DDP checkpoint, artifact) of the suite's `convert ufldv2 --dataset tusimple --checkpoint`."""
    checkpoint, artifact = ufldv2_artifact
    return artifact.parent, checkpoint, artifact


def test_official_checkpoint_keys_are_the_official_layout() -> None:
    from edge_deploy.lanedet.ufldv2.model import UFLDv2

    for dataset in PRESETS:
        for backbone in ("resnet18", "resnet34"):
            preset = PRESETS[dataset]
            with torch.device("meta"):  # names and shapes only: no 800 MB of weights
                model = UFLDv2(preset, backbone)
            state = model.state_dict()
            assert set(state) == official_keys(backbone, preset.fc_norm)
            assert tuple(state["cls.3.weight"].shape) == (preset.total_dim, 2048)
            assert tuple(state["cls.1.weight"].shape) == (2048, preset.feature_size)
    assert PRESETS["culane"].total_dim == 91_224 and PRESETS["culane"].feature_size == 4_000


@TUSIMPLE_ONCE
def test_tusimple_checkpoint_converts_to_onnx_equal_to_the_pytorch_model(tusimple) -> None:
    _, checkpoint, artifact = tusimple
    _check_onnx_equals_torch(artifact, checkpoint, "tusimple")
    manifest = Manifest.read(artifact)
    assert manifest.family == "ufldv2" and manifest.source["dataset"] == "tusimple"
    assert manifest.source["trained"] is True and manifest.source["checkpoint"]["sha256"]
    assert manifest.decode.row_anchor == pytest.approx((160 / 720, 710 / 720))
    spec = manifest.preprocess
    assert (spec.height, spec.width, spec.resized_height, spec.color) == (320, 800, 400, "rgb")
    assert [t.name for t in manifest.io.outputs] == list(OUTPUT_NAMES)
    lanes = manifest.fp16_onnx["verify"]["lanes"]  # the FP16 lane check: same lanes, mean |dx| <= 1 px
    assert manifest.fp16_onnx["verify"]["passed"] and lanes["lanes_fp16"] == lanes["lanes_fp32"] > 0
    assert lanes["dx_width_px"] == 1280  # held at TuSimple's original width, not at 640


@pytest.mark.slow
@pytest.mark.once(reason="a 825 MB model converted (a minute)")
def test_culane_checkpoint_converts_to_onnx_equal_to_the_pytorch_model(tmp_path) -> None:
    from edge_deploy.engine.convert import convert
    from edge_deploy.export.settings import ExportSettings, batch_range
    from edge_deploy.export.source import SourceSpec
    from edge_deploy.artifact.precision import Precision

    checkpoint = write_official_checkpoint(tmp_path / "culane_res18.pth", "culane")
    # One fixed batch of 1: the parity run and the FP16 report see one sample of this 825 MB model instead of
    # five (batches 1 and 4); the dynamic batch axis is the TuSimple test's and conftest.py's ufldv2_artifact's.
    result = convert(SourceSpec(model="ufldv2", dataset="culane", checkpoint=checkpoint), tmp_path / "art",
                     ExportSettings(precision=Precision.FP32, simplify=False, batch=batch_range(batch=1)),
                     target="onnx")
    manifest = Manifest.read(result.artifact_dir)
    # convert's own parity step ran this model.onnx against the PyTorch model (the LayerNorm of CULane's head
    # included); the TuSimple test above makes the same comparison independently, and building the 825 MB
    # model a second time here cost 20 s of the suite.
    tolerance = manifest.parity.tolerance
    assert manifest.parity.outputs and all(error.max_abs <= tolerance.atol for error in manifest.parity.outputs.values())
    assert [t.name for t in manifest.io.outputs] == list(OUTPUT_NAMES)
    assert manifest.source["parameters"] == 206_300_640  # the 206 M (825 MB FP32)
    assert manifest.preprocess.resized_height == 533 and manifest.decode.row_anchor == (0.42, 1.0)


@TUSIMPLE_ONCE
def test_a_checkpoint_of_the_other_data_set_is_refused_naming_the_dataset_that_fits(tusimple) -> None:
    from edge_deploy.lanedet.ufldv2.model import build_ufldv2

    _, checkpoint, _ = tusimple
    with pytest.raises(CheckpointError) as refused:
        build_ufldv2("culane", "resnet18", checkpoint)
    message = str(refused.value)
    assert "does not fit UFLDv2-resnet18 for culane" in message and "--dataset tusimple" in message
    assert "cls.0.weight" in message  # culane's LayerNorm, which a tusimple checkpoint has not
    with pytest.raises(CheckpointError, match="--backbone resnet18"):
        build_ufldv2("tusimple", "resnet34", checkpoint)


@TUSIMPLE_ONCE
def test_convert_cli_refuses_the_wrong_dataset_in_one_line(tusimple, tmp_path) -> None:
    _, checkpoint, _ = tusimple
    done = run_cli(tmp_path, "convert", "ufldv2", "--dataset", "culane", "--checkpoint", str(checkpoint),
                   "-o", str(tmp_path / "out"), "--target", "onnx", timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(lines) == 1 and "--dataset tusimple" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_laneatt_only_options_unknown_presets_and_score_options_are_refused(tmp_path) -> None:
    from edge_deploy.errors import ConvertError
    from edge_deploy.export.source import SourceSpec
    from edge_deploy.lanedet.family import get_family

    family = get_family("ufldv2")
    with pytest.raises(ConvertError, match="no --dataset llamas preset"):
        family.load(SourceSpec(model="ufldv2", dataset="llamas"))
    with pytest.raises(ConvertError, match="--topk-anchors only applies to LaneATT"):
        family.load(SourceSpec(model="ufldv2", options={"topk_anchors": 100}))
    with pytest.raises(ConvertError, match="no --backbone resnet50"):
        family.load(SourceSpec(model="ufldv2", dataset="tusimple", backbone="resnet50"))
    done = run_cli(tmp_path, "convert", "ufldv2", "--dataset", "tusimple", "--conf", "0.3", "-o",
                   str(tmp_path / "out"), "--target", "onnx", timeout=300)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "UFLDv2 decoding has no conf_threshold" in done.stderr and "export ONNX" not in done.stdout


@TUSIMPLE_ONCE
@pytest.mark.slow
def test_fuse_preprocess_is_a_bilinear_crop_and_resize_with_its_difference_recorded(tusimple, tmp_path) -> None:
    """UFLDv2's antialiased bilinear resize to a taller image whose bottom rows are kept is fused as a bilinear
    crop-and-resize of the rows that reach them (antialiasing needs ONNX opset 18): offered, its per-pixel
    difference to the client's resize and the lanes' recorded in the manifest."""
    import shutil

    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.export import fused_preprocess as fp
    from edge_deploy.core.progress import Reporter

    _, _, artifact = tusimple
    work = tmp_path / "art"
    shutil.copytree(artifact, work)
    manifest = Manifest.read(work)
    warnings: list[str] = []

    class Warnings(Reporter):
        def warn(self, message: str) -> None:
            warnings.append(message)

    section = fp.fuse_artifact(work, manifest, (720, 1280), reporter=Warnings())
    substituted = section["substituted"]
    assert substituted["interpolation"] == "antialiased_bilinear" and "opset 18" in substituted["by"]
    assert "Pillow's antialiased bilinear" in section["parity"]["reference"]
    assert "mode=linear" in section["graph"] and "crop-and-resize" in section["graph"]
    pixels = section["parity"]["pixels"]
    assert fp.MAX_PIXEL_LEVELS < pixels["max_levels"] < 255, pixels  # recorded, not refused (119 on uniform noise)
    # The lane comparison is recorded; with these random weights (argmax over near-equal logits) lanes move, which
    # is said and not refused for a substituted resize.
    lanes = section["parity"]["lanes"]
    assert set(lanes) == {"model.onnx", "model_fp16.onnx"} and all("passed" in report for report in lanes.values())
    assert any("differ from client-side" in message for message in warnings)
    assert manifest.io.inputs[0].name == fp.FRAME_INPUT and manifest.fused_preprocess is section


# --------------------------------------------------------------------------- served


@pytest.fixture(scope="module")
def served(tusimple):
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work, _, artifact = tusimple
    repo = work / "repo"
    install(InstallOptions(artifact, repo, "ufld", runtime="python", pipeline=True))
    install(InstallOptions(artifact, repo, "ufldb", runtime="python", pipeline="bls"))
    with serving(repo, work, timeout=180) as proc:
        yield artifact, repo, proc


@TUSIMPLE_ONCE
@pytest.mark.triton
def test_served_ufldv2_lanes_raw_and_pipeline_equal_the_local_decode(served) -> None:
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.evaluate.runners import OnnxRunner
    from edge_deploy.repository.versions import read_config

    from edge_deploy.artifact.manifest import Manifest

    artifact, repo, proc = served
    # the server preprocesses with preprocess.py (the ensemble's preprocess model, the BLS model), as the client does
    assert Manifest.read(artifact).preprocess.interpolation == "antialiased_bilinear"
    post = read_config(repo, "ufld_postprocess")
    assert [list(t.dims) for t in post.output][0] == [4, 56, 2]  # top_k lanes of the most anchors (56 rows)
    local = OnnxRunner(artifact, "fp16")  # install served model_fp16.onnx, as convert recorded FP16
    drawn = 0
    with LaneDetClient(proc.url, "ufld") as raw, LaneDetClient(proc.url, "ufld_pipeline") as pipeline, \
            LaneDetClient(proc.url, "ufldb_pipeline") as bls:
        assert raw.model.family.name == "ufldv2" and pipeline.model.kind == "pipeline" == bls.model.kind
        for frame in _frames((720, 1280)):
            expected = local.detect(frame)
            for client in (raw, pipeline, bls):
                lanes = client.detect(frame)
                assert len(lanes) == len(expected)
                for got, want in zip(lanes, expected):
                    np.testing.assert_allclose(got.points, want.points, atol=1e-3)
                    assert got.score == pytest.approx(want.score, abs=1e-4)
            drawn += len(expected)
            if expected:
                (best,) = raw.detect(frame, top_k=1)
                assert best.score == pytest.approx(max(lane.score for lane in expected), abs=1e-4)
        assert drawn > 0
        with pytest.raises(Exception, match="UFLDv2 decoding has no conf_threshold"):
            raw.detect(_frames((720, 1280))[0], conf_threshold=0.9)


# --------------------------------------------------------------------------- checkpoint keys


def _tiny_preset():
    """A UFLDv2 preset small enough for a fast checkpoint test (the real heads are 96-206 M parameters)."""
    from edge_deploy.lanedet.ufldv2.presets import UFLDv2Preset

    return UFLDv2Preset("tiny", 64, 64, 0.8, rows=4, cols=4, cells_row=8, cells_col=8, fc_norm=True,
                        row_anchor=(0.5, 1.0), col_anchor=(0.0, 1.0), image_size=(72, 64))


@TUSIMPLE_ONCE
def test_a_checkpoint_model_is_built_without_random_weights_and_holds_the_checkpoints(tusimple) -> None:
    """build_ufldv2 with a checkpoint builds on the meta device and takes the checkpoint's tensors (assign=True):
    every weight is the checkpoint's, cast to FP32, none is left on the meta device, and the outputs are those
    of a randomly initialised model loaded by copying."""
    from edge_deploy.lanedet.ufldv2.model import UFLDv2, build_ufldv2, load_checkpoint

    _, checkpoint, _ = tusimple
    built = build_ufldv2("tusimple", "resnet18", checkpoint)
    saved = {k.removeprefix("module."): v for k, v in torch.load(checkpoint, weights_only=False)["model"].items()}
    state = built.state_dict()
    assert set(state) == set(saved) and not any(t.is_meta for t in state.values())
    assert all(torch.equal(state[k], saved[k].to(state[k].dtype)) for k in state)
    assert {t.dtype for t in built.parameters()} == {torch.float32} and not built.training
    copied = load_checkpoint(UFLDv2(PRESETS["tusimple"], "resnet18"), checkpoint).eval()
    x = torch.from_numpy(np.random.default_rng(2).normal(0, 1, (1, 3, 320, 800)).astype(np.float32))
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(built(x), copied(x)))


def test_the_training_only_seg_head_is_dropped_and_other_keys_are_named_without_advising_the_given_options(
        tmp_path) -> None:
    """An official checkpoint trained with use_aux=True also holds the auxiliary `seg_head.*` (model_culane.py:
    `self.seg_head = SegHead(...)`): dropped and recorded. Any other key that does not fit is named, and the
    advice never repeats the options already given."""
    from edge_deploy.lanedet.ufldv2.model import UFLDv2, load_checkpoint

    torch.manual_seed(3)
    trained = UFLDv2(_tiny_preset())
    state = {f"module.{k}": v for k, v in trained.state_dict().items()}
    aux = {"module.seg_head.aux_header2.0.weight": torch.zeros(128, 128, 3, 3),
           "module.seg_head.aux_combine.2.weight": torch.zeros(8, 128, 1, 1)}
    torch.save({"model": {**state, **aux}}, tmp_path / "aux.pth")
    model = load_checkpoint(UFLDv2(_tiny_preset()), tmp_path / "aux.pth")
    assert sorted(model.dropped_keys) == ["seg_head.aux_combine.2.weight", "seg_head.aux_header2.0.weight"]
    assert torch.equal(model.state_dict()["cls.3.weight"], trained.state_dict()["cls.3.weight"])

    torch.save({"model": {**state, "module.extra.weight": torch.zeros(1)}}, tmp_path / "extra.pth")
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(UFLDv2(_tiny_preset()), tmp_path / "extra.pth")
    message = str(refused.value)
    assert "1 unexpected (extra.weight)" in message and "pass those options" not in message, message
    assert "--backbone resnet18" not in message and len(message.splitlines()) == 1


@pytest.fixture(scope="module")
def served_small(tmp_path_factory):
    """The negligible-compute CULane stand-in (tests/support/small_artifact.py, the real I/O) served as `ufl`."""
    from small_artifact import make_ufldv2_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = tmp_path_factory.mktemp("ufldv2_small")
    artifact = make_ufldv2_artifact(work / "art", "culane")
    install(InstallOptions(artifact, work / "repo", "ufl", runtime="python"))
    with serving(work / "repo", work, timeout=120) as proc:
        yield artifact, proc


def _same_lanes(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a.points if hasattr(a, "points") else a["points"], np.float64),
                                   b.points, atol=1e-3)


@pytest.mark.triton
def test_served_ufldv2_async_grpc_infer_and_evaluate_give_the_local_lanes(served_small, tmp_path) -> None:
    """UFLDv2 served without tests before: AsyncLaneDetClient (shared memory), LaneDetClient over plain gRPC,
    `edge-deploy infer` on a PNG and `edge-deploy evaluate --url` (synthetic, a CULane list, TuSimple labels)."""
    import asyncio
    import json

    import cv2

    from edge_deploy.client.async_client import AsyncLaneDetClient
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.evaluate.datasets import write_lines_file
    from edge_deploy.evaluate.runners import OnnxRunner

    artifact, proc = served_small
    frames = _frames((590, 1640))
    local = OnnxRunner(artifact, "fp32")
    expected = [local.detect(frame) for frame in frames]
    assert sum(len(lanes) for lanes in expected) > 0

    async def detect_async() -> list:
        async with AsyncLaneDetClient(proc.url, "ufl") as client:
            assert client.model.family.name == "ufldv2" and client.shm_regions
            return list(await asyncio.gather(*(client.detect(frame) for frame in frames)))

    for got, want in zip(asyncio.run(detect_async()), expected):
        _same_lanes(got, want)
    with LaneDetClient(proc.url, "ufl", transport="grpc") as client:
        assert client.transport == "grpc"
        for frame, want in zip(frames, expected):
            _same_lanes(client.detect(frame), want)

    image = tmp_path / "road.png"
    cv2.imwrite(str(image), frames[0])
    done = run_cli(tmp_path, "infer", str(image), "--url", proc.url, "--model", "ufl", "--out", str(tmp_path / "out"),
                   "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "out" / "road.lanes.json").read_text())
    _same_lanes(record["lanes"], local.detect(cv2.imread(str(image))))
    assert (tmp_path / "out" / "road.lanes.png").is_file()

    # one-frame data sets: a CULane list (1640x590) and a TuSimple label file (1280x720)
    culane = tmp_path / "culane"
    (culane / "list").mkdir(parents=True)
    cv2.imwrite(str(culane / "f.jpg"), frames[1])
    write_lines_file(culane / "f.lines.txt", [np.array([[800.0, 580.0], [820.0, 300.0]])])
    (culane / "list" / "test.txt").write_text("/f.jpg\n")
    tusimple = tmp_path / "tusimple"
    tusimple.mkdir()
    cv2.imwrite(str(tusimple / "t.jpg"), _frames((720, 1280))[0])
    h_samples = list(range(240, 720, 10))
    (tusimple / "label_data_0313.json").write_text(json.dumps(
        {"lanes": [[640 - (h - 240) // 4 for h in h_samples]], "h_samples": h_samples, "raw_file": "t.jpg"}) + "\n")
    for source in (["--synthetic", "2"], ["--data", str(culane / "list" / "test.txt"), "--root", str(culane)],
                   ["--tusimple", str(tusimple / "label_data_0313.json")]):
        done = run_cli(tmp_path, "evaluate", "--url", proc.url, "--model", "ufl", *source)
        assert done.returncode == 0, (source, done.stderr)
        assert "F1" in done.stdout or "f1" in done.stdout.lower(), done.stdout
