"""Serving a model repository, as `edge-deploy serve | stop` do: the unit (or a foreground server) from one options object.

`ServeOptions` is what a caller asks for, checked once when it is made (ports, timeouts, the
log cap). `serve` finds tritonserver, decides TLS and who may connect (`serve/network.py`),
then prints the unit (`print_unit`), runs the server here until it is stopped (`foreground`),
or installs and starts the systemd unit. `uninstall` and `stop` act on the installed unit.
Every failure is a one-line `ServerError`; what is worth saying goes to the `Reporter`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import ServerError
from . import systemd as su
from .argv import DEFAULT_GRPC_PORT, ServerOptions, ServerTLS, generate_key
from .checks import check_options
from .discovery import TritonInstall, find_tritonserver
from .logfile import MIN_MAX_BYTES
from .network import NetworkPolicy, network_policy
from ..core.state import state_dir
from .server_record import claim_holder, foreground_records
from .server_tensorrt import check_plans_load
from ..core.progress import Reporter
from ..core.sizes import parse_size
from .foreground import foreground_log, serve_foreground

if TYPE_CHECKING:
    from .admin import Health

SYSTEM_CACHE = Path("/var/cache/edge-deploy")  # the bundle's backend directory for the system unit


def scope_of(user: bool) -> str:
    """The systemd scope: "user" (a user manager, ~/.config) or "system"."""
    return "user" if user else "system"


def foreground_scope(user: bool) -> str:
    """Where a foreground server keeps its record, key and log: the system state dir only for root."""
    return "user" if user or su.effective_uid() != 0 else "system"


def key_paths(scope: str) -> tuple[Path, Path]:
    """(environment file, key file) of the unit in the scope's state dir."""
    state = state_dir(scope)
    return state / "triton.env", state / "model-repository.key"


def parse_log_max_size(text: str) -> int:
    """--log-max-size ("50M", "1G") in bytes; a one-line ServerError for text that is no size from 64 KiB to
    1 TiB."""
    return parse_size(text, "--log-max-size", low=MIN_MAX_BYTES, error=ServerError)


@dataclass(frozen=True)
class ServeOptions:
    """What `serve` is asked to do; checked when made (ServerError), so a ServeOptions is always valid.

    The fields are `edge-deploy serve`'s options. Made from them: `log_max_bytes` (from
    `log_max_size`), `model_repository` (`repository` resolved) and `log_file` made absolute.
    Checks of this machine (root, systemd, TLS files, free ports) come when `serve` runs.
    """

    repository: Path = Path("model_repository")
    user: bool = False
    foreground: bool = False
    print_unit: bool = False
    tritonserver: Path | None = None
    grpc_address: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http: bool = False
    http_port: int = 8000
    metrics: bool = False
    metrics_port: int = 8002
    wait: int = su.DEFAULT_HEALTH_WAIT
    exit_timeout: int = 30
    log_verbose: int = 0
    log_file: Path | None = None
    log_max_size: str = "50M"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_client_cert: Path | None = None
    tls_client_key: Path | None = None
    allow_from: tuple[str, ...] = ()
    insecure: bool = False
    verbose: bool = False  # foreground: tritonserver's log on the console too (it always goes to its file)
    log_max_bytes: int = field(init=False)
    model_repository: Path = field(init=False)

    def __post_init__(self) -> None:
        check_options(ServerOptions(model_repository=Path(self.repository), grpc_port=self.grpc_port,
                                    http_port=self.http_port, metrics_port=self.metrics_port,
                                    exit_timeout=self.exit_timeout, log_verbose=self.log_verbose))
        if self.wait < 1:
            raise ServerError(f"--wait must be at least 1 second (got {self.wait}); "
                              "TensorRT plans can take minutes to load.")
        object.__setattr__(self, "log_max_bytes", parse_log_max_size(self.log_max_size))
        object.__setattr__(self, "repository", Path(self.repository))
        object.__setattr__(self, "model_repository", self.repository.expanduser().resolve())
        if self.log_file is not None:
            object.__setattr__(self, "log_file", Path(self.log_file).expanduser().absolute())
        object.__setattr__(self, "allow_from", tuple(self.allow_from or ()))  # the command line gives None for none

    @property
    def scope(self) -> str:
        """The systemd scope of the unit: "user" with `user`, else "system"."""
        return scope_of(self.user)

    @property
    def url(self) -> str:
        """The gRPC address the server listens on (host:port)."""
        return f"{self.grpc_address}:{self.grpc_port}"


@dataclass
class ServeOutcome:
    """What `serve` did: printed a unit (`unit_text`), started or kept the unit (`started`), or, with
    neither, ran a foreground server that has now stopped cleanly."""

    scope: str
    install: TritonInstall
    repository: Path
    unit_text: str | None = None
    started: su.ServeResult | None = None


