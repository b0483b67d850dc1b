"""An FP16 install serves only files the manifest lists, each with its checksum (issue 55, item 18): the version
install writes holds the listed model_fp16.onnx byte for byte; a model_fp16.onnx changed after convert, or one the
manifest does not list, is refused in one line and nothing is written.

Real artifacts (tests/support/small_artifact.py, FP16 made by the converter convert uses), real ONNX files."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from small_artifact import make_artifact

from edge_deploy.artifact.manifest import FP16_ONNX_NAME, Manifest
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.errors import EdgeDeployError, RepositoryError
from edge_deploy.artifact.precision import Precision


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def fp16_artifact(tmp_path_factory, laneatt_data) -> Path:
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    artifact = make_artifact(tmp_path_factory.mktemp("fp16") / "art", laneatt_data / "anchors_2784x77.npy", n=80)
    manifest = Manifest.read(artifact)
    make_fp16_onnx(artifact, manifest)
    manifest.precision = Precision.FP16  # what convert records when it made model_fp16.onnx (install follows it)
    manifest.write(artifact)
    return artifact


def _copy(artifact: Path, to: Path) -> Path:
    to.mkdir()
    for file in artifact.iterdir():
        (to / file.name).write_bytes(file.read_bytes())
    return to


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("precision", [None, Precision.FP16])  # as converted, and --precision fp16
def test_an_fp16_install_serves_the_listed_model_fp16_onnx(tmp_path, fp16_artifact, precision) -> None:
    listed = Manifest.read(fp16_artifact).files[FP16_ONNX_NAME].sha256
    assert _sha256(fp16_artifact / FP16_ONNX_NAME) == listed
    repo = tmp_path / "repo"
    install(InstallOptions(fp16_artifact, repo, "lane", runtime="python", precision=precision))
    served = [p for p in (repo / "lane").rglob("*.onnx")]
    assert served and all(_sha256(p) == listed for p in served), served


def test_a_model_fp16_onnx_changed_after_convert_is_refused(tmp_path, fp16_artifact) -> None:
    art = _copy(fp16_artifact, tmp_path / "art")
    # the FP32 model in its place: a valid ONNX file with the same I/O, so only the checksum tells it apart
    (art / FP16_ONNX_NAME).write_bytes((art / "model.onnx").read_bytes())
    repo = tmp_path / "repo"
    with pytest.raises(RepositoryError) as info:
        install(InstallOptions(art, repo, "lane", runtime="python"))
    assert f"{art / FP16_ONNX_NAME} does not match its manifest" in str(info.value)
    assert "\n" not in str(info.value) and not repo.exists()


@pytest.mark.parametrize("precision", [None, Precision.FP16])
def test_a_model_fp16_onnx_the_manifest_does_not_list_is_refused(tmp_path, fp16_artifact, precision) -> None:
    art = _copy(fp16_artifact, tmp_path / "art")
    manifest = json.loads((art / "manifest.json").read_text())
    del manifest["files"][FP16_ONNX_NAME]
    (art / "manifest.json").write_text(json.dumps(manifest, indent=2))
    repo = tmp_path / "repo"
    with pytest.raises(EdgeDeployError) as info:  # ManifestError: the manifest is damaged
        install(InstallOptions(art, repo, "lane", runtime="python", precision=precision))
    assert f"does not list {FP16_ONNX_NAME}" in str(info.value), str(info.value)
    assert "\n" not in str(info.value) and not repo.exists()
