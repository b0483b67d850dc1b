"""Messages that used to mislead (issue 13): each one now says what failed, why, and what to do, truthfully."""
from __future__ import annotations

import os
import pickle
import subprocess
import textwrap
from pathlib import Path

import pytest
from cli_process import run_cli

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return run_cli(args, env=env, cwd=cwd, timeout=timeout)


def error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def factory_dir(tmp_path) -> Path:
    (tmp_path / "tinyfactory.py").write_text(textwrap.dedent("""
        import torch

        def make():
            return torch.nn.Linear(8, 4)
    """))
    return tmp_path


def test_an_opset_the_exporter_does_not_write_is_refused_up_front(factory_dir) -> None:
    line = error(cli("convert", "tinyfactory:make", "--input-shape", "1,8", "-o", "out", "--opset", "1",
                     cwd=factory_dir))
    assert "--opset 1: opset 1 is outside 9 to 17" in line and "default 17" in line
    # torch 2.13 exports opset 18, but TensorRT 8.5 (JetPack 5) parses up to 17 (export/onnx_target.py).
    line = error(cli("convert", "tinyfactory:make", "--input-shape", "1,8", "-o", "out", "--opset", "18",
                     cwd=factory_dir))
    assert "TensorRT 8.5 stops at 17" in line
    assert not (factory_dir / "out").exists()


def test_laneatt_options_for_another_model_are_refused_not_ignored(factory_dir) -> None:
    line = error(cli("convert", "tinyfactory:make", "--input-shape", "1,8", "-o", "out", "--topk-anchors", "1000",
                     cwd=factory_dir))
    assert "--topk-anchors only applies to the built-in lane families" in line


@pytest.mark.parametrize("args, needle", [
    (["--dataset", "culane"], "--dataset only applies to the built-in lane families"),
    (["--backbone", "resnet18", "--anchor-order", "stable"], "--backbone and --anchor-order only apply"),
    (["--frame-size", "99x99"], "--frame-size is the camera frame size of --fuse-preprocess"),
])
def test_options_that_would_be_ignored_are_refused(factory_dir, args, needle) -> None:
    line = error(cli("convert", "tinyfactory:make", "--input-shape", "1,8", "-o", "out", "--target", "onnx", *args,
                     cwd=factory_dir))
    assert needle in line
    assert not (factory_dir / "out").exists()


def test_export_options_for_an_artifact_are_refused(tmp_path, laneatt_data) -> None:
    # an artifact MODEL only gets its TensorRT plan built; export options used to be ignored silently
    from small_artifact import make_artifact

    artifact = make_artifact(tmp_path / "artifact", laneatt_data / "anchors_2784x77.npy")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in artifact.iterdir())
    line = error(cli("convert", str(artifact), "--fuse-preprocess", "--opset", "16", "--max-batch", "8"))
    assert "--opset, --max-batch, --fuse-preprocess describe the export from PyTorch" in line
    assert "converted already" in line
    assert sorted((p.name, p.stat().st_mtime_ns) for p in artifact.iterdir()) == before


def test_a_checkpoint_the_safe_loader_refuses_is_not_called_corrupt(tmp_path) -> None:
    class Payload:
        def __reduce__(self):
            return (os.getpid, ())

    with open(tmp_path / "with-code.pt", "wb") as fh:
        pickle.dump({"model": Payload()}, fh, protocol=4)
    line = error(cli("convert", "laneatt", "--backbone", "resnet18", "--checkpoint", str(tmp_path / "with-code.pt"),
                     "-o", str(tmp_path / "out"), "--target", "onnx"))
    try:
        import torch  # noqa: F401
    except ImportError:  # the Python 3.10 CI run: no torch, and the same command says what to install
        assert "needs the Python package 'torch'" in line and "edge-deploy[torch]" in line, line
        return
    assert "corrupt" not in line and "truncated" not in line, line
    assert "safe loader" in line or "not unpickled for safety" in line, line
    assert "if you trust the file" in line


def test_a_long_model_name_is_refused_for_its_length() -> None:
    from edge_deploy.errors import RepositoryError
    from edge_deploy.repository.versions import check_name

    with pytest.raises(RepositoryError, match="is 300 characters long; use at most 200"):
        check_name("a" * 300)
    with pytest.raises(RepositoryError, match="use letters, digits, _ and - only"):
        check_name("lane det")


