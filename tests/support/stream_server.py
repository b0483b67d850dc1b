"""The servers of the stream tests (tests/client/test_lane_stream.py, test_stream_bounds.py): the real bundled
tritonserver serving two models installed by the real `install` (Python-backend ONNX Runtime):

- ``tiny``: tests/support/small_artifact.py, LaneATT's I/O with negligible compute;
- ``slow``: the same model with a SLOW_S sleep written into its installed model.py: slower than a 30 frames/s
  camera, so a stream must drop frames.

And the faults they meet: SIGKILL (a crash) and SIGSTOP (a hung server).
"""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
from camera_stub import SIZE
from conftest import free_port
from slow_models import every_call, install_model
from slow_models import warm as warm_model

from edge_deploy.client.shm import leftover_regions

SLOW_S = 0.05


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory, laneatt_data):
    """The negligible-compute model with LaneATT's I/O (small_artifact.py), made once per module that imports this."""
    from small_artifact import make_artifact

    return make_artifact(tmp_path_factory.mktemp("tiny") / "artifact", laneatt_data / "anchors_2784x77.npy")


def our_shm() -> list[str]:
    return leftover_regions(os.getpid())


def install_models(repo: Path, tiny_artifact: Path, slow: dict[str, float] | None = None) -> None:
    """`tiny`, and each of `slow` (name -> seconds each request sleeps; default {"slow": SLOW_S})."""
    install_model(tiny_artifact, repo, "tiny")
    for name, seconds in (slow or {"slow": SLOW_S}).items():
        install_model(tiny_artifact, repo, name, every_call(seconds))


def serve(repo: Path, log: Path, port: int | None = None):
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    proc = TritonProcess(find_tritonserver(cache_dir=log.parent / "cache"),
                         ServerOptions(model_repository=repo, grpc_port=port or free_port()), log)
    proc.start()
    try:
        proc.wait_ready(120)
        warm(proc.url)
    except Exception:
        proc.stop(timeout=15)
        raise
    return proc


def warm(url: str) -> None:
    """A few untimed calls to `tiny` on a fresh server (slow_models.warm)."""
    warm_model(url, "tiny", SIZE)


def sigkill(proc) -> None:
    """SIGKILL tritonserver (its whole process group: the Python-backend stubs too), as a crash would."""
    os.killpg(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait(timeout=15)


def sigstop(proc) -> None:
    """SIGSTOP tritonserver's process group: a hung server, which keeps its connections open and answers nothing."""
    os.killpg(proc.proc.pid, signal.SIGSTOP)


def sigcont(proc) -> None:
    os.killpg(proc.proc.pid, signal.SIGCONT)


def registered_regions(url: str) -> list[str]:
    """The names of this process's shared memory regions the server at `url` has registered."""
    import tritonclient.grpc as grpcclient

    with contextlib.closing(grpcclient.InferenceServerClient(url)) as admin:
        regions = admin.get_system_shared_memory_status(as_json=True, client_timeout=10).get("regions", {})
    prefix = f"edge_deploy_{os.getpid()}_"
    return sorted(name for name in regions if prefix in name)
