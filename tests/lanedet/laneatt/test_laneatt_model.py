"""The built-in LaneATT: official checkpoint layout, checkpoint errors, parity with the reference, ONNX export."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from needs import torch_or_skip

torch = torch_or_skip()

from laneatt_reference import (  # noqa: E402
    reference_anchors,
    reference_cut,
    reference_head,
    reference_unclamped_columns,
    torch16_topk,
)

from edge_deploy.errors import CheckpointError, ConvertError  # noqa: E402
from edge_deploy.lanedet.laneatt.model import (  # noqa: E402
    LaneATT,
    build_laneatt,
    load_checkpoint,
)

TOPK = 1000
VARIANTS = {"all_2784": None, "culane_top1000": TOPK}


def _build(laneatt_data: Path, backbone: str, variant: str, **kwargs: Any) -> LaneATT:
    topk = VARIANTS[variant]
    freq = laneatt_data / "culane_anchors_freq.pt" if topk else None
    return build_laneatt(backbone, anchors_freq=freq, topk_anchors=topk, **kwargs)


def _official_keys(laneatt_data: Path, entry: str) -> list[tuple[str, list[int]]]:
    table = json.loads((laneatt_data / "official_state_dict_keys.json").read_text())
    return [(name, list(shape)) for name, shape in table[entry]]


def _zeros_state_dict(keys: list[tuple[str, list[int]]]) -> dict[str, Any]:
    return {
        name: torch.zeros(shape, dtype=torch.long if name.endswith("num_batches_tracked") else torch.float32)
        for name, shape in keys
    }


def _assert_one_line_error(excinfo: pytest.ExceptionInfo, *fragments: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- official checkpoint layout ----------------------------------------------------------


@pytest.mark.parametrize("backbone", ["resnet18", "resnet34"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_official_checkpoints_load_strict(laneatt_data: Path, tmp_path: Path, backbone: str, variant: str) -> None:
    keys = _official_keys(laneatt_data, f"{backbone}/{variant}")
    model = _build(laneatt_data, backbone, variant)
    assert [(k, list(v.shape)) for k, v in model.state_dict().items()] == keys
    assert model.num_anchors == (VARIANTS[variant] or 2784)
    assert model.backbone == backbone

    state = _zeros_state_dict(keys)
    wrapped, bare = tmp_path / "wrapped.pt", tmp_path / "bare.pt"
    torch.save({"model": state, "epoch": 15, "optimizer": {"state": {}, "param_groups": []}}, wrapped)
    torch.save(state, bare)
    for path in (wrapped, bare):
        loaded = _build(laneatt_data, backbone, variant, checkpoint=path)
        assert not loaded.training
        # the seeded init is not zero, so zeros prove the checkpoint's values arrived
        assert all(not t.any() for t in loaded.state_dict().values())


def test_anchor_buffers_are_not_in_the_state_dict(laneatt_data: Path) -> None:
    model = _build(laneatt_data, "resnet18", "culane_top1000")
    buffers = dict(model.named_buffers())
    assert {"anchors", "pool_index", "pool_mask"} <= set(buffers)
    assert not {"anchors", "pool_index", "pool_mask"} & set(model.state_dict())


def test_topk_model_uses_the_selected_anchors(laneatt_data: Path) -> None:
    model = _build(laneatt_data, "resnet18", "culane_top1000")
    expected = reference_anchors()[torch16_topk(laneatt_data, "culane", TOPK)]
    expected[:, :2] = 0
    np.testing.assert_array_equal(model.anchors.numpy(), expected)


def test_seeded_weights_are_reproducible_and_leave_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build_laneatt("resnet18", seed=0)
    after = torch.rand(3)
    b = build_laneatt("resnet18", seed=0)
    c = build_laneatt("resnet18", seed=1)
    assert torch.equal(before, after)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    assert not a.training


# --- bad checkpoints and options ---------------------------------------------------------


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet18", checkpoint=tmp_path / "nope.pt")
    _assert_one_line_error(excinfo, "not found", "nope.pt")


def test_corrupt_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.pt"
    path.write_bytes(b"PK\x03\x04 this is not a torch file" * 10)
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet18", checkpoint=path)
    _assert_one_line_error(excinfo, "cannot read checkpoint", "corrupt.pt")


def test_checkpoint_with_python_objects_is_not_unpickled(tmp_path: Path) -> None:
    # weights_only refuses arbitrary globals: the file is reported, never executed
    path = tmp_path / "pickled.pt"
    torch.save({"model": {}, "args": argparse.Namespace(lr=0.1)}, path)
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet18", checkpoint=path)
    _assert_one_line_error(excinfo, "argparse.Namespace", "re-save")


def test_checkpoint_without_state_dict(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"epoch": 3, "model": "resnet"}, path)
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet18", checkpoint=path)
    _assert_one_line_error(excinfo, "no state_dict")


def test_resnet18_checkpoint_into_resnet34(laneatt_data: Path, tmp_path: Path) -> None:
    keys18 = _official_keys(laneatt_data, "resnet18/all_2784")
    keys34 = _official_keys(laneatt_data, "resnet34/all_2784")
    path = tmp_path / "r18.pt"
    torch.save({"model": _zeros_state_dict(keys18)}, path)
    n_missing = len({k for k, _ in keys34} - {k for k, _ in keys18})
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet34", checkpoint=path)
    message = _assert_one_line_error(excinfo, f"{n_missing} missing", "--backbone resnet18", "resnet34")
    assert "unexpected" not in message  # resnet18's blocks are a subset of resnet34's
    assert message.count("feature_extractor.") <= 3  # only the first few names


def test_wrong_attention_shape(laneatt_data: Path, tmp_path: Path) -> None:
    path = tmp_path / "top1000.pt"
    torch.save(_zeros_state_dict(_official_keys(laneatt_data, "resnet18/culane_top1000")), path)
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet18", checkpoint=path)
    _assert_one_line_error(
        excinfo, "trained with the top 1000 anchors", "--dataset culane|tusimple|llamas", "--topk-anchors 1000"
    )


def test_unexpected_keys_are_counted(laneatt_data: Path, tmp_path: Path) -> None:
    state = _zeros_state_dict(_official_keys(laneatt_data, "resnet18/all_2784"))
    state.update({f"extra.{i}": torch.zeros(1) for i in range(5)})
    path = tmp_path / "extra.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError) as excinfo:
        build_laneatt("resnet18", checkpoint=path)
    _assert_one_line_error(excinfo, "5 unexpected", "extra.0")


def test_load_checkpoint_leaves_model_untouched_when_it_does_not_fit(laneatt_data: Path, tmp_path: Path) -> None:
    model = build_laneatt("resnet18")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = _zeros_state_dict(_official_keys(laneatt_data, "resnet18/culane_top1000"))
    path = tmp_path / "top1000.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError):
        load_checkpoint(model, path)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"topk_anchors": 1000}, "needs the anchor frequencies"),
        ({"anchors_freq": "x.pt"}, "goes with --topk-anchors"),
        ({"dataset": "culane", "anchors_freq": "x.pt"}, "pass one of them"),
        ({"dataset": "bdd100k"}, "unknown --dataset"),
        ({"dataset": "culane", "anchor_order": "random"}, "unknown --anchor-order"),
        ({"topk_anchors": 1, "anchors_freq": "x.pt"}, "between 2 and 2784"),
        ({"topk_anchors": 5000, "anchors_freq": "x.pt"}, "between 2 and 2784"),
    ],
)
def test_bad_anchor_options(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConvertError) as excinfo:
        build_laneatt("resnet18", **kwargs)
    _assert_one_line_error(excinfo, fragment)


def test_bad_anchor_frequency_file(tmp_path: Path) -> None:
    path = tmp_path / "freq.pt"
    torch.save(torch.ones(100), path)
    with pytest.raises(ConvertError) as excinfo:
        build_laneatt("resnet18", anchors_freq=path, topk_anchors=10)
    _assert_one_line_error(excinfo, "[100]", "2784")


def test_unknown_backbone() -> None:
    with pytest.raises(ConvertError) as excinfo:
        build_laneatt("resnet50")
    _assert_one_line_error(excinfo, "resnet18", "resnet34")


# --- parity with the reference formulation ----------------------------------------------


def _randomize(model: LaneATT, seed: int) -> LaneATT:
    """Weights and BN statistics far from the near-uniform official head init, so every path matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if not t.is_floating_point():
                continue
            if name.endswith("running_var") or (name.endswith("weight") and t.ndim == 1):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif t.ndim == 1:
                t.copy_(torch.randn(t.shape, generator=g) * 0.1)
            else:
                t.copy_(torch.randn(t.shape, generator=g) / t[0].numel() ** 0.5)
    return model


