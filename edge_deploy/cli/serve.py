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
) -> None:
    """Serve the model repository with tritonserver under systemd; returns when every model is ready."""
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
    if not foreground and not print_unit:
        su.require_root(scope)
        su.require_systemd(scope)

    system_service = scope == "system" and not foreground
    cache = SYSTEM_CACHE if system_service and su.effective_uid() == 0 else None
    install = find_tritonserver(tritonserver, cache_dir=cache, prepare=not print_unit)
    typer.echo(f"using {install.describe()}", err=True)
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
    )
    if foreground:
        _serve_foreground(install, options, "user" if user or su.effective_uid() != 0 else "system", wait, reporter)
        return

    from ..serve.record import state_dir

    config = su.UnitConfig(
        scope=scope,
        install=install,
        options=options,
        environment_file=env_file,
        health_wait=wait,
        log_file=su.default_log_file(scope, state_dir(scope)),
        device_nodes=su.gpu_device_nodes() if scope == "system" else [],
    )
    if print_unit:
        typer.echo(su.render_unit(config), nl=False)
        return
    result = su.install_and_start(config, key=generate_key(), key_file=key_file, reporter=reporter)
    verb = "already serving" if result.already_running else "serving"
    typer.echo(f"{su.UNIT_NAME} ({scope}) {verb} {options.model_repository} at {result.url}")
    _print_models(result.models)
    if result.already_running:
        typer.echo("(unchanged: the installed unit has these settings; the model-repository key was kept)")


def _serve_foreground(install, options, scope: str, wait: int, reporter) -> None:  # noqa: ANN001
    from ..serve.foreground import serve_foreground

    def ready(health) -> None:  # noqa: ANN001
        typer.echo(f"tritonserver serving {options.model_repository} at {options.url} (Ctrl-C to stop)")
        _print_models(health.models)
        sys.stdout.flush()

    def note(message: str) -> None:
        typer.echo(f"note: {message}", err=True)

    code, log_path = serve_foreground(install, options, scope, ready_timeout=wait, on_ready=ready, on_note=note)
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
                          headers=repository_headers(installed.repository))
    server_state = "ready" if health.all_ready else ("live, not ready" if health.live else f"not reachable ({health.error})")
    typer.echo(f"server {installed.url}: {server_state}; repository {installed.repository}")
    _print_models(health.models)
    if props.get("ActiveState") != "active" or not health.all_ready:
        raise typer.Exit(3)


@app.command()
def logs(
    user: UserOpt = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many recent lines to show.")] = 200,
) -> None:
    """The tritonserver unit's log (journalctl; the log file where journald is not running)."""
    from ..serve import systemd as su

    scope = _scope(user)
    if su.journald_available():
        argv = ["journalctl", "--user-unit" if user else "--unit", su.UNIT_NAME, "-n", str(lines), "--no-pager"]
        code = subprocess.call(argv + (["-f"] if follow else []))
        raise typer.Exit(code)
    installed = su.read_installed_unit(scope)
    if installed is None or installed.log_file is None:
        raise ServerError(
            "journald is not running on this machine, so there is no journal for the unit; "
            f"{'install the unit with `edge-deploy serve`' if installed is None else 'see the unit StandardOutput='}."
        )
    typer.echo(f"journald is not running here; the unit writes to {installed.log_file}", err=True)
    if not installed.log_file.exists():
        raise ServerError(f"no log yet at {installed.log_file}; start the server with `edge-deploy serve`.")
    code = subprocess.call(["tail", "-n", str(lines), *(["-F"] if follow else []), str(installed.log_file)])
    raise typer.Exit(code)


@app.command()
def health(
    user: UserOpt = False,
    wait: Annotated[float, typer.Option("--wait", help="Wait up to this many seconds for readiness (0: ask once).")] = 0.0,
    model: Annotated[Optional[list[str]], typer.Option("--model", help="Model that must be ready (repeatable; default: every model of the repository).")] = None,
    url: Annotated[Optional[str], typer.Option(help="Server gRPC address (default: from the installed unit, else 127.0.0.1:8001).")] = None,
    repository: Annotated[Optional[Path], typer.Option(help="Repository whose models must be ready (default: the unit's).")] = None,
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
    if wait > 0:
        result = wait_healthy(target, models, wait, alive=server_gone, headers=headers)
    else:
        result = check_health(target, models, headers=headers)
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
