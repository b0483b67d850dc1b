"""`edge-deploy serve | stop | status | logs | health`: tritonserver under systemd (or in the foreground)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ServerError
from .app import app

UserOpt = Annotated[bool, typer.Option("--user", help="The user-manager unit (~/.config/systemd/user) instead of the system one.")]
SYSTEM_CACHE = Path("/var/cache/edge-deploy")


def _scope(user: bool) -> str:
    return "user" if user else "system"


def _key_paths(scope: str) -> tuple[Path, Path]:
    """(environment file, key file) in the scope's state dir."""
    from ..serve.record import state_dir

    state = state_dir(scope)
    return state / "triton.env", state / "model-repository.key"


def _print_models(models: list) -> None:
    for model in models:
        versions = ", ".join(model.versions) or "-"
        if model.ready:
            note = f" ({model.reason})" if model.reason else ""
            typer.echo(f"  {model.name}: ready, versions served: {versions}{note}")
        else:
            typer.echo(f"  {model.name}: NOT ready{' (' + model.reason + ')' if model.reason else ''}, versions served: {versions}")


@app.command()
def serve(
    repository: Annotated[Path, typer.Option(help="The Triton model repository to serve.")] = Path("model_repository"),
    user: UserOpt = False,
    foreground: Annotated[bool, typer.Option(help="Run tritonserver here, without systemd; Ctrl-C / SIGTERM stop it.")] = False,
    print_unit: Annotated[bool, typer.Option("--print-unit", help="Print the unit `serve` would install, and exit.")] = False,
    uninstall: Annotated[bool, typer.Option(help="Stop, disable and remove the unit, its key and server record.")] = False,
    tritonserver: Annotated[Optional[Path], typer.Option(help="The tritonserver binary (default: $TRITONSERVER, /opt/tritonserver, PATH, nvidia-pytriton).")] = None,
    grpc_address: Annotated[str, typer.Option(help="Address the gRPC endpoint listens on.")] = "127.0.0.1",
    grpc_port: Annotated[int, typer.Option(help="gRPC port.")] = 8001,
    http: Annotated[bool, typer.Option(help="Also serve HTTP (on 127.0.0.1:--http-port).")] = False,
    http_port: Annotated[int, typer.Option(help="HTTP port (with --http).")] = 8000,
    metrics: Annotated[bool, typer.Option(help="Serve Prometheus metrics (on 127.0.0.1:--metrics-port).")] = False,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (with --metrics).")] = 8002,
    wait: Annotated[int, typer.Option("--wait", help="Seconds to wait for the server and every model to be ready (TensorRT plans can take minutes).")] = 300,
    exit_timeout: Annotated[int, typer.Option(help="Seconds tritonserver waits for in-flight requests when stopping.")] = 30,
    log_verbose: Annotated[int, typer.Option(help="tritonserver verbose log level (0 = off).")] = 0,
    log_file: Annotated[Optional[Path], typer.Option(help="Keep the server's output in this file (size-capped) instead of the journal.")] = None,
    log_max_size: Annotated[str, typer.Option(help="Cap on --log-file and its one rotated predecessor together, e.g. 50M.")] = "50M",
    tls_cert: Annotated[Optional[Path], typer.Option(help="Server certificate (PEM) for gRPC over TLS (default beyond loopback: `edge-deploy certs`' server.pem).")] = None,
    tls_key: Annotated[Optional[Path], typer.Option(help="The server certificate's private key (PEM).")] = None,
    tls_ca: Annotated[Optional[Path], typer.Option(help="CA whose client certificates are admitted (mutual TLS: clients without one are refused).")] = None,
    tls_client_cert: Annotated[Optional[Path], typer.Option(help="Client certificate edge-deploy's own health checks and model loads present (default: the CA's `edge-deploy` certificate).")] = None,
    tls_client_key: Annotated[Optional[Path], typer.Option(help="Its private key.")] = None,
    allow_from: Annotated[Optional[list[str]], typer.Option("--allow-from", help="Network (CIDR) allowed to connect beyond loopback (repeatable; default: the --grpc-address's own subnet).")] = None,
    insecure: Annotated[bool, typer.Option(help="Serve plaintext gRPC beyond loopback: anyone on the network can run inference, read results and the model-repository key.")] = False,
) -> None:
    """Serve the model repository with tritonserver under systemd; returns when every model is ready.

    Beyond loopback (--grpc-address other than 127.0.0.1), gRPC is served only with mutual TLS
    (`edge-deploy certs init` makes the files) unless --insecure.
    """
    from ..progress import ConsoleReporter
    from ..serve import systemd as su
    from ..serve.tritonserver import ServerOptions, check_options, find_tritonserver, generate_key

    scope = _scope(user)
    env_file, key_file = _key_paths(scope)
    reporter = ConsoleReporter()
    if uninstall:
        su.require_root(scope)
        su.require_systemd(scope)
        removed = su.uninstall_unit(scope, env_file, key_file)
        typer.echo(f"removed {su.UNIT_NAME} ({', '.join(map(str, removed))})" if removed else f"{su.UNIT_NAME} is not installed; nothing to remove")
        return
    # Before anything else: these need no tritonserver and change nothing.
    check_options(ServerOptions(model_repository=repository, grpc_port=grpc_port, http_port=http_port,
                                metrics_port=metrics_port, exit_timeout=exit_timeout, log_verbose=log_verbose))
    if wait < 1:
        raise ServerError(f"--wait must be at least 1 second (got {wait}); TensorRT plans can take minutes to load.")
    log_max_bytes = _log_max_bytes(log_max_size)
    if log_file is not None:
        log_file = log_file.expanduser().absolute()
    if not foreground and not print_unit:
        su.require_root(scope)
        su.require_systemd(scope)

    server_tls, allowed = _network_policy(scope, grpc_address, tls_cert, tls_key, tls_ca, tls_client_cert,
                                          tls_client_key, allow_from or [], insecure, reporter)
    system_service = scope == "system" and not foreground
    cache = SYSTEM_CACHE if system_service and su.effective_uid() == 0 else None
    install = find_tritonserver(tritonserver, cache_dir=cache, prepare=not print_unit)
    typer.echo(f"using {install.describe()}", err=True)
    if http and not install.has_option("--http-restricted-api"):
        reporter.warn("this tritonserver (before 2.40) cannot restrict its HTTP model-repository API to the key: "
                      "with --http, any local process can load and unload models over HTTP; serve without --http, "
                      "or use tritonserver 2.40 or later.")
    options = ServerOptions(
        model_repository=repository.expanduser().resolve(),
        grpc_address=grpc_address,
        grpc_port=grpc_port,
        http=http,
        http_port=http_port,
        metrics=metrics,
        metrics_port=metrics_port,
        exit_timeout=exit_timeout,
        log_verbose=log_verbose,
        tls=server_tls,
    )
    if foreground:
        _serve_foreground(install, options, "user" if user or su.effective_uid() != 0 else "system", wait,
                          log_file, log_max_bytes)
        return
    if log_file is None and not print_unit and not su.journald_available():
        reporter.warn("journald is not running here, so the server's output will not be kept; "
                      "pass --log-file PATH to keep it in a size-capped file.")

    config = su.UnitConfig(
        scope=scope,
        install=install,
        options=options,
        environment_file=env_file,
        health_wait=wait,
        log_file=log_file,
        log_max_bytes=log_max_bytes,
        device_nodes=su.gpu_device_nodes() if scope == "system" else [],
        allow_from=allowed,
    )
    if server_tls is not None:
        from dataclasses import replace

        from ..serve.record import state_dir

        config.tls_sources = server_tls
        config.options = replace(options, tls=su.service_tls(server_tls, state_dir(scope)))
    if print_unit:
        typer.echo(su.render_unit(config), nl=False)
        return
    result = su.install_and_start(config, key=generate_key(), key_file=key_file, reporter=reporter)
    verb = "already serving" if result.already_running else "serving"
    typer.echo(f"{su.UNIT_NAME} ({scope}) {verb} {options.model_repository} at {result.url}")
    _print_models(result.models)
    if result.already_running:
        typer.echo("(unchanged: the installed unit has these settings; the model-repository key was kept)")


