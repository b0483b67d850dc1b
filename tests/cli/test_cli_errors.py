"""The README's promise: every failure is one line on stderr with a non-zero exit, never a traceback (issue 13).

The commands run as real subprocesses (`python -m edge_deploy`). A full disk is a real one: a
small tmpfs mounted for the test (tests run as root here; elsewhere the test skips).
"""
from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from cli_process import run_cli
from needs import torch_or_skip

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    base["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *(p for p in [base.get("PYTHONPATH")] if p)])
    return run_cli(args, env={**base, **(env or {})}, cwd=cwd, timeout=timeout)


def one_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def small_disk(tmp_path):
    """A 1.6 MiB tmpfs: room for the test model's ONNX file (1 MiB) but not for a second copy of it."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1600k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_disk_full_during_simplify_is_one_line_and_leaves_nothing(tmp_path, small_disk) -> None:
    torch_or_skip()  # the model is a torch factory
    (tmp_path / "tinyfactory.py").write_text(textwrap.dedent("""
        import torch

        def make():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    """))
    result = cli("convert", "tinyfactory:make", "--input-shape", "1,256", "--target", "onnx",
                 "--output", str(small_disk / "out"), cwd=tmp_path)
    assert "✓ check ONNX" in result.stdout and "✓ simplify" not in result.stdout  # it failed in simplify
    one_line(result, f"could not finish writing {small_disk / 'out'}", "No space left on device", "df -h")
    assert list(small_disk.iterdir()) == []  # the staging directory is gone


def test_disk_full_during_install_is_one_line_and_keeps_the_installed_version(tmp_path, small_disk,
                                                                              laneatt_data) -> None:
    from small_artifact import make_artifact

    artifact = make_artifact(tmp_path / "artifact", laneatt_data / "anchors_2784x77.npy")
    repo = small_disk / "repo"
    first = cli("install", str(artifact), "--repository", str(repo), "--runtime", "python")
    assert first.returncode == 0, first.stderr
    before = {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    result = cli("install", str(artifact), "--repository", str(repo), "--runtime", "python")  # no room for a copy
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]  # install's progress goes to stderr before it
    assert error == (f"error: cannot install into {repo}: No space left on device; the file system is full: "
                     "free space there (`df -h`) or write somewhere else, then run it again."), error
    after = {p.relative_to(repo): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    assert after == before  # version 1 and its config untouched, no partial version 2 or staging leftovers
    assert sorted(p.name for p in (repo / "lanedet").iterdir()) == ["1", "config.pbtxt"]


@pytest.mark.parametrize("port", ["99999", "-5", "0"])
def test_serve_port_out_of_range_is_one_line(tmp_path, port) -> None:
    for mode in ("--foreground", "--print-unit"):
        result = cli("serve", mode, "--user", "--repository", str(tmp_path), "--grpc-port", port)
        one_line(result, f"--grpc-port must be a TCP port in [1, 65535], not {port}.")


def test_infer_on_an_empty_png_is_one_line(tmp_path) -> None:
    (tmp_path / "empty.png").write_bytes(b"")
    one_line(cli("infer", str(tmp_path / "empty.png"), "--out", str(tmp_path / "out")), "is empty (0 bytes)")
    assert not (tmp_path / "out").exists()


def test_infer_out_that_is_a_file_is_one_line(tmp_path) -> None:
    assert cli("sample", "--out", str(tmp_path), "-n", "1").returncode == 0
    (tmp_path / "taken").write_text("a file, not a directory")
    one_line(cli("infer", "--synthetic", "1", str(tmp_path / "road-000.png"), "--out", str(tmp_path / "taken")),
             f"{tmp_path / 'taken'} is a file")
    assert (tmp_path / "taken").read_text() == "a file, not a directory"


def test_errors_that_are_not_edge_deploys_are_one_line_by_category() -> None:
    import errno

    from edge_deploy.cli import INTERNAL_ERROR_EXIT, error_line
    from edge_deploy.errors import RepositoryError

    assert error_line(RepositoryError("x failed; do y.")) == ("x failed; do y.", 2)
    message, code = error_line(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/model.onnx"))
    assert code == 1 and message.startswith("No space left on device (/data/model.onnx); the file system is full")
    message, code = error_line(OSError(errno.EROFS, os.strerror(errno.EROFS), "/x"))
    assert "read-only" in message
    message, code = error_line(KeyError("weights"))
    assert code == INTERNAL_ERROR_EXIT and "internal error (KeyError: 'weights')" in message
    assert "EDGE_DEPLOY_DEBUG=1" in message and "\n" not in message
