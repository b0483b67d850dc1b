"""Served lane models of a known speed, for tests about time: tests/support/small_artifact.py's tiny LaneATT-I/O model
installed by the real `install` (Python backend, ONNX Runtime), with a delay written into its installed model.py's
execute. Only the delay is added: the server, the model's outputs and the client are real."""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

EXECUTE = "    def execute(self, requests):\n"


def every_call(seconds: float) -> str:
    """Each request takes `seconds` more."""
    return f"import time; time.sleep({seconds})"


def first_calls(seconds: float, count: int, after: int = 0) -> str:
    """The model instance's requests after its first `after` (a test's own warm-up calls): the next `count` take
    `seconds` more each (a model still warming up), the rest none."""
    return (f"import time; self._calls = getattr(self, '_calls', 0) + 1; "
            f"time.sleep({seconds} if {after} < self._calls <= {after + count} else 0)")


def install_model(artifact: Path, repo: Path, name: str, delay: str | None = None, **options) -> None:
    """`install` the artifact as `name` (runtime python), with `delay` (every_call, first_calls) in its execute."""
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    install(InstallOptions(artifact, repo, name, runtime="python", **options))
    if delay is None:
        return
    (model_py,) = (repo / name).glob("*/model.py")
    code = model_py.read_text()
    assert EXECUTE in code, "the installed model.py has no execute to slow down"
    model_py.write_text(code.replace(EXECUTE, f"{EXECUTE}        {delay}\n"))


def warm(url: str, model: str, shape: tuple[int, int] = (590, 1640), calls: int = 3) -> None:
    """A few calls on a fresh server, untimed: a Python-backend model's first requests load ONNX Runtime's session
    (up to a second on a busy machine), which no test of time is about."""
    from edge_deploy.client.sync_client import LaneDetClient

    frame = np.zeros((shape[0], shape[1], 3), np.uint8)
    with contextlib.suppress(Exception), LaneDetClient(url, model) as client:
        for _ in range(calls):
            client.detect(frame)


@contextlib.contextmanager
def serving_tiny_and_slow(work: Path, anchors: Path, slow_s: float, shape: tuple[int, int] = (590, 1640)):
    """The real tritonserver serving `tiny` and `slow` (every call SLOW_S more), both warmed on `shape` frames."""
    from small_artifact import make_artifact
    from triton_helpers import serving

    artifact = make_artifact(work / "artifact", anchors)
    install_model(artifact, work / "repo", "tiny")
    install_model(artifact, work / "repo", "slow", every_call(slow_s))
    with serving(work / "repo", work) as proc:
        warm(proc.url, "tiny", shape)
        warm(proc.url, "slow", shape, calls=1)
        yield proc