def _network_policy(scope: str, address: str, cert, key, ca, client_cert, client_key,  # noqa: ANN001
                    allow_from: list[str], insecure: bool, reporter) -> tuple:  # noqa: ANN001
    """(ServerTLS or None, CIDRs for IPAddressAllow=) for a listen address; ServerError for plaintext beyond loopback."""
    from ..serve.addresses import check_cidrs, is_loopback, local_subnets

    loopback = is_loopback(address)
    given = [p for p in (cert, key, ca) if p is not None]
    if insecure and given:
        raise ServerError("--insecure serves plaintext; it cannot go with --tls-cert/--tls-key/--tls-ca (drop one).")
    tls = None
    if given:
        if len(given) != 3:
            raise ServerError("TLS needs all three of --tls-cert, --tls-key and --tls-ca (`edge-deploy certs init` "
                              "writes them: issued/server.pem, issued/server.key, ca.pem).")
        tls = _server_tls(Path(cert), Path(key), Path(ca), client_cert, client_key)
    elif not loopback and not insecure:
        from ..certs import SERVER, CertificateAuthority
        from ..serve.record import state_dir

        authority = CertificateAuthority(state_dir(scope) / "tls")
        if not authority.cert_path(SERVER).is_file():
            raise ServerError(
                f"serving gRPC on {address} (beyond loopback) needs TLS: run `edge-deploy certs init --ip {address}` "
                "and serve again, or pass --tls-cert/--tls-key/--tls-ca; --insecure serves plaintext to anyone "
                "who can reach the address."
            )
        typer.echo(f"mutual TLS with the certificates in {authority.dir}", err=True)
        tls = _server_tls(authority.cert_path(SERVER), authority.key_path(SERVER), authority.ca_cert,
                          client_cert, client_key)
    if loopback:
        return tls, []
    if insecure:
        reporter.warn(f"--insecure: gRPC on {address} is plaintext and open to every host allowed to connect: they "
                      "can run inference, read its results, and read the model-repository key from request "
                      "headers (and then load models). Serve with TLS (`edge-deploy certs init`) instead.")
    allowed = check_cidrs(allow_from) if allow_from else local_subnets(address)
    typer.echo(f"accepting connections from {', '.join(allowed)} and localhost (IPAddressAllow=)", err=True)
    return tls, allowed


