"""Checks before a server starts: its settings, its ports, and the model repository it serves."""
from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Callable

from ..errors import ServerError
from ..core.triton_layout import repository_models
from .addresses import not_on_this_host_message
from .argv import DEFAULT_GRPC_PORT, ServerOptions


def bind_error(address: str, port: int) -> OSError | None:
    """Why (address, port) cannot be bound now (None: it can): a bind test."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    host = "127.0.0.1" if address in ("0.0.0.0", "") else address
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR ignores TIME_WAIT leftovers of a server that just stopped.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def port_in_use(address: str, port: int) -> bool:
    """True when (address, port) cannot be bound now: something already listens there (or the address is not
    this host's: check_ports_free tells them apart)."""
    return bind_error(address, port) is not None


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
        failed = bind_error(address, port)
        if failed is None:
            continue
        if failed.errno == errno.EADDRNOTAVAIL:
            raise ServerError(f"cannot listen on {address}:{port} ({what}): {not_on_this_host_message(address)}")
        if failed.errno != errno.EADDRINUSE:
            raise ServerError(f"cannot listen on {what} {address}:{port}: {failed.strerror or failed}; pass another "
                              "address (--grpc-address) or port (--grpc-port).")
        raise ServerError(
            f"{what} port {address}:{port} is already in use; stop whatever listens there "
            f"(`ss -ltnp 'sport = :{port}'`) or pick another port (--grpc-port)."
        )


def check_repository(repository: Path, warn: Callable[[str], object] | None = None) -> list[str]:
    """The models of `repository`; ServerError when it is missing, holds no model, or (on a Jetson) serves plans that
    do not fit the board's memory together (memory_fit.py; elsewhere `warn` gets that)."""
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
    from ..machine.facts import device_facts
    from .memory_fit import check_stack_fits

    check_stack_fits(repository, device_facts(probe_gpu=False), warn)
    return models
