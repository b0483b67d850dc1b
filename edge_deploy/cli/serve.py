"""`edge-deploy serve | stop | status | logs | health`: tritonserver under systemd (or in the foreground).

Parsing and printing only: the rules live in edge_deploy.serve (`service`, `network`, `status`, `logs`).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..progress import ConsoleReporter
from .app import app

UserOpt = Annotated[bool, typer.Option("--user", help="The user-manager unit (~/.config/systemd/user) instead of the system one.")]


class _Reporter(ConsoleReporter):
    """The console reporter, with notes as plain lines on stderr."""

    def info(self, message: str) -> None:
        typer.echo(message, err=True)


def _print_models(models: list, repository: Path | None = None) -> None:
    from ..triton_layout import config_disagreement

    for model in models:
        versions = ", ".join(model.versions) or "-"
        if model.ready:
            note = f" ({model.reason})" if model.reason else ""
            typer.echo(f"  {model.name}: ready, versions served: {versions}{note}")
        else:
            typer.echo(f"  {model.name}: NOT ready{' (' + model.reason + ')' if model.reason else ''}, versions served: {versions}")
        differs = config_disagreement(repository, model.name, model.versions) if repository is not None else None
        if differs:
            typer.echo(f"  warning: {differs}")


def _print_certificate(expiry: str | None) -> None:
    if expiry is not None:
        typer.echo(f"TLS: {expiry}")


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
    verbose: Annotated[bool, typer.Option("--verbose", help="With --foreground: also print tritonserver's log here (it always goes to its file: the server's own in the state directory, or --log-file).")] = False,
) -> None:
    """Serve the model repository with tritonserver under systemd; returns when every model is ready.

    Beyond loopback (--grpc-address other than 127.0.0.1), gRPC is served only with mutual TLS
    (`edge-deploy certs init` makes the files) unless --insecure.
    """
    from ..serve import service
    from ..serve.systemd import UNIT_NAME

    if uninstall:
        removed = service.uninstall(user)
        typer.echo(f"removed {UNIT_NAME} ({', '.join(map(str, removed))})" if removed else f"{UNIT_NAME} is not installed; nothing to remove")
        return
    options = service.ServeOptions(
        repository=repository, user=user, foreground=foreground, print_unit=print_unit, tritonserver=tritonserver,
        grpc_address=grpc_address, grpc_port=grpc_port, http=http, http_port=http_port, metrics=metrics,
        metrics_port=metrics_port, wait=wait, exit_timeout=exit_timeout, log_verbose=log_verbose, log_file=log_file,
        log_max_size=log_max_size, tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca, tls_client_cert=tls_client_cert,
        tls_client_key=tls_client_key, allow_from=tuple(allow_from or ()), insecure=insecure, verbose=verbose,
    )

    def ready(health) -> None:  # noqa: ANN001 - edge_deploy.serve.admin.Health
        typer.echo(f"tritonserver serving {options.model_repository} at {options.url} (Ctrl-C to stop)")
        _print_models(health.models)
        sys.stdout.flush()

    def note(message: str) -> None:
        typer.echo(f"note: {message}", err=True)

    outcome = service.serve(options, _Reporter(), on_ready=ready, on_note=note)
    if options.foreground:
        typer.echo("tritonserver stopped")
        return
    if outcome.unit_text is not None:
        typer.echo(outcome.unit_text, nl=False)
        return
    result = outcome.started
    assert result is not None
    verb = "already serving" if result.already_running else "serving"
    typer.echo(f"{UNIT_NAME} ({outcome.scope}) {verb} {outcome.repository} at {result.url}")
    _print_models(result.models)
    if result.already_running:
        typer.echo("(unchanged: the installed unit has these settings; the model-repository key was kept)")


@app.command()
def stop(user: UserOpt = False) -> None:
    """Stop the tritonserver unit (it stays installed and enabled)."""
    from ..serve import service
    from ..serve.systemd import UNIT_NAME

    service.stop(user)
    typer.echo(f"stopped {UNIT_NAME}")


@app.command()
def status(user: UserOpt = False) -> None:
    """Unit state (and any `serve --foreground` server), server and model readiness, the versions served
    (exit 3 when not serving)."""
    from ..serve.service import scope_of
    from ..serve.status import serving_status
    from ..serve.systemd import UNIT_NAME

    report = serving_status(user)
    state = report.unit
    if state is None:
        why = "systemd is not running here" if report.no_systemd else f"not installed ({scope_of(user)})"
        typer.echo(f"{UNIT_NAME}: {why}" if report.foreground else f"{UNIT_NAME} is not installed ({scope_of(user)}); "
                   f"start it with `edge-deploy serve{' --user' if user else ''}`")
    else:
        props = state.properties
        typer.echo(
            f"{UNIT_NAME} ({state.scope}): {props.get('ActiveState', '?')} ({props.get('SubState', '?')}), "
            f"{props.get('UnitFileState', '?')}, main PID {props.get('MainPID', '?')}, restarts {props.get('NRestarts', '?')}"
        )
        typer.echo(f"server {state.unit.url}: {state.server_state}; repository {state.unit.repository}")
        _print_certificate(state.certificate())
        _print_models(state.health.models, state.unit.repository)
    for server in report.foreground:
        record = server.record
        typer.echo(f"{record.describe()}: server {record.url}: {server.server_state}; repository {record.repository}"
                   f"{'; mutual TLS' if record.tls else ''}")
        _print_certificate(server.certificate())
        _print_models(server.health.models, record.repository)
    if not report.serving:
        raise typer.Exit(3)


@app.command()
def logs(
    user: UserOpt = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many recent lines to show.")] = 200,
) -> None:
    """The tritonserver unit's log: `journalctl -u`, or the unit's --log-file (else the foreground server's log)."""
    from ..serve.logs import log_source

    source = log_source(user, lines)
    if source.path is None:
        raise typer.Exit(subprocess.call(source.journal_argv(follow)))
    typer.echo(source.note, err=True)
    sys.stdout.write(source.text())
    sys.stdout.flush()
    if follow:
        raise typer.Exit(subprocess.call(source.follow_argv()))
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
    from ..serve.status import server_health

    target, result = server_health(user=user, url=url, repository=repository, models=tuple(model or ()), wait=wait,
                                   tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                                   main_pid=os.environ.get("MAINPID"))  # set by systemd for ExecStartPost=
    typer.echo(f"ready: {target}")
    _print_models(result.models, repository)


def _cli_tls(ca, cert, key):  # noqa: ANN001, ANN202
    """A TLSConfig from --tls-ca/--tls-cert/--tls-key (`infer` and `evaluate` use it too)."""
    from ..tls import TLSConfig

    return TLSConfig(ca=ca, cert=cert, key=key)