def _server_tls(cert: Path, key: Path, ca: Path, client_cert, client_key):  # noqa: ANN001, ANN202
    """ServerTLS from the files given; the admin client identity defaults to the CA's `edge-deploy` certificate."""
    from ..certs import ADMIN_CLIENT, cert_not_after
    from ..serve.tritonserver import ServerTLS

    cert, key, ca = cert.expanduser().absolute(), key.expanduser().absolute(), ca.expanduser().absolute()
    if (client_cert is None) != (client_key is None):
        raise ServerError("--tls-client-cert and --tls-client-key go together.")
    if client_cert is None:
        guess = cert.parent / f"{ADMIN_CLIENT}.pem"
        if not guess.is_file():
            raise ServerError(
                f"no client certificate for edge-deploy's own health checks (looked for {guess}); pass "
                "--tls-client-cert/--tls-client-key (`edge-deploy certs issue edge-deploy` makes one)."
            )
        client_cert, client_key = guess, guess.with_suffix(".key")
    for what, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca),
                       ("--tls-client-cert", client_cert), ("--tls-client-key", client_key)):
        if not Path(path).is_file():
            raise ServerError(f"{what} {path} does not exist; `edge-deploy certs init` writes the TLS files.")
    import datetime as dt

    expires = cert_not_after(cert)
    if expires < dt.datetime.now(dt.timezone.utc):
        raise ServerError(f"the server certificate {cert} expired on {expires:%Y-%m-%d}; issue a new one "
                          "(`edge-deploy certs init --force` or `certs issue server --server`).")
    return ServerTLS(cert=cert, key=key, ca=ca, client_cert=Path(client_cert).expanduser().absolute(),
                     client_key=Path(client_key).expanduser().absolute())


def _log_max_bytes(text: str) -> int:
    from ..engine.options import parse_size
    from ..errors import EdgeDeployError
    from ..serve.logfile import MIN_MAX_BYTES

    try:
        value = parse_size(text)
    except EdgeDeployError:
        value = -1
    if value < MIN_MAX_BYTES:
        raise ServerError(f"--log-max-size {text!r} is not a size of at least 64K; write it like 50M or 1G.")
    return value


def _serve_foreground(install, options, scope: str, wait: int, log_file, log_max_bytes: int) -> None:  # noqa: ANN001
    from ..serve.foreground import serve_foreground

    def ready(health) -> None:  # noqa: ANN001
        typer.echo(f"tritonserver serving {options.model_repository} at {options.url} (Ctrl-C to stop)")
        _print_models(health.models)
        sys.stdout.flush()

    def note(message: str) -> None:
        typer.echo(f"note: {message}", err=True)

    code, log_path = serve_foreground(install, options, scope, ready_timeout=wait, on_ready=ready, on_note=note,
                                      log_file=log_file, log_max_bytes=log_max_bytes)
    if code != 0:
        raise ServerError(f"tritonserver exited with code {code}; see {log_path}.")
    typer.echo("tritonserver stopped")