def serve(
    options: ServeOptions,
    reporter: Reporter | None = None,
    *,
    on_ready: Callable[[Health], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> ServeOutcome:
    """Serve `options.repository` as `edge-deploy serve` does; returns when every model is ready.

    With `foreground`, tritonserver runs in this process until SIGINT/SIGTERM: `on_ready` is
    called once it and every model are ready, `on_note` with what was cleaned up after it; a
    non-zero exit is a ServerError. `print_unit` only renders the unit. Otherwise the unit is
    installed and started (root and systemd needed). `reporter.info` says which tritonserver
    and TLS are used and who may connect; `reporter.warn` what the user should know.
    """
    reporter = reporter or Reporter()
    scope = options.scope
    env_file, key_file = key_paths(scope)
    if not options.foreground and not options.print_unit:
        _check_unit_can_start(options.model_repository, scope)

    policy = network_policy(scope, options.grpc_address, cert=options.tls_cert, key=options.tls_key,
                            ca=options.tls_ca, client_cert=options.tls_client_cert,
                            client_key=options.tls_client_key, allow_from=options.allow_from,
                            insecure=options.insecure, reporter=reporter, foreground=options.foreground)
    system_service = scope == "system" and not options.foreground
    cache = SYSTEM_CACHE if system_service and su.effective_uid() == 0 else None
    install = find_tritonserver(options.tritonserver, cache_dir=cache, prepare=not options.print_unit)
    if not options.print_unit:
        check_plans_load(install, options.model_repository)
    reporter.info(f"using {install.describe()}")
    if options.http and not install.has_option("--http-restricted-api"):
        reporter.warn("this tritonserver (before 2.40) cannot restrict its HTTP model-repository API to the key: "
                      "with --http, any local process can load and unload models over HTTP; serve without --http, "
                      "or use tritonserver 2.40 or later.")
    server = _server_options(options, policy.tls)
    outcome = ServeOutcome(scope=scope, install=install, repository=server.model_repository)
    if options.foreground:
        fg_scope = foreground_scope(options.user)
        log_path = options.log_file or foreground_log(fg_scope, server.model_repository)
        if not options.verbose:
            reporter.info(f"tritonserver's log: {log_path} (--verbose shows it here too)")
        code, log_path = serve_foreground(install, server, fg_scope, ready_timeout=options.wait,
                                          on_ready=on_ready, on_note=on_note, log_file=log_path,
                                          log_max_bytes=options.log_max_bytes, echo=options.verbose,
                                          reporter=reporter)
        if code != 0:
            raise ServerError(f"tritonserver exited with code {code}; see {log_path}.")
        return outcome
    if options.log_file is None and not options.print_unit and not su.journald_available():
        reporter.warn("journald is not running here, so the server's output will not be kept; "
                      "pass --log-file PATH to keep it in a size-capped file.")

    config = _unit_config(options, install, server, policy, env_file)
    if options.print_unit:
        outcome.unit_text = su.render_unit(config)
        return outcome
    outcome.started = su.install_and_start(config, key=generate_key(), key_file=key_file, reporter=reporter)
    return outcome


def _check_unit_can_start(repository: Path, scope: str) -> None:
    """A unit can serve `repository` here: no foreground server holds it, root (system scope) and systemd run."""
    holder = claim_holder(repository)
    if holder is not None:  # a foreground server of another state directory, which the records do not show
        raise ServerError(
            f"{Path(repository).resolve()} is already served by `edge-deploy serve --foreground` "
            f"({holder}); stop it first (Ctrl-C), then run `edge-deploy serve` again."
        )
    su.require_root(scope)
    su.require_systemd(scope)


def _server_options(options: ServeOptions, tls: ServerTLS | None) -> ServerOptions:
    """tritonserver's options for `serve`'s."""
    return ServerOptions(
        model_repository=options.model_repository,
        grpc_address=options.grpc_address,
        grpc_port=options.grpc_port,
        http=options.http,
        http_port=options.http_port,
        metrics=options.metrics,
        metrics_port=options.metrics_port,
        exit_timeout=options.exit_timeout,
        log_verbose=options.log_verbose,
        tls=tls,
        exit_on_error=False,  # serve the models that load (`health`, `status` and `serve` name the others)
    )


def _unit_config(options: ServeOptions, install: TritonInstall, server: ServerOptions, policy: NetworkPolicy,
                 env_file: Path) -> su.UnitConfig:
    """The systemd unit's configuration; with TLS, the unit reads copies of the certificates in the state dir."""
    scope = options.scope
    config = su.UnitConfig(
        scope=scope,
        install=install,
        options=server,
        environment_file=env_file,
        health_wait=options.wait,
        log_file=options.log_file,
        log_max_bytes=options.log_max_bytes,
        device_nodes=su.gpu_device_nodes() if scope == "system" else [],
        allow_from=policy.allow_from,
    )
    if policy.tls is not None:
        config.tls_sources = policy.tls
        config.options = replace(server, tls=su.service_tls(policy.tls, state_dir(scope)))
    return config


def uninstall(user: bool = False) -> list[Path]:
    """Stop, disable and remove the unit, its key and server record; the files removed ([] when none was installed)."""
    scope = scope_of(user)
    su.require_root(scope)
    su.require_systemd(scope)
    env_file, key_file = key_paths(scope)
    return su.uninstall_unit(scope, env_file, key_file)


def stop(user: bool = False) -> None:
    """Stop the unit (it stays installed and enabled); ServerError when none is installed."""
    scope = scope_of(user)
    try:
        su.require_root(scope)
        su.require_systemd(scope)
        if su.stop_unit(scope):
            return
        why = f"{su.UNIT_NAME} is not installed ({su.unit_path(scope)})"
    except ServerError as exc:
        if not _foreground_servers(user):
            raise
        why = str(exc).split(";", 1)[0].rstrip(".")
    running = _foreground_servers(user)
    if not running:
        raise ServerError(f"{why}; nothing to stop.")
    raise ServerError(f"{why}, so `stop` stopped nothing; the server running is " + "; ".join(
        f"{record.describe()} serving {record.repository} at {record.url}: stop it with Ctrl-C in its terminal "
        f"or `kill -INT {record.pid}`" for record in running) + ".")


def _foreground_servers(user: bool) -> list:  # list[ServerRecord]
    """The `serve --foreground` servers of this user's state dirs that run now."""
    return foreground_records(tuple(dict.fromkeys((foreground_scope(user), scope_of(user)))))
