"""Shared test fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from needs import torch_or_skip
from xdist_shared import exclusive, made_once

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "tests" / "data"

# How the suite's processes run, set before pytest-xdist starts its workers so that they and every process the tests
# start inherit it. glibc's malloc backs its large blocks with transparent huge pages (where the kernel gives them
# on request, Debian's "madvise" default): the converts copy models of up to 825 MB many times, each copy faulting
# in 4 KiB pages (8 M page faults for UFLDv2-CULane alone, 160 k with this); glibc before 2.35 ignores it. Memory
# use is measured only by tests/media/test_bag.py, whose bound holds with it.
os.environ.setdefault("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
# One compute thread per process: the workers already fill the two cores, and torch's OpenMP pool and ONNX
# Runtime's intra-op pool (edge-deploy's sessions and the Python-backend runner: $EDGE_DEPLOY_ORT_THREADS) would
# otherwise each add a thread per core that spins waiting for work, taking 10-20 % more CPU for the same tests.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("EDGE_DEPLOY_ORT_THREADS", "1")


# The longest test files, longest first (docs/testing.md has their times). Under pytest-xdist (scripts/test.sh:
# `-n 3 --dist loadfile`) they start first, so the workers finish together rather than one running a long
# file alone at the end. Only the order of files changes; a file's tests keep theirs. Missing one costs time only.
LONGEST_FIRST = (
    "tests/fleet/test_rollout.py",
    "tests/client/test_client_triton.py",
    "tests/export/test_onnx_target.py",
    "tests/docs/test_readme_runs.py",
    "tests/deploy/test_repository_triton.py",
    "tests/client/test_fused_triton.py",
    "tests/serve/test_serve_systemd.py",
    "tests/export/test_convert.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist >= 3.7 would order files by their test count
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("EDGE_DEPLOY_DEMO_TESTS") != "1":
        for item in items:
            marker = item.get_closest_marker("once")
            if marker is not None:  # run by .ci/run's demo step: torch work the Python 3.10 run skips anyway
                item.add_marker(pytest.mark.skip(reason=f"{marker.kwargs['reason']}: run once by .ci/run's demo step "
                                                        "(EDGE_DEPLOY_DEMO_TESTS=1), not in the suite"))
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest as collected


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
    ready `edge_deploy.serve.process.TritonProcess` (``server.url``, ``server.log_path``).
    """
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

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


@pytest.fixture
def default_port_alone(tmp_path_factory):
    """For a test that serves on 127.0.0.1:8001 (the default port) or needs nothing there: under pytest-xdist
    no other such test runs meanwhile (tests/support/xdist_shared.py)."""
    with exclusive(tmp_path_factory, "default-port"):
        yield


@pytest.fixture(scope="session")
def laneatt_checkpoint(tmp_path_factory, laneatt_data) -> Path:
    """A LaneATT-R18 checkpoint (CULane top-1000 anchors) whose lanes are real lanes.

    Seeded weights as they are predict a lane length of ~0 strips, which decodes to no
    lane at all whatever the threshold; so the length bias is set to 30 strips and the
    classifier sharpened: frames then give lanes and comparisons of lanes are not vacuous.
    """
    torch = torch_or_skip()

    def make(work: Path) -> Path:
        from edge_deploy.lanedet.laneatt.model import build_laneatt, give_untrained_lanes

        state = give_untrained_lanes(build_laneatt("resnet18", anchors_freq=laneatt_data / "culane_anchors_freq.pt",
                                                   topk_anchors=1000, seed=0)).state_dict()
        torch.save({"model": state}, work / "laneatt_r18_culane.pt")
        return work / "laneatt_r18_culane.pt"

    return made_once(tmp_path_factory, "checkpoint", make)


@pytest.fixture(scope="session")
def laneatt_artifact(tmp_path_factory, laneatt_data, laneatt_checkpoint) -> Path:
    """A real `edge-deploy convert` artifact of `laneatt_checkpoint`: resnet18, CULane top-1000 anchors, batch 1..4."""
    from cli_process import run_cli

    def make(work: Path) -> Path:
        result = run_cli(["convert", "laneatt", "--backbone", "resnet18", "--checkpoint", str(laneatt_checkpoint),
                          "--dataset", "culane", "--min-batch", "1", "--opt-batch", "1", "--max-batch", "4",
                          "--target", "onnx", "--output", str(work / "lanedet")], timeout=600)
        assert result.returncode == 0, f"convert failed: {result.stderr[-2000:]}"
        return work / "lanedet"

    return made_once(tmp_path_factory, "artifact", make)


@pytest.fixture(scope="session")
def laneatt_fused_artifact(tmp_path_factory, laneatt_checkpoint) -> Path:
    """`laneatt_artifact`'s model converted with --fuse-preprocess (FRAME uint8 [B, 590, 1640, 3])."""
    from cli_process import run_cli

    def make(work: Path) -> Path:
        result = run_cli(["convert", "laneatt", "--backbone", "resnet18", "--checkpoint", str(laneatt_checkpoint),
                          "--dataset", "culane", "--fuse-preprocess", "--frame-size", "1640x590", "--target", "onnx",
                          "--output", str(work / "lanedet")], timeout=900)
        assert result.returncode == 0, f"convert failed: {result.stderr[-2000:]}"
        return work / "lanedet"

    return made_once(tmp_path_factory, "fused_artifact", make)


@pytest.fixture(scope="session")
def ufldv2_artifact(tmp_path_factory) -> tuple[Path, Path]:
    """(checkpoint, artifact): `convert ufldv2 --dataset tusimple --checkpoint` of an official-format DDP checkpoint
    with random weights (tests/support/ufldv2_checkpoints.py), every default stage (FP16 copy, simplifier)."""
    from needs import torch_or_skip
    from ufldv2_checkpoints import write_official_checkpoint

    torch_or_skip()
    from edge_deploy.engine.convert import convert
    from edge_deploy.export.source import SourceSpec

    def make(work: Path) -> tuple[Path, Path]:
        checkpoint = write_official_checkpoint(work / "tusimple_res18.pth", "tusimple")
        result = convert(SourceSpec(model="ufldv2", dataset="tusimple", checkpoint=checkpoint), work / "art",
                         target="onnx")
        return checkpoint, result.artifact_dir

    return made_once(tmp_path_factory, "ufldv2", make)


@pytest.fixture(scope="session")
def clrnet_artifact(tmp_path_factory) -> tuple[Path, Path]:
    """(checkpoint, artifact): `convert clrnet --dataset culane --backbone resnet18 --checkpoint` of an official-format
    checkpoint with random weights (tests/support/clrnet_checkpoints.py), every default stage (FP16 copy and its
    lane check, simplifier): shared by the CLRNet tests in tests/lanedet/clrnet."""
    from clrnet_checkpoints import write_official_checkpoint

    torch_or_skip()
    from edge_deploy.engine.convert import convert
    from edge_deploy.export.source import SourceSpec

    def make(work: Path) -> tuple[Path, Path]:
        checkpoint = write_official_checkpoint(work / "culane_r18.pth", "culane")
        result = convert(SourceSpec(model="clrnet", dataset="culane", backbone="resnet18", checkpoint=checkpoint),
                         work / "art", target="onnx")
        return checkpoint, result.artifact_dir

    return made_once(tmp_path_factory, "clrnet", make)