def _forward_and_reference(model: LaneATT, x: Any, indices: list[int] | None) -> tuple[Any, Any]:
    """model(x) and the reference head on the same backbone output (captured, not recomputed)."""
    anchors = torch.from_numpy(reference_anchors() if indices is None else reference_anchors()[indices])
    captured: list[Any] = []
    hook = model.feature_extractor.register_forward_hook(lambda _m, _i, out: captured.append(out))
    try:
        with torch.no_grad():
            out = model(x)
            ref = reference_head(model, captured[0], anchors, reference_cut(indices))
    finally:
        hook.remove()
    return out, ref


@pytest.fixture(scope="module")
def culane_top_indices(laneatt_data: Path) -> list[int]:
    return torch16_topk(laneatt_data, "culane", TOPK)


PARITY_CASES = [
    pytest.param(backbone, variant, batch, marks=[pytest.mark.slow] if batch > 1 else [])
    for backbone in ("resnet18", "resnet34")
    for variant in VARIANTS
    for batch in (1, 4)
]


@pytest.mark.parametrize(("backbone", "variant", "batch"), PARITY_CASES)
def test_forward_matches_reference(
    laneatt_data: Path, culane_top_indices: list[int], backbone: str, variant: str, batch: int
) -> None:
    model = _randomize(_build(laneatt_data, backbone, variant), seed=batch)
    indices = culane_top_indices if VARIANTS[variant] else None
    x = torch.rand(batch, 3, 360, 640, generator=torch.Generator().manual_seed(7))
    out, ref = _forward_and_reference(model, x, indices)
    assert out.shape == ref.shape == (batch, model.num_anchors, 77)
    assert torch.isfinite(out).all()
    assert (out - ref).abs().max().item() <= 1e-4
    if batch > 1:  # images are not mixed up across the batch
        assert not torch.allclose(out[0], out[1])


