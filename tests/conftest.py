"""Shared test fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """../shared beside the checkout (CI clones main with shared/ beside it)."""
    return Path(os.environ.get("EDGE_DEPLOY_SHARED", REPO_ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def laneatt_data() -> Path:
    """The LaneATT reference data: anchors table, key list, anchor-frequency files."""
    path = shared_dir() / "laneatt"
    if not (path / "anchors_2784x77.npy").is_file():
        pytest.fail(f"LaneATT reference data not found at {path}; set EDGE_DEPLOY_SHARED")
    return path
