"""install never loses the version that serves, and refuses a manifest that does not describe its model (issue 13)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_process import run_cli
from small_artifact import make_artifact, make_unloadable

from edge_deploy.errors import RepositoryError
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.artifact.precision import Precision
from edge_deploy.deploy.rollback import rollback
from edge_deploy.core.triton_layout import read_config, versions
from edge_deploy.serve import admin
from edge_deploy.serve import server_record as control

KEY_NAME = "edge-deploy-key"
pytest_plugins = ["jetson_fixtures"]


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def anchors(laneatt_data) -> Path:
    return laneatt_data / "anchors_2784x77.npy"


def _serve_with_key(tmp_path: Path, repo: Path, start_triton):  # noqa: ANN001, ANN202
    """A key-restricted explicit-mode server on `repo` and the record that lets install/rollback load models."""
    key_file = tmp_path / "key"
    key_file.write_text("k" * 32 + "\n")
    server = start_triton(repo, model_control="explicit", restricted_key=(KEY_NAME, "k" * 32))
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_NAME,
                                             key_file=key_file, scope="user"))
    return server


def _rows(url: str) -> int:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        inp = grpcclient.InferInput("input", [1, 3, 360, 640], "FP32")
        inp.set_data_from_numpy(np.full((1, 3, 360, 640), 0.5, np.float32))
        return client.infer("lane", [inp]).as_numpy("predict_lanes").shape[1]
    finally:
        client.close()


@pytest.mark.triton
def test_keep_1_with_a_version_that_fails_to_load_keeps_the_served_version(tmp_path, anchors, start_triton) -> None:
    good = make_artifact(tmp_path / "good", anchors, n=100, seed=1)
    broken = make_unloadable(tmp_path / "broken", anchors, n=100)
    repo = tmp_path / "repo"
    install(InstallOptions(good, repo, "lane", runtime="python"))
    server = _serve_with_key(tmp_path, repo, start_triton)

    with pytest.raises(RepositoryError, match="did not load lane"):
        install(InstallOptions(broken, repo, "lane", runtime="python", keep=1))
    # The served version is still on disk, the config points at it, and it still answers.
    assert 1 in versions(repo, "lane")
    assert list(read_config(repo, "lane").version_policy.specific.versions) == [1]
    assert admin.served_versions(server.url, "lane") == [1] and _rows(server.url) == 100

    # After a restart (power cycle) the server loads it again.
    server.stop(timeout=15)
    again = _serve_with_key(tmp_path, repo, start_triton)
    assert admin.served_versions(again.url, "lane") == [1] and _rows(again.url) == 100

    # A version that loads is served first, then the others are pruned: the refused one, never the one
    # this install replaced (1, what a rollback returns to), even with --keep 1.
    result = install(InstallOptions(make_artifact(tmp_path / "next", anchors, n=200, seed=2), repo, "lane", runtime="python", keep=1))
    assert result.served == {"lane": [3]} and result.pruned == {"lane": [2]}
    assert versions(repo, "lane") == [1, 3] and _rows(again.url) == 200


@pytest.mark.triton
def test_a_failed_install_retried_can_still_roll_back(tmp_path, anchors, start_triton) -> None:
    # Issue 26, as a vehicle meets it: v2 serves; a bad version loads but its lanes are wrong (the fleet's
    # smoke check fails), so it is rolled back to 2; the same bad install again, and again. --keep 2 must
    # never take version 2 away; the versions rolled back from do not count towards K and go first.
    good = make_artifact(tmp_path / "good", anchors, n=100, seed=1)
    bad = make_artifact(tmp_path / "bad", anchors, n=200, seed=2)  # loads; 200 rows stand for "wrong lanes"
    unloadable = make_unloadable(tmp_path / "unloadable", anchors, n=100)
    repo = tmp_path / "repo"
    install(InstallOptions(good, repo, "lane", runtime="python"))
    server = _serve_with_key(tmp_path, repo, start_triton)
    assert _cli("install", str(good), "--repository", str(repo), "--name", "lane", "--runtime", "python").returncode == 0
    assert admin.served_versions(server.url, "lane") == [2]

    for attempt, expect in ((3, "pruned lane versions 1 (kept 2, 3)"), (4, "pruned lane versions 3 (kept 2, 4)")):
        done = _cli("install", str(bad), "--repository", str(repo), "--name", "lane", "--runtime", "python",
                    "--keep", "2")
        assert done.returncode == 0, done.stderr
        assert expect in done.stdout and f"now serves: lane {attempt}" in done.stdout, (attempt, done.stdout)
        back = _cli("rollback", "lane", "--to", "2", "--repository", str(repo))
        assert back.returncode == 0, (attempt, back.stderr)
        assert admin.served_versions(server.url, "lane") == [2] and _rows(server.url) == 100
        assert versions(repo, "lane") == [2, attempt]

    # a load the server refuses counts for nothing either: the next install prunes it, never 2
    with pytest.raises(RepositoryError, match="did not load lane"):
        install(InstallOptions(unloadable, repo, "lane", runtime="python", keep=2))
    assert admin.served_versions(server.url, "lane") == [2] and versions(repo, "lane") == [2, 4, 5]
    result = install(InstallOptions(bad, repo, "lane", runtime="python", keep=2))
    assert result.pruned == {"lane": [4, 5]} and versions(repo, "lane") == [2, 6]
    assert rollback(repo, "lane").version == 2  # the default skips versions that failed
    assert admin.served_versions(server.url, "lane") == [2] and _rows(server.url) == 100

    # after a power cycle the server serves 2 again, and the next good install may let the bad ones go
    server.stop(timeout=15)
    again = _serve_with_key(tmp_path, repo, start_triton)
    assert admin.served_versions(again.url, "lane") == [2]
    result = install(InstallOptions(good, repo, "lane", runtime="python", keep=2))
    assert result.served == {"lane": [7]} and result.pruned == {"lane": [6]} and versions(repo, "lane") == [2, 7]


def _edit_manifest(artifact: Path, edit) -> None:  # noqa: ANN001
    manifest = json.loads((artifact / "manifest.json").read_text())
    edit(manifest["io"])
    (artifact / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    return run_cli(args, env=env)


@pytest.mark.parametrize("edit, needle", [
    (lambda io: io["inputs"][0].update(shape=[-1, 3, 720, 1280]),
     "input 'input' has shape [-1, 3, 360, 640] in the model, [-1, 3, 720, 1280] in the manifest"),
    (lambda io: io["outputs"][0].update(shape=[-1, 1000, 77]),
     "output 'predict_lanes' has shape [-1, 80, 77] in the model, [-1, 1000, 77] in the manifest"),
    (lambda io: io["outputs"][0].update(datatype="FP16"), "output 'predict_lanes' is FP32 in the model, FP16"),
    (lambda io: io["inputs"][0].update(name="images"), "inputs ['input'] in the model, ['images'] in the manifest"),
])
def test_a_manifest_that_does_not_describe_model_onnx_is_refused(tmp_path, anchors, edit, needle) -> None:
    art = make_artifact(tmp_path / "art", anchors, n=80)
    _edit_manifest(art, edit)
    repo = tmp_path / "repo"
    with pytest.raises(RepositoryError) as info:
        install(InstallOptions(art, repo, "lane", runtime="python"))
    assert needle in str(info.value) and "convert the model again" in str(info.value)
    assert not repo.exists()
    proc = _cli("install", str(art), "--repository", str(repo), "--name", "lane", "--runtime", "onnxruntime")
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert not repo.exists()


def test_a_model_onnx_that_is_not_onnx_is_refused(tmp_path, anchors) -> None:
    from edge_deploy.artifact.manifest import file_entry

    art = make_artifact(tmp_path / "art", anchors, n=80)
    (art / "model.onnx").write_bytes(b"this is not an ONNX model")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["files"]["model.onnx"] = file_entry(art / "model.onnx").to_dict()
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RepositoryError, match="is not a readable ONNX model"):
        install(InstallOptions(art, tmp_path / "repo", "lane", runtime="python"))
    assert not (tmp_path / "repo").exists()


def test_a_plan_is_checked_against_the_manifest_where_tensorrt_is_installed(tmp_path, fake_trt, no_tensorrt) -> None:
    # TensorRT cannot be installed here: the recording double (tests/support/trt_double.py) stands in for it.
    from trt_double import ROWS

    from dataclasses import replace

    from edge_deploy.artifact.manifest import IOSignature, TensorSpec
    from edge_deploy.repository.signature import check_plan_signature

    plan = tmp_path / "model.plan"
    plan.write_bytes(b"PLAN8.6.1 engine bytes")
    io = IOSignature.from_dict({"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 360, 640]}],
                                "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [-1, ROWS, 77]}],
                                "batch": {"min": 1, "opt": 1, "max": 4, "dynamic": True}})
    assert check_plan_signature(plan, io) is False  # no TensorRT yet: left to the server's load
    fake_trt("8.6.1")
    assert check_plan_signature(plan, io) is True
    io = replace(io, outputs=(TensorSpec("predict_lanes", "FP32", (-1, ROWS + 1, 77)),))
    with pytest.raises(RepositoryError, match=r"output 'predict_lanes' has shape \[-1, 64, 77\], the manifest says"):
        check_plan_signature(plan, io)


def _with_fp16(artifact: Path) -> Path:
    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    manifest = Manifest.read(artifact)
    make_fp16_onnx(artifact, manifest)
    manifest.write(artifact)
    return artifact


def test_the_manifest_is_checked_against_model_onnx_when_model_fp16_onnx_serves(tmp_path, anchors) -> None:
    """Issue 34 item 9: served from model_fp16.onnx, a manifest that does not describe model.onnx was installed."""
    from edge_deploy.artifact.manifest import file_entry

    art = _with_fp16(make_artifact(tmp_path / "art", anchors, n=80))
    _edit_manifest(art, lambda io: io["outputs"][0].update(shape=[-1, 1000, 77]))
    with pytest.raises(RepositoryError, match="does not describe model.onnx: output 'predict_lanes' has shape"):
        install(InstallOptions(art, tmp_path / "repo", "lane", runtime="python", precision=Precision.FP16))
    assert not (tmp_path / "repo").exists()

    art = _with_fp16(make_artifact(tmp_path / "art2", anchors, n=80))
    (art / "model.onnx").write_bytes(b"this is not an ONNX model")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["files"]["model.onnx"] = file_entry(art / "model.onnx").to_dict()
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RepositoryError, match="model.onnx is not a readable ONNX model"):
        install(InstallOptions(art, tmp_path / "repo", "lane", runtime="python", precision=Precision.FP16))
    assert not (tmp_path / "repo").exists()
