"""`edge-deploy serve | stop | status | logs | health`: tritonserver under systemd (or in the foreground).

Parsing and printing only: the rules live in edge_deploy.serve (`service`, `network`, `status`, `logs`).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..core.progress import ConsoleReporter
from ..serve.service import ServeOptions, parse_log_max_size
from . import option_groups as groups
from .typer_app import app
from .options import Only, takes_fields
from .numeric import number, text_callback
from ..core.numbers import DAY_S, PORT, Range, whole



class _Reporter(ConsoleReporter):
    """The console reporter, with notes as plain lines on stderr."""

    def info(self, message: str) -> None:
        typer.echo(message, err=True)


def scheduling_line(repository: Path | None, model: str) -> str | None:
    """How MODEL's config.pbtxt in `repository` has the server run it, as `status` shows it under the model:
    "priority high, 2 instances on DLA core 0" (repository.model_config.scheduling); None without a repository or a
    readable config, and for an ensemble."""
    from ..errors import RepositoryError
    from ..repository.model_config import scheduling
    from ..core.triton_layout import read_config

    if repository is None:
        return None
    try:
        shown = scheduling(read_config(repository, model))
    except RepositoryError:
        return None
    return shown.describe() if shown is not None else None


def _print_models(models: list, repository: Path | None = None, *, scheduling: bool = False) -> None:
    from ..repository.served_config import config_disagreement

    for model in models:
        versions = ", ".join(model.versions) or "-"
        if model.ready:
            note = f" ({model.reason})" if model.reason else ""
            typer.echo(f"  {model.name}: ready, versions served: {versions}{note}")
        else:
            typer.echo(f"  {model.name}: NOT ready{' (' + model.reason + ')' if model.reason else ''}, versions served: {versions}")
        shown = scheduling_line(repository, model.name) if scheduling else None
        if shown:
            typer.echo(f"    {shown}")
        differs = config_disagreement(repository, model.name, model.versions) if repository is not None else None
        if differs:
            typer.echo(f"  warning: {differs}")


def _print_certificate(expiry: str | None) -> None:
    if expiry is not None:
        typer.echo(f"TLS: {expiry}")


SERVE_WAIT_S = whole(1, DAY_S, "seconds")
EXIT_TIMEOUT_S = whole(0, 3600, "seconds")
LOG_VERBOSE = whole(0, 10, noun="a verbose level", note="0: off")
LOG_LINES = whole(1, 10**6, "lines")
HEALTH_WAIT_S = Range(0, DAY_S, "seconds", note="0: ask once")

_USER = typer.Option("--user", help="The user-manager unit (~/.config/systemd/user) instead of the system one.")
UserOpt = Annotated[bool, _USER]

# `serve`'s parameters: the fields of ServeOptions (their types and defaults), each with its option here, in the order
# of --help; --uninstall is the command line's own.
SERVE_PARAMETERS = {
    "repository": typer.Option(help="The Triton model repository to serve."),
    "user": _USER,
    "foreground": typer.Option(help="Run tritonserver here, without systemd; Ctrl-C / SIGTERM stop it."),
    "print_unit": typer.Option("--print-unit", help="Print the unit `serve` would install, and exit."),
    "uninstall": Only(Annotated[bool, typer.Option(
        help="Stop, disable and remove the unit, its key and server record.")], False),
    "tritonserver": typer.Option(
        help="The tritonserver binary (default: $TRITONSERVER, /opt/tritonserver, PATH, nvidia-pytriton)."),
    "grpc_address": typer.Option(help="Address the gRPC endpoint listens on."),
    "grpc_port": number(PORT, help="gRPC port."),
    "http": typer.Option(help="Also serve HTTP (on 127.0.0.1:--http-port)."),
    "http_port": number(PORT, help="HTTP port (with --http)."),
    "metrics": typer.Option(help="Serve Prometheus metrics (on 127.0.0.1:--metrics-port)."),
    "metrics_port": number(PORT, help="Metrics port (with --metrics)."),
    "wait": number(SERVE_WAIT_S, "--wait", help="Seconds to wait for the server and every model to be ready "
                                                "(TensorRT plans can take minutes)."),
    "exit_timeout": number(EXIT_TIMEOUT_S, help="Seconds tritonserver waits for in-flight requests when stopping."),
    "log_verbose": number(LOG_VERBOSE, help="tritonserver verbose log level."),
    "log_file": typer.Option(help="Keep the server's output in this file (size-capped) instead of the journal."),
    "log_max_size": typer.Option(help="Cap on --log-file and its one rotated predecessor together, e.g. 50M: from "
                                      "64 KiB to 1 TiB.", callback=text_callback(parse_log_max_size)),
    "tls_cert": typer.Option(help="Server certificate (PEM) for gRPC over TLS (default beyond loopback: "
                                  "`edge-deploy certs`' server.pem)."),
    "tls_key": typer.Option(help="The server certificate's private key (PEM)."),
    "tls_ca": typer.Option(help="CA whose client certificates are admitted (mutual TLS: clients without one are "
                                "refused)."),
    "tls_client_cert": typer.Option(help="Client certificate edge-deploy's own health checks and model loads present "
                                         "(default: the CA's `edge-deploy` certificate)."),
    "tls_client_key": typer.Option(help="Its private key."),
    "allow_from": Only(Annotated[Optional[list[str]], typer.Option(
        "--allow-from", help="Network (CIDR) allowed to connect beyond loopback (repeatable; default: the "
                             "--grpc-address's own subnet).")], None),
    "insecure": typer.Option(help="Serve plaintext gRPC beyond loopback: anyone on the network can run inference, "
                                  "read results and the model-repository key."),
    "verbose": typer.Option("--verbose", help="With --foreground: also print tritonserver's log here (it always goes "
                                              "to its file: the server's own in the state directory, or --log-file)."),
}


@app.command()
@takes_fields(ServeOptions, SERVE_PARAMETERS)
def serve(*, uninstall: bool = False, **given: Any) -> None:
    """Serve the model repository with tritonserver under systemd; returns when every model is ready.

    Beyond loopback (--grpc-address other than 127.0.0.1), gRPC is served only with mutual TLS
    (`edge-deploy certs init` makes the files) unless --insecure.
    """
    from ..serve import service
    from ..serve.systemd import UNIT_NAME

    if uninstall:
        removed = service.uninstall(given["user"])
        typer.echo(f"removed {UNIT_NAME} ({', '.join(map(str, removed))})" if removed else f"{UNIT_NAME} is not installed; nothing to remove")
        return
    options = ServeOptions(**given)

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
    """Unit state (and any `serve --foreground` server), server and model readiness, the versions served and
    each model's priority, instances and placement from its config (exit 3 when not serving)."""
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
        _print_models(state.health.models, state.unit.repository, scheduling=True)
    for server in report.foreground:
        record = server.record
        typer.echo(f"{record.describe()}: server {record.url}: {server.server_state}; repository {record.repository}"
                   f"{'; mutual TLS' if record.tls else ''}")
        _print_certificate(server.certificate())
        _print_models(server.health.models, record.repository, scheduling=True)
    if not report.serving:
        raise typer.Exit(3)