@app.command()
def stop(user: UserOpt = False) -> None:
    """Stop the tritonserver unit (it stays installed and enabled)."""
    from ..serve import systemd as su

    scope = _scope(user)
    su.require_root(scope)
    su.require_systemd(scope)
    if not su.stop_unit(scope):
        raise ServerError(f"{su.UNIT_NAME} is not installed ({su.unit_path(scope)}); nothing to stop.")
    typer.echo(f"stopped {su.UNIT_NAME}")


@app.command()
def status(user: UserOpt = False) -> None:
    """Unit state, server and model readiness, and the versions served (exit 3 when not serving)."""
    from ..serve import systemd as su
    from ..serve.admin import check_health, repository_headers
    from ..serve.tritonserver import repository_models

    scope = _scope(user)
    su.require_systemd(scope)
    installed = su.read_installed_unit(scope)
    if installed is None:
        typer.echo(f"{su.UNIT_NAME} is not installed ({scope}); start it with `edge-deploy serve{' --user' if user else ''}`")
        raise typer.Exit(3)
    props = su.unit_properties(scope, "ActiveState", "SubState", "UnitFileState", "MainPID", "NRestarts")
    typer.echo(
        f"{su.UNIT_NAME} ({scope}): {props.get('ActiveState', '?')} ({props.get('SubState', '?')}), "
        f"{props.get('UnitFileState', '?')}, main PID {props.get('MainPID', '?')}, restarts {props.get('NRestarts', '?')}"
    )
    health = check_health(installed.url, repository_models(installed.repository),
                          headers=repository_headers(installed.repository), tls=_record_tls(installed.repository))
    server_state = "ready" if health.all_ready else ("live, not ready" if health.live else f"not reachable ({health.error})")
    typer.echo(f"server {installed.url}: {server_state}; repository {installed.repository}")
    if installed.server_cert is not None:
        typer.echo(f"TLS: {_expiry_line(installed.server_cert)}")
    _print_models(health.models)
    if props.get("ActiveState") != "active" or not health.all_ready:
        raise typer.Exit(3)


@app.command()
def logs(
    user: UserOpt = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many recent lines to show.")] = 200,
) -> None:
    """The tritonserver unit's log: `journalctl -u`, or the unit's --log-file (else the foreground server's log)."""
    from ..serve import systemd as su
    from ..serve.foreground import foreground_log

    if lines < 1:
        raise ServerError(f"--lines must be at least 1 (got {lines}).")
    scope = _scope(user)
    installed = su.read_installed_unit(scope)
    if installed is not None and installed.log_file is not None:
        _tail(installed.log_file, lines, follow, f"the unit writes to {installed.log_file} (--log-file)")
    if installed is None:
        fallback = foreground_log("user" if user or su.effective_uid() != 0 else "system")
        if fallback.is_file():
            _tail(fallback, lines, follow, f"no {su.UNIT_NAME} is installed ({scope}); "
                                           f"showing the `serve --foreground` log {fallback}")
        raise ServerError(
            f"no {su.UNIT_NAME} is installed ({scope}) and no `serve --foreground` log exists at {fallback}: "
            "nothing has been served here yet."
        )
    if not su.journald_available():
        raise ServerError(
            "journald is not running on this machine, so the unit's output (StandardOutput=journal) was not kept; "
            f"re-run `edge-deploy serve{' --user' if user else ''} --log-file PATH` to keep it in a size-capped file."
        )
    argv = ["journalctl", "--user-unit" if user else "--unit", su.UNIT_NAME, "-n", str(lines), "--no-pager"]
    raise typer.Exit(subprocess.call(argv + (["-f"] if follow else [])))


def _tail(path: Path, lines: int, follow: bool, note: str) -> None:
    """Print the last lines of a capped log (its rotated predecessor first when needed); exits."""
    typer.echo(note, err=True)
    if not path.exists():
        raise ServerError(f"no log yet at {path}; start the server with `edge-deploy serve`.")
    previous = path.with_name(path.name + ".1")
    text = path.read_bytes().decode(errors="replace").splitlines(keepends=True)
    if len(text) < lines and previous.is_file():
        text = previous.read_bytes().decode(errors="replace").splitlines(keepends=True) + text
    sys.stdout.write("".join(text[-lines:]))
    sys.stdout.flush()
    if follow:
        raise typer.Exit(subprocess.call(["tail", "-n", "0", "-F", str(path)]))
    raise typer.Exit(0)


