"""Fake tritonserver installs whose TensorRT backend is a real ELF library, for the TensorRT-version checks.

TensorRT and Triton's TensorRT backend cannot be installed here (no GPU, no NVIDIA download), so a
layout like the real ones is built in a temporary directory: `bin/tritonserver` (a script that only
says it is not the real one), `TRITON_VERSION`, and `backends/tensorrt/libtriton_tensorrt.so`, a
shared library compiled here with the C compiler and linked against a stand-in `libnvinfer.so.N`
(an empty library with that soname), exactly as the real backend's ELF dynamic section names it.
Where that libnvinfer lives follows the real installs:

- "system": a JetPack tarball in /opt/tritonserver uses JetPack's TensorRT in the system
  library directory (root/usr/lib/aarch64-linux-gnu/libnvinfer.so.N -> libnvinfer.so.N.M.P);
- "bundled": an -igpu container or tarball that carries its own TensorRT in its lib/ directory,
  found through the backend's DT_RUNPATH ($ORIGIN/../../lib).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CC = shutil.which("cc") or shutil.which("gcc")
NO_CC = "no C compiler (cc/gcc) here to build the stand-in ELF libraries"
FAKE_SERVER = "#!/bin/sh\necho 'stand-in tritonserver: not the real one' >&2\nexit 3\n"


def compile_library(path: Path, *, soname: str | None = None, needed: tuple[Path, ...] = (),
                    runpath: str | None = None) -> Path:
    """A real (empty) ELF shared library at `path`, with `soname` and DT_NEEDED entries for `needed`."""
    if CC is None:
        pytest.skip(NO_CC)
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / f".{path.name}.c"
    source.write_text("int edge_deploy_stand_in(void) { return 0; }\n")
    cmd = [CC, "-shared", "-fPIC", "-nostdlib", "-o", str(path), str(source), "-Wl,--no-as-needed"]
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    if runpath:
        cmd.append(f"-Wl,-rpath,{runpath},--enable-new-dtags")
    for lib in needed:
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}"]
    subprocess.run(cmd, check=True, capture_output=True)
    source.unlink()
    return path


def libnvinfer(directory: Path, version: str) -> Path:
    """libnvinfer.so.<version> with soname libnvinfer.so.<major> and the symlink the package installs."""
    major = version.split(".")[0]
    real = compile_library(directory / f"libnvinfer.so.{version}", soname=f"libnvinfer.so.{major}")
    link = directory / f"libnvinfer.so.{major}"
    if not link.exists():
        link.symlink_to(real.name)
    return link


def fake_triton(base: Path, *, tensorrt: str, where: str = "system", root: Path | None = None,
                release: str = "2.49.0", backends: tuple[str, ...] = ("python", "onnxruntime")) -> Path:
    """A tritonserver install at base/opt/tritonserver whose TensorRT backend links TensorRT `tensorrt`;
    returns the tritonserver binary. where="system" puts libnvinfer under `root` (a fake system root)."""
    install = base / "opt" / "tritonserver"
    binary = install / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(FAKE_SERVER)
    binary.chmod(0o755)
    (install / "TRITON_VERSION").write_text(release + "\n")
    for name in backends:
        (install / "backends" / name).mkdir(parents=True, exist_ok=True)
    if where == "system":
        link_dir = (root or base) / "usr" / "lib" / "aarch64-linux-gnu"
        runpath = None
    else:
        link_dir = install / "lib"
        runpath = "$ORIGIN/../../lib"
    link = libnvinfer(link_dir, tensorrt)
    compile_library(install / "backends" / "tensorrt" / "libtriton_tensorrt.so", needed=(link,), runpath=runpath)
    return binary


def readelf_needed(path: Path) -> list[str] | None:
    """binutils' own reading of DT_NEEDED (None without readelf), to check the parser against."""
    tool = shutil.which("readelf")
    if tool is None:
        return None
    out = subprocess.run([tool, "-d", str(path)], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "(NEEDED)" in line]
