"""LaneATT in PyTorch, with a static forward that exports to ONNX (see docs/design.md).

Official LaneATT checkpoints load with strict=True: the module and parameter names
(`feature_extractor.*`, `conv1`, `cls_layer`, `reg_layer`, `attention_layer`) and shapes
are the official ones. Anchors and pooling indices are non-persistent buffers (the
official state_dict has none); they are rebuilt from `anchors.py`.

The forward has no data-dependent control flow: anchor pooling is one gather with
precomputed indices and a constant 0/1 mask, and the attention weights are placed into
the N x N matrix (zero diagonal) by a fixed reshape/concat layout instead of nonzero().
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ...errors import CheckpointError, ConvertError
from ..checkpoint import backbone_hint, checkpoint_path, fit_problems, refuse_other_family, state_dict_from, torch_load
from . import anchors as A
from ..resnet import BLOCKS_PER_STAGE, OUT_CHANNELS, resnet_features
from .anchor_order import DATASETS, ORDERS, dataset_frequency, topk_anchor_indices

BACKBONES = tuple(BLOCKS_PER_STAGE)
ANCHOR_FEAT_CHANNELS = 64
ANCHOR_FEAT_LEN = ANCHOR_FEAT_CHANNELS * A.FMAP_H  # 704
BACKBONE_CELLS = -(-A.IMG_H // A.STRIDE) * A.FMAP_W  # the backbone's 12 x 20 feature map


class LaneATT(nn.Module):
    """LaneATT: [B, 3, 360, 640] BGR in [0, 1] -> [B, N, 77] proposals (NMS not included).

    Output row: [logit_neg, logit_pos, start_y, start_x, length, x_0..x_71] with x in
    640-px units (docs/design.md, "The LaneATT model"). `anchor_indices` selects (and orders)
    rows of the 2784-anchor table, e.g. `anchor_order.topk_anchor_indices(freq, 1000)`.
    """

    anchors: Tensor  # buffers (register_buffer), declared for the type checker
    pool_index: Tensor
    pool_mask: Tensor

    def __init__(self, backbone: str = "resnet34", anchor_indices: np.ndarray | None = None) -> None:
        super().__init__()
        if backbone not in BACKBONES:
            raise ConvertError(f"unknown LaneATT backbone {backbone!r}; choose one of {', '.join(BACKBONES)}")
        table = A.generate_anchors()
        columns, valid = A.pooling_columns()
        if anchor_indices is not None:
            anchor_indices = np.asarray(anchor_indices, dtype=np.int64)
            table, columns, valid = table[anchor_indices], columns[anchor_indices], valid[anchor_indices]
        n = table.shape[0]
        if n < 2:
            raise ConvertError(f"LaneATT needs at least 2 anchors, got {n}; raise --topk-anchors")
        self.backbone = backbone
        self.num_anchors = n

        # registration order = official state_dict key order
        self.feature_extractor = resnet_features(backbone)
        self.conv1 = nn.Conv2d(OUT_CHANNELS, ANCHOR_FEAT_CHANNELS, kernel_size=1)
        self.cls_layer = nn.Linear(2 * ANCHOR_FEAT_LEN, 2)
        self.reg_layer = nn.Linear(2 * ANCHOR_FEAT_LEN, A.N_OFFSETS + 1)
        self.attention_layer = nn.Linear(ANCHOR_FEAT_LEN, n - 1)
        for layer in (self.attention_layer, self.cls_layer, self.reg_layer):
            nn.init.normal_(layer.weight, 0.0, 0.001)  # the official head initialisation
            nn.init.zeros_(layer.bias)

        table[:, :2] = 0.0  # logits come from cls_layer; the anchor adds nothing there
        self.register_buffer("anchors", torch.from_numpy(table), persistent=False)
        # index into the flattened [12 * 20] feature map: row h (from the top), column columns[n, h]
        rows = np.arange(A.FMAP_H, dtype=np.int64)[None, :]
        flat_index = (rows * A.FMAP_W + columns).reshape(-1)
        self.register_buffer("pool_index", torch.from_numpy(flat_index), persistent=False)
        mask = torch.from_numpy(valid.astype(np.float32)).reshape(n, 1, A.FMAP_H)
        self.register_buffer("pool_mask", mask, persistent=False)

    def pool_anchor_features(self, features: Tensor) -> Tensor:
        """[B, 64, 12, 20] -> [B, N, 704]: per anchor, 64 channels x 11 rows (channel-major).

        One gather over the flattened map with precomputed indices, then a constant 0/1
        mask zeroes the rows whose column fell outside the map.
        """
        n = self.num_anchors
        pooled = features.reshape(-1, ANCHOR_FEAT_CHANNELS, BACKBONE_CELLS).index_select(2, self.pool_index)
        pooled = pooled.reshape(-1, ANCHOR_FEAT_CHANNELS, n, A.FMAP_H).transpose(1, 2)
        return (pooled * self.pool_mask).reshape(-1, n, ANCHOR_FEAT_LEN)

    def attention_matrix(self, weights: Tensor) -> Tensor:
        """[B, N, N-1] weights (row i skips anchor i) -> [B, N, N] with a zero diagonal.

        Row-major, the off-diagonal entries of an N x N matrix are exactly the N(N-1)
        weights in order, and the diagonal entries sit every N+1 places starting at 0.
        So: view the weights as [N-1, N], append a zero column (the diagonal entries
        1..N-1), flatten, prepend one zero (diagonal entry 0), view as [N, N].
        """
        n = self.num_anchors
        rows = weights.reshape(-1, n - 1, n)
        rows = torch.cat((rows, _zeros_like_slice(rows)), dim=-1).reshape(-1, (n - 1) * (n + 1))
        return torch.cat((_zeros_like_slice(rows), rows), dim=-1).reshape(-1, n, n)

    def forward(self, x: Tensor) -> Tensor:
        features = self.conv1(self.feature_extractor(x))
        anchor_features = self.pool_anchor_features(features)
        weights = torch.softmax(self.attention_layer(anchor_features), dim=-1)
        attended = torch.matmul(self.attention_matrix(weights), anchor_features)
        both = torch.cat((attended, anchor_features), dim=-1)
        reg = self.reg_layer(both)
        # [logits, 0, 0, length, x offsets] + [0, 0, start_y, start_x, 0, anchor xs]
        head = torch.cat((self.cls_layer(both), _zeros_like_slice(reg, 2), reg), dim=-1)
        return head + self.anchors


def _zeros_like_slice(t: Tensor, width: int = 1) -> Tensor:
    """Zeros shaped like t[..., :width]. Exports as Slice + Mul: no shape arithmetic for a
    dynamic batch, unlike F.pad / zeros(batch, ...) (t is finite here: softmax / linear outputs)."""
    return t[..., :width] * 0.0


def _guess_shape(state: dict[str, Tensor]) -> str:
    """What the checkpoint looks like, to tell the user which options fit it."""
    hints = [hint for hint in [backbone_hint(state, "feature_extractor.6")] if hint]
    attention = state.get("attention_layer.weight")
    if isinstance(attention, Tensor) and attention.ndim == 2:
        n = attention.shape[0] + 1
        anchors = "all anchors (no --topk-anchors)" if n == A.N_ANCHORS else f"--topk-anchors {n} (and its --anchors-freq)"
        hints.append(anchors)
    return " and ".join(hints)


def load_checkpoint(model: LaneATT, path: Path | str) -> LaneATT:
    """Load an official LaneATT checkpoint (`{'model': state_dict, ...}` or a bare state_dict), strict.

    Raises CheckpointError (one line) when the file is missing, unreadable, or does not fit.
    """
    path = checkpoint_path(path, "LaneATT")
    obj = torch_load(path, "checkpoint", "torch.save(torch.load(path, weights_only=False)['model'], 'weights.pt')")
    state = state_dict_from(obj)
    if state is None:
        raise CheckpointError(
            f"checkpoint {path} holds no state_dict (expected {{'model': state_dict}} or a bare state_dict of tensors)"
        )
    problems = fit_problems(model.state_dict(), state)
    if problems:
        refuse_other_family(path, state, "laneatt")
        guess = _guess_shape(state)
        advice = (
            f"it looks trained with {guess}: pass those options"
            if guess
            else "check --backbone, --topk-anchors and --anchors-freq"
        )
        raise CheckpointError(
            f"checkpoint {path} does not fit LaneATT-{model.backbone} with {model.num_anchors} anchors: "
            f"{problems}; {advice}"
        )
    model.load_state_dict(state, strict=True)
    return model


def load_anchor_frequency(path: Path | str) -> np.ndarray:
    """An anchor-frequency file (torch .pt, a 1-D tensor with one count per anchor) as a NumPy array."""
    path = Path(path)
    if not path.is_file():
        raise ConvertError(f"anchor-frequency file {path} not found; pass e.g. culane_anchors_freq.pt with --anchors-freq")
    obj = torch_load(path, "anchor-frequency file", "torch.save(torch.as_tensor(freq), 'anchors_freq.pt')", ConvertError)
    if not isinstance(obj, Tensor) or obj.ndim != 1 or obj.shape[0] != A.N_ANCHORS:
        shape = list(obj.shape) if isinstance(obj, Tensor) else type(obj).__name__
        raise ConvertError(
            f"anchor-frequency file {path} holds {shape}, expected a 1-D tensor of {A.N_ANCHORS} counts; "
            "pass the file LaneATT was trained with"
        )
    return obj.detach().numpy().copy()


def anchor_frequency(dataset: str | None, anchors_freq: Path | str | None) -> np.ndarray | None:
    """The frequency table for the top-k anchors: a shipped official one (`dataset`) or a file; None for neither."""
    if dataset is not None and anchors_freq is not None:
        raise ConvertError("--dataset and --anchors-freq both give the anchor frequencies: pass one of them")
    if dataset is not None:
        if dataset not in DATASETS:
            raise ConvertError(f"unknown --dataset {dataset!r}: use one of {', '.join(DATASETS)}")
        return dataset_frequency(dataset)
    return None if anchors_freq is None else load_anchor_frequency(anchors_freq)


def _checkpoint_anchors(path: Path | str) -> int | None:
    """How many anchors a checkpoint's attention layer was trained with (None when it cannot tell)."""
    if not Path(path).is_file():
        return None
    state = state_dict_from(torch_load(Path(path), "checkpoint", "torch.save(state_dict, 'weights.pt')"))
    attention = (state or {}).get("attention_layer.weight")
    return int(attention.shape[0]) + 1 if isinstance(attention, Tensor) and attention.ndim == 2 else None


