"""Where tritonserver is: discovery of an install and what it needs to run.

Discovery order: an explicit path, $TRITONSERVER, /opt/tritonserver (the
JetPack tarball), PATH, then the nvidia-pytriton wheel's bundled server. The
bundle needs a backend directory laid out the way Triton expects (the Python
backend library, its utils module and the stub built for *this* Python), its
shared libraries on LD_LIBRARY_PATH, and PYTHONHOME/PYTHONPATH so the stub's
embedded interpreter sees this environment's numpy and onnxruntime.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError

JETPACK_TRITON = Path("/opt/tritonserver")
INSTALL_HINT = (
    "install Triton for JetPack (the tritonserver tarball from the Triton release page, "
    "unpacked to /opt/tritonserver) or, on x86_64/aarch64 for development, "
    "`pip install --no-deps nvidia-pytriton`; or pass --tritonserver PATH"
)


@dataclass(frozen=True)
class TritonInstall:
    """A tritonserver binary and what it needs to run."""

    binary: Path
    backend_dir: Path | None
    source: str
    env: dict[str, str] = field(default_factory=dict)

    def version(self) -> str | None:
        """The Triton release this install reports, or None when it cannot be told without starting it."""
        for candidate in (self.binary.parent.parent / "TRITON_VERSION", self.binary.parent.parent / "VERSION"):
            if candidate.is_file():
                return candidate.read_text().strip()
        if self.source == "nvidia-pytriton bundle":
            from importlib.metadata import PackageNotFoundError, version

            try:
                return f"nvidia-pytriton {version('nvidia-pytriton')}"
            except PackageNotFoundError:
                return None
        return None

    def release(self) -> tuple[int, ...] | None:
        """The Triton server version from the install's TRITON_VERSION file ((2, 35, 0)), or None."""
        version = self.version()
        if not version or not version[:1].isdigit():
            return None
        return tuple(int(p) for p in re.findall(r"\d+", version)[:3]) or None

    def has_option(self, option: str) -> bool:
        """Whether this tritonserver parses `option` (e.g. "--http-restricted-api").

        tritonserver exits on an option it does not know. Its TRITON_VERSION decides where the option's
        first release is known (_OPTION_SINCE); otherwise `tritonserver --help`, which lists every option.
        """
        release = self.release()
        if release is not None and option in _OPTION_SINCE:
            return release >= _OPTION_SINCE[option]
        return option in _help_text(str(self.binary), tuple(sorted(self.env.items())))

    def describe(self) -> str:
        """One line saying which tritonserver is used and where it came from."""
        version = self.version()
        return f"tritonserver {self.binary} (from {self.source}{', ' + version if version else ''})"

    def backends(self) -> list[str]:
        """Names of the backends in the backend directory."""
        if self.backend_dir is None or not self.backend_dir.is_dir():
            return []
        return sorted(p.name for p in self.backend_dir.iterdir() if p.is_dir())


# First Triton release with an option (triton-inference-server/server, src/command_line_parser.cc per release
# branch): --http-restricted-api appears in r23.11 (2.40.0); r23.05/r23.06 (2.34/2.35, the JetPack 5
# tarballs) to r23.10 have only --grpc-restricted-protocol, and exit on the HTTP one.
_OPTION_SINCE = {"--http-restricted-api": (2, 40)}


@functools.lru_cache(maxsize=8)
def _help_text(binary: str, env: tuple[tuple[str, str], ...]) -> str:
    """`tritonserver --help` output ("" when it cannot be run)."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30,
                              env={**os.environ, **dict(env)})
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


def _bundle_install(cache_dir: Path | None = None, prepare: bool = True) -> TritonInstall | None:
    # Only the wheel's files are used; importing pytriton would need its Python dependencies.
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.origin:
        return None
    package = Path(spec.origin).parent
    root = package / "tritonserver"
    binary = root / "bin" / "tritonserver"
    libs = package.parent / "nvidia_pytriton.libs"
    if not binary.is_file():
        return None
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerError(
            f"the nvidia-pytriton bundle has no Python backend stub for Python {py}; "
            "use Python 3.8-3.13 or pass --tritonserver PATH"
        )
    cache = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edge-deploy"
    backend_dir = cache / "triton-backends" / f"py{py}"
    python_dir = backend_dir / "python"
    if prepare:
        _link_backend(python_dir, [
            root / "backends" / "python" / "libtriton_python.so",
            root / "backends" / "python" / "triton_python_backend_utils.py",
            stub,
        ])
    # The stub links libpython3.X.so from the loader path: point it at this interpreter's.
    lib_path = [str(libs), sysconfig.get_config_var("LIBDIR") or ""]
    # The stub's embedded interpreter finds its prefix through the first `python3` on
    # PATH (PYTHONHOME alone is not enough): put this interpreter's directory first.
    search_path = [str(Path(sys.executable).parent), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    env = {
        "PATH": os.pathsep.join(search_path),
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in lib_path if p),
        "PYTHONHOME": sys.base_prefix,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and "site-packages" in p),
    }
    return TritonInstall(binary=binary, backend_dir=backend_dir, source="nvidia-pytriton bundle", env=env)


def _link_backend(python_dir: Path, sources: list[Path]) -> None:
    """Symlink the Python backend's files into `python_dir` (atomically, safe to repeat)."""
    python_dir.mkdir(parents=True, exist_ok=True)
    for src in sources:
        link = python_dir / src.name
        if not (link.is_symlink() and os.readlink(link) == str(src)):
            tmp = python_dir / f".{src.name}.tmp{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(src)
            os.replace(tmp, link)


def find_tritonserver(
    explicit: Path | str | None = None, *, cache_dir: Path | None = None, prepare: bool = True
) -> TritonInstall:
    """Find tritonserver: explicit path, $TRITONSERVER, /opt/tritonserver, PATH, nvidia-pytriton.

    For the bundle, `prepare=False` only computes where its backend directory goes
    (nothing is written; e.g. for `serve --print-unit`).
    """
    looked: list[str] = []
    candidates: list[tuple[str, str | None]] = [
        ("--tritonserver", str(explicit) if explicit else None),
        ("$TRITONSERVER", os.environ.get("TRITONSERVER")),
        ("/opt/tritonserver", str(JETPACK_TRITON / "bin" / "tritonserver")),
        ("PATH", shutil.which("tritonserver")),
    ]
    for source, value in candidates:
        if not value:
            continue
        binary = Path(value)
        looked.append(str(binary))
        if binary.is_file() and os.access(binary, os.X_OK):
            backends = binary.resolve().parent.parent / "backends"
            return TritonInstall(binary=binary, backend_dir=backends if backends.is_dir() else None, source=source)
        if source in ("--tritonserver", "$TRITONSERVER"):
            raise ServerError(f"{source} {binary} is not an executable tritonserver; {INSTALL_HINT}.")
    bundle = _bundle_install(cache_dir, prepare)
    if bundle is not None:
        return bundle
    looked.append("the nvidia-pytriton package")
    raise ServerError(f"no tritonserver found (looked at {', '.join(looked)}); {INSTALL_HINT}.")
