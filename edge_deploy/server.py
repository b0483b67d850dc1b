"""tritonserver: discovery, the one argv builder, and a foreground process.

Discovery order: an explicit path, $TRITONSERVER, /opt/tritonserver (the
JetPack tarball), PATH, then the nvidia-pytriton wheel's bundled server. The
bundle needs a backend directory laid out the way Triton expects (the Python
backend library, its utils module and the stub built for *this* Python), its
shared libraries on LD_LIBRARY_PATH, and PYTHONHOME/PYTHONPATH so the stub's
embedded interpreter sees this environment's numpy and onnxruntime.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ServerError

DEFAULT_GRPC_PORT = 8001
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

    def backends(self) -> list[str]:
        """Names of the backends in the backend directory."""
        if self.backend_dir is None or not self.backend_dir.is_dir():
            return []
        return sorted(p.name for p in self.backend_dir.iterdir() if p.is_dir())


def _bundle_install(cache_dir: Path | None = None) -> TritonInstall | None:
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
    python_dir.mkdir(parents=True, exist_ok=True)
    for src in (
        root / "backends" / "python" / "libtriton_python.so",
        root / "backends" / "python" / "triton_python_backend_utils.py",
        stub,
    ):
        link = python_dir / src.name
        if not (link.is_symlink() and os.readlink(link) == str(src)):
            tmp = python_dir / f".{src.name}.tmp{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(src)
            os.replace(tmp, link)
    # The stub links libpython3.X.so from the loader path: point it at this interpreter's.
    lib_path = [str(libs), sysconfig.get_config_var("LIBDIR") or ""]
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in lib_path if p),
        "PYTHONHOME": sys.base_prefix,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and "site-packages" in p),
    }
    return TritonInstall(binary=binary, backend_dir=backend_dir, source="nvidia-pytriton bundle", env=env)


def find_tritonserver(explicit: Path | str | None = None, *, cache_dir: Path | None = None) -> TritonInstall:
    """Find tritonserver: explicit path, $TRITONSERVER, /opt/tritonserver, PATH, nvidia-pytriton."""
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
    bundle = _bundle_install(cache_dir)
    if bundle is not None:
        return bundle
    looked.append("the nvidia-pytriton package")
    raise ServerError(f"no tritonserver found (looked at {', '.join(looked)}); {INSTALL_HINT}.")


@dataclass
class ServerOptions:
    """How tritonserver is launched; `tritonserver_argv` turns this into a command line."""

    model_repository: Path
    grpc_address: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http: bool = False
    http_port: int = 8000
    metrics: bool = False
    metrics_port: int = 8002
    model_control: str = "explicit"  # explicit | poll | none
    load_models: tuple[str, ...] = ("*",)
    repository_poll_secs: int = 2
    restricted_key: tuple[str, str] | None = None  # (header, value) for the model-repository protocol
    strict_readiness: bool = True
    exit_timeout: int = 30
    log_verbose: int = 0
    extra_args: tuple[str, ...] = ()


def tritonserver_argv(install: TritonInstall, options: ServerOptions) -> list[str]:
    """The one command line used by the systemd unit and by --foreground."""
    argv = [
        str(install.binary),
        f"--model-repository={options.model_repository}",
        f"--grpc-address={options.grpc_address}",
        f"--grpc-port={options.grpc_port}",
        f"--allow-http={'true' if options.http else 'false'}",
        f"--allow-metrics={'true' if options.metrics else 'false'}",
        f"--model-control-mode={options.model_control}",
        f"--strict-readiness={'true' if options.strict_readiness else 'false'}",
        f"--exit-timeout-secs={options.exit_timeout}",
        f"--log-verbose={options.log_verbose}",
    ]
    if install.backend_dir is not None:
        argv.append(f"--backend-directory={install.backend_dir}")
    if options.http:
        argv += [f"--http-address={options.grpc_address}", f"--http-port={options.http_port}"]
    if options.metrics:
        argv += [f"--metrics-address={options.grpc_address}", f"--metrics-port={options.metrics_port}"]
    if options.model_control == "explicit":
        argv += [f"--load-model={name}" for name in options.load_models]
    elif options.model_control == "poll":
        argv.append(f"--repository-poll-secs={options.repository_poll_secs}")
    if options.restricted_key is not None:
        header, value = options.restricted_key
        argv.append(f"--grpc-restricted-protocol=model-repository:{header}={value}")
    argv += list(options.extra_args)
    return argv


class TritonProcess:
    """A tritonserver child process (used by `serve --foreground` and by tests).

    Output goes to `log_path`. `wait_ready` polls gRPC readiness; `stop` sends
    SIGTERM, then SIGKILL after the timeout.
    """

    def __init__(self, install: TritonInstall, options: ServerOptions, log_path: Path) -> None:
        self.install = install
        self.options = options
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.options.grpc_address}:{self.options.grpc_port}"

    def start(self) -> "TritonProcess":
        env = {**os.environ, **self.install.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                tritonserver_argv(self.install, self.options),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server reports ready, or raise ServerError with the log's reason."""
        import tritonclient.grpc as grpcclient

        deadline = time.monotonic() + timeout
        client = grpcclient.InferenceServerClient(self.url)
        try:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise ServerError(
                        f"tritonserver exited with code {self.proc.returncode}: {last_error_line(self.log_path)}"
                    )
                try:
                    if client.is_server_ready(client_timeout=2.0):
                        return
                except Exception:  # noqa: BLE001 - not up yet
                    pass
                time.sleep(0.2)
        finally:
            client.close()
        raise ServerError(
            f"tritonserver was not ready after {timeout:.0f} s: {last_error_line(self.log_path)}"
        )

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM, wait up to the exit timeout (+5 s), then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout if timeout is not None else self.options.exit_timeout + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> "TritonProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def last_error_line(log_path: Path) -> str:
    """The most informative line of a tritonserver log: the last error, else the last line."""
    try:
        lines = [ln.strip() for ln in Path(log_path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no server log"
    for line in reversed(lines):
        if line.startswith("E") or line.startswith("error:") or "failed to load" in line:
            return line[:400]
    return lines[-1][:400] if lines else "the server printed nothing"