def build_laneatt(
    backbone: str = "resnet34",
    *,
    checkpoint: Path | str | None = None,
    anchors_freq: Path | str | None = None,
    dataset: str | None = None,
    topk_anchors: int | None = None,
    anchor_order: str = "torch16",
    seed: int = 0,
) -> LaneATT:
    """A LaneATT model in eval mode: weights from `checkpoint`, else from torch.manual_seed(seed).

    Top-k anchors (the official checkpoints keep 1000) come from `dataset`'s shipped
    frequency table or an `anchors_freq` file, ordered by `anchor_order` ("torch16":
    torch 1.6's argsort, what official checkpoints were trained with; "stable": ties
    by index, for models trained with that rule).
    """
    if dataset is not None and topk_anchors is None:
        topk_anchors = 1000  # every official config
    if topk_anchors is not None and dataset is None and anchors_freq is None:
        raise ConvertError("--topk-anchors needs the anchor frequencies: pass --dataset culane|tusimple|llamas "
                           "(official checkpoints) or --anchors-freq FILE")
    if anchors_freq is not None and topk_anchors is None:
        raise ConvertError("--anchors-freq goes with --topk-anchors: pass both (or neither for all 2784 anchors)")
    if topk_anchors is not None and not 2 <= topk_anchors <= A.N_ANCHORS:
        raise ConvertError(f"--topk-anchors must be between 2 and {A.N_ANCHORS}, got {topk_anchors}")
    if anchor_order not in ORDERS:
        raise ConvertError(f"unknown --anchor-order {anchor_order!r}: use one of {', '.join(ORDERS)}")
    frequency = anchor_frequency(dataset, anchors_freq)
    if checkpoint is not None and frequency is None:
        trained = _checkpoint_anchors(checkpoint)
        if trained is not None and trained != A.N_ANCHORS:
            raise CheckpointError(
                f"checkpoint {checkpoint} was trained with the top {trained} anchors: pass --dataset "
                f"culane|tusimple|llamas for an official checkpoint, or --anchors-freq FILE --topk-anchors {trained}"
            )
    # frequencies come with topk_anchors (above)
    indices = None if frequency is None or topk_anchors is None else topk_anchor_indices(frequency, topk_anchors,
                                                                                         anchor_order)
    with torch.random.fork_rng(devices=[]):  # seeded weights without touching the caller's RNG
        torch.manual_seed(seed)
        model = LaneATT(backbone, indices)
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    return model.eval()


UNTRAINED_LANES = ("reg_layer.bias[0] = 30 strips and cls_layer.weight x 40: seeded weights then decode to lanes, "
                   "so convert's lane checks compare lanes")


def give_untrained_lanes(model: LaneATT) -> LaneATT:
    """Seeded weights predict lanes ~0 strips long, which decode to no lane at any threshold: a lane length of 30
    strips and sharpened scores make them find lanes (for convert's lane checks and tests; see UNTRAINED_LANES)."""
    with torch.no_grad():
        model.reg_layer.bias[0] = 30.0
        model.cls_layer.weight.mul_(40.0)
    return model
