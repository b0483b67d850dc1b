"""The straightforward LaneATT formulation the static model is checked against.

Written from docs/design.md, deliberately plain: anchors from per-anchor loops with
math.tan, anchor pooling with Python loops over batch and anchors and boolean-mask
zeroing, the dense N x N attention matrix filled through nonzero(), then the heads.
It shares only the trained layers (backbone, conv1, linear layers) with the model.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

IMG_W = 640
STRIDE = 32
FMAP_H = 11
FMAP_W = 20
N_OFFSETS = 72
SIDES = (
    # (origins as (x0, y0), angles in degrees), in official row order
    ("left", [(0.0, y) for y in np.linspace(1.0, 0.0, 72)], (72, 60, 49, 39, 30, 22)),
    ("bottom", [(x, 1.0) for x in np.linspace(1.0, 0.0, 128)],
     (165, 150, 141, 131, 120, 108, 100, 90, 80, 72, 60, 49, 39, 30, 15)),
    ("right", [(1.0, y) for y in np.linspace(1.0, 0.0, 72)], (108, 120, 131, 141, 150, 158)),
)


def anchor_lines() -> list[tuple[float, float, float]]:
    """(x0, y0, angle in radians) for every anchor, in official order."""
    lines = []
    for _, origins, angles in SIDES:
        for x0, y0 in origins:
            for angle in angles:
                lines.append((float(x0), float(y0), math.radians(angle)))
    return lines


def _xs(line: tuple[float, float, float], n_points: int) -> list[float]:
    x0, y0, theta = line
    return [(x0 + (y0 - y) / math.tan(theta)) * IMG_W for y in np.linspace(1.0, 0.0, n_points)]


def reference_anchors() -> np.ndarray:
    """The [2784, 77] anchor table, one anchor at a time."""
    rows = []
    for line in anchor_lines():
        x0, y0, _ = line
        rows.append([0.0, 0.0, 1.0 - y0, x0, 0.0, *_xs(line, N_OFFSETS)])
    return np.asarray(rows, dtype=np.float32)


def torch16_topk(laneatt_data: Path, dataset: str, k: int) -> list[int]:
    """The first k anchors of the order real torch 1.6.0 gave (recorded in tests/data/laneatt)."""
    return np.load(laneatt_data / f"torch16_argsort_{dataset}.npy")[:k].tolist()


def reference_topk(freq: np.ndarray, k: int) -> list[int]:
    """Most frequent first; equal counts keep index order (Python's sort is stable)."""
    return sorted(range(len(freq)), key=lambda i: -float(freq[i]))[:k]


def reference_unclamped_columns(indices: list[int] | None = None) -> Tensor:
    """Feature-map column per anchor and pooled row [N, 11], row 0 = top, before clamping."""
    lines = anchor_lines()
    if indices is not None:
        lines = [lines[i] for i in indices]
    return torch.tensor([[round(x / STRIDE) for x in _xs(line, FMAP_H)][::-1] for line in lines])


def reference_cut(indices: list[int] | None = None) -> tuple[Tensor, Tensor]:
    """Clamped pooling columns [N, 11] (row 0 = top) and the invalid mask [N, 11]."""
    unclamped = reference_unclamped_columns(indices)
    invalid = (unclamped < 0) | (unclamped > FMAP_W)
    return unclamped.clamp(0, FMAP_W - 1), invalid


def reference_head(model: torch.nn.Module, backbone_out: Tensor, anchors: Tensor, cut: tuple[Tensor, Tensor]) -> Tensor:
    """LaneATT after the backbone: [B, 512, 12, 20] -> [B, N, 77]."""
    columns, invalid = cut
    features = model.conv1(backbone_out)
    batch, channels = features.shape[:2]
    n = anchors.shape[0]
    rows = torch.arange(FMAP_H)
    pooled = torch.zeros(batch, n, channels, FMAP_H)
    for b in range(batch):
        for i in range(n):
            roi = features[b][:, rows, columns[i]]  # [64, 11]
            roi[:, invalid[i]] = 0
            pooled[b, i] = roi
    flat = pooled.reshape(batch * n, channels * FMAP_H)

    weights = torch.softmax(model.attention_layer(flat), dim=1).reshape(batch, n, n - 1)
    matrix = torch.eye(n).repeat(batch, 1, 1)
    off_diagonal = torch.nonzero(matrix == 0.0, as_tuple=False)
    matrix[:] = 0
    matrix[off_diagonal[:, 0], off_diagonal[:, 1], off_diagonal[:, 2]] = weights.flatten()
    own = flat.reshape(batch, n, -1)
    attended = torch.bmm(own.transpose(1, 2), matrix.transpose(1, 2)).transpose(1, 2)

    both = torch.cat((attended.reshape(batch * n, -1), flat), dim=1)
    cls = model.cls_layer(both).reshape(batch, n, 2)
    reg = model.reg_layer(both).reshape(batch, n, N_OFFSETS + 1)
    out = torch.zeros(batch, n, 5 + N_OFFSETS) + anchors
    out[:, :, :2] = cls
    out[:, :, 4:] += reg
    return out
