"""Nothing is read or installed from outside the artifact (issue 44, items 2-3): every file install copies is listed
in the manifest (an unlisted one means a damaged manifest), every copy is opened without following a link, and a
manifest.json that is a link is refused unread. The artifact directory itself may still be a link. Real files, real
install (no server: these are refused before one would be asked)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_process import run_cli
from small_artifact import make_artifact

from edge_deploy.errors import EdgeDeployError
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, laneatt_data) -> tuple[Path, Path]:
    """An artifact, and an outside ONNX model of other lanes (what a link would smuggle in)."""
    work = tmp_path_factory.mktemp("outside")
    anchors = laneatt_data / "anchors_2784x77.npy"
    return make_artifact(work / "art", anchors, n=80, seed=1), make_artifact(work / "other", anchors, n=80, seed=5)


@pytest.fixture
def art(tmp_path, pristine) -> Path:
    return Path(shutil.copytree(pristine[0], tmp_path / "art"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    return run_cli(args, env=env, timeout=120)


def _refused(art: Path, repo: Path, needle: str) -> None:
    proc = _cli("install", str(art), "--repository", str(repo), "--name", "lane", "--runtime", "onnxruntime")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert not repo.exists()


def test_an_unlisted_model_file_that_is_a_link_out_is_never_installed(tmp_path, art, pristine) -> None:
    manifest = json.loads((art / "manifest.json").read_text())
    del manifest["files"]["model.onnx"]
    (art / "manifest.json").write_text(json.dumps(manifest))
    (art / "model.onnx").unlink()
    (art / "model.onnx").symlink_to(pristine[1] / "model.onnx")
    _refused(art, tmp_path / "repo", "manifest.json is damaged: it does not list model.onnx")
    # unlisted but a regular file: refused the same (the manifest is what vouches for a file)
    (art / "model.onnx").unlink()
    shutil.copy(pristine[0] / "model.onnx", art / "model.onnx")
    _refused(art, tmp_path / "repo", "manifest.json is damaged: it does not list model.onnx")


def test_a_file_swapped_for_a_link_after_the_check_is_not_copied(tmp_path, art, pristine) -> None:
    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.repository import model_config as mc
    from edge_deploy.repository.files import publish
    from edge_deploy.repository.new_version import plan_versions

    manifest = Manifest.read(art)
    items = plan_versions(art, manifest, "lane", "onnxruntime", mc.ConfigOptions(), None)
    (art / "model.onnx").unlink()  # after every check: the copy itself must not follow it
    (art / "model.onnx").symlink_to(pristine[1] / "model.onnx")
    repo = tmp_path / "repo"
    repo.mkdir()
    with pytest.raises(EdgeDeployError, match="model.onnx is a symbolic link"):
        publish(repo, 1, items[0])
    assert not (repo / "lane" / "1").exists()


@pytest.mark.parametrize("outside", ["manifest", "any file"])
def test_a_manifest_that_is_a_link_is_refused_unread(tmp_path, art, pristine, outside) -> None:
    target = pristine[1] / "manifest.json" if outside == "manifest" else tmp_path / "secret.txt"
    if outside != "manifest":
        target.write_text('{"not": "read"}')
    (art / "manifest.json").unlink()
    (art / "manifest.json").symlink_to(target)
    _refused(art, tmp_path / "repo", "manifest.json is a symbolic link, but an artifact's manifest must be a regular")


def test_an_artifact_directory_that_is_a_link_installs(tmp_path, art) -> None:
    current = tmp_path / "current"
    current.symlink_to(art, target_is_directory=True)
    result = install(InstallOptions(current, tmp_path / "repo", "lane", runtime="onnxruntime"))
    assert result.version == 1
    assert (tmp_path / "repo" / "lane" / "1" / "model.onnx").read_bytes() == (art / "model.onnx").read_bytes()