def test_reference_comparison_detects_a_wrong_pooling_rule(laneatt_data: Path, culane_top_indices: list[int]) -> None:
    """Dropping the 'column 20 reads column 19' quirk must show up as a difference."""
    model = _randomize(_build(laneatt_data, "resnet18", "culane_top1000"), seed=3)
    edge = reference_unclamped_columns(culane_top_indices) == 20
    assert edge.any()
    with torch.no_grad():
        model.pool_mask[edge.unsqueeze(1)] = 0.0
    out, ref = _forward_and_reference(model, torch.rand(1, 3, 360, 640), culane_top_indices)
    assert (out - ref).abs().max().item() > 1e-3


def test_attention_matrix_layout(laneatt_data: Path) -> None:
    model = _build(laneatt_data, "resnet18", "culane_top1000")
    n = model.num_anchors
    weights = torch.rand(2, n, n - 1)
    dense = torch.zeros(2, n, n)
    for i in range(n):
        dense[:, i, :i] = weights[:, i, :i]
        dense[:, i, i + 1 :] = weights[:, i, i:]
    assert torch.equal(model.attention_matrix(weights), dense)


# --- export -------------------------------------------------------------------------------


def test_onnx_export_runs_in_onnxruntime(laneatt_data: Path, tmp_path: Path) -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    model = _build(laneatt_data, "resnet18", "culane_top1000")
    path = tmp_path / "laneatt.onnx"
    # dynamo=False: the dynamo exporter needs onnxscript, which is not a dependency here
    torch.onnx.export(
        model,
        (torch.zeros(1, 3, 360, 640),),
        str(path),
        opset_version=17,
        input_names=["input"],
        output_names=["predict_lanes"],
        dynamic_axes={"input": {0: "batch"}, "predict_lanes": {0: "batch"}},
        dynamo=False,
    )
    onnx = pytest.importorskip("onnx")
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert not ops & {"NonZero", "Loop", "If", "ScatterND", "ScatterElements", "Shape"}, ops
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 2):  # traced at batch 1: batch 2 proves nothing batch-specific was baked in
        x = torch.rand(batch, 3, 360, 640, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = model(x).numpy()
        (got,) = session.run(["predict_lanes"], {"input": x.numpy()})
        assert got.shape == (batch, TOPK, 77)
        np.testing.assert_allclose(got[..., :5], expected[..., :5], rtol=0, atol=1e-4)
        # x columns are anchor + offset with |x| up to ~1500 px, where one float32 step is
        # 1.2e-4: allow 1e-4 plus two float32 steps of the value for a reordered sum
        np.testing.assert_allclose(got[..., 5:], expected[..., 5:], rtol=2.0**-22, atol=1e-4)
