"""tritonserver: discovery, the one argv builder, and a foreground process.

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
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError
from .addresses import dial_url
from .admin import Health, wait_healthy

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


@dataclass(frozen=True)
class ServerTLS:
    """TLS of the gRPC endpoint (PEM files) and the client identity edge-deploy itself dials it with.

    cert/key: the server's certificate and key; ca: the CA that signed the clients' certificates (and,
    as `edge-deploy certs` makes them, the server's). mutual: refuse clients without a certificate
    signed by `ca` (tritonserver --grpc-use-ssl-mutual). client_cert/client_key: what health checks
    and model loads present (`edge-deploy certs` issues one named edge-deploy).
    """

    cert: Path
    key: Path
    ca: Path
    mutual: bool = True
    client_cert: Path | None = None
    client_key: Path | None = None

    def client(self):  # noqa: ANN201 - edge_deploy.client.tls.TLSConfig
        """The TLSConfig edge-deploy's own admin calls use."""
        from ..client.tls import TLSConfig

        return TLSConfig(ca=self.ca, cert=self.client_cert, key=self.client_key)

    def files(self) -> dict[str, Path]:
        """role -> file, for copying and checking."""
        found = {"server-cert": self.cert, "server-key": self.key, "ca": self.ca}
        if self.client_cert is not None and self.client_key is not None:
            found.update({"client-cert": self.client_cert, "client-key": self.client_key})
        return found


@dataclass
class ServerOptions:
    """How tritonserver is launched; `tritonserver_argv` turns this into a command line."""

    model_repository: Path
    grpc_address: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http: bool = False
    http_address: str = "127.0.0.1"
    http_port: int = 8000
    metrics: bool = False
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 8002
    model_control: str = "explicit"  # explicit | poll | none
    load_models: tuple[str, ...] = ("*",)
    repository_poll_secs: int = 2
    restricted_key: tuple[str, str] | None = None  # (key name, value) guarding the model-repository protocol
    strict_readiness: bool = True
    exit_timeout: int = 30
    log_verbose: int = 0
    tls: ServerTLS | None = None  # None: plaintext gRPC (loopback, or `serve --insecure`)
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """The gRPC address clients dial (host:port)."""
        return f"{self.grpc_address}:{self.grpc_port}"

    def ports(self) -> list[tuple[str, str, int]]:
        """(what, address, port) for every port this server will listen on."""
        ports = [("gRPC", self.grpc_address, self.grpc_port)]
        if self.http:
            ports.append(("HTTP", self.http_address, self.http_port))
        if self.metrics:
            ports.append(("metrics", self.metrics_address, self.metrics_port))
        return ports


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
        argv += [f"--http-address={options.http_address}", f"--http-port={options.http_port}"]
    if options.metrics:
        argv += [f"--metrics-address={options.metrics_address}", f"--metrics-port={options.metrics_port}"]
    if options.model_control == "explicit":
        argv += [f"--load-model={name}" for name in options.load_models]
    elif options.model_control == "poll":
        argv.append(f"--repository-poll-secs={options.repository_poll_secs}")
    if options.restricted_key is not None:
        # gRPC clients send the header `triton-grpc-protocol-<name>`, HTTP clients `<name>`.
        name, value = options.restricted_key
        argv.append(f"--grpc-restricted-protocol=model-repository:{name}={value}")
        # Only servers from 2.40 (r23.11) have it; older ones (JetPack 5's 2.34/2.35) would exit on it.
        if options.http and install.has_option("--http-restricted-api"):
            argv.append(f"--http-restricted-api=model-repository:{name}={value}")
    if options.tls is not None:
        # The same five options from 2.34/2.35 (JetPack 5) to 2.51: triton-inference-server/server
        # src/command_line_parser.cc (v2.34.0, v2.35.0, v2.51.0); --grpc-use-ssl-mutual implies --grpc-use-ssl.
        tls = options.tls
        argv.append("--grpc-use-ssl-mutual=true" if tls.mutual else "--grpc-use-ssl=true")
        argv += [f"--grpc-server-cert={tls.cert}", f"--grpc-server-key={tls.key}", f"--grpc-root-cert={tls.ca}"]
    argv += list(options.extra_args)
    return argv


# The model-repository key. tritonserver reads options only from its command line
# (getopt_long: no option file, no environment variable), so the value is visible in
# /proc/PID/cmdline to local users unless /proc is mounted with hidepid=invisible.
RESTRICTED_KEY_NAME = "edge-deploy-key"
GRPC_KEY_HEADER = f"triton-grpc-protocol-{RESTRICTED_KEY_NAME}"
KEY_ENV = "EDGE_DEPLOY_MODEL_KEY"


def generate_key() -> str:
    """A fresh random model-repository key (hex, safe in argv and environment files)."""
    return secrets.token_hex(32)


def port_in_use(address: str, port: int) -> bool:
    """True when something already listens on (address, port): a bind test."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    host = "127.0.0.1" if address in ("0.0.0.0", "") else address
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR ignores TIME_WAIT leftovers of a server that just stopped.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_options(options: ServerOptions) -> None:
    """ServerError for settings tritonserver would reject or misread (a port out of range, a negative timeout)."""
    for flag, port in (("--grpc-port", options.grpc_port), ("--http-port", options.http_port),
                       ("--metrics-port", options.metrics_port)):
        if not 1 <= port <= 65535:
            raise ServerError(f"{flag} must be a TCP port from 1 to 65535 (got {port}); the default gRPC port is "
                              f"{DEFAULT_GRPC_PORT}.")
    if options.exit_timeout < 0:
        raise ServerError(f"--exit-timeout must be 0 or more seconds (got {options.exit_timeout}).")
    if options.log_verbose < 0:
        raise ServerError(f"--log-verbose must be 0 (off) or more (got {options.log_verbose}).")


def check_ports_free(options: ServerOptions) -> None:
    """Raise ServerError when a port the server needs is out of range or taken."""
    check_options(options)
    for what, address, port in options.ports():
        if port_in_use(address, port):
            raise ServerError(
                f"{what} port {address}:{port} is already in use; stop whatever listens there "
                f"(`ss -ltnp 'sport = :{port}'`) or pick another port (--grpc-port)."
            )


def repository_models(repository: Path) -> list[str]:
    """Names of the models in a Triton model repository (directories holding config.pbtxt)."""
    repository = Path(repository)
    if not repository.is_dir():
        return []
    return sorted(p.name for p in repository.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file())


def check_repository(repository: Path) -> list[str]:
    """The models of `repository`; ServerError when it is missing or holds no model."""
    repository = Path(repository)
    if not repository.is_dir():
        raise ServerError(
            f"model repository {repository} does not exist; install a model first "
            "(`edge-deploy install ARTIFACT --repository DIR`) or pass --repository."
        )
    models = repository_models(repository)
    if not models:
        raise ServerError(
            f"model repository {repository} has no models (no <model>/config.pbtxt); "
            "install one with `edge-deploy install ARTIFACT --repository DIR`."
        )
    return models












class TritonProcess:
    """A tritonserver child process (used by `serve --foreground` and by tests).

    Output goes to `log_path` (and, with `echo=True`, to stderr as well).
    `wait_ready` polls gRPC readiness; `stop` sends SIGTERM, then SIGKILL after the timeout.
    """

    def __init__(
        self, install: TritonInstall, options: ServerOptions, log_path: Path, *, echo: bool = False,
        die_with_parent: bool = False, log_max_bytes: int | None = None,
    ) -> None:
        self.install = install
        self.log_max_bytes = log_max_bytes  # with echo: cap the log (edge_deploy.serve.logfile.CappedLog)
        self.options = options
        self.log_path = Path(log_path)
        self.echo = echo
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None
        self._tee: threading.Thread | None = None
        self._log_start = 0  # where this run's output begins in an appended-to log

    @property
    def url(self) -> str:
        """The gRPC address (host:port)."""
        return self.options.url

    @property
    def argv(self) -> list[str]:
        """The command line (`tritonserver_argv`)."""
        return tritonserver_argv(self.install, self.options)

    def start(self) -> "TritonProcess":
        """Launch tritonserver in its own session, output appended to the log; returns self."""
        env = {**os.environ, **self.install.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.echo and self.log_max_bytes is not None:
            from .logfile import CappedLog

            log = CappedLog(self.log_path, self.log_max_bytes)
            self._log_start = log.size
        else:
            log = open(self.log_path, "ab")
            self._log_start = log.seek(0, os.SEEK_END)
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=subprocess.PIPE if self.echo else log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_term_when_parent_dies if self.die_with_parent else None,
            )
        except OSError as exc:
            log.close()
            raise ServerError(f"cannot start {self.install.binary}: {exc}; {INSTALL_HINT}.") from exc
        if self.echo:
            self._tee = threading.Thread(target=self._copy_output, args=(log,), daemon=True)
            self._tee.start()
        else:
            log.close()
        return self

    def _copy_output(self, log) -> None:  # noqa: ANN001 - binary file
        assert self.proc is not None and self.proc.stdout is not None
        with log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                sys.stderr.buffer.write(line)
                sys.stderr.flush()

    def exited(self) -> str | None:
        """None while running; otherwise why it stopped (exit code and the log's reason)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        if self._tee is not None:
            self._tee.join(timeout=2)
        return f"tritonserver exited with code {self.proc.returncode}: {self.reason()}"

    def wait_ready(self, timeout: float = 60.0, models: list[str] | tuple[str, ...] = ()) -> Health:
        """Block until the server (and `models`) report ready, or raise ServerError with the log's reason."""
        try:
            tls = self.options.tls.client() if self.options.tls is not None else None
            return wait_healthy(dial_url(self.url), models, timeout, alive=self.exited, tls=tls)
        except ServerError as exc:
            if self.exited():
                raise
            raise ServerError(f"{exc} Last log line: {self.reason()}") from None

    def reason(self) -> str:
        """The most informative line this run wrote to the log (earlier runs' lines are ignored)."""
        return last_error_line(self.log_path, self._log_start)

    def wait(self) -> int:
        """Wait for the process to end; its exit code."""
        assert self.proc is not None
        code = self.proc.wait()
        if self._tee is not None:
            self._tee.join(timeout=2)
        return code

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
        if self._tee is not None:
            self._tee.join(timeout=2)
        return self.proc.returncode

    def __enter__(self) -> "TritonProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _term_when_parent_dies() -> None:
    # Runs in the child before exec: Linux sends it SIGTERM when its parent dies, so a
    # killed `serve --foreground` does not leave an orphaned server holding the port.
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)






_LOG_NOISE = ("CudaDriverHelper has not been initialized", "Unable to allocate pinned system memory")


def last_error_line(log_path: Path, offset: int = 0) -> str:
    """The most informative line of a tritonserver log.

    A model's own error (failed to load / poll failed) beats the generic
    "failed to load all models" line that follows it; then any error; then the last line.
    Only what follows byte `offset` is read.
    """
    try:
        with open(log_path, "rb") as fh:
            if offset > os.fstat(fh.fileno()).st_size:
                offset = 0  # the log was rotated since (edge_deploy.serve.logfile)
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return "no server log"
    return reason_from_log(text)


def reason_from_log(text: str) -> str:
    """`last_error_line` for log text already read (e.g. from journalctl)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [
        ln for ln in lines
        if (ln.startswith("E") and ln[1:2].isdigit() or ln.startswith("error:")) and not any(n in ln for n in _LOG_NOISE)
    ]
    for line in reversed(errors):
        if "model" in line and "failed to load all models" not in line:
            return _clean(line)
    if errors:
        return _clean(errors[-1])
    for line in reversed(lines):
        if "failed to load" in line or "UNAVAILABLE" in line:
            return _clean(line)
    return _clean(lines[-1]) if lines else "the server printed nothing"


def _clean(line: str) -> str:
    # "E1122 06:52:19.798981 10086 file.cc:1460] \"message\"" -> "message"
    if line[:1] in "EWI" and "] " in line:
        line = line.split("] ", 1)[1].strip().strip('"')
    # Python-backend errors carry their traceback as literal "\\n"s: keep the first line.
    return line.split("\\n", 1)[0].strip()[:400]