@app.command()
def health(
    user: UserOpt = False,
    wait: Annotated[float, typer.Option("--wait", help="Wait up to this many seconds for readiness (0: ask once).")] = 0.0,
    model: Annotated[Optional[list[str]], typer.Option("--model", help="Model that must be ready (repeatable; default: every model of the repository).")] = None,
    url: Annotated[Optional[str], typer.Option(help="Server gRPC address (default: from the installed unit, else 127.0.0.1:8001).")] = None,
    repository: Annotated[Optional[Path], typer.Option(help="Repository whose models must be ready (default: the unit's).")] = None,
    tls_ca: Annotated[Optional[Path], typer.Option(help="Dial over TLS trusting this CA (default: as the server record says).")] = None,
    tls_cert: Annotated[Optional[Path], typer.Option(help="Client certificate for a mutual-TLS server.")] = None,
    tls_key: Annotated[Optional[Path], typer.Option(help="Its private key.")] = None,
) -> None:
    """Exit 0 when the server (and every model) is ready; otherwise say what is not."""
    from ..serve import systemd as su
    from ..serve.admin import check_health, repository_headers, wait_healthy
    from ..serve.tritonserver import repository_models

    if not wait >= 0:
        raise ServerError(f"--wait must be 0 (ask once) or more seconds (got {wait:g}).")
    installed = su.read_installed_unit(_scope(user)) if url is None or (repository is None and not model) else None
    target = url or (installed.url if installed else "127.0.0.1:8001")
    repo = repository or (installed.repository if installed else None)
    models = list(model) if model else (repository_models(repo) if repo else [])
    main_pid = os.environ.get("MAINPID")  # set by systemd for ExecStartPost=

    def server_gone() -> str | None:
        if main_pid and not Path(f"/proc/{main_pid}").exists():
            return f"tritonserver (PID {main_pid}) exited before it was ready"
        return None

    headers = repository_headers(repo)
    tls = _cli_tls(tls_ca, tls_cert, tls_key) if tls_ca or tls_cert or tls_key else _record_tls(repo)
    if wait > 0:
        result = wait_healthy(target, models, wait, alive=server_gone, headers=headers, tls=tls)
    else:
        result = check_health(target, models, headers=headers, tls=tls)
        if not result.all_ready:
            what = result.not_ready()
            verb = "are" if what.startswith("models") else "is"
            reason = f" ({result.error})" if result.error else ""
            failed = any("failed to load" in m.reason for m in result.models if not m.ready)
            advice = ("install a version that loads, or roll back with `edge-deploy rollback NAME`" if failed else
                      "start it with `edge-deploy serve` or wait with --wait SECONDS")
            raise ServerError(f"{what} at {target} {verb} not ready{reason}; {advice}.")
    typer.echo(f"ready: {target}")
    _print_models(result.models)


def _cli_tls(ca, cert, key):  # noqa: ANN001, ANN202
    """A TLSConfig from --tls-ca/--tls-cert/--tls-key."""
    from ..client.tls import TLSConfig

    return TLSConfig(ca=ca, cert=cert, key=key)


def _record_tls(repository):  # noqa: ANN001, ANN202
    """The TLS identity the server record of `repository` names (None: plaintext, or no record)."""
    from ..serve.record import find_record

    record = find_record(repository) if repository is not None else None
    return record.client_tls() if record is not None else None


def _expiry_line(cert: Path) -> str:
    """"server certificate PATH expires 2028-11-22 (730 days)", with a warning inside 30 days."""
    import datetime as dt

    from ..certs import EXPIRY_WARN_DAYS, cert_not_after
    from ..errors import CertificateError

    try:
        expires = cert_not_after(cert)
    except CertificateError as exc:
        return str(exc)
    left = (expires - dt.datetime.now(dt.timezone.utc)).days
    state = "EXPIRED" if left < 0 else ("expires soon" if left < EXPIRY_WARN_DAYS else "expires")
    return f"server certificate {cert} {state} {expires:%Y-%m-%d} ({left} days)"
