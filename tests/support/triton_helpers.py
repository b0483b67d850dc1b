"""For tests with a real tritonserver: a tiny Python-backend model, and reading the server's log."""
from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import cli_process

# Errors a GPU-less machine always logs (no CUDA driver): at startup, and when an ensemble loads.
CPU_ONLY_NOISE = ("CudaDriverHelper has not been initialized", "CUDA driver version is insufficient")


def failed_loads(log: Path) -> list[str]:
    """Failed loads and errors in a tritonserver log, minus the CUDA noise of this CPU machine."""
    lines = Path(log).read_text(errors="replace").splitlines()
    return [
        ln for ln in lines
        if "failed to load" in ln or (ln.startswith("E") and not any(noise in ln for noise in CPU_ONLY_NOISE))
    ]


ADD_ONE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
ADD_ONE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]
            )
            for r in requests
        ]
"""
ADD_TWO = ADD_ONE.replace("as_numpy() + 1", "as_numpy() + 2")  # a new version a reload must bring in
BROKEN = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file is corrupt")
"""


def write_model(repo: Path, name: str, code: str = ADD_ONE, versions: tuple[int, ...] = (1,)) -> Path:
    """A minimal Python-backend model directory (tests of `serve` do not depend on `install`)."""
    model = repo / name
    for version in versions:
        (model / str(version)).mkdir(parents=True, exist_ok=True)
        (model / str(version) / "model.py").write_text(code)
    (model / "config.pbtxt").write_text(ADD_ONE_CONFIG.format(name=name))
    return model


def mapped_shm_names() -> set[str]:
    """Names of the /dev/shm files some live process has mapped (read from every /proc/PID/maps)."""
    names: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text(errors="replace")
        except OSError:  # the process exited meanwhile
            continue
        names.update(line.rsplit("/dev/shm/", 1)[1].split(" (deleted)")[0] for line in text.splitlines()
                     if "/dev/shm/" in line)
    return names


def remove_orphaned_python_backend_regions(before: set[Path]) -> None:
    """Unlink the Python-backend regions made since `before` that no live process maps any more (a SIGKILLed
    server's): a server of another test running at the same time (pytest-xdist) still maps its own."""
    made = set(Path("/dev/shm").glob("triton_python_backend_shm_region_*")) - before
    live = mapped_shm_names()
    for region in made:
        if region.name not in live:
            region.unlink(missing_ok=True)


def stop_process_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signal a server started in its own session (its process group: the server stops its stubs), SIGKILL the
    group after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an `edge-deploy` subprocess with its own HOME and state directory under tmp_path."""
    env = dict(os.environ)
    env.update(HOME=str(tmp_path / "home"), EDGE_DEPLOY_STATE_DIR=str(tmp_path / "state"))
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "TRITONSERVER", "EDGE_DEPLOY_DEBUG"):
        env.pop(name, None)
    return env


def run_cli(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m edge_deploy ARGS` in cli_env(tmp_path)."""
    return cli_process.run_cli(args, env=cli_env(tmp_path), timeout=timeout)


@contextmanager
def serving(repo: Path, work: Path, timeout: float = 120) -> Iterator[Any]:
    """The real bundled tritonserver serving `repo` on a free loopback port (logs and cache under `work`), for
    module-scoped fixtures; yields the ready TritonProcess and stops it afterwards."""
    from conftest import free_port

    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=repo, grpc_port=free_port()), work / "triton.log")
    proc.start()
    try:
        proc.wait_ready(timeout)
        yield proc
    finally:
        proc.stop(timeout=15)
