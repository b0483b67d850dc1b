"""Which TensorRT a tritonserver install loads plans with, and the plans that would not load in it.

A serialized plan only deserializes in the TensorRT release that built it (the plan format changes
with every release), and Triton's `tensorrt_plan` backend uses whatever libnvinfer its backend
library links: the system's TensorRT for a JetPack tarball in /opt/tritonserver, the container's own
for an `-igpu` container. So the version is read from that library: the DT_NEEDED libnvinfer.so.N
of backends/tensorrt/libtriton_tensorrt.so, found the way the dynamic loader would (its run path,
the install's own lib directories, $LD_LIBRARY_PATH, /etc/ld.so.conf.d, the system library
directories), whose file name carries the full version (libnvinfer.so.10.3.0). When only the
soname can be found, the major version is still known.

Reading files instead of loading the library keeps this usable where TensorRT cannot load (no
GPU, a container's libraries seen from outside) and testable with fake roots.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..artifact.manifest import MANIFEST_NAME, PLAN_NAME, Manifest
from ..errors import EdgeDeployError, ServerError
from ..core.triton_layout import CONFIG, policy_now
from .discovery import TritonInstall
from .elf import read_dynamic
from ..machine.facts import default_root
from ..machine.plan_fit import tensorrt_mismatch

BACKEND_LIBRARY = Path("tensorrt") / "libtriton_tensorrt.so"
_SYSTEM_DIRS = ("usr/lib/aarch64-linux-gnu", "usr/lib/x86_64-linux-gnu", "usr/lib/sbsa-linux-gnu", "lib",
                "usr/lib", "usr/local/lib", "usr/local/cuda/lib64", "usr/local/tensorrt/lib")
_NVINFER = re.compile(r"^libnvinfer\.so\.(\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class ServerTensorRT:
    """The TensorRT a tritonserver's TensorRT backend uses."""

    version: str | None  # "10.3.0", or "10" when only the soname was found; None: the library was not found
    library: str  # what it was read from (the libnvinfer file, or the soname the backend needs)
    backend: Path  # the backend library that needs it

    def describe(self) -> str:
        if self.version is None:
            return f"{self.library} (needed by {self.backend}, not found on this machine)"
        return f"TensorRT {self.version} ({self.library}, linked by {self.backend})"


def _version(name: str) -> str | None:
    match = _NVINFER.match(name)
    return match.group(1) if match else None


def _ld_conf_dirs(root: Path) -> list[str]:
    dirs: list[str] = []
    conf = root / "etc" / "ld.so.conf.d"
    try:
        files = sorted(conf.glob("*.conf"))
    except OSError:
        return dirs
    for file in files:
        try:
            dirs += [line.split("#")[0].strip() for line in file.read_text().splitlines()]
        except OSError:
            continue
    return [d for d in dirs if d.startswith("/")]


def _search_dirs(install: TritonInstall, backend: Path, run_path: tuple[str, ...], root: Path) -> list[Path]:
    """Where the loader would look for the backend's libraries, in its order (install paths as they are,
    system paths under `root`)."""
    install_root = install.binary.resolve().parent.parent
    env_paths = os.pathsep.join([install.env.get("LD_LIBRARY_PATH", ""), os.environ.get("LD_LIBRARY_PATH", "")])
    dirs = [Path(p) for p in run_path]
    dirs += [Path(p) for p in env_paths.split(os.pathsep) if p]
    dirs += [backend.parent, install_root / "lib", install_root / "backends" / "tensorrt"]
    dirs += [root / d.lstrip("/") for d in _ld_conf_dirs(root)]
    dirs += [root / d for d in _SYSTEM_DIRS]
    return list(dict.fromkeys(dirs))


def server_tensorrt(install: TritonInstall, root: Path | None = None) -> ServerTensorRT | None:
    """The TensorRT the install's TensorRT backend links; None when the install has no TensorRT backend."""
    if root is None:
        root = default_root()
    root = Path(root)
    if install.backend_dir is None:
        return None
    backend = install.backend_dir / BACKEND_LIBRARY
    if not backend.is_file():
        return None
    dynamic = read_dynamic(backend)
    soname = next((n for n in dynamic.needed if _NVINFER.match(n)), None)
    if soname is None:
        return ServerTensorRT(None, "libnvinfer (not among the libraries it needs)", backend)
    for directory in _search_dirs(install, backend, dynamic.search, root):
        candidate = directory / soname
        if not candidate.exists():
            continue
        full = _version(candidate.resolve().name)
        if full and full.count(".") >= 2:
            return ServerTensorRT(full, str(candidate.resolve()), backend)
        versions = sorted((_version(p.name) or "" for p in directory.glob(f"{soname}.*.*")),
                          key=lambda v: tuple(int(x) for x in v.split(".") if x.isdigit()))
        if versions and versions[-1]:
            return ServerTensorRT(versions[-1], str(directory / f"libnvinfer.so.{versions[-1]}"), backend)
        return ServerTensorRT(_version(soname), str(candidate), backend)
    return ServerTensorRT(None, soname, backend)


def plan_refusal(label: str, manifest: Manifest | None, server: ServerTensorRT, install: TritonInstall) -> str | None:
    """One line saying why the plan of `label` would not load in this server (None: it would, or cannot tell)."""
    if server.version is None:
        return None
    built = manifest.plan.tensorrt if manifest and manifest.plan else None
    if not built:
        return None
    if not tensorrt_mismatch(str(built), server.version):
        return None
    return (f"{label}: its {PLAN_NAME} was built with TensorRT {built}, but the tritonserver at {install.binary} loads "
            f"plans with TensorRT {server.version} ({server.library}), which cannot deserialize it; rebuild the plan "
            f"on this device with `edge-deploy convert ARTIFACT --force` and install it again, or serve with a "
            f"tritonserver built for TensorRT {built}")


def repository_refusals(repository: Path, install: TritonInstall, root: Path | None = None) -> list[str]:
    """The plans `repository` serves (the versions each config's version_policy selects) that this server's
    TensorRT cannot deserialize, one line each. Versions kept on disk but not served are not asked about."""
    server = server_tensorrt(install, root)
    repository = Path(repository)
    if server is None or server.version is None or not repository.is_dir():
        return []
    lines = []
    for model_dir in sorted(p for p in repository.iterdir() if (p / CONFIG).is_file()):
        for version in policy_now(repository, model_dir.name):
            version_dir = model_dir / str(version)
            if not (version_dir / PLAN_NAME).is_file():
                continue
            try:
                manifest = Manifest.read(version_dir) if (version_dir / MANIFEST_NAME).is_file() else None
            except EdgeDeployError:
                manifest = None
            line = plan_refusal(f"model {model_dir.name}/{version}", manifest, server, install)
            if line:
                lines.append(line)
    return lines


def check_plans_load(install: TritonInstall, repository: Path, root: Path | None = None) -> None:
    """ServerError (before the server starts) when a plan the repository serves would not load in `install`."""
    refusals = repository_refusals(repository, install, root)
    if refusals:
        more = f" (and {len(refusals) - 1} more plan(s) like it)" if len(refusals) > 1 else ""
        raise ServerError(f"{refusals[0]}{more}.")
