"""Shared test fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def laneatt_data() -> Path:
    """The LaneATT reference data copied into tests/data/laneatt (origins in tests/data/README.md)."""
    return DATA_DIR / "laneatt"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (tests only use loopback)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def start_triton(tmp_path):
    """Factory: start the real bundled tritonserver on a model repository; stopped at teardown.

    Usage: ``server = start_triton(repo, model_control="explicit", ...)``; returns a
    ready `edge_deploy.serve.tritonserver.TritonProcess` (``server.url``, ``server.log_path``).
    """
    from edge_deploy.serve.tritonserver import (
        ServerOptions,
        TritonProcess,
        find_tritonserver,
    )

    started: list[TritonProcess] = []

    def start(repository: Path, *, wait: bool = True, timeout: float = 90.0, **options) -> TritonProcess:
        opts = ServerOptions(model_repository=Path(repository), grpc_port=free_port(), **options)
        proc = TritonProcess(find_tritonserver(cache_dir=tmp_path / "cache"), opts, tmp_path / f"triton{len(started)}.log")
        started.append(proc.start())
        if wait:
            proc.wait_ready(timeout)
        return proc

    yield start
    for proc in started:
        proc.stop(timeout=15)


@pytest.fixture(scope="session")
def laneatt_artifact(tmp_path_factory, laneatt_data) -> Path:
    """A real `edge-deploy convert` artifact: LaneATT resnet18, CULane top-1000 anchors, batch 1..4.

    Untrained weights (seed 0): tests that compare lanes use a low conf_threshold.
    """
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("artifact") / "lanedet"
    cmd = [
        sys.executable, "-m", "edge_deploy", "convert", "laneatt",
        "--backbone", "resnet18",
        "--dataset", "culane",
        "--min-batch", "1", "--opt-batch", "1", "--max-batch", "4",
        "--target", "onnx",
        "--output", str(out),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"convert failed: {result.stderr[-2000:]}"
    return out
