"""The TensorRT a tritonserver loads plans with, and plans it cannot load: doctor, install and serve say so in
one line before Triton fails (the most common Triton-on-Jetson failure).

TensorRT and Triton's TensorRT backend cannot exist here, so the tritonserver installs are fake layouts
of real files (tests/support/fake_triton.py): a backend library compiled here whose ELF dynamic section
needs libnvinfer.so.N, and a stand-in libnvinfer in the system directory of a fake Jetson root
(tests/data/jetson_root, a JetPack tarball) or in the install's own lib/ (an -igpu container).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import run_cli
from fake_triton import compile_library, fake_triton, libnvinfer, readelf_needed
from manifest_files import manifest_json, write_manifest_json

from edge_deploy.artifact.manifest import file_entry
from edge_deploy.machine.plan_fit import tensorrt_mismatch
from edge_deploy.serve.discovery import find_tritonserver
from edge_deploy.serve.elf import read_dynamic
from edge_deploy.serve.server_tensorrt import server_tensorrt

pytest_plugins = ["jetson_fixtures"]  # board, no_tensorrt, artifact

REPO_ROOT = Path(__file__).resolve().parents[2]
# What a plan built on tests/data/jetson_root/agx_orin_jp60 records (TensorRT 8.6.2 of JetPack 6.0).
BUILT_ON_JP60 = {"tensorrt": "8.6.2.3", "cuda": "12.2.140", "gpu": "Orin", "compute_capability": "8.7",
                 "l4t": "36.3.0", "precision": "fp16"}


def cli(*args: str, root: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EDGE_DEPLOY_DEBUG", "TRITONSERVER")}
    env.update(PYTHONPATH=str(REPO_ROOT), EDGE_DEPLOY_ROOT=str(root), XDG_CACHE_HOME=str(root / "cache"))
    return run_cli(args, env=env, timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def plan_artifact(tmp_path: Path, source: tuple, plan: dict) -> Path:
    """`source` (jetson_fixtures' artifact: directory, manifest) with a (fake) model.plan and the plan section
    a build on the device records."""
    art = tmp_path / f"plan-{plan['tensorrt']}"
    shutil.copytree(source[0], art)
    source[1].write(art)
    (art / "model.plan").write_bytes(b"not a real engine: TensorRT cannot be installed here")
    manifest = manifest_json(art)
    manifest["files"]["model.plan"] = file_entry(art / "model.plan").to_dict()
    manifest["plan"] = plan
    write_manifest_json(art, manifest)
    return art


def test_the_elf_reader_reads_what_readelf_reads(tmp_path) -> None:
    link = libnvinfer(tmp_path / "lib", "10.3.0")
    backend = compile_library(tmp_path / "libtriton_tensorrt.so", needed=(link,), runpath="$ORIGIN/lib")
    dynamic = read_dynamic(backend)
    assert dynamic.needed == ("libnvinfer.so.10",)
    assert dynamic.search == (str(tmp_path / "lib"),)  # $ORIGIN is the library's directory
    expected = readelf_needed(backend)
    if expected is not None:
        assert list(dynamic.needed) == expected
    assert read_dynamic(tmp_path / "lib" / "libnvinfer.so.10.3.0").needed == ()
    (tmp_path / "text.so").write_text("not an ELF file")
    assert read_dynamic(tmp_path / "text.so").needed == ()


def test_a_jetpack_tarball_serves_with_the_systems_tensorrt(tmp_path) -> None:
    root = tmp_path / "root"
    binary = fake_triton(tmp_path, tensorrt="8.5.2", where="system", root=root)
    found = server_tensorrt(find_tritonserver(binary), root)
    assert found.version == "8.5.2" and found.library.endswith("usr/lib/aarch64-linux-gnu/libnvinfer.so.8.5.2")
    assert "TensorRT 8.5.2" in found.describe()


def test_an_igpu_install_serves_with_its_own_tensorrt_not_jetpacks(tmp_path) -> None:
    root = tmp_path / "root"
    libnvinfer(root / "usr" / "lib" / "aarch64-linux-gnu", "8.6.2")  # JetPack 6.0's TensorRT on the system
    libnvinfer(root / "usr" / "lib" / "aarch64-linux-gnu", "10.0.1")  # and another 10.x: the run path comes first
    binary = fake_triton(tmp_path, tensorrt="10.3.0", where="bundled", root=root)
    found = server_tensorrt(find_tritonserver(binary), root)
    assert found.version == "10.3.0" and "/opt/tritonserver/lib/libnvinfer.so.10.3.0" in found.library


def test_an_unversioned_library_gives_the_major_and_a_missing_one_nothing(tmp_path) -> None:
    root = tmp_path / "root"
    binary = fake_triton(tmp_path, tensorrt="10.3.0", where="system", root=root)
    libdir = root / "usr" / "lib" / "aarch64-linux-gnu"
    (libdir / "libnvinfer.so.10").unlink()
    (libdir / "libnvinfer.so.10.3.0").rename(libdir / "libnvinfer.so.10")  # only the soname is there
    assert server_tensorrt(find_tritonserver(binary), root).version == "10"
    (libdir / "libnvinfer.so.10").unlink()
    missing = server_tensorrt(find_tritonserver(binary), root)
    assert missing.version is None and "not found" in missing.describe()


def test_a_server_without_a_tensorrt_backend_has_no_tensorrt(tmp_path) -> None:
    binary = fake_triton(tmp_path, tensorrt="10.3.0")
    shutil.rmtree(binary.parent.parent / "backends" / "tensorrt")
    assert server_tensorrt(find_tritonserver(binary), tmp_path) is None


def test_which_plans_a_tensorrt_can_load() -> None:
    assert not tensorrt_mismatch("10.3.0.26", "10.3.0")  # the build number does not change the plan format
    assert tensorrt_mismatch("8.6.2.3", "10.3.0") and tensorrt_mismatch("10.3.0", "10.7.0")
    assert not tensorrt_mismatch("10.3.0", "10") and tensorrt_mismatch("8.6.2", "10")  # only the major known


def _repository_with_plan(tmp_path: Path, art: Path, root: Path) -> Path:
    """`art` installed as model lane/1 (with a server whose TensorRT is the plan's: JetPack 6.0's)."""
    repo = tmp_path / "repo"
    matching = fake_triton(tmp_path / "jetpack", tensorrt="8.6.2", where="system", root=root)
    result = cli("install", str(art), "--repository", str(repo), "--name", "lane", "--tritonserver", str(matching),
                 root=root)
    assert result.returncode == 0, result.stderr
    assert (repo / "lane" / "1" / "model.plan").is_file()
    return repo


def test_install_refuses_a_plan_the_servers_tensorrt_cannot_load(board, artifact, tmp_path) -> None:
    root = board("agx_orin_jp60")
    art = plan_artifact(tmp_path, artifact, BUILT_ON_JP60)
    igpu = fake_triton(tmp_path / "igpu", tensorrt="10.3.0", where="bundled", root=root)
    repo = tmp_path / "repo"
    line = one_line_error(cli("install", str(art), "--repository", str(repo), "--name", "lane",
                              "--tritonserver", str(igpu), root=root))
    for text in ("TensorRT 8.6.2.3", "TensorRT 10.3.0", str(igpu), "edge-deploy convert ARTIFACT --force"):
        assert text in line, line
    assert not repo.exists()  # refused before anything was written
    # The same artifact with JetPack's own tarball (TensorRT 8.6.2, the plan's) installs.
    assert _repository_with_plan(tmp_path, art, root).is_dir()


def test_install_force_installs_over_a_server_tensorrt_mismatch_with_a_warning(board, artifact, tmp_path,
                                                                               monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps the warning at 80 columns off a terminal
    root = board("agx_orin_jp60")
    art = plan_artifact(tmp_path, artifact, BUILT_ON_JP60)
    igpu = fake_triton(tmp_path / "igpu", tensorrt="10.3.0", where="bundled", root=root)
    repo = tmp_path / "repo"
    result = cli("install", str(art), "--repository", str(repo), "--name", "lane", "--tritonserver", str(igpu),
                 "--force", root=root)
    assert result.returncode == 0, result.stderr
    assert (repo / "lane" / "1" / "model.plan").read_bytes() == (art / "model.plan").read_bytes()
    (warning,) = [line for line in result.stderr.splitlines() if "installing because of --force" in line]
    for text in ("TensorRT 8.6.2.3", "TensorRT 10.3.0", str(igpu)):
        assert text in warning, warning


def test_serve_refuses_a_served_plan_before_tritonserver_starts(board, artifact, tmp_path) -> None:
    root = board("agx_orin_jp60")
    repo = _repository_with_plan(tmp_path, plan_artifact(tmp_path, artifact, BUILT_ON_JP60), root)
    igpu = fake_triton(tmp_path / "igpu", tensorrt="10.3.0", where="bundled", root=root)
    line = one_line_error(cli("serve", "--foreground", "--user", "--repository", str(repo), "--tritonserver",
                              str(igpu), "--grpc-port", "18999", root=root))
    for text in ("model lane/1", "TensorRT 8.6.2.3", "TensorRT 10.3.0", "edge-deploy convert ARTIFACT --force"):
        assert text in line, line
    assert "stand-in tritonserver" not in line  # refused before the (stand-in) server was started
    # A version kept on disk but no longer served is not held against the server.
    (repo / "lane" / "2").mkdir()
    shutil.copytree(repo / "lane" / "1", repo / "lane" / "2", dirs_exist_ok=True)
    (repo / "lane" / "2" / "model.plan").unlink()
    (repo / "lane" / "2" / "model.onnx").write_bytes(b"")
    from edge_deploy.serve.server_tensorrt import repository_refusals

    assert repository_refusals(repo, find_tritonserver(igpu), root) == []  # latest 1 serves version 2


def test_doctor_names_the_servers_tensorrt_and_the_plans_it_cannot_load(board, artifact, tmp_path) -> None:
    root = board("agx_orin_jp60")
    repo = _repository_with_plan(tmp_path, plan_artifact(tmp_path, artifact, BUILT_ON_JP60), root)
    igpu = fake_triton(tmp_path / "igpu", tensorrt="10.3.0", where="bundled", root=root)
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    env.update(PYTHONPATH=str(REPO_ROOT), TRITONSERVER=str(igpu), XDG_CACHE_HOME=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "edge_deploy", "doctor", "--for", "serve", "--json",
                             "--repository", str(repo), "--root", str(root)], capture_output=True, text=True,
                            env=env, timeout=120)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["stages"]["serve"]["blockers"] == ["model lane/1"], result.stdout
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["Triton TensorRT"]["status"] == "ok" and "TensorRT 10.3.0" in checks["Triton TensorRT"]["detail"]
    plan = checks["model lane/1"]
    assert plan["status"] == "fail"
    for text in ("TensorRT 8.6.2.3", "TensorRT 10.3.0", "edge-deploy convert ARTIFACT --force"):
        assert text in plan["detail"]
    # With JetPack's own tarball the same plan is fine.
    env["TRITONSERVER"] = str(tmp_path / "jetpack" / "opt" / "tritonserver" / "bin" / "tritonserver")
    ok = subprocess.run([sys.executable, "-m", "edge_deploy", "doctor", "--for", "serve", "--json",
                         "--repository", str(repo), "--root", str(root)], capture_output=True, text=True, env=env,
                        timeout=120)
    report = json.loads(ok.stdout)
    assert {c["name"]: c for c in report["checks"]}["model lane/1"]["status"] == "ok", ok.stdout
    assert "TensorRT 8.6.2" in {c["name"]: c for c in report["checks"]}["Triton TensorRT"]["detail"]


@pytest.mark.parametrize("server_version, built, refused", [
    ("10", "10.3.0", False),  # only the soname (libnvinfer.so.10) is known: the major version decides
    ("10", "8.6.2.3", True),
    ("10.3.0", "10.3.0.26", False),
    ("10.3.0", "10.4.0", True),
])
def test_plan_refusal_compares_the_plan_to_what_the_server_knows(server_version, built, refused) -> None:
    """A server whose TensorRT is known only by its major version must not refuse a plan of that major version
    (`tensorrt_mismatch(built, loading)`: the arguments the right way round)."""
    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.serve.discovery import TritonInstall
    from edge_deploy.serve.server_tensorrt import ServerTensorRT, plan_refusal

    manifest = Manifest.from_dict({"format": 1, "plan": {**BUILT_ON_JP60, "tensorrt": built},
                                   "io": {"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 360, 640]}],
                                          "outputs": [{"name": "predict_lanes", "datatype": "FP32",
                                                       "shape": [-1, 1000, 77]}],
                                          "batch": {"min": 1, "max": 4}},
                                   "preprocess": {"height": 360, "width": 640}})
    server = ServerTensorRT(server_version, f"libnvinfer.so.{server_version}", Path("libtriton_tensorrt.so"))
    install = TritonInstall(Path("/opt/tritonserver/bin/tritonserver"), None, "test")
    refusal = plan_refusal("lane version 1", manifest, server, install)
    assert (refusal is not None) is refused, refusal
    if refused:
        assert f"built with TensorRT {built}, but the tritonserver" in refusal
