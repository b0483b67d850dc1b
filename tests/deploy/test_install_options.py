"""InstallOptions: install's options, checked once when made (the CLI and `install(...)` both make one)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_deploy.deploy.options import InstallOptions
from edge_deploy.errors import RepositoryError
from edge_deploy.artifact.precision import Precision
from edge_deploy.repository.pipeline_kind import PipelineKind


def test_options_are_checked_and_typed_when_made(tmp_path: Path) -> None:
    options = InstallOptions(str(tmp_path), str(tmp_path / "repo"), "lane", pipeline="bls", precision="fp16")
    assert options.artifact == tmp_path and options.repository == tmp_path / "repo"
    assert options.kind is PipelineKind.BLS and not options.follows_installed
    assert options.precision is Precision.FP16
    assert InstallOptions(tmp_path).follows_installed and InstallOptions(tmp_path).kind is None
    assert InstallOptions(tmp_path, pipeline=True).kind is PipelineKind.ENSEMBLE
    assert InstallOptions(tmp_path, pipeline=False).kind is None


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "a b"}, "illegal model name"),
    ({"instances": 0}, "--instances must be at least 1"),
    ({"keep": 0}, "--keep must be at least 1"),
    ({"max_queue_delay_us": -1}, "--max-queue-delay-us must be >= 0"),
    ({"pipeline": "dag"}, "unknown pipeline"),
    ({"precision": Precision.INT8}, "not 'int8'"),
    ({"precision": "fp8"}, "not 'fp8'"),
])
def test_bad_options_are_one_line_errors(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(RepositoryError, match=message) as caught:
        InstallOptions(tmp_path, **kwargs)
    assert "\n" not in str(caught.value)


def test_a_missing_artifact_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="does not exist; create it with `edge-deploy convert`"):
        InstallOptions(tmp_path / "nothing")
