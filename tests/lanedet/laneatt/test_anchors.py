"""LaneATT anchors: the table and the pooling columns against reference data (top-k order: test_anchor_order.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

torch_or_skip()  # laneatt_reference computes the reference with torch
from laneatt_reference import (  # noqa: E402
    reference_anchors,
    reference_cut,
    reference_unclamped_columns,
)

from edge_deploy.lanedet.laneatt import anchors as A


def _frequency(path: Path) -> np.ndarray:
    torch = pytest.importorskip("torch")
    return torch.load(path, weights_only=True).numpy()


def test_table_matches_official_anchors(laneatt_data: Path) -> None:
    official = np.load(laneatt_data / "anchors_2784x77.npy")
    table = A.generate_anchors()
    assert table.shape == official.shape == (A.N_ANCHORS, A.ROW_LEN)
    assert table.dtype == np.float32
    np.testing.assert_allclose(table, official, rtol=0, atol=1e-3)


def test_reference_formulation_matches_official_anchors(laneatt_data: Path) -> None:
    # the per-anchor loop in laneatt_reference is what the model parity tests trust
    official = np.load(laneatt_data / "anchors_2784x77.npy")
    np.testing.assert_allclose(reference_anchors(), official, rtol=0, atol=1e-3)


def test_pooling_columns_match_reference() -> None:
    columns, valid = A.pooling_columns()
    ref_columns, ref_invalid = reference_cut()
    assert columns.shape == valid.shape == (A.N_ANCHORS, A.FMAP_H)
    np.testing.assert_array_equal(columns, ref_columns.numpy())
    np.testing.assert_array_equal(valid, ~ref_invalid.numpy())
    assert columns.min() == 0 and columns.max() == A.FMAP_W - 1


def test_column_20_is_read_as_column_19() -> None:
    """The official quirk: an unclamped column of exactly FMAP_W stays valid and reads FMAP_W - 1."""
    columns, valid = A.pooling_columns()
    unclamped = reference_unclamped_columns().numpy()
    at_edge = unclamped == A.FMAP_W
    assert at_edge.any(), "the anchor set should contain rows at column 20 for this test to mean anything"
    assert valid[at_edge].all()
    assert (columns[at_edge] == A.FMAP_W - 1).all()
    beyond = unclamped > A.FMAP_W
    assert beyond.any() and not valid[beyond].any()


def test_anchors_module_does_not_import_torch() -> None:
    code = "import sys, edge_deploy.lanedet.laneatt.anchors; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