@pytest.mark.parametrize("args, needle", [
    (["infer", "--synthetic", "1", "--timeout", "-1"], "--timeout must be a number of seconds in (0, 86400], not -1"),
    (["infer", "--synthetic", "-3"], "--synthetic must be a whole number of frames in [0, 10000], not -3"),
    (["infer", "--synthetic", "1", "--conf", "7"], "--conf must be a score threshold in [0, 1], not 7"),
    (["health", "--wait", "-5", "--url", "127.0.0.1:1"], "--wait must be a number of seconds in [0, 86400] (0: ask "
                                                         "once), not -5"),
    (["sample", "-n", "0"], "--count must be a whole number of frames in [1, 100000], not 0"),
    (["serve", "--foreground", "--grpc-port", "x"], "Invalid value for '--grpc-port'"),
])
def test_bad_numbers_and_usage_errors_are_one_line(tmp_path, args, needle) -> None:
    line = error(cli(*args, cwd=tmp_path))
    assert needle in line
    assert list(tmp_path.iterdir()) == []  # nothing was written (infer's default --out is ./lanes)


# --- issue 26: messages that blamed the wrong thing --------------------------------------------------------


def test_rollback_of_a_repository_that_does_not_exist_says_so(tmp_path) -> None:
    line = error(cli("rollback", "lanedet", "--repository", str(tmp_path / "nowhere"), cwd=tmp_path))
    assert f"model repository {tmp_path / 'nowhere'} does not exist" in line and "has no model" not in line


def test_rollback_of_a_repository_that_is_a_file_says_it_is_not_a_directory(tmp_path) -> None:
    (tmp_path / "repo").write_text("not a repository\n")
    line = error(cli("rollback", "lanedet", "--repository", str(tmp_path / "repo"), cwd=tmp_path))
    assert f"model repository {tmp_path / 'repo'} is not a directory" in line and "does not exist" not in line


def test_infer_on_a_directory_reads_its_images_or_says_it_has_none(tmp_path) -> None:
    from edge_deploy.media import image_paths
    from edge_deploy.errors import FrameError

    empty = tmp_path / "empty"
    empty.mkdir()
    line = error(cli("infer", str(empty), "--url", "127.0.0.1:1", cwd=tmp_path))
    assert f"{empty} is a directory with no images in it" in line and "does not exist" not in line
    (empty / "notes.txt").write_text("no image\n")
    with pytest.raises(FrameError, match="is a directory with no images"):
        image_paths([empty])
    for name in ("b.JPG", "a.png"):
        (empty / name).write_bytes(b"x")
    assert image_paths([empty, tmp_path / "c.png"]) == [empty / "a.png", empty / "b.JPG", tmp_path / "c.png"]


@pytest.mark.parametrize("args, needle", [
    (["--synthetic", "0"], "--synthetic must be a whole number of frames in [1, 100000], not 0."),
    (["--synthetic", "-1"], "--synthetic must be a whole number of frames in [1, 100000], not -1."),
    (["--synthetic", "2", "--seed", "-4"], "--seed must be a seed offset in [0, 100000000], not -4."),
])
def test_evaluate_synthetic_counts_are_named_as_options(tmp_path, args, needle) -> None:
    line = error(cli("evaluate", "--url", "127.0.0.1:1", *args, cwd=tmp_path))
    assert needle in line


def test_a_manifest_naming_files_outside_the_artifact_is_refused_as_such(tmp_path) -> None:
    import json
    import shutil

    artifact = tmp_path / "art"
    shutil.copytree(REPO_ROOT / "tests/data/format1/tiny_fp16", artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    for bad in ("../../../etc/passwd", "/etc/passwd", "sub/model.onnx", ".."):
        manifest["files"] = {bad: {"sha256": "0" * 64, "bytes": 1}}
        (artifact / "manifest.json").write_text(json.dumps(manifest))
        line = error(cli("install", str(artifact), "--repository", str(tmp_path / "repo"), cwd=tmp_path))
        assert f"lists the file {bad!r}, which is not a plain file name inside the artifact" in line, line
        assert "changed after convert" not in line and not (tmp_path / "repo").exists()
