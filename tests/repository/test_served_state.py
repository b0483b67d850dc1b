"""What serves is never changed or lost by a mistaken command (issue 34, items 1-6): a pipeline's name is not free
for a lane model, a rollback that fails half-way puts back what served, a state file of a newer format or with
wrong types, and a state directory that is a file.

Real files and the real bundled tritonserver throughout; one explicit-mode server serves the module's served cases.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from small_artifact import make_artifact

from edge_deploy.errors import RepositoryError
from edge_deploy.repository.install import install


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def anchors(laneatt_data) -> Path:
    return laneatt_data / "anchors_2784x77.npy"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, anchors) -> tuple[Path, Path]:
    """Two small artifacts whose lanes differ."""
    work = tmp_path_factory.mktemp("artifacts")
    return make_artifact(work / "a", anchors, n=100, seed=1), make_artifact(work / "b", anchors, n=100, seed=2)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in (env or os.environ).items() if k != "EDGE_DEPLOY_DEBUG"}
    return subprocess.run([sys.executable, "-m", "edge_deploy", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def snapshot(repo: Path) -> dict[str, bytes]:
    """Every file of a repository, by path (what a refused command must leave as it was)."""
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def one_line_refusal(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------ 1. a pipeline's name is not free for the taking


@pytest.mark.parametrize("kind, taken, role", [
    ("bls", "lane_pipeline", "pipeline"),
    ("ensemble", "lane_pipeline", "pipeline"),
    ("ensemble", "lane_preprocess", "preprocess"),
    ("ensemble", "lane_postprocess", "postprocess"),
])
def test_a_pipeline_name_is_refused_to_a_lane_model(tmp_path, artifacts, kind, taken, role) -> None:
    first, other = artifacts
    repo = tmp_path / "repo"
    install(first, repo, "lane", runtime="python", pipeline=kind)
    before = snapshot(repo)
    with pytest.raises(RepositoryError, match=f"{taken} is lane's {role} in"):
        install(other, repo, taken, runtime="python", pipeline=False)
    for pipeline in ("--no-pipeline", "--pipeline=bls"):
        proc = cli("install", str(other), "--repository", str(repo), "--name", taken, "--runtime", "python", pipeline)
        one_line_refusal(proc, f"{taken} is lane's {role} in")
    assert snapshot(repo) == before


def test_a_lane_model_name_is_refused_to_a_pipeline(tmp_path, artifacts) -> None:
    first, other = artifacts
    repo = tmp_path / "repo"
    install(first, repo, "lane_pipeline", runtime="python", pipeline=False)
    before = snapshot(repo)
    with pytest.raises(RepositoryError, match="lane_pipeline is a model of its own in"):
        install(other, repo, "lane", runtime="python", pipeline="bls")
    assert snapshot(repo) == before