@app.command()
def logs(
    user: UserOpt = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, number(LOG_LINES, "--lines", "-n", help="How many recent lines to show.")] = 200,
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
    wait: Annotated[float, number(HEALTH_WAIT_S, "--wait", help="Wait up to this many seconds for readiness.")] = 0.0,
    model: Annotated[Optional[list[str]], typer.Option("--model", help="Model that must be ready (repeatable; default: every model of the repository).")] = None,
    url: Annotated[Optional[str], groups.url(groups.FOUND_URL_HELP)] = None,
    repository: Annotated[Optional[Path], typer.Option(
        help="Repository whose models must be ready (default: the one the server found serves).")] = None,
    tls_ca: Annotated[Optional[Path], groups.tls_ca(default="as the server record says")] = None,
    tls_cert: Annotated[Optional[Path], groups.tls_cert()] = None,
    tls_key: Annotated[Optional[Path], groups.tls_key()] = None,
) -> None:
    """Exit 0 when the server (and every model) is ready; otherwise say what is not."""
    from ..serve.status import server_health

    say = lambda line: typer.echo(line, err=True)  # noqa: E731
    target, result = server_health(user=user, url=url, repository=repository, models=tuple(model or ()), wait=wait,
                                   tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                                   main_pid=os.environ.get("MAINPID"),  # set by systemd for ExecStartPost=
                                   on_found=lambda found: say(found.line()), on_wait=say)
    typer.echo(f"ready: {target}")
    _print_models(result.models, repository)

